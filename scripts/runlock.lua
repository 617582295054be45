-- runlock.lua removes one reader from a read lock key (see rlock.lua),
-- only its own field. Readers whose expiry has passed go too. When no live
-- reader is left the key is deleted and, when a waiter marked it, the
-- release is announced on its channel. A writer's marker ("1") stays, so
-- that new readers keep waiting behind that writer until it has taken the
-- key (its Unlock deletes the marker) or the marker's TTL ends; a reader's
-- marker is deleted with the key. Otherwise the key's expiry is set to the
-- latest live reader's.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its waiting marker.
-- ARGV[1]: the reader's value.
-- ARGV[2]: the key's release channel, or '' to announce nothing (a
--          rollback).
-- ARGV[3]: '1' on a Redis Cluster node: announce with SPUBLISH.
--
-- Returns 1 when the reader was there and live; 0 when it was gone or had
-- expired; -1 when the key holds something else than a read lock.
local key, value, channel, sharded = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local typ = redis.call('TYPE', key).ok
if typ == 'none' then
  return 0
end
if typ ~= 'hash' or redis.call('HGET', key, 'mode') ~= 'read' then
  return -1
end
local now = nodeMillis()
local mine = 'r:' .. value
local ret, drop, latest = 0, {mine}, 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'r:' then
    local e = tonumber(all[i + 1])
    if f == mine then
      if e > now then
        ret = 1
      end
    elseif e <= now then
      drop[#drop + 1] = f
    elseif e > latest then
      latest = e
    end
  end
end
if latest == 0 then
  local w = KEYS[2]
  redis.call('DEL', key)
  if channel ~= '' then
    local m = redis.call('GET', w)
    if m then
      if m ~= '1' then
        redis.call('DEL', w)
      end
      announce(channel, value, sharded)
    end
  end
  return ret
end
hdelAll(key, drop)
expireAtLatest(key, latest)
return ret
