-- release.lua releases an acquisition's lock keys, only where they still
-- hold its token, so it never deletes another holder's key. A plain key is
-- deleted; an owner lock loses this acquisition's field, and is deleted when
-- no acquisition of the owner is left. Each deleted key is announced on its
-- release channel, so that waiters retry at once.
--
-- KEYS[1..n]: the lock keys.
-- ARGV[1]: the token of the acquisition that releases.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the prefix of the release channels, or '' to announce nothing.
--          The message is the released token, which lets a subscriber of
--          several nodes tell copies of one release from the next release.
--
-- Returns 1 when every key held the acquisition, else 0. The keys that did
-- hold it are released either way.
local token, owner, prefix = ARGV[1], ARGV[2], ARGV[3]
local all = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  if holds(key, token, owner) then
    local gone = true
    if owner ~= '' then
      redis.call('HDEL', key, 't:' .. token)
      gone = redis.call('HLEN', key) <= 1
    end
    if gone then
      redis.call('DEL', key)
      if prefix ~= '' then
        redis.call('PUBLISH', prefix .. key, token)
      end
    end
  else
    all = 0
  end
end
return all
