-- release.lua deletes a lock key only while it still holds our token, so it
-- never deletes another holder's key. When it deletes, and a channel is
-- given, it announces the release there, so that waiters retry at once.
--
-- KEYS[1]: the lock key.
-- ARGV[1]: the token of the acquisition that releases.
-- ARGV[2]: optional; the channel to publish the release on. The message is
--          the released token, which lets a subscriber of several nodes
--          tell copies of one release from the next release.
--
-- Returns 1 when the key was deleted, and 0 when it held another token or
-- was missing.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] and ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
return 0
