-- term.lua writes an election's term record, once a Campaign won the lock
-- (see election.go and docs/ELECTION.md): "<term>\n<token>\n<value>", the
-- leader's term (its fence), the value its lock holds at the lock key, and
-- what the leader passed to Campaign. It writes only while the node still
-- holds the lock key for the token, and never replaces the record of a
-- higher term, so that a late copy of an old leader's request cannot undo
-- a newer one. A new record is announced on the election's channel. The
-- record has no expiry, like the fence counter: a stale one names a token
-- that no longer holds the key, and readers ignore it.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its term record.
-- ARGV[1]: the leader's token: the value of the attempt that won the lock.
-- ARGV[2]: the term, a decimal fence.
-- ARGV[3]: the leader's value.
-- ARGV[4]: the election's channel (Go's keyspace.Elected).
-- ARGV[5]: '1' on a Redis Cluster node: announce with SPUBLISH (see
--          announce).
--
-- Returns 1 when the record names the token at the term (written now, or
-- by an earlier copy of this request); 0 when the node does not hold the
-- lock key for the token, and then it changed nothing; -1 when the record
-- is of a higher term, which it left alone.
local token, term, value = ARGV[1], ARGV[2], ARGV[3]
if not holds(KEYS[1], token, '') then
  return 0
end
-- greater reports whether the decimal a is above the decimal b, without
-- going through Lua's numbers.
local function greater(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end
local record = term .. '\n' .. token .. '\n' .. value
local cur = redis.pcall('GET', KEYS[2])
if type(cur) == 'string' then
  if cur == record then
    return 1
  end
  local t = string.match(cur, '^(%d+)\n')
  if t and greater(t, term) then
    return -1
  end
end
redis.call('SET', KEYS[2], record)
announce(ARGV[4], term, ARGV[5])
return 1
