-- fence.lua writes a fence back: it raises each lock key's fence counter to
-- at least M, only while the node still holds every lock key for our value.
-- Once a quorum applied it, any later quorum meets one of these nodes, and
-- its acquire increments past M there.
--
-- KEYS[1..n]:    the lock keys.
-- KEYS[n+1..2n]: the fence counter of each lock key.
-- ARGV[1]: the value of the attempt that won the lock.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: M, the fence the acquisition will hand out.
-- ARGV[4]: n, the number of lock keys.
--
-- Returns 1 when the counters were raised, and 0 when the node no longer
-- holds the keys.
local token, owner, n = ARGV[1], ARGV[2], tonumber(ARGV[4])
for i = 1, n do
  if not holds(KEYS[i], token, owner) then
    return 0
  end
end
raiseFences(n, ARGV[3])
return 1
