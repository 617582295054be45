-- releaseplain.lua is release.lua for the common case: one plain lock key,
-- on a node that is not a Redis Cluster node. It does there what release.lua
-- does, and returns the same, for what a plain compare-and-delete costs:
-- without the prelude (holds.lua), whose functions Redis would make anew on
-- every call.
-- The other cases (several keys, an owner lock, a semaphore, a cluster
-- node) use release.lua.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its waiting marker.
-- ARGV[1]: the value to release.
-- ARGV[2]: the key's release channel, or '' to announce nothing and leave
--          the marker (a rollback).
--
-- Returns 1 when the key held the value, and deletes it; -1 when it held
-- something else (another value, or another type); 0 when it was gone.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
  elseif redis.call('DEL', KEYS[1], KEYS[2]) > 1 then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
if v then
  return -1 -- another value, or the error table of another type
end
return 0
