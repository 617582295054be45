-- release.lua releases an attempt's lock keys, only where they still hold
-- its exact value, so it never deletes another holder's key, nor the value
-- of a later attempt of the same acquisition. A plain key is deleted; an
-- owner lock loses this acquisition's field, and is deleted when no
-- acquisition of the owner is left. A deleted key is announced on its
-- release channel when a waiter marked it (see waitingKey), so that waiters
-- retry at once; the marker goes with the key. Without a marker the release
-- costs a GET and a DEL, as a plain compare-and-delete does.
--
-- KEYS[1..n]: the lock keys.
-- ARGV[1]: the value to release.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the prefix of the release channels, or '' to announce nothing
--          and leave the waiters' markers (a rollback).
--          The message is the released value, which lets a subscriber of
--          several nodes tell copies of one release from the next release.
-- ARGV[4]: '1' on a Redis Cluster node: announce on the shard channel
--          (see announce).
--
-- Returns 1 when every key held the value; -1 when some key held something
-- else (another value, owner or type); 0 when some key was gone and none
-- held something else, as after a release that go-redis sent twice. The
-- keys that did hold the value are released either way.
local value, owner, prefix, sharded = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local all = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  if holds(key, value, owner) then
    local gone = true
    if owner ~= '' then
      redis.call('HDEL', key, 't:' .. value)
      gone = redis.call('HLEN', key) <= 1
    end
    if gone then
      if prefix == '' then
        redis.call('DEL', key)
      elseif redis.call('DEL', key, waitingKey(key)) > 1 then
        announce(prefix, key, value, sharded)
      end
    end
  else
    local t = redis.call('TYPE', key).ok
    local ownHash = owner ~= '' and t == 'hash' and redis.call('HGET', key, 'owner') == owner
    if t ~= 'none' and not ownHash then
      all = -1
    elseif all == 1 then
      all = 0
    end
  end
end
return all
