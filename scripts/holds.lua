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

-- announce publishes the release of value on channel, the key's release
-- channel (Go's keyspace.Channel names it, in the key's hash slot). On a
-- Redis Cluster node (sharded is '1') it uses SPUBLISH (Redis 7.0 and
-- later), so that the cluster does not broadcast it to every shard; where
-- SPUBLISH is unknown it falls back to PUBLISH on the same channel, which
-- the subscribers then use too.
local function announce(channel, value, sharded)
  if sharded == '1' and pcall(redis.call, 'SPUBLISH', channel, value) then
    return
  end
  redis.call('PUBLISH', channel, value)
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

-- The expiry rule. Copies of one request reach a node in any order, over
-- different connections, long after their sender gave up; and an Extend
-- may have lengthened what an acquire set. So no script ever shortens the
-- expiry of a key, hash field or sorted-set member that holds our value:
-- every expiry a script writes goes through the functions below, which
-- only lengthen. scripts_test.go checks that no script writes one any
-- other way. expireAtLatest and expireAtMost are the exceptions, and say
-- why.

-- expireAtLeast sets key's TTL to ms, unless it already lives longer.
local function expireAtLeast(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- setAtLeast makes the string key hold value for at least ms: a key that
-- already holds value keeps its TTL when that is longer (a late copy of
-- the acquire, after an Extend); any other key is overwritten.
local function setAtLeast(key, value, ms)
  if redis.pcall('GET', key) == value then
    expireAtLeast(key, ms)
  else
    redis.call('SET', key, value, 'PX', ms)
  end
end

-- expireAtAtLeast sets key's expiry to at, in milliseconds on this node's
-- clock (now), unless it already lives longer.
local function expireAtAtLeast(key, at, now)
  if redis.call('PTTL', key) < at - now then
    redis.call('PEXPIREAT', key, string.format('%.0f', at))
  end
end

-- expireAtLatest sets key's expiry to latest, the latest expiry of the
-- live holders left in it, after the caller removed its own: the only
-- expiry that may shorten a key, since every holder left in it counts on
-- its own expiry (a hash field), which is at most latest.
local function expireAtLatest(key, latest)
  redis.call('PEXPIREAT', key, string.format('%.0f', latest))
end

-- expireAtMost sets key's TTL to ms when it lives longer: the release of a
-- hold that must last until the end of its minimum hold (releaselater.lua,
-- WithMinHold), which lets the key expire then rather than delete it. It
-- may shorten a key that holds our value because the hold is given up:
-- the caller calls it only for the last hold in the key (a plain key, or
-- an owner key with no other acquisition), whose extensions have stopped.
-- It never lengthens, so that a copy of the release that lands later finds
-- the key shorter than its ms, and leaves it as the first copy set it.
local function expireAtMost(key, ms)
  if redis.call('PTTL', key) > tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- hsetAtLeast sets the hash field of key to the expiry e (milliseconds on
-- this node's clock), unless it already holds a later one.
local function hsetAtLeast(key, field, e)
  local cur = redis.call('HGET', key, field)
  if not cur or tonumber(cur) < e then
    redis.call('HSET', key, field, string.format('%.0f', e))
  end
end

-- zaddAtLeast scores member of the sorted set key with the expiry e
-- (milliseconds on this node's clock), unless it already has a later one.
local function zaddAtLeast(key, member, e)
  local cur = redis.call('ZSCORE', key, member)
  if not cur or tonumber(cur) < e then
    redis.call('ZADD', key, e, member)
  end
end

-- hdelAll deletes fields of key in chunks: Lua's unpack fails past about
-- 8000 values, and lapsed holders may leave more fields than that.
local function hdelAll(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end

-- The functions below are shared by several scripts and use the expiry
-- functions above, so they come after them.

-- takeAll takes KEYS[1..n] for attempt of acquisition id, writing value
-- for ttl milliseconds: every key or none (see takeable). A key that holds
-- value keeps a longer TTL (setAtLeast); an owner lock's earlier attempts
-- of the acquisition give way to this one. It reports whether it took them.
local function takeAll(n, value, owner, ttl, id, attempt)
  for i = 1, n do
    if not takeable(KEYS[i], value, owner, id, attempt) then
      return false
    end
  end
  for i = 1, n do
    if owner == '' then
      setAtLeast(KEYS[i], value, ttl)
    else
      dropEarlier(KEYS[i], id, attempt)
      redis.call('HSET', KEYS[i], 'owner', owner, 't:' .. value, '1')
      expireAtLeast(KEYS[i], ttl)
    end
  end
  return true
end

-- raiseFences raises the fence counters KEYS[n+1..2n] to at least m, a
-- fence as a decimal string: a counter never goes down.
local function raiseFences(n, m)
  local f = tonumber(m)
  for i = n + 1, 2 * n do
    if tonumber(redis.call('GET', KEYS[i]) or '0') < f then
      redis.call('SET', KEYS[i], m)
    end
  end
end

-- notHeldVerdict is a release's verdict once key was found not to hold
-- its value, from all, the verdict so far: -1 when key holds something
-- else (another value, owner or type), else 0 (gone, or the owner's hash
-- without this hold) unless a key already made it -1.
local function notHeldVerdict(key, owner, all)
  local t = redis.call('TYPE', key).ok
  local ownHash = owner ~= '' and t == 'hash' and redis.call('HGET', key, 'owner') == owner
  if t ~= 'none' and not ownHash then
    return -1
  elseif all == 1 then
    return 0
  end
  return all
end
