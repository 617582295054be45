-- semextend.lua extends one permit of a counting semaphore (see
-- semacquire.lua): only while the value still holds a live permit, and
-- never shortening its expiry nor the key's. A permit that expired is not
-- brought back: its place may have been given to another holder.
--
-- KEYS[1]: the semaphore key.
-- ARGV[1]: the value of the attempt that won the permit.
-- ARGV[2]: unused ('' ; the owner of extend.lua's layout).
-- ARGV[3]: the new TTL in milliseconds.
--
-- Returns 1 when the permit was extended, else 0.
if redis.replicate_commands then
  redis.replicate_commands()
end
local key, value, ttl = KEYS[1], ARGV[1], tonumber(ARGV[3])
if redis.call('TYPE', key).ok ~= 'zset' then
  return 0
end
local score = redis.call('ZSCORE', key, value)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not score or tonumber(score) <= now then
  return 0
end
zaddAtLeast(key, value, now + ttl)
expireAtLeast(key, ttl)
return 1
