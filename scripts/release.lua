-- release.lua releases an attempt's lock keys, only where they still hold
-- its exact value, so it never deletes another holder's key, nor the value
-- of a later attempt of the same acquisition. A plain key is deleted; an
-- owner lock loses this acquisition's field, and is deleted when no
-- acquisition of the owner is left. A deleted key is announced on its
-- release channel when a waiter marked it, so that waiters retry at once;
-- the marker goes with the key. Without a marker the release
-- costs a GET and a DEL, as a plain compare-and-delete does.
--
-- KEYS[1..n]:    the lock keys.
-- KEYS[n+1..2n]: their waiting markers.
-- ARGV[1]: the value to release.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: '1' on a Redis Cluster node: announce with SPUBLISH (see
--          announce).
-- ARGV[4..n+3]: the keys' release channels; none to announce nothing and
--          leave the waiters' markers (a rollback). The message is the
--          released value, which lets a subscriber of several nodes tell
--          copies of one release from the next release.
--
-- Returns 1 when every key held the value; -1 when some key held something
-- else (another value, owner or type); 0 when some key was gone and none
-- held something else, as after a release that go-redis sent twice. The
-- keys that did hold the value are released either way.
local value, owner, sharded = ARGV[1], ARGV[2], ARGV[3]
local n = #KEYS / 2
local all = 1
for i = 1, n do
  local key = KEYS[i]
  if holds(key, value, owner) then
    local gone = true
    if owner ~= '' then
      redis.call('HDEL', key, 't:' .. value)
      gone = redis.call('HLEN', key) <= 1
    end
    if gone then
      local channel = ARGV[3 + i]
      if not channel then
        redis.call('DEL', key)
      elseif redis.call('DEL', key, KEYS[n + i]) > 1 then
        announce(channel, value, sharded)
      end
    end
  else
    all = notHeldVerdict(key, owner, all)
  end
end
return all
