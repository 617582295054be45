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
// Each node holds a plain string, written with SET key value PX ttl NX GET
// (Redis 7.0 or later; older servers get the same effect from a script). It is
// the same layout as go-redsync/redsync and the reference redlock-rb and
// redlock-py clients: a key held by one of them blocks the others. Each
// attempt of one Lock call writes its own value, so a late or repeated request
// of an earlier attempt never deletes what a later one counted.
//
// A Client is safe for concurrent use by many goroutines. See docs/ALGORITHM.md
// for the algorithm step by step, and the README for the safety caveats.
package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	// wait on calls.
	mu     sync.RWMutex
	closed bool
	done   chan struct{} // closed by Close: waiting calls stop
	// calls tracks every call in progress. Each is bounded by its node
	// timeouts, so Close can wait for them.
	calls sync.WaitGroup
	// wg tracks every goroutine the Client starts: one per request in
	// flight, the renewer, and the pub/sub connections. A request to a hung
	// node may outlive the call that sent it, until go-redis gives up on
	// its read (the client's ReadTimeout, which may be infinite); Close
	// waits for them only so long (see closeGrace).
	wg sync.WaitGroup

	// replyChans holds the reply channels of decided rounds, empty and
	// buffered to len(nodes), for later rounds: see outcome.finish.
	replyChans sync.Pool
	// ttlArg is what the nodes keep a key of cfg's acquisitions for (the
	// acquisition TTL plus the lock-delay) in milliseconds, boxed once for
	// the calls that ask for it.
	ttlArg any

	// callbacks admits the calls of the Observer and the logger until
	// Close: from then on they hear nothing more, even from a timer or a
	// straggling request.
	callbacks callGate

	renewer  *renewer  // renews auto-extended locks
	waitlist *waitlist // wakes waiting Lock calls on release

	log      *slog.Logger
	faults   nodeFaults   // the nodes' failures: for messages, and warnings given once
	observer Observer     // nil when none
	events   events       // the Observer's optional interfaces; zero when none
	hooks    testHooks    // the tests' negative controls; zero in use
	ttlMax   atomic.Int64 // the longest TTL sent to a node so far; only raiseMaxTTL writes it
}

// New returns a Client for the given Redis masters, usually 5. They must be
// independent masters, not replicas of each other. The options set the
// Client's defaults; each call may override them.
//
// New fails, with an error that wraps ErrInvalidOption and names the problem,
// when no node is given, a node is nil or a *redis.Ring (which reroutes keys
// between its shards), the same client (or server) is given twice,
// WithReplicaAck or WithFsyncAck comes with a Redis Cluster node, or the
// options are out of range: a TTL that is not positive or too
// small to leave validity after drift and node timeout, a drift factor
// outside [0, 0.5), or a bad retry delay.
func New(nodes []redis.UniversalClient, opts ...ClientOption) (*Client, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes given: Redlock needs independent Redis masters, usually 5", ErrInvalidOption)
	}
	c := &Client{nodes: make([]*node, len(nodes)), quorum: len(nodes)/2 + 1, now: time.Now, done: make(chan struct{})}
	servers := make(map[string]int, len(nodes))
	for i, rc := range nodes {
		if rc == nil || isNilPointer(rc) {
			return nil, fmt.Errorf("%w: node %d is nil", ErrInvalidOption, i)
		}
		if _, ok := rc.(*redis.Ring); ok {
			return nil, fmt.Errorf("%w: node %d is a *redis.Ring: a Ring sends each script to the shard of its first key only, "+
				"and moves keys to other shards when a shard fails its health check, so the node would forget locks; "+
				"give each Redlock node as a *redis.Client, a *redis.ClusterClient or a Sentinel failover client", ErrInvalidOption, i)
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
		c.nodes[i] = newNode(c, i, rc)
	}
	c.faults.init(c)
	cfg, err := defaultConfig().applyClient(opts)
	if err != nil {
		return nil, err
	}
	if err := c.checkAcks(&cfg); err != nil {
		return nil, err
	}
	c.cfg = cfg
	c.ttlArg = cfg.nodeTTL(cfg.acquireTTL()).Milliseconds()
	c.observer = cfg.observer
	if c.observer != nil {
		c.events = eventsOf(c.observer)
	}
	c.log = slog.New(slog.DiscardHandler)
	if cfg.logger != nil {
		c.log = slog.New(&quietHandler{next: cfg.logger.Handler(), c: c})
	}
	c.raiseMaxTTL(cfg.ttl)
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
// has returned. It then waits for the requests still in flight to end, but
// not forever: a request to a hung node ends when go-redis gives up on it
// (its ReadTimeout), and Close waits at most the longest ReadTimeout of the
// nodes' go-redis clients plus a second (6s with go-redis's defaults; 1s when
// reads have no timeout). A request that outlives that ends on its own.
// Once Close has returned, the Observer and the logger are never called
// again, even for a lock whose validity runs out later; a call of theirs
// still running when the grace ends (a stuck Observer) is not waited for.
//
// Close does not close the go-redis clients, and locks still held stay held
// until they expire or are unlocked: Unlock fails after Close, so unlock
// first.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.waitlist.shutdown()
	c.calls.Wait()
	grace := time.Now().Add(c.closeGrace())
	waitAtMost(&c.wg, time.Until(grace))
	// The losses found before Close are still reported.
	c.renewer.notify.drain(time.Until(grace))
	// From here on no callback starts; those already running are waited
	// for, within the same grace: a stuck Observer or logger cannot hold
	// Close.
	c.callbacks.close(grace)
	return nil
}

// closeGrace is how long Close waits for requests still in flight: a
// second more than the longest go-redis ReadTimeout of the nodes.
func (c *Client) closeGrace() time.Duration {
	longest := time.Duration(0)
	for _, n := range c.nodes {
		rt := 5 * time.Second // go-redis's default, for clients we cannot ask
		switch rc := n.client.(type) {
		case *redis.Client:
			rt = rc.Options().ReadTimeout
		case *redis.ClusterClient:
			rt = rc.Options().ReadTimeout
		}
		// Options holds the values go-redis settled on: 0 or less means
		// reads never time out, so there is nothing to wait for.
		longest = max(longest, rt)
	}
	return longest + time.Second
}

// waitAtMost waits for wg, or until d has passed. When d passes first, the
// goroutine it leaves waiting ends with the last request it waits for.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (c *Client) isClosed() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.closed
}

// enter registers a call, so that Close waits for it; the caller must call
// c.leave when it returns.
func (c *Client) enter() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.calls.Add(1)
	return nil
}

// leave ends a call that enter registered.
func (c *Client) leave() { c.calls.Done() }

// Lock acquires the lock on key, waiting as long as ctx allows. After a
// failed attempt it listens for the holder's release on pub/sub, on every
// node, and tries again the moment a quorum of nodes announces it, or after
// a random delay within WithRetryDelay's range, whichever comes first. There
// is no fixed number of attempts: give ctx a deadline to bound the wait.
//
// On failure every node that may hold our token is told to release it: the
// ones that said yes or failed before Lock returns, and the ones that had
// not answered as soon as they answer (a release sent earlier could overtake
// the request it undoes). The error matches ErrNotAcquired, and
// ErrUnavailable when too few nodes answered for a quorum (an outage, not a
// lock held elsewhere); when ctx ended the wait, it also matches ctx.Err(),
// and after Close, ErrClosed. The error is a *QuorumError that says what
// each node answered in the last attempt; when ctx cut that attempt short
// before its votes decided it, in the last attempt they did decide.
// Bad options or an empty key give an error that wraps ErrInvalidOption.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, true, plainFlavour)
}

// TryLock makes exactly one attempt to acquire the lock on key. On failure it
// behaves as Lock does, and returns an error that matches ErrNotAcquired.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, false, plainFlavour)
}

// config returns the settings for one call.
func (c *Client) config(opts []LockOption) (*config, error) {
	if len(opts) == 0 {
		return &c.cfg, nil
	}
	cfg, err := c.cfg.applyLock(opts)
	if err != nil {
		return nil, err
	}
	// Every acquisition's TTL comes from here (or from New's defaults).
	c.raiseMaxTTL(cfg.ttl)
	return &cfg, nil
}

// checkAcks refuses WithReplicaAck and WithFsyncAck on Redis Cluster
// nodes: WAIT and WAITAOF have no key, so a ClusterClient would send them
// to any shard, not to the one whose connection wrote the lock key.
func (c *Client) checkAcks(cfg *config) error {
	var opt, cmd string
	switch {
	case cfg.replicaAck != 0:
		opt, cmd = "WithReplicaAck", "WAIT"
	case cfg.fsyncAck:
		opt, cmd = "WithFsyncAck", "WAITAOF"
	default:
		return nil
	}
	for _, n := range c.nodes {
		if _, ok := n.client.(*redis.ClusterClient); ok {
			return fmt.Errorf("%w: %s is not supported on Redis Cluster nodes (node %d): %s would not reach the key's shard", ErrInvalidOption, opt, n.index, cmd)
		}
	}
	return nil
}

// maxTTL is the longest TTL this Client has sent to a node: the longest a
// key of one of its holds may live, and so the time a restarted node must
// stay out, by the Redlock spec's rule.
func (c *Client) maxTTL() time.Duration { return time.Duration(c.ttlMax.Load()) }

// raiseMaxTTL raises maxTTL to ttl, if it is longer. It is the only place
// the bound grows, and every path that sends a TTL to a node comes through
// it before the request goes out: acquisitions through config (or New), and
// Extend and renewals through Lock.extendTTL. A request may land even when
// its call fails, so raising after the answer would be too late.
func (c *Client) raiseMaxTTL(ttl time.Duration) {
	for {
		old := c.ttlMax.Load()
		if int64(ttl) <= old || c.ttlMax.CompareAndSwap(old, int64(ttl)) {
			return
		}
	}
}

// acquire runs one call that acquires a hold of flavour fl on keys (of
// the owner flavour instead, when WithOwner makes a plain lock an owner
// lock): Lock, TryLock, LockMulti, RLock, a semaphore's Acquire, and
// their kin.
func (c *Client) acquire(ctx context.Context, keys []string, opts []LockOption, wait bool, fl *flavour) (*Lock, error) {
	cfg, err := c.config(opts)
	if err != nil {
		return nil, err
	}
	t, err := c.target(keys, cfg, fl)
	if err != nil {
		return nil, err
	}
	return c.acquireTarget(ctx, cfg, keys, t, wait)
}

// acquireTarget runs the attempts of one call of acquire.
func (c *Client) acquireTarget(ctx context.Context, cfg *config, keys []string, t *target, wait bool) (got *Lock, err error) {
	if err := c.enter(); err != nil {
		c.traceRefused(ctx, keys, t, err)
		return nil, err
	}
	defer c.leave()
	a := c.newAcquisition(cfg, keys, t)
	// The wait events. finish runs before leave, so that Close, which
	// waits for the call, cannot silence the Observer between a WaitBegan
	// and its WaitEnded.
	ev := c.callEvents(ctx, a, wait)
	defer func() {
		if got != nil && t.election {
			// Campaign finishes them once the term record is stored,
			// with its own result.
			pending := ev
			t.events = &pending
			return
		}
		ev.finish(got, err)
	}()
	var (
		last *QuorumError
		wt   *waiter // set once the first attempt failed
		won  bool
	)
	defer func() {
		if wt != nil {
			c.waitlist.leave(wt, won)
		}
		if a.fair != nil && a.fair.sent {
			// A fair call leaves the queue: the winner takes its
			// entry out, and a call that gave up (Close included,
			// which waits for this call's requests) tells the next.
			a.leaveQueue(!won)
		}
		if !won && a.waiting != nil && t.fl.unmark && !t.election && !c.isClosed() {
			// A writer that gives up takes its marker back, so that new
			// readers need not wait out its TTL. A campaigner leaves it:
			// on an election's key it is also Observe's, which re-sets it
			// at each read, and a resign unannounced would be seen only
			// at Observe's next periodic read.
			a.unmark()
		}
	}()
	// pause waits for a wake-up or the retry delay before the next attempt;
	// it returns the error that ends the call instead, if any.
	// With ready, it also ends once the waiter's subscriptions took effect.
	pause := func(ready <-chan struct{}) error {
		var wake <-chan struct{} // nil without pub/sub: never ready
		if wt != nil {
			wake = wt.wake
		}
		var took time.Duration
		if last != nil {
			took = last.Stats.Elapsed
		}
		delay := time.NewTimer(a.fair.pause(cfg, cfg.retryDelay()+spread(took)))
		defer delay.Stop()
		select {
		case <-wake:
			a.woken = true
		case <-ready:
		case <-delay.C:
		case <-ctx.Done():
			return a.abandon(last, ctx.Err())
		case <-c.done:
			return a.abandon(last, ErrClosed)
		}
		return nil
	}
	if wait && cfg.pubsub && t.fair == nil && c.waitlist.waiting(t) {
		// Other Lock calls of this Client already wait for a key: queue
		// behind them rather than race the one the next release wakes.
		// Its attempt and ours would split the votes and both fail. A
		// fair call does not: its first attempt draws its ticket, and its
		// place comes from that.
		ev.began()
		wt = c.waitlist.join(t, 0)
		a.wait()
		if err := pause(nil); err != nil {
			return nil, err
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, a.abandon(last, err)
		}
		l, qerr := a.attempt(ctx)
		if l != nil {
			if c.isClosed() {
				// Close began during the attempt: the caller could not
				// unlock, so release at once.
				l.mu.Lock()
				l.released = true
				l.mu.Unlock()
				_ = l.release(false)
				return nil, a.abandon(last, ErrClosed)
			}
			won = true
			l.start()
			return l, nil
		}
		last = qerr
		if err := permitsMismatch(qerr); err != nil {
			// Waiting would not help.
			return nil, err
		}
		if qerr.ctxErr != nil || !wait {
			return nil, a.abandon(qerr, qerr.ctxErr)
		}
		ev.began()
		if a.fair != nil {
			a.queued(ctx, &ev)
		}
		if wt == nil && cfg.pubsub {
			// Listen for the release, then try again as soon as the
			// subscription took effect: the holder may have released
			// before it did, unannounced to us. A node that does not
			// confirm (hung) holds this up to the retry delay.
			wt = c.waitlist.join(t, a.fair.num())
			a.wait()
			if err := pause(wt.ready); err != nil {
				return nil, err
			}
			continue
		}
		if err := pause(nil); err != nil {
			return nil, err
		}
	}
}

// spread draws a wait in [0, took], added to the retry delay after an
// attempt that took that long. Jitter only breaks the symmetry of
// contenders whose attempts split the votes if it is wider than an
// attempt: on a slow or loaded machine, where attempts take longer than
// the retry delay's range, the attempts of every contender would overlap
// again and again (no acquisition in 3 seconds was seen with 4 Clients on
// 2 cores under a CPU hog). On a fast network it adds next to nothing.
func spread(took time.Duration) time.Duration {
	if took <= 0 {
		return 0
	}
	return rand.N(took + 1)
}

// retryDelay draws the wait before the next attempt.
func (c *config) retryDelay() time.Duration {
	if c.retryMax <= c.retryMin {
		return c.retryMin
	}
	return c.retryMin + rand.N(c.retryMax-c.retryMin+1)
}
