-- semacquire.lua takes one permit of a counting semaphore for one attempt
-- of an acquisition. The key is a sorted set: one member per holder, its
-- value, scored by its expiry on this node's clock (TIME, in milliseconds),
-- and the member '#permits' scored by minus the number of permits, so that
-- every holder agrees on it and expiry ranges (scores from 0 up) never
-- touch it. The key expires with its last holder.
--
-- Any other type at the key means "taken": a string is a plain lock
-- (ours or redsync's), a hash an owner lock, a sorted set without
-- '#permits' someone else's data. None of them is touched.
--
-- KEYS[1]: the semaphore key.
-- ARGV[1]: the attempt's value.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the number of permits.
-- ARGV[4]: the acquisition's id.
-- ARGV[5]: the attempt's number.
--
-- Returns 1 when the permit was taken (or already held by this attempt:
-- go-redis sent the request twice, and the permit keeps a later expiry), 0 when every permit is held or the key
-- is something else, and the error 'PERMITS <k>' when live holders use a
-- different number of permits k.
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before writes, on Redis before 5
end
local key, value, ttl, permits = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local id, n = ARGV[4], tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local kind = redis.call('TYPE', key).ok
if kind ~= 'none' and kind ~= 'zset' then
  return 0
end
if kind == 'zset' then
  local p = redis.call('ZSCORE', key, '#permits')
  if not p then
    return 0
  end
  -- Expired holders never count.
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local mine = false
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if m == value then
      mine = true
    elseif m ~= '#permits' then
      local k = attemptOf(m, id)
      if k ~= nil and k > n then
        return 0 -- a later attempt counted this node: never undo it
      elseif k ~= nil then
        redis.call('ZREM', key, m) -- an earlier attempt's leftover
      end
    end
  end
  local held = redis.call('ZCARD', key) - 1
  if mine then
    held = held - 1
  end
  if held > 0 and -tonumber(p) ~= permits then
    return redis.error_reply('PERMITS ' .. tostring(-tonumber(p)))
  end
  if not mine and held >= permits then
    return 0
  end
end
redis.call('ZADD', key, -permits, '#permits')
-- A permit this attempt already holds keeps a later expiry: an Extend may
-- have lengthened it before this late copy came.
zaddAtLeast(key, value, now + ttl)
-- The key lives as long as its longest-lived holder.
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
expireAtLeast(key, tonumber(last[2]) - now)
return 1
