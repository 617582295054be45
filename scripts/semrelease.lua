-- semrelease.lua gives back one permit of a counting semaphore (see
-- semacquire.lua): it removes the attempt's value, and nothing else. The key
-- goes when its last holder does. A permit given back is announced on the
-- release channel when a waiter marked the key; the marker goes with it,
-- and the next waiters set it again.
--
-- KEYS[1]: the semaphore key.
-- KEYS[2]: its waiting marker.
-- ARGV[1]: the value to release.
-- ARGV[2]: unused ('' ; the owner of release.lua's layout).
-- ARGV[3]: '1' on a Redis Cluster node: announce with SPUBLISH.
-- ARGV[4]: the key's release channel; absent to announce nothing (a
--          rollback). The message is the released value.
--
-- Returns 1 when the value held a live permit; 0 when it was gone or had
-- expired (an expired member is removed all the same); -1 when the key is
-- something else (another type, or a sorted set that is not a semaphore).
if redis.replicate_commands then
  redis.replicate_commands()
end
local key, value, sharded, channel = KEYS[1], ARGV[1], ARGV[3], ARGV[4]
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  return 0
end
if kind ~= 'zset' or not redis.call('ZSCORE', key, '#permits') then
  return -1
end
local score = redis.call('ZSCORE', key, value)
if not score then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', key, value)
if redis.call('ZCARD', key) <= 1 then
  redis.call('DEL', key)
end
if tonumber(score) <= now then
  return 0
end
if channel and redis.call('DEL', KEYS[2]) > 0 then
  announce(channel, value, sharded)
end
return 1
