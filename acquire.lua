-- acquire.lua takes a lock key for a token, or refreshes it when the key
-- already holds that same token (a leftover of this acquisition's earlier
-- attempt whose rollback did not reach the node).
--
-- KEYS[1]: the lock key.
-- ARGV[1]: the token of this acquisition.
-- ARGV[2]: the TTL in milliseconds.
--
-- Returns 1 when the key now holds ARGV[1], and 0 when another token holds it.
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
