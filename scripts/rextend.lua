-- rextend.lua extends one reader of a read lock key (see rlock.lua): its
-- own expiry, and the key's expiry when the key would otherwise end first.
-- A reader that is gone or has expired is not brought back: a writer may
-- have held the key since on a majority. Like extend.lua, it never shortens
-- an expiry.
--
-- KEYS[1]: the lock key.
-- ARGV[1]: the reader's value.
-- ARGV[2]: the new TTL in milliseconds.
--
-- Returns 1 when the reader was extended, else 0.
local key, f, ttl = KEYS[1], 'r:' .. ARGV[1], tonumber(ARGV[2])
if redis.call('TYPE', key).ok ~= 'hash' then
  return 0
end
local r = redis.call('HMGET', key, 'mode', f)
local now = nodeMillis()
if r[1] ~= 'read' or not r[2] or tonumber(r[2]) <= now then
  return 0
end
hsetAtLeast(key, f, now + ttl)
expireAtLeast(key, ttl)
return 1
