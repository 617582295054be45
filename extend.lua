-- extend.lua resets the TTL of a lock key only while it still holds our
-- token. It never re-creates a missing key: a key that expired may already
-- belong to someone else on the other nodes.
--
-- KEYS[1]: the lock key.
-- ARGV[1]: the token of the acquisition that extends.
-- ARGV[2]: the new TTL in milliseconds.
--
-- Returns 1 when the TTL was reset, and 0 when the key held another token or
-- was missing.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
