-- acquire.lua takes every lock key for one attempt of an acquisition, or
-- none of them: a node votes yes only when it took them all. A key that
-- already holds this attempt's value (go-redis sent the request twice), or
-- an earlier attempt's value of the same acquisition (a leftover whose
-- rollback has not landed), counts as taken by us and gets the attempt's
-- value and the TTL. A key that already holds the attempt's value keeps a
-- longer TTL: an Extend may have lengthened it before this late copy came
-- (see the expiry rule in holds.lua).
--
-- KEYS[1..n]:    the lock keys.
-- KEYS[n+1..2n]: with fencing, the fence counter of each lock key.
-- ARGV[1]: the attempt's value.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the TTL in milliseconds.
-- ARGV[4]: n, the number of lock keys.
-- ARGV[5]: '1' with fencing, else '0'.
-- ARGV[6]: the acquisition's id.
-- ARGV[7]: the attempt's number.
--
-- Returns 0 when a key is held by someone else. Otherwise 1, or with
-- fencing the largest of the keys' new fence values (at least 1). A counter
-- goes up by one; a counter that does not exist yet starts at the node's
-- clock in microseconds, so that a node restarted empty, after the delay the
-- Redlock spec asks for, still counts above every fence handed out before.
local value, owner, ttl, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local id, attempt = ARGV[6], tonumber(ARGV[7])
if not takeAll(n, value, owner, ttl, id, attempt) then
  return 0
end
if ARGV[5] ~= '1' then
  return 1
end
local m = 0
for i = n + 1, 2 * n do
  local v
  if redis.call('EXISTS', KEYS[i]) == 1 then
    v = redis.call('INCR', KEYS[i])
  else
    -- Built as a string: Lua would print a number this large in
    -- exponent form, which INCR could not read.
    local t = redis.call('TIME')
    local s = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('SET', KEYS[i], s)
    v = tonumber(s)
  end
  if v > m then
    m = v
  end
end
return m
