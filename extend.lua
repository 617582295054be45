-- extend.lua resets the TTL of an acquisition's lock keys, only when every
-- one of them still holds the lock's value; otherwise it changes nothing. It never
-- re-creates a missing key: a key that expired may already belong to someone
-- else on the other nodes. An owner lock's TTL is never shortened, since
-- other acquisitions of the owner may count on it.
--
-- KEYS[1..n]: the lock keys.
-- ARGV[1]: the value of the attempt that won the lock.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the new TTL in milliseconds.
--
-- Returns 1 when the TTLs were reset, else 0.
local token, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
for i = 1, #KEYS do
  if not holds(KEYS[i], token, owner) then
    return 0
  end
end
for i = 1, #KEYS do
  if owner == '' then
    redis.call('PEXPIRE', KEYS[i], ttl)
  else
    expireAtLeast(KEYS[i], ttl)
  end
end
return 1
