-- holds.lua is the prelude of every lock script: it is prepended to each
-- script's body, so that they agree on what "holding" a lock key means.
--
-- A plain lock key is a string that holds the acquisition's token: the
-- layout of redsync and the reference clients. An owner (reentrant) lock key
-- is a hash: field "owner" names the owner, and one field "t:<token>" per
-- acquisition of that owner that reached this node.

-- holds reports whether key holds the acquisition of token (and owner, for an
-- owner lock; '' for a plain one).
local function holds(key, token, owner)
  local t = redis.call('TYPE', key).ok
  if owner == '' then
    return t == 'string' and redis.call('GET', key) == token
  end
  return t == 'hash' and redis.call('HGET', key, 'owner') == owner
    and redis.call('HEXISTS', key, 't:' .. token) == 1
end

-- takeable reports whether the acquisition can take key: it is missing, or
-- already ours, or, for an owner lock, held by the same owner.
local function takeable(key, token, owner)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    return true
  end
  if owner == '' then
    return t == 'string' and redis.call('GET', key) == token
  end
  return t == 'hash' and redis.call('HGET', key, 'owner') == owner
end

-- expireAtLeast sets key's TTL to ms, unless it already lives longer: other
-- acquisitions of the same owner may count on that.
local function expireAtLeast(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end
