-- rlock.lua adds a reader to a read lock key, for one attempt of an RLock or
-- TryRLock call. A read lock key is a hash: field "mode" is "read", and one
-- field "r:<value>" per reader holds the reader's expiry, in milliseconds
-- on this node's clock (TIME). Readers whose expiry has passed are dropped
-- here and by runlock.lua, and the key's own expiry is kept at least at the
-- latest reader's, so that no reader's expiry depends on another's
-- renewals.
--
-- A plain string (a writer: ours, redsync's or node-redlock's), an owner
-- lock, or any other type at the key refuses the reader. So does a writer's
-- waiting marker ("1" at KEYS[2]), unless this value is already there:
-- existing readers keep their place, new ones wait behind the writer.
--
-- As in acquire.lua, this attempt's own value (go-redis sent the request
-- twice) counts as ours, and keeps a later expiry (an Extend may have
-- lengthened it: see the expiry rule in holds.lua); an earlier attempt's
-- value of the same acquisition (a leftover whose rollback has not landed)
-- is replaced; a later attempt's value refuses the write.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its waiting marker.
-- ARGV[1]: the attempt's value.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the acquisition's id.
-- ARGV[4]: the attempt's number.
-- ARGV[5]: '1' to ignore the writers' waiting marker (a test switch).
--
-- Returns 1 when the reader was added (or was there), else 0.
local key, value, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local id, n = ARGV[3], tonumber(ARGV[4])
local typ = redis.call('TYPE', key).ok
if typ ~= 'none' and (typ ~= 'hash' or redis.call('HGET', key, 'mode') ~= 'read') then
  return 0
end
local now = nodeMillis()
local mine, drop, latest = false, {}, 0
if typ == 'hash' then
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 2) == 'r:' then
      local v, e = string.sub(f, 3), tonumber(all[i + 1])
      local k = attemptOf(v, id)
      if v == value then
        mine = true
        latest = math.max(latest, e)
      elseif k ~= nil and k > n then
        return 0
      elseif e <= now or k ~= nil then
        drop[#drop + 1] = f
      elseif e > latest then
        latest = e
      end
    end
  end
end
if not mine and ARGV[5] ~= '1' and redis.call('GET', KEYS[2]) == '1' then
  return 0
end
hdelAll(key, drop)
local e = now + ttl
redis.call('HSET', key, 'mode', 'read')
hsetAtLeast(key, 'r:' .. value, e)
expireAtAtLeast(key, math.max(e, latest), now)
return 1
