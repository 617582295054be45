-- holds.lua is the prelude of every lock script: it is prepended to each
-- script's body, so that they agree on what "holding" a lock key means.
--
-- A plain lock key is a string that holds the value of one attempt: the
-- layout of redsync and the reference clients. An owner (reentrant) lock key
-- is a hash: field "owner" names the owner, and one field "t:<value>" per
-- acquisition of that owner that reached this node.
--
-- An attempt's value is the acquisition's random id for its first attempt,
-- and "<id>.<n>" for attempt n; with a label (WithLabel), a space and the
-- label follow. The id is a UUID, so the first space ends the attempt's name.

-- holds reports whether key holds value (and owner, for an owner lock; ''
-- for a plain one).
--
-- One command either way, so that the common paths cost what a plain
-- compare-and-delete costs: pcall turns the WRONGTYPE error of a key of
-- another type into a table, which equals no string.
local function holds(key, value, owner)
  if owner == '' then
    return redis.pcall('GET', key) == value
  end
  local r = redis.pcall('HMGET', key, 'owner', 't:' .. value)
  return r[1] == owner and r[2] ~= false and r[2] ~= nil
end

-- waitingKey names the marker that waiters set on a lock key, so that its
-- release is announced only when someone may be waiting. It stays in the
-- key's hash slot; Go's waitingKey builds the same name.
local function waitingKey(key)
  local s = string.find(key, '{', 1, true)
  if s then
    local e = string.find(key, '}', s + 1, true)
    if e and e > s + 1 then
      return key .. ':waiting'
    end
  end
  return '{' .. key .. '}:waiting'
end

-- shardChannel is the release channel of key as a shard channel: it stays
-- in the key's hash slot, as waitingKey does, so that SPUBLISH on a Redis
-- Cluster node reaches only the key's shard. Go's shardChannel builds the
-- same name.
local function shardChannel(prefix, key)
  local s = string.find(key, '{', 1, true)
  if s then
    local e = string.find(key, '}', s + 1, true)
    if e and e > s + 1 then
      return prefix .. key
    end
  end
  return prefix .. '{' .. key .. '}'
end

-- announce publishes the release of value on key's release channel. On a
-- Redis Cluster node (sharded is '1') it uses the shard channel with
-- SPUBLISH (Redis 7.0 and later), so that the cluster does not broadcast
-- it to every shard; where SPUBLISH is unknown it falls back to PUBLISH on
-- the plain channel, which the subscribers then use too.
local function announce(prefix, key, value, sharded)
  if sharded == '1' and pcall(redis.call, 'SPUBLISH', shardChannel(prefix, key), value) then
    return
  end
  redis.call('PUBLISH', prefix .. key, value)
end

-- attemptOf returns the attempt number of v when v is a value of the
-- acquisition id, else nil. The label, if any, is left out.
local function attemptOf(v, id)
  local sp = string.find(v, ' ', 1, true)
  if sp then
    v = string.sub(v, 1, sp - 1)
  end
  if v == id then
    return 0
  end
  if string.sub(v, 1, #id + 1) == id .. '.' then
    return tonumber(string.sub(v, #id + 2))
  end
  return nil
end

-- takeable reports whether attempt n of acquisition id, writing value, can
-- take key: it is missing, already holds value, or holds the value of an
-- earlier attempt of the same acquisition (a leftover whose rollback has not
-- landed); for an owner lock, it is held by the same owner, and no later
-- attempt of the acquisition is there. A later attempt's value is never
-- replaced: a late write of an earlier attempt must not undo what a later
-- one counted.
local function takeable(key, value, owner, id, n)
  if owner == '' then
    local cur = redis.pcall('GET', key)
    if cur == false or cur == value then
      return true
    end
    if type(cur) ~= 'string' then
      return false -- another type
    end
    local k = attemptOf(cur, id)
    return k ~= nil and k < n
  end
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    return true
  end
  if t ~= 'hash' or redis.call('HGET', key, 'owner') ~= owner then
    return false
  end
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 't:' then
      local k = attemptOf(string.sub(f, 3), id)
      if k ~= nil and k > n then
        return false
      end
    end
  end
  return true
end

-- dropEarlier deletes the fields of an owner lock key that belong to earlier
-- attempts of acquisition id than n: attempt n takes their place.
local function dropEarlier(key, id, n)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 't:' then
      local k = attemptOf(string.sub(f, 3), id)
      if k ~= nil and k < n then
        redis.call('HDEL', key, f)
      end
    end
  end
end

-- expireAtLeast sets key's TTL to ms, unless it already lives longer: other
-- acquisitions of the same owner may count on that.
local function expireAtLeast(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end
