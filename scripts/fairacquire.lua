-- fairacquire.lua is one attempt of a fair lock (WithFair). It queues the
-- call, or refreshes its entry, and takes the lock key only for the head of
-- the queue: the first live entry, by (ticket, id). A call's first attempt
-- has no ticket yet ('0'): it takes the key only when no call is queued,
-- and does not queue; refused, it draws a ticket (as ticket.lua does), so
-- that a call that goes on to wait needs no round of its own for it. The key is a plain string, taken through takeAll, as
-- acquire.lua takes it: the queue only adds a condition to the take.
--
-- A copy of this very attempt (the key already holds its value) counts as
-- taken and writes no entry. A call whose tombstone is here ended: a late
-- copy of one of its attempts neither queues it again nor takes the key.
-- The winner's entry is left: the caller takes it out once the attempt won
-- on a quorum (fairleave.lua), since an attempt that won here but lost the
-- quorum must stay queued. A queued call that did not take the key sets the
-- key's waiting marker, as a waiting writer's attempt does, so that the
-- holder's release is announced: the head hears of it at once, even when
-- its last attempt was before the holder took the key.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its queue.
-- KEYS[3]: its deadlines (see queue.lua).
-- KEYS[4]: its ticket counter.
-- KEYS[5]: its waiting marker.
-- KEYS[6]: with fencing, its fence counter.
-- ARGV[1]: the attempt's value.
-- ARGV[2]: the TTL in milliseconds (the lock-delay included).
-- ARGV[3]: '1' with fencing, else '0'.
-- ARGV[4]: the acquisition's id.
-- ARGV[5]: the attempt's number.
-- ARGV[6]: the call's ticket, or '0' before it has one.
-- ARGV[7]: how long an entry lives unless refreshed, in milliseconds (the
--          lock's TTL).
--
-- Returns 1, or with fencing the key's new fence, when the key is ours.
-- Otherwise, for an attempt without a ticket, minus the ticket counter,
-- incremented; for one with a ticket, 0 when the call is not queued here
-- (it ended), else minus its place in the queue (-1 for the head). A
-- counter starts at the node's clock in microseconds, so a ticket is never
-- mistaken for a place.
local value, ttl, id, attempt, ticket = ARGV[1], ARGV[2], ARGV[4], tonumber(ARGV[5]), ARGV[6]
local q, d = KEYS[2], KEYS[3]
local now = nodeMillis()
purgeQueue(q, d, now)
local may
if redis.pcall('GET', KEYS[1]) == value then
  may = true
elseif ticket ~= '0' then
  if redis.call('ZSCORE', d, '!' .. id) then
    return 0
  end
  raiseCounter(KEYS[4], ticket)
  enqueue(q, d, id, ticket, now + tonumber(ARGV[7]), now)
  may = queueHead(q) == id
else
  may = redis.call('ZCARD', q) == 0
end
if may and takeAll(1, value, '', ttl, id, attempt) then
  if ARGV[3] == '1' then
    return bumpCounter(KEYS[6])
  end
  return 1
end
if ticket == '0' then
  return -bumpCounter(KEYS[4])
end
local r = redis.call('ZRANK', q, id)
if not r then
  return 0
end
setAtLeast(KEYS[5], '1', ttl)
return -(r + 1)
