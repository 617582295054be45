-- release.lua deletes a lock key only while it still holds our token, so it
-- never deletes another holder's key.
--
-- KEYS[1]: the lock key.
-- ARGV[1]: the token of the acquisition that releases.
--
-- Returns 1 when the key was deleted, and 0 when it held another token or
-- was missing.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
