-- rwholds.lua is the prelude of the read lock scripts, after holds.lua.

-- nodeMillis is the node's clock in milliseconds since the epoch: reader
-- expiries are kept on it, as the key's PEXPIREAT is.
local function nodeMillis()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

