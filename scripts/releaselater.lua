-- releaselater.lua releases an attempt's lock keys before the end of the
-- lock's minimum hold (WithMinHold): instead of deleting them, it lets them
-- expire in ms, the time left until the acquisition plus the minimum hold,
-- as the client measured it when it sent the request. It touches only the
-- keys that still hold the exact value, as release.lua does, so it never
-- touches another holder's key. Nothing is announced: the keys are not
-- free, and the waiters' markers stay, so that the waiters hear of the
-- next release.
--
-- An owner lock whose key holds other acquisitions of the owner loses
-- this acquisition's field, as with release.lua, and the key is only
-- lengthened: the others count on its expiry. The last acquisition keeps
-- its field, as a plain key keeps its value, so that the key still reads
-- as held (Inspect) and Client.Release can still free it.
--
-- Each mode is safe to run twice, or late (go-redis may send a copy
-- again): '1' only shortens the key's expiry, so a copy finds it shorter
-- than ms already and leaves it; '0' only lengthens it, as a late copy of
-- an extension would. A copy that finds the owner's field gone does
-- nothing.
--
-- KEYS[1..n]: the lock keys.
-- ARGV[1]: the value to release.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: ms, the time left until the end of the minimum hold, at least 1.
-- ARGV[4]: '1' when the minimum hold ends while the keys still live (the
--          lock is still valid): the keys that live longer are cut to ms.
--          '0' when they may end first (the minimum hold is longer than the
--          TTL, or the lock is over): the keys that live shorter are
--          lengthened to ms, and the others are left alone.
--
-- Returns 1 when every key held the value; -1 when some key held something
-- else (another value, owner or type); 0 when some key was gone and none
-- held something else, as after a copy of an owner lock's release. The keys
-- that did hold the value are released either way.
local value, owner, ms, cut = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local all = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  if holds(key, value, owner) then
    -- The owner's field and ours: the last acquisition in the key.
    local last = owner == '' or redis.call('HLEN', key) <= 2
    if not last then
      redis.call('HDEL', key, 't:' .. value)
    end
    if cut and last then
      expireAtMost(key, ms)
    else
      expireAtLeast(key, ms)
    end
  else
    all = notHeldVerdict(key, owner, all)
  end
end
return all
