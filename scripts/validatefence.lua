-- validatefence.lua reads one node's view of a fence, and writes nothing:
-- who holds the lock key, and the value of the key's fence counter.
-- Client.ValidateFence compares the counter with the fence in Go, and counts
-- the nodes that agree holder by holder (see validatefence.go). It needs
-- none of holds.lua, whose functions Redis would make anew on every call.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its fence counter.
--
-- Returns {layout, holder, counter}:
--   layout 'plain' at a string key, and holder is its value;
--   layout 'owner' at an owner lock's hash (see holds.lua) that has a hold
--     left, and holder is its owner;
--   layout '' when the key is missing, or is an owner lock's hash with no
--     hold left, and holder is '';
--   layout 'other' at any other type or layout (a read lock, a semaphore,
--     another program's data), none of which a fenced lock writes, and
--     holder is ''.
--   counter is the counter as stored, or '' when it is missing or not a
--     string.
local layout, holder = '', ''
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then
  layout, holder = 'plain', redis.call('GET', KEYS[1])
elseif t == 'hash' then
  local owner = redis.call('HGET', KEYS[1], 'owner')
  if not owner then
    layout = 'other'
  elseif redis.call('HLEN', KEYS[1]) > 1 then
    layout, holder = 'owner', owner
  end
elseif t ~= 'none' then
  layout = 'other'
end
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then
  counter = ''
end
return {layout, holder, counter}
