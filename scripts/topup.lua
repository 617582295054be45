-- topup.lua asks a node that did not vote yes for a lock to take it now,
-- while the lock is valid (WithTopUp): each extension of the lock sends it,
-- instead of extend.lua, to the nodes that never said yes. Like acquire.lua
-- it takes every key or none, by the same rule (takeAll): a key that is
-- missing is set (SET NX of the holder's value); a key that already holds
-- the value (a copy of this request, or a late acquire of the same
-- attempt) keeps the longer of its TTL and the new one; a key that holds an
-- earlier attempt's value of the same acquisition (a leftover whose
-- rollback has not landed) is taken over; an owner lock of the same owner
-- is joined. A key held by anyone else is left alone. The caller never sends it to a node that held the lock and lost it:
-- there the key may have been released by token, or taken by the next
-- holder.
--
-- With fencing, each key's counter is raised to at least the lock's fence,
-- as fence.lua raises it on the nodes that voted: the node then counts like
-- one of them, for the next holder's fence and for Client.ValidateFence.
--
-- KEYS[1..n]:    the lock keys.
-- KEYS[n+1..2n]: with fencing, the fence counter of each lock key.
-- ARGV[1]: the value of the attempt that won the lock.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the TTL in milliseconds.
-- ARGV[4]: n, the number of lock keys.
-- ARGV[5]: the lock's fence, or '0' without fencing.
-- ARGV[6]: the acquisition's id.
-- ARGV[7]: the winning attempt's number.
--
-- Returns 1 when the node holds every key for the value now, else 0, and
-- then it changed nothing.
local value, owner, ttl, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local id, attempt = ARGV[6], tonumber(ARGV[7])
if not takeAll(n, value, owner, ttl, id, attempt) then
  return 0
end
if ARGV[5] ~= '0' then
  raiseFences(n, ARGV[5])
end
return 1
