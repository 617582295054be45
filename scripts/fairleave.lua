-- fairleave.lua takes a fair call out of the queue of a lock key
-- (WithFair): the winner's entry once its attempt won on a quorum, and the
-- entry of a call that gave up (its ctx ended, or the Client closed). It
-- leaves the call's tombstone, so that a late copy of one of its attempts
-- does not queue it again. When the call was the head of the queue and the
-- key is free, the next call in the queue is told at once, on the key's
-- release channel, rather than at its next retry. It never touches the
-- lock key.
--
-- KEYS[1]: the lock key.
-- KEYS[2]: its queue.
-- KEYS[3]: its deadlines (see queue.lua).
-- ARGV[1]: the acquisition's id.
-- ARGV[2]: how long the tombstone lives, in milliseconds (the lock's TTL).
-- ARGV[3]: the key's release channel, or '' to announce nothing.
-- ARGV[4]: '1' on a Redis Cluster node (see announce).
--
-- Returns 1 when the call was queued here, else 0.
local id = ARGV[1]
local q, d = KEYS[2], KEYS[3]
local now = nodeMillis()
purgeQueue(q, d, now)
local queued = redis.call('ZSCORE', q, id) ~= false
local head = queueHead(q) == id
dequeue(q, d, id, now + tonumber(ARGV[2]), now)
if head and ARGV[3] ~= '' and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('ZCARD', q) > 0 then
  announce(ARGV[3], '!' .. id, ARGV[4])
end
if queued then
  return 1
end
return 0
