package redlock

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// This file is the fair lock's part of an acquisition (WithFair): the
// ticket round, the place in the queue, and leaving the queue. The queue
// itself is on the nodes (queue.lua), and docs/FAIRNESS.md says why its
// order holds over a quorum.
//
// A fair call's first attempt has no ticket: it takes the key only when
// nobody is queued (fairacquire.lua), which is all TryLock does, and each
// node that refuses draws a ticket there (increments the key's ticket
// counter) and answers it. The largest of a quorum's answers is the call's
// ticket; when fewer answered, a waiting call draws it in a round of its
// own (ticket.lua on every node). Every later attempt queues
// the call at that ticket on each node it reaches, or refreshes its entry
// there, and wins only where the call is the head of the queue. When the
// call ends, it leaves the queue on every node, announcing its leave when
// it was the head of a free key, so that the next call need not wait for
// its retry.

// fairKeys are a fair lock's KEYS, boxed once: acquire's are
// fairacquire.lua's (the lock key, its queue, its deadlines, its ticket
// counter, its waiting marker, then its fence counter with fencing),
// leave's fairleave.lua's (the first three), and ticket's ticket.lua's.
type fairKeys struct {
	acquire, leave, ticket []any
}

// newFairKeys names the queue keys of the lock key rk, whose fence counter
// is the first of fence, if any.
func newFairKeys(rk string, fence []string) *fairKeys {
	keys := []any{rk, keyspace.Queue(rk), keyspace.Deadline(rk), keyspace.Ticket(rk), keyspace.Waiting(rk)}
	if fence != nil {
		keys = append(keys, fence[0])
	}
	return &fairKeys{acquire: keys, leave: keys[:3:3], ticket: keys[3:4:4]}
}

// fairState is where a fair call stands in its key's queue. Only the
// calling goroutine uses it.
type fairState struct {
	// ticket is the call's ticket, as a decimal string; "" before the
	// ticket round gave one. number is the same, as a number.
	ticket string
	number int64
	// sent is set once an attempt with the ticket went out: the call may
	// be queued, and leaves the queue when it ends.
	sent bool
	// unheard is when the first of the queued attempts that no quorum of
	// nodes has answered since went out, and zero when there is none (see
	// stale).
	unheard time.Time
	// place is the call's place in the queue by its last attempt that a
	// quorum answered (1 for the head), and 0 before that.
	place int
	// moved is set when an attempt changed place, until the call has told
	// the Observer and WithQueuePlace's function.
	moved bool
}

// num is the call's ticket, and 0 before it has one, and for a call that
// is not fair (f nil).
func (f *fairState) num() int64 {
	if f == nil {
		return 0
	}
	return f.number
}

// pause is how long a waiting call waits for a wake-up before its next
// attempt, given d, its retry delay: d, but a fair call with two or more
// calls ahead of it in the queue waits a quarter of the TTL, long enough to
// spare the nodes an attempt per retry delay and short enough to refresh
// its entry three times within the entry's life. Its turn comes by a wake-up
// all the same: the queued attempts set the key's waiting marker, so every
// release is announced, and a Client wakes its fair waiters in queue order.
// Without pub/sub every call waits d. f is nil for a call that is not fair.
//
// A call with a ticket never waits more than a third of the TTL, whatever
// its retry delay: its entries live one TTL past its last refresh, and a
// longer wait would let them expire under a live waiter.
func (f *fairState) pause(cfg *config, d time.Duration) time.Duration {
	if f == nil || f.ticket == "" {
		return d
	}
	if f.place > 2 && cfg.pubsub {
		d = max(d, cfg.ttl/4)
	}
	return min(d, cfg.ttl/3)
}

// ticketArg is fairacquire.lua's ticket argument: "0" before the call has
// a ticket.
func (f *fairState) ticketArg() string {
	if f.ticket == "" {
		return "0"
	}
	return f.ticket
}

// read learns the call's place from a ticketed attempt's answers, and
// reports whether it changed. A node that said yes has the call at the head
// of its queue; one that said no answered minus its place. The call's place
// is the quorum-th smallest of them: a quorum of nodes has at most place-1
// calls ahead of it, and the call can only win once a quorum has none. With
// fewer than a quorum of places nothing is learned.
func (f *fairState) read(o *outcome, quorum int) bool {
	places := make([]int64, 0, len(o.votes))
	for i, v := range o.votes {
		switch {
		case !o.got[i]:
		case v.v == VoteYes:
			places = append(places, 1)
		case v.v == VoteNo && o.vals[i] < 0:
			places = append(places, -o.vals[i])
		}
	}
	if len(places) < quorum {
		return false
	}
	f.unheard = time.Time{}
	slices.Sort(places)
	p := int(places[quorum-1])
	if p == f.place {
		return false
	}
	f.place = p
	return true
}

// fairAcquireArgs builds fairacquire.lua's arguments. KEYS: the lock key,
// its queue, its deadlines, its ticket counter, its fence counter with
// fencing. ARGV: the value, the TTL the node keeps the key for, '1' with
// fencing, the acquisition's id, the attempt's number, the ticket ("0"
// before the call has one), the life of a queue entry (the lock's TTL).
func fairAcquireArgs(dst []any, t *target, tk token, ttl time.Duration, ttlArg any, h *testHooks) []any {
	if h.fairSent != nil && tk.ticket != "0" {
		h.fairSent(tk.id, tk.n)
	}
	fence := "0"
	if t.fence != nil {
		fence = "1"
	}
	ticket := tk.ticket
	if ticket == "" {
		ticket = "0"
	}
	return append(withKeys(dst, t.fair.acquire), tk.value, ttlArg, fence, tk.id, tk.n, ticket, ttl.Milliseconds())
}

// counters returns the ticket an attempt without one drew: the largest of
// the counters that its refusals returned (fairacquire.lua answers minus
// the counter, incremented), when a quorum of nodes returned one.
func counters(o *outcome, quorum int) (int64, bool) {
	var m int64
	n := 0
	for i, v := range o.votes {
		if o.got[i] && v.v == VoteNo && o.vals[i] < 0 {
			m = max(m, -o.vals[i])
			n++
		}
	}
	return m, n >= quorum
}

// setTicket makes m the call's ticket.
func (a *acquisition) setTicket(m int64) {
	if a.c.hooks.ticketOf != nil {
		m = a.c.hooks.ticketOf(m)
	}
	a.fair.ticket, a.fair.number = strconv.FormatInt(m, 10), m
	a.fair.unheard = time.Time{}
}

// stale gives up the call's ticket when its queued attempts have gone
// unanswered by a quorum of nodes for half a TTL, counted from the first
// of them (a pause of the call's own between two attempts is no silence of
// the nodes): a call cut off from most nodes cannot win, and its entries at
// the head of the queues it still reaches would keep the others from
// winning for as long as it waits. Its next attempt is unticketed again,
// and draws a new ticket, behind the calls queued meanwhile; its old
// entries expire within a TTL of their last refresh. Otherwise it notes
// that a queued attempt is going out.
func (a *acquisition) stale() {
	f := a.fair
	if f == nil || f.ticket == "" {
		return
	}
	now := a.c.now()
	switch {
	case f.unheard.IsZero():
		f.unheard = now
	case now.Sub(f.unheard) >= a.cfg.ttl/2:
		f.ticket, f.number, f.place, f.unheard = "", 0, 0, time.Time{}
	}
}

// drawTicket runs the ticket round of a fair call: ticket.lua on every
// node, and the largest answer of a quorum becomes the call's ticket. It
// reports whether a quorum answered; otherwise the call waits and tries
// again. The call's next attempt writes the ticket back (fairacquire.lua
// raises each counter it reaches to it): until a quorum has it, a call that
// draws its ticket later may draw a smaller one, and the two are ordered as
// calls that began to wait at once.
func (a *acquisition) drawTicket(ctx context.Context) bool {
	c, t := a.c, a.t
	jobs := make([]ticketJob, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op:      "ticket",
		quorum:  t.quorum,
		timeout: a.cfg.nodeTimeout,
		life:    a.cfg.releaseTimeout(),
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.key = t.fair.ticket
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)
	if o.yes < t.quorum || o.ctxErr != nil {
		return false
	}
	var m int64
	for i, v := range o.votes {
		if v.v == VoteYes {
			m = max(m, o.vals[i])
		}
	}
	a.setTicket(m)
	return true
}

// ticketJob draws a ticket on one node.
type ticketJob struct {
	leg
	key  []any // the ticket counter, boxed
	cmd  *redis.Cmd
	args [4]any
	evalFallback
}

func (j *ticketJob) Deadline() time.Time { return j.end }
func (j *ticketJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *ticketJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmd = redis.NewCmd(context.Background(), withKeys(evalStart(j.args[:0], scriptTicket, j.eval), j.key)...)
	return append(cmds, j.cmd)
}

func (j *ticketJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	j.leg.deliver(j.cmd.Int64())
	return false
}

// leaveQueue takes a fair call out of its key's queue on every node,
// without waiting for the replies: the winner's entry once it won, or the
// entry of a call that gave up, whose leave announce asks the nodes to
// announce when it was the head of a free key. A node it does not reach
// drops the entry one TTL after the call's last attempt refreshed it.
func (a *acquisition) leaveQueue(announce bool) {
	ttl := a.cfg.ttl.Milliseconds()
	end := time.Now().Add(a.cfg.releaseTimeout())
	for _, n := range a.c.nodes {
		n.pipe.Submit(&fairLeaveJob{t: a.t, n: n, ttl: ttl, announce: announce, end: end})
	}
}

// fairLeaveJob takes a fair call out of its key's queue on node n.
type fairLeaveJob struct {
	t        *target
	n        *node
	ttl      int64 // the tombstone's life, in milliseconds
	announce bool
	end      time.Time
	cmd      *redis.Cmd
	evalFallback
}

func (j *fairLeaveJob) Deadline() time.Time { return j.end }
func (j *fairLeaveJob) Fail(error)          {}

func (j *fairLeaveJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	args := withKeys(evalStart(make([]any, 0, 10), scriptFairLeave, j.eval), j.t.fair.leave)
	j.cmd = redis.NewCmd(context.Background(), append(args, j.t.id, j.ttl, j.t.channel(j.announce), j.n.shardArg)...)
	return append(cmds, j.cmd)
}

func (j *fairLeaveJob) Done(time.Time, time.Time) bool { return j.resendAsEval(j.cmd) }

// queued is what a waiting fair call does after an attempt that failed: it
// tells WithQueuePlace's function of a new place, and draws its ticket in a
// round of its own when its first attempt did not draw one (too few nodes
// refused it). When that round too falls short of a quorum, the next
// attempt is unticketed again, and draws.
func (a *acquisition) queued(ctx context.Context, ev *callEvents) {
	if a.fair.moved {
		a.fair.moved = false
		ev.queued(a.fair.place)
		if a.cfg.queuePlace != nil {
			a.cfg.queuePlace(a.fair.place)
		}
	}
	if a.fair.ticket == "" {
		a.drawTicket(ctx)
	}
}
