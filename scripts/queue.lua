-- queue.lua is a fair lock's queue (WithFair), composed after holds.lua by
-- the scripts that need it. Each node keeps, beside the lock key:
--
--   the queue:     a sorted set of the waiting calls' ids, each scored by
--                  its ticket. Equal tickets are ordered by id, as every
--                  sorted set orders equal scores, so that (ticket, id) is
--                  one order on every node.
--   the deadlines: a sorted set of the same ids, each scored by the time,
--                  in milliseconds on this node's clock, at which its entry
--                  expires unless the call refreshes it; and the tombstones
--                  ('!' .. id) of the calls that ended, which keep a late
--                  copy of one of their attempts from queueing them again.
--
-- The tickets come from the ticket counter, which the caller reads from a
-- quorum and writes back with its first queued attempt (see ticket.lua and
-- docs/FAIRNESS.md). A queue entry and a tombstone live one lock TTL past
-- the call's last request; nothing else removes an entry but the call.

-- nodeMillis is the node's clock in milliseconds since the epoch, which the
-- deadlines are kept on.
local function nodeMillis()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- bumpCounter increments the counter key and returns it. A counter that
-- does not exist yet starts at the node's clock in microseconds, as a fence
-- counter does (see acquire.lua), so that a node restarted empty, after the
-- delay the Redlock spec asks for, still counts above every ticket drawn
-- before.
local function bumpCounter(key)
  if redis.call('EXISTS', key) == 1 then
    return redis.call('INCR', key)
  end
  -- Built as a string: Lua would print a number this large in exponent
  -- form, which INCR could not read.
  local t = redis.call('TIME')
  local s = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', key, s)
  return tonumber(s)
end

-- raiseCounter raises the counter key to at least m, a decimal string: a
-- counter never goes down.
local function raiseCounter(key, m)
  if tonumber(redis.call('GET', key) or '0') < tonumber(m) then
    redis.call('SET', key, m)
  end
end

-- purgeQueue removes the entries and tombstones whose deadline has passed,
-- a thousand at a time: a queue of calls that all crashed empties over
-- their next calls.
local function purgeQueue(q, d, now)
  local gone = redis.call('ZRANGEBYSCORE', d, '-inf', string.format('%.0f', now), 'LIMIT', 0, 1000)
  if #gone == 0 then
    return
  end
  local ids = {}
  for _, m in ipairs(gone) do
    if string.sub(m, 1, 1) ~= '!' then
      ids[#ids + 1] = m
    end
  end
  redis.call('ZREM', d, unpack(gone))
  if #ids > 0 then
    redis.call('ZREM', q, unpack(ids))
  end
end

-- enqueue puts the call id in the queue at ticket, or keeps it there, and
-- makes its entry live until e at least: every queued attempt refreshes
-- it, so that an entry outlives its call's last attempt by one TTL. The
-- queue's score is the ticket, not an expiry: the deadlines and the keys'
-- own expiries go through holds.lua's functions, which only lengthen.
local function enqueue(q, d, id, ticket, e, now)
  redis.call('ZADD', q, ticket, id) -- a ticket, not an expiry
  zaddAtLeast(d, id, e)
  expireAtAtLeast(q, e, now)
  expireAtAtLeast(d, e, now)
end

-- dequeue takes the call id out of the queue and leaves its tombstone
-- until e at least.
local function dequeue(q, d, id, e, now)
  redis.call('ZREM', q, id)
  redis.call('ZREM', d, id)
  zaddAtLeast(d, '!' .. id, e)
  expireAtAtLeast(d, e, now)
end

-- queueHead returns the id at the head of the queue, or nil.
local function queueHead(q)
  return redis.call('ZRANGE', q, 0, 0)[1]
end
