// Package redlock is a distributed lock over several independent Redis
// masters, after the Redlock algorithm.
//
// A Client sends each request to all N masters at once and needs a quorum of
// N/2+1 of them. A lock is valid for its TTL minus the time the acquisition
// took and an allowance for clock drift, so it stays correct while a minority
// of nodes crash, hang or lose the network. Release and extension compare the
// lock's token atomically on each node, in Lua, so they never touch another
// holder's key.
//
// Each node holds a plain string, SET key token NX PX ttl, the same layout as
// go-redsync/redsync and the reference redlock-rb and redlock-py clients: a
// key held by one of them blocks the others.
//
// A Client is safe for concurrent use by many goroutines. See docs/ALGORITHM.md
// for the algorithm step by step, and the README for the safety caveats.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client acquires locks on a fixed set of independent Redis masters. It is
// safe for concurrent use and must not be copied; create it with New. It does
// not own the go-redis clients it was given and never closes them.
type Client struct {
	nodes  []*node
	quorum int
	cfg    config // defaults, from New's options
	now    clock

	// mu guards closed, so that no call enters once Close has begun to
	// wait on wg.
	mu     sync.RWMutex
	closed bool
	done   chan struct{} // closed by Close: waiting calls stop
	// wg tracks every call in progress and every goroutine the Client
	// starts: one per request in flight, the renewer, and the pub/sub
	// connections. A request to a hung node may outlive the call that sent
	// it, until go-redis gives up on its read (the client's ReadTimeout).
	wg sync.WaitGroup

	renewer  *renewer  // renews auto-extended locks
	waitlist *waitlist // wakes waiting Lock calls on release

	log      *slog.Logger
	observer Observer     // nil when none
	ttlMax   atomic.Int64 // the largest TTL used so far, for the node guard
}

// New returns a Client for the given Redis masters, usually 5. They must be
// independent masters, not replicas of each other. The options set the
// Client's defaults; each call may override them.
//
// New fails, with an error that wraps ErrInvalidOption and names the problem,
// when no node is given, a node is nil, the same client (or server) is given
// twice, or the options are out of range: a TTL that is not positive or too
// small to leave validity after drift and node timeout, a drift factor
// outside [0, 0.5), or a bad retry delay.
func New(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes given: Redlock needs independent Redis masters, usually 5", ErrInvalidOption)
	}
	c := &Client{nodes: make([]*node, len(nodes)), quorum: len(nodes)/2 + 1, now: time.Now, done: make(chan struct{})}
	servers := make(map[string]int, len(nodes))
	for i, rc := range nodes {
		if rc == nil || isNilPointer(rc) {
			return nil, fmt.Errorf("%w: node %d is nil", ErrInvalidOption, i)
		}
		for j := range i {
			if nodes[j] == rc {
				return nil, fmt.Errorf("%w: node %d is the same client as node %d: each node must be a different Redis master", ErrInvalidOption, i, j)
			}
		}
		if id, ok := serverID(rc); ok {
			if j, dup := servers[id]; dup {
				return nil, fmt.Errorf("%w: node %d points at the same server as node %d (%s): each node must be a different Redis master", ErrInvalidOption, i, j, id)
			}
			servers[id] = i
		}
		c.nodes[i] = newNode(i, rc)
	}
	cfg, err := defaultConfig().apply(opts)
	if err != nil {
		return nil, err
	}
	c.cfg = cfg
	c.log, c.observer = cfg.logger, cfg.observer
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.ttlMax.Store(int64(cfg.ttl))
	c.renewer = newRenewer(c)
	c.waitlist = newWaitlist(c)
	return c, nil
}

// isNilPointer reports a typed nil, such as a (*redis.Client)(nil) in the
// interface.
func isNilPointer(rc redis.UniversalClient) bool {
	switch v := rc.(type) {
	case *redis.Client:
		return v == nil
	case *redis.ClusterClient:
		return v == nil
	case *redis.Ring:
		return v == nil
	}
	return false
}

// Quorum returns the number of nodes that must agree: N/2+1 of the N nodes
// given to New.
func (c *Client) Quorum() int { return c.quorum }

// Close makes every later call fail with ErrClosed, stops the Lock calls
// that are waiting between attempts, and waits until every call in progress
// has returned and every request in flight has ended. A request to a hung
// node ends when go-redis gives up on it (its ReadTimeout). Close does not
// close the go-redis clients, and locks still held stay held until they
// expire or are unlocked: Unlock fails after Close, so unlock first.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.waitlist.shutdown()
	c.wg.Wait()
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.closed
}

// enter registers a call, so that Close waits for it; the caller must call
// c.wg.Done when it returns.
func (c *Client) enter() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.wg.Add(1)
	return nil
}

// Lock acquires the lock on key, waiting as long as ctx allows. After a
// failed attempt it listens for the holder's release on pub/sub, on every
// node, and tries again the moment a quorum of nodes announces it, or after
// a random delay within WithRetryDelay's range, whichever comes first. There
// is no fixed number of attempts: give ctx a deadline to bound the wait.
//
// On failure every node that may hold our token is told to release it: the
// ones that said yes or failed before Lock returns, and the ones that had
// not answered as soon as they answer (a release sent earlier could overtake
// the request it undoes). The error matches ErrNotAcquired; when ctx ended
// the wait, it also matches ctx.Err(), and after Close, ErrClosed. The error
// is a *QuorumError that says what each node answered in the last attempt.
// Bad options or an empty key give an error that wraps ErrInvalidOption.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, true)
}

// TryLock makes exactly one attempt to acquire the lock on key. On failure it
// behaves as Lock does, and returns an error that matches ErrNotAcquired.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, false)
}

// config returns the settings for one call.
func (c *Client) config(opts []Option) (*config, error) {
	if len(opts) == 0 {
		return &c.cfg, nil
	}
	cfg, err := c.cfg.apply(opts)
	if err != nil {
		return nil, err
	}
	for {
		old := c.ttlMax.Load()
		if int64(cfg.ttl) <= old || c.ttlMax.CompareAndSwap(old, int64(cfg.ttl)) {
			break
		}
	}
	return &cfg, nil
}

// maxTTL is the largest TTL this Client has used: the time a restarted node
// must stay out, by the Redlock spec's rule.
func (c *Client) maxTTL() time.Duration { return time.Duration(c.ttlMax.Load()) }

func (c *Client) acquire(ctx context.Context, keys []string, opts []Option, wait bool) (*Lock, error) {
	cfg, err := c.config(opts)
	if err != nil {
		return nil, err
	}
	t, err := c.target(keys, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.wg.Done()
	a := &acquisition{
		c:      c,
		cfg:    cfg,
		keys:   keys,
		t:      t,
		busy:   make([]int, len(c.nodes)),
		lastNo: make([]bool, len(c.nodes)),
	}
	var (
		last *QuorumError
		wt   *waiter // set once the first attempt failed
		won  bool
	)
	defer func() {
		if wt != nil {
			c.waitlist.leave(wt, won)
		}
	}()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, a.abandon(last, err)
		}
		l, qerr := a.attempt(ctx, attempt == 0)
		if l != nil {
			if c.isClosed() {
				// Close began during the attempt: the caller could not
				// unlock, so release at once.
				l.mu.Lock()
				l.released = true
				l.mu.Unlock()
				_ = l.release(context.WithoutCancel(ctx))
				return nil, a.abandon(last, ErrClosed)
			}
			won = true
			l.start()
			return l, nil
		}
		last = qerr
		if qerr.ctxErr != nil || !wait {
			return nil, a.abandon(qerr, qerr.ctxErr)
		}
		if wt == nil && cfg.pubsub {
			// Listen for the release, then try again at once: the holder
			// may have released before the subscription took effect.
			wt = c.waitlist.join(t.rkeys)
			continue
		}
		var wake <-chan struct{} // nil without pub/sub: never ready
		if wt != nil {
			wake = wt.wake
		}
		delay := time.NewTimer(cfg.retryDelay())
		select {
		case <-wake:
		case <-delay.C:
		case <-ctx.Done():
			delay.Stop()
			return nil, a.abandon(last, ctx.Err())
		case <-c.done:
			delay.Stop()
			return nil, a.abandon(last, ErrClosed)
		}
		delay.Stop()
	}
}

// retryDelay draws the wait before the next attempt.
func (c *config) retryDelay() time.Duration {
	if c.retryMax <= c.retryMin {
		return c.retryMin
	}
	return c.retryMin + rand.N(c.retryMax-c.retryMin+1)
}

// acquisition is one call of Lock or TryLock: one token, one or more
// attempts. It is shared by the call and the node goroutines its attempts
// started, which may answer after their attempt was decided.
type acquisition struct {
	c    *Client
	cfg  *config
	keys []string // as given
	t    *target

	mu sync.Mutex
	// busy counts, per node, this acquisition's requests in flight. An
	// attempt does not send to a busy node: a late rollback of an earlier
	// attempt could otherwise delete the key a later attempt counted as a
	// yes. Guarded by mu.
	busy []int
	// lock is the lock once an attempt has won; nil before. Guarded by mu.
	lock *Lock
	// unlocking is set when Unlock picks its nodes. Guarded by mu.
	unlocking bool
	// lastNo marks the nodes that said no to the last attempt. Only the
	// calling goroutine uses it.
	lastNo []bool
}

// attempt runs one round of acquisition, and with fencing the write-back
// round. It returns the lock when it won, or the error otherwise.
func (a *acquisition) attempt(ctx context.Context, first bool) (*Lock, *QuorumError) {
	c, cfg, t := a.c, a.cfg, a.t
	ttl := cfg.acquireTTL()
	// A node that said no to the last attempt held another token: none of
	// ours can be left there, so the plain SET NX will do, as on the first
	// attempt. Under contention that is most nodes.
	fresh := slices.Clone(a.lastNo)
	o := c.fanout(ctx, &spec{
		op:      OpLock,
		quorum:  c.quorum,
		timeout: cfg.nodeTimeout,
		skip:    a.reserve(func(int) bool { return true }),
		req: func(ctx context.Context, n *node) (int64, error) {
			plain := first || fresh[n.index]
			if cfg.guard {
				return n.acquireGuarded(ctx, c, t, ttl, plain, cfg)
			}
			return n.acquire(ctx, t, ttl, plain)
		},
	})
	a.free(o)
	for i, v := range o.votes {
		a.lastNo[i] = v.Vote == VoteNo
	}

	st := o.stats(OpLock, strings.Join(a.keys, ","), c.quorum)
	st.Drift = clockDrift(ttl, cfg.driftFactor)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)
	// The lock needs both: a quorum, and time left to use it.
	won := o.yes >= c.quorum && st.Validity > 0 && o.ctxErr == nil
	reason := ""
	if o.yes >= c.quorum && o.ctxErr == nil && !won {
		reason = "no validity left"
	}

	var fence int64
	if won && t.fence != nil {
		// The fence is the largest counter the quorum returned. It is
		// handed out only once a quorum has raised its counters to it, so
		// that every later quorum, which must meet this one, counts past
		// it.
		for i, v := range st.Nodes {
			if v.Vote == VoteYes {
				fence = max(fence, o.vals[i])
			}
		}
		if !cfg.noFenceWriteBack {
			var ctxErr error
			if won, ctxErr = a.writeFence(ctx, fence, o.start, ttl, &st); !won {
				reason = "fence not written back to a quorum"
				if ctxErr != nil {
					o.ctxErr = ctxErr
				}
			}
		}
	}

	if won {
		l := &Lock{
			c:        c,
			acq:      a,
			cfg:      cfg,
			keys:     a.keys,
			t:        t,
			fence:    uint64(fence),
			acquired: o.start,
			done:     make(chan struct{}),
			until:    o.start.Add(ttl - st.Drift),
			held:     make([]bool, len(c.nodes)),
			stats:    st,
		}
		if cfg.maxHold > 0 {
			l.holdEnd = o.start.Add(cfg.maxHold)
			l.capped = ttl < cfg.ttl
		}
		for i, v := range st.Nodes {
			l.held[i] = v.Vote == VoteYes
		}
		a.mu.Lock()
		a.lock = l
		a.mu.Unlock()
	}
	drained := o.finish(a.late)
	if won {
		for _, rp := range drained {
			a.late(rp) // no I/O: the lock is not released yet
		}
		c.observeAttempt(st, nil)
		return a.lock, nil
	}

	// Roll back on every node that may hold our token: those that said yes
	// and those that failed, since the SET may have landed before the error.
	// A node that has not answered yet is still busy with this acquisition:
	// it is rolled back by a.late when its answer comes, because a release
	// sent now could overtake the SET. A node that said no holds another
	// token, so there is nothing of ours to delete there.
	a.rollback(ctx, func(i int) bool { return st.Nodes[i].Vote != VoteNo })
	// Replies that came while the attempt was being decided are late ones:
	// each may need a release, which must not hold up the others.
	for _, rp := range drained {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			a.late(rp)
		}()
	}
	qerr := &QuorumError{Stats: st, Reason: reason, sentinel: ErrNotAcquired, ctxErr: o.ctxErr}
	c.observeAttempt(st, qerr)
	return nil, qerr
}

// writeFence runs the fence write-back round of an attempt that reached its
// quorum, and says whether it reached a quorum too, within the validity. It
// updates st's elapsed time and validity to include the round.
func (a *acquisition) writeFence(ctx context.Context, fence int64, start time.Time, ttl time.Duration, st *Stats) (bool, error) {
	c, t := a.c, a.t
	o := c.fanout(ctx, &spec{
		op:      OpLock,
		quorum:  c.quorum,
		timeout: a.cfg.nodeTimeout,
		skip:    a.reserve(func(int) bool { return true }),
		req: func(ctx context.Context, n *node) (int64, error) {
			return n.writeFence(ctx, t, fence)
		},
	})
	a.free(o)
	for _, rp := range o.finish(a.freeLate) {
		a.freeLate(rp)
	}
	st.Elapsed = o.end.Sub(start)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)
	return o.yes >= c.quorum && st.Validity > 0 && o.ctxErr == nil, o.ctxErr
}

// reserve marks busy the chosen nodes that have no request of this
// acquisition in flight, and returns the skip function of a spec: it keeps
// the round off the other nodes. An attempt must not send to a busy node: the
// late rollback of an earlier attempt could delete the key that the new
// attempt counted as a yes.
func (a *acquisition) reserve(on func(i int) bool) func(i int) error {
	skip := make([]error, len(a.busy))
	a.mu.Lock()
	for i := range a.busy {
		switch {
		case !on(i):
			skip[i] = errNotAsked
		case a.busy[i] > 0:
			skip[i] = ErrInFlight
		default:
			a.busy[i]++
		}
	}
	a.mu.Unlock()
	return func(i int) error { return skip[i] }
}

// free releases the nodes whose replies the round gathered in time. The
// others are freed by the late handler when their reply comes.
func (a *acquisition) free(o *outcome) {
	a.mu.Lock()
	for i, got := range o.got {
		if got {
			a.busy[i]--
		}
	}
	a.mu.Unlock()
}

// late handles an acquire reply that came after its attempt was decided.
//
// If the acquisition won and is not being unlocked, the node is freed at
// once, under the same lock Unlock uses to pick its nodes, and a yes is
// remembered for diagnostics: Unlock will reach this node after its reply.
// If Unlock has begun, it skipped this node because it was busy, so the
// release falls to this handler, after the SET it undoes: each node gets
// exactly one release. If the acquisition did not win, a yes, or an error
// that may hide one, is rolled back: the node may have set the key after the
// attempt gave up.
func (a *acquisition) late(rp reply) {
	a.mu.Lock()
	l, unlocking := a.lock, a.unlocking
	if l != nil && !unlocking {
		a.busy[rp.i]--
		a.mu.Unlock()
		if rp.yes() {
			l.markHeld(rp.i)
		}
		return
	}
	a.mu.Unlock()
	switch {
	case l != nil:
		a.releaseOn(rp.i, releasePrefix)
	case rp.yes() || rp.err != nil:
		a.releaseOn(rp.i, "")
	}
	a.freeLate(rp)
}

// unlockSkip marks the acquisition as being unlocked and returns the skip
// function of the release round: it leaves out the nodes that still have a
// request of this acquisition in flight, whose late handler releases them
// instead, after their request.
func (a *acquisition) unlockSkip() func(i int) error {
	skip := make([]error, len(a.busy))
	a.mu.Lock()
	a.unlocking = true
	for i, b := range a.busy {
		if b > 0 {
			skip[i] = ErrInFlight
		}
	}
	a.mu.Unlock()
	return func(i int) error { return skip[i] }
}

// freeLate frees the node of a reply that came after its round.
func (a *acquisition) freeLate(rp reply) {
	a.mu.Lock()
	a.busy[rp.i]--
	a.mu.Unlock()
}

// releaseOn releases our token on one node, announcing it on channels with
// the given prefix unless it is empty, from a goroutine that already belongs
// to the Client, on a context detached from any caller and bounded by the
// node timeout.
func (a *acquisition) releaseOn(i int, channelPrefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.nodeTimeout)
	defer cancel()
	_, _ = a.c.nodes[i].release(ctx, a.t, channelPrefix)
}

// rollback tells the chosen nodes to release our token and waits, bounded by
// the node timeout, until they answered. It uses a context detached from the
// caller's cancellation, so that a cancelled caller still cleans up.
func (a *acquisition) rollback(ctx context.Context, on func(i int) bool) {
	o := a.c.fanout(context.WithoutCancel(ctx), &spec{
		op:      opRollback,
		timeout: a.cfg.nodeTimeout,
		waitAll: true,
		skip:    a.reserve(on),
		req: func(ctx context.Context, n *node) (int64, error) {
			return n.release(ctx, a.t, "")
		},
	})
	a.free(o)
	// A rollback that answers late only has to free its node.
	for _, rp := range o.finish(a.freeLate) {
		a.freeLate(rp)
	}
}

// abandon ends an acquisition that will not win: it returns the error, with
// the ctx error when there is one.
func (a *acquisition) abandon(last *QuorumError, ctxErr error) error {
	if last == nil {
		reason := "ended before any attempt"
		if errors.Is(ctxErr, ErrClosed) {
			reason = ""
		}
		return &QuorumError{
			Stats:    Stats{Op: OpLock, Key: strings.Join(a.keys, ","), Quorum: a.c.quorum},
			Reason:   reason,
			sentinel: ErrNotAcquired,
			ctxErr:   ctxErr,
		}
	}
	last.ctxErr = ctxErr
	return last
}
