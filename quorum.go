package redlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redlockgo/redlock/internal/transport"
)

// Names of the operations, as Stats.Op reports them.
const (
	OpLock   = "lock"
	OpExtend = "extend"
	OpUnlock = "unlock"

	opRollback = "rollback"
)

// Vote is one node's answer in a round.
type Vote uint8

const (
	votePending Vote = iota // no answer yet; never left in Stats

	// VoteYes means the node did what was asked: it took the key for our
	// token, extended it, or deleted it.
	VoteYes
	// VoteNo means the node answered no: for Lock, another token holds the
	// key; for Unlock and Extend, our token is no longer there.
	VoteNo
	// VoteFailed means the node did not give a usable answer: a network or
	// Redis error, or no answer within the node timeout. NodeVote.Err says
	// which.
	VoteFailed
	// VoteNotWaited means the node had not answered when the round was
	// decided without it (a quorum said yes, or could no longer say yes),
	// or when the caller's ctx ended the call: usually it is only slower
	// than the others. It is not a failure, and Stats.Failed does not
	// count it. Its answer is still handled when it comes: a late yes to a
	// failed attempt is rolled back. NodeVote.Err is ErrNoAnswer.
	VoteNotWaited
)

// String returns "yes", "no", "failed", "not waited" or "pending".
func (v Vote) String() string {
	switch v {
	case VoteYes:
		return "yes"
	case VoteNo:
		return "no"
	case VoteFailed:
		return "failed"
	case VoteNotWaited:
		return "not waited"
	}
	return "pending"
}

// NodeVote is what one node answered in a round.
type NodeVote struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Vote is the node's answer.
	Vote Vote
	// Err is why the node failed, when Vote is VoteFailed; ErrNoAnswer
	// when it is VoteNotWaited; and ErrWrongType for a VoteNo from a node
	// where the key holds a value of another type.
	Err error
	// Latency is how long the node took to answer; zero when it did not
	// answer before the round was decided.
	Latency time.Duration
	// Holder is the label (see WithLabel) of the lock that held the key on
	// a node that said no, when it is known: only in the error of an
	// acquisition, which reads it once the call gives up, and only for a
	// plain lock with a label. It is "" otherwise.
	Holder string
}

// Stats describes one round of requests to the nodes: an attempt to acquire,
// an extension, or a release.
type Stats struct {
	// Op is OpLock, OpExtend or OpUnlock.
	Op string
	// Key is the lock key, as given by the caller.
	Key string
	// Quorum is the number of yes votes needed: N/2+1 of the configured N
	// for a lock, Semaphore.Quorum for a semaphore's permit.
	Quorum int
	// Nodes holds each node's vote, in the order given to New.
	Nodes []NodeVote
	// Yes, No, Failed and NotWaited count the votes. A node that was not
	// waited for is not counted as failed: on healthy nodes a Lock that
	// won on 3 of 5 shows Yes 3, NotWaited 2.
	Yes, No, Failed, NotWaited int
	// Elapsed runs from before the first request to the decision, on the
	// monotonic clock.
	Elapsed time.Duration
	// Drift is the clock-drift allowance: TTL × drift factor + 2 ms. It is
	// zero for OpUnlock.
	Drift time.Duration
	// Validity is TTL − Elapsed − Drift: how long the lock stays valid from
	// the decision on. It is zero for OpUnlock.
	Validity time.Duration
}

// reply is one node's answer to one request.
type reply struct {
	i   int
	val int64 // what the script returned: 0 for no, above 0 for yes
	err error
	lat time.Duration
}

// yes reports a yes vote.
func (rp reply) yes() bool { return rp.err == nil && rp.val > 0 }

// round is one fan-out of a request to the nodes. Replies that arrive
// before the round is decided go to ch; a reply that arrives after it goes to
// the late handler chosen at the decision, so that no answer is lost: a yes
// that comes after a failed attempt is rolled back, one that comes after a
// success is remembered.
type round struct {
	start time.Time // the round's start, on the Client's clock
	end   time.Time // the requests' deadline, on the real clock

	mu sync.Mutex
	// in is where replies go until the round is decided: it is set before
	// the first request goes out, and set to nil, under mu, when the round
	// is decided (see finish).
	in      *replies
	decided bool        // guarded by mu
	late    lateHandler // guarded by mu
	stalled []bool      // guarded by mu; node counted in node.stalled
}

// replies is a round's reply channel, which its Client keeps for later
// rounds once the round is decided.
type replies struct {
	ch chan reply // buffered to N: a node's reply never blocks on it
	c  *Client    // whose channel it is
}

// lateHandler takes the replies of a round that come after it was decided.
type lateHandler interface {
	lateReply(rp reply)
}

// spec describes a round.
type spec struct {
	op      string
	quorum  int
	timeout time.Duration
	// life bounds each request, when longer than timeout.
	life time.Duration
	// waitAll keeps the round open, once its outcome is known, until every
	// node that was not already stalled has answered or the timeout passed.
	// Without it the round ends as soon as the quorum is reached or has
	// become impossible.
	waitAll bool
	// waitNo keeps a round whose quorum has become impossible open until
	// every node that was not already stalled has answered or the timeout
	// passed: a fair attempt learns its place in the queue from the nodes'
	// answers (see fairState.read). A round that reached its quorum ends
	// at once, as without it.
	waitNo bool
	// waitStalled makes waitAll wait for stalled nodes too: renewals,
	// whose quorum may need a node that once answered late, and Inspect
	// and Check, which report every node's own answer, up to the timeout.
	waitStalled bool
	// diagnostic marks Inspect's and Check's rounds: their timeouts do not
	// mark nodes stalled, since a slow diagnostic read (a large hash, INFO
	// on a busy node) says nothing of the lock path's requests.
	diagnostic bool
	// stop, when not nil, ends the gathering as the caller's ctx would,
	// with ErrClosed: the Client's done, for rounds that have no caller
	// (renewals).
	stop <-chan struct{}
	// skip, when not nil, names the nodes not to send to, with the reason
	// that becomes their failed vote.
	skip func(i int) error
	// start sends the request to one node: it submits a job to the node's
	// pipe, which delivers the reply to the leg, or delivers at once. It
	// must not block. ctx is the caller's.
	start func(ctx context.Context, lg *leg)
	// leg, when not nil, gives node i's leg a place in the caller's job
	// for node i, which start then gets: the round needs no legs of its
	// own.
	leg func(i int) *leg
}

// outcome is a gathered round, before the caller decides what it means.
// Its round stays reachable from the legs, and so from late replies, for as
// long as a request of the round is out: no part of an outcome is reused,
// but the reply channel that finish gives back.
type outcome struct {
	r     round // in the same allocation: the legs point into it
	votes []vote
	got   []bool  // the node's reply was gathered
	vals  []int64 // the gathered replies' values
	yes   int
	no    int
	took  time.Duration // from start to the end of the gathering
	// ctxErr is set when the caller's ctx ended the gathering.
	ctxErr error

	// mem backs the per-node slices when there are few enough nodes, so
	// that a round costs one allocation for them all.
	mem struct {
		votes [inlineNodes]vote
		vals  [inlineNodes]int64
		flags [4 * inlineNodes]bool
	}
}

// vote is one node's answer in a round, as an outcome keeps it: a NodeVote
// without the node's index and address, which nodeVotes adds when Stats
// need them.
type vote struct {
	err error // NodeVote.Err
	lat time.Duration
	v   Vote
}

// inlineNodes is the largest number of nodes whose round state fits in the
// outcome itself: the usual 5, so that a round of 5 allocates no more than
// it uses.
const inlineNodes = 5

// start is when the round began, on the Client's clock.
func (o *outcome) start() time.Time { return o.r.start }

// ended is when its gathering ended, on the Client's clock.
func (o *outcome) ended() time.Time { return o.r.start.Add(o.took) }

// fanout sends the spec's request to every node at once, through the
// nodes' pipes, and gathers the replies until the outcome is known. The
// caller must call finish on the result.
//
// go-redis ignores ctx deadlines on socket reads unless the client was built
// with ContextTimeoutEnabled, so the node timeout is enforced here, by the
// gatherer, rather than trusted to the client: a hung node delays nothing.
// Its request lives on until go-redis gives up, and its reply then goes to
// the round's late handler.
func (c *Client) fanout(ctx context.Context, sp *spec) *outcome {
	n := len(c.nodes)
	o := &outcome{}
	var flags []bool
	if n <= inlineNodes {
		flags = o.mem.flags[:4*n]
		o.votes, o.vals = o.mem.votes[:n], o.mem.vals[:n]
	} else {
		flags = make([]bool, 4*n)
		o.votes, o.vals = make([]vote, n), make([]int64, n)
	}
	var legs []leg // without sp.leg
	if sp.leg == nil {
		legs = make([]leg, n)
	}
	legOf := func(i int) *leg {
		if sp.leg != nil {
			return sp.leg(i)
		}
		return &legs[i]
	}
	o.r.in, o.r.stalled = c.replies(), flags[:n]
	o.got = flags[n : 2*n]
	wasStalled, send := flags[2*n:3*n], flags[3*n:]
	pending, waitFor := 0, 0
	// The decision comes at sp.timeout, but a request may run on until
	// sp.life: go-redis closes a connection whose request it gave up on, so
	// a deadline as short as the node timeout would, on a machine too busy
	// to meet it, make every request dial anew and miss it again. A reply
	// that comes after the decision goes to the late handler.
	// Deadlines are on the real clock: c.now is the algorithm's, which
	// tests may step.
	o.r.start = c.now()
	o.r.end = time.Now().Add(max(sp.timeout, sp.life))
	for i, nd := range c.nodes {
		*legOf(i) = leg{round: &o.r, n: nd}
		if sp.skip != nil {
			if err := sp.skip(i); err != nil {
				o.votes[i] = vote{v: VoteFailed, err: err}
				continue
			}
		}
		pending++
		send[i] = true
		if wasStalled[i] = nd.stalled.Load() > 0 && !sp.waitStalled; !wasStalled[i] {
			waitFor++
		}
	}
	for i := range c.nodes {
		if send[i] {
			sp.start(ctx, legOf(i))
		}
	}

	timer := newRoundTimer(sp.timeout)
	defer freeRoundTimer(timer)
	for pending > 0 {
		if !sp.waitAll && (o.yes >= sp.quorum || o.yes+pending < sp.quorum && (!sp.waitNo || waitFor == 0)) {
			break
		}
		if sp.waitAll && waitFor == 0 {
			break
		}
		select {
		case rp := <-o.r.in.ch:
			pending--
			if !wasStalled[rp.i] {
				waitFor--
			}
			o.count(rp)
			if !sp.diagnostic {
				c.faults.seen(rp)
			}
		case <-timer.C:
			o.took = c.now().Sub(o.r.start)
			o.markPending(c, &timeoutError{after: sp.timeout, release: sp.op == OpUnlock}, sp.diagnostic)
			return o
		case <-ctx.Done():
			o.ctxErr = ctx.Err()
			o.took = c.now().Sub(o.r.start)
			o.markPending(c, ErrNoAnswer, sp.diagnostic)
			return o
		case <-sp.stop:
			o.ctxErr = ErrClosed
			o.took = c.now().Sub(o.r.start)
			o.markPending(c, ErrNoAnswer, sp.diagnostic)
			return o
		}
	}
	o.took = c.now().Sub(o.r.start)
	o.markPending(c, ErrNoAnswer, sp.diagnostic)
	return o
}

// roundTimers holds the stopped timers of rounds that ended. A round's
// timer is its gatherer's alone: no reply, late or not, ever reaches it, so
// it can serve the next round as soon as its own has been gathered.
var roundTimers sync.Pool

// newRoundTimer returns a timer that fires after d, for one round.
func newRoundTimer(d time.Duration) *time.Timer {
	if t, ok := roundTimers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// freeRoundTimer stops a round's timer and keeps it for another round.
func freeRoundTimer(t *time.Timer) {
	if !t.Stop() {
		// Already fired, and maybe not received. Since Go 1.23 Stop
		// leaves nothing to receive; with asynctimerchan=1 it may.
		select {
		case <-t.C:
		default:
		}
	}
	roundTimers.Put(t)
}

// replies returns an empty reply channel for one round: one that an
// earlier round of the Client gave back, or a new one.
func (c *Client) replies() *replies {
	if in, ok := c.replyChans.Get().(*replies); ok {
		return in
	}
	return &replies{ch: make(chan reply, len(c.nodes)), c: c}
}

// wait runs fn on a goroutine of the Client, for a request that does not
// go through the node's pipe: one that must wait for an earlier request of
// the same acquisition before it is sent, or a read of Inspect or Check.
// fn gets a context detached from the caller's and bounded by the leg's
// deadline, and must deliver the leg's reply.
func (lg *leg) wait(ctx context.Context, fn func(ctx context.Context)) {
	c := lg.n.c
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), lg.end)
		defer cancel()
		fn(wctx)
	}()
}

// nodeErr maps the errors that the per-node deadline causes to
// ErrNodeTimeout. The request's context is detached from the caller's, so a
// context error here is always that deadline, never the caller's ctx: left
// as it is, it would match context.DeadlineExceeded, which callers read as
// "my ctx ended". A network timeout (go-redis's ReadTimeout, or its read
// deadline from the ctx with ContextTimeoutEnabled) is the same event. A
// command that go-redis left unanswered fails with what go-redis said of
// its batch (see transport.Cause).
func nodeErr(err error) error {
	if err == nil {
		return nil
	}
	// The cause of a command go-redis left unanswered is the node's
	// failure: it names it better than "no reply".
	err = transport.Cause(err)
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return &timeoutError{net: err}
	}
	return err
}

func (o *outcome) count(rp reply) {
	o.got[rp.i] = true
	o.vals[rp.i] = rp.val
	v := &o.votes[rp.i]
	v.lat = rp.lat
	switch {
	case rp.err != nil:
		v.v, v.err = VoteFailed, rp.err
	case rp.val > 0:
		v.v = VoteYes
		o.yes++
	default:
		v.v = VoteNo
		o.no++
	}
}

// markPending sets the votes of the nodes that have not answered: failures
// for a timeout (an error that matches ErrNodeTimeout), which also marks
// those nodes stalled until they answer (unless the round is diagnostic),
// and VoteNotWaited for ErrNoAnswer.
func (o *outcome) markPending(c *Client, why error, diagnostic bool) {
	o.r.mu.Lock()
	defer o.r.mu.Unlock()
	// Replies already in the channel came in time: count them, so that
	// their nodes are not taken for stalled.
	for drained := false; !drained; {
		select {
		case rp := <-o.r.in.ch:
			o.count(rp)
			if !diagnostic {
				c.faults.seen(rp)
			}
		default:
			drained = true
		}
	}
	timedOut := why != ErrNoAnswer
	for i := range o.votes {
		if o.votes[i].v != votePending {
			continue
		}
		v := VoteFailed
		if !timedOut {
			v = VoteNotWaited
		}
		o.votes[i].v, o.votes[i].err = v, why
		if timedOut && !diagnostic {
			o.r.stalled[i] = true
			c.nodes[i].stalled.Add(1)
		}
	}
}

// finish decides the round: from now on a reply goes to late (which may be
// nil to drop it). It returns the replies that came in between the end of the
// gathering and this call, which the caller must handle as late ones; their
// votes stay as the gathering left them.
//
// The round's channel is then empty, and no reply can reach it any more: a
// reply goes to the channel only under mu and while the round is not
// decided. So it goes back to the Client, for a later round.
func (o *outcome) finish(late lateHandler) []reply {
	var drained []reply
	o.r.mu.Lock()
	o.r.decided = true
	o.r.late = late
	in := o.r.in
	o.r.in = nil
	for more := true; more; {
		select {
		case rp := <-in.ch:
			drained = append(drained, rp)
		default:
			more = false
		}
	}
	o.r.mu.Unlock()
	in.c.replyChans.Put(in)
	return drained
}

// stats turns the outcome into Stats, without Nodes: see nodeVotes.
func (o *outcome) stats(op, key string, quorum int) Stats {
	s := Stats{Op: op, Key: key, Quorum: quorum, Elapsed: o.took}
	for _, v := range o.votes {
		switch v.v {
		case VoteYes:
			s.Yes++
		case VoteNo:
			s.No++
		case VoteFailed:
			s.Failed++
		case VoteNotWaited:
			s.NotWaited++
		}
	}
	return s
}

// nodeVotes returns the votes as Stats.Nodes has them, newly made. Stats
// get them only where they leave the Client (an error, the Observer,
// Lock.Stats), so that a round nobody looks at does not make them.
//
// A node that failed for want of an answer (a timeout, or busy with an
// earlier request) gets its last failure in its vote's error, when one is
// known: go-redis may take seconds to give up dialing a node that refuses
// connections, longer than the node timeout, and that failure is then why.
func (o *outcome) nodeVotes(c *Client) []NodeVote {
	nv := make([]NodeVote, len(o.votes))
	for i, v := range o.votes {
		nv[i] = NodeVote{Index: i, Addr: c.nodes[i].addr, Vote: v.v, Err: c.faults.explain(i, v.err), Latency: v.lat}
	}
	return nv
}

// anyErr reports whether a vote's error matches target (see permitsRefused).
func (o *outcome) anyErr(target error) bool {
	for _, v := range o.votes {
		if errors.Is(v.err, target) {
			return true
		}
	}
	return false
}

// withNodes returns s with the outcome's votes, of c's round, as its Nodes.
func (o *outcome) withNodes(c *Client, s Stats) Stats {
	s.Nodes = o.nodeVotes(c)
	return s
}
