package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Observer receives what happens to a Client's locks, for metrics, tracing
// or logs. Set it with WithObserver. Attempted, Released, and Extended for a
// call of Extend, are called by the call that did the work, before it
// returns. Lost, and Extended for an auto-extension, are called later, from
// a goroutine of the Client's that makes one call at a time, in order: a
// slow Observer then holds up no renewal and no Done. Methods may run on
// many goroutines at once: they must be safe for concurrent use, return
// quickly, and not call back into the Client. A panic in a method is
// recovered, and the first one of each method is logged at Error.
// contrib/otel adapts it to OpenTelemetry metrics.
//
// The four methods are all an Observer must have, and they will not
// change. Events added later come as optional interfaces of one method
// each, which an Observer may also implement: the Client finds them with a
// type assertion, as net/http finds http.Flusher on a ResponseWriter, so an
// Observer written today keeps compiling and working.
type Observer interface {
	// Attempted is called after each acquisition attempt, with the votes;
	// err is nil when the attempt won the lock.
	Attempted(s Stats, err error)
	// Extended is called after each extension, by Extend or by
	// auto-extension; err is nil when it succeeded. An extension made by
	// auto-extension reports the vote counts, not each node's vote.
	Extended(s Stats, err error)
	// Lost is called once for a lock that ended without Unlock: its validity
	// ran out, a quorum lost its token, or its max hold was reached. err
	// wraps ErrLockLost. It is called after the lock's Done has closed, so
	// a holder that wakes on Done may find the loss not yet counted.
	Lost(key string, err error)
	// Released is called after each Unlock that reached the nodes; err is
	// nil when a quorum still held the lock.
	Released(s Stats, err error)
}

// observeAttempt reports an attempt to the Observer, and logs a failed one.
func (c *Client) observeAttempt(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: attempt failed", "key", s.Key, "yes", s.Yes, "no", s.No, "failed", s.Failed, "err", err)
	}
	c.callObserver("Attempted", func(o Observer) { o.Attempted(s, err) })
}

// observeExtend reports an extension to the Observer, and logs a failed one.
// The renewer does not call it itself: it queues the call on the notifier.
func (c *Client) observeExtend(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: extension failed", "key", s.Key, "err", err)
	}
	c.callObserver("Extended", func(o Observer) { o.Extended(s, err) })
}

// observeLost logs a loss and reports it to the Observer. It runs on the
// notifier's goroutine, once the lock's Done has closed.
func (c *Client) observeLost(key string, err error) {
	c.log.Warn("redlock: lock lost", "key", key, "err", err)
	c.callObserver("Lost", func(o Observer) { o.Lost(key, err) })
}

// observeRelease reports a release to the Observer, and logs an unconfirmed
// one.
func (c *Client) observeRelease(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: release not confirmed", "key", s.Key, "err", err)
	}
	c.callObserver("Released", func(o Observer) { o.Released(s, err) })
}

// callObserver calls the Observer's method name through call, unless there
// is no Observer or the Client is closed. A panic in the method is recovered
// and logged, so that a faulty Observer cannot crash a renewal, an expiry
// timer or the caller's own Lock, Extend or Unlock halfway.
func (c *Client) callObserver(name string, call func(Observer)) {
	if c.observer == nil {
		return
	}
	if p, stack := c.callObserverQuietly(call); p != nil {
		// Logged once the call has left the gate: Close waits for what is
		// inside it.
		c.renewer.notify.panicked(name, p, stack)
	}
}

// callObserverQuietly makes the call through the Client's callback gate,
// so that Close waits for it, and returns what it panicked with, if it
// did.
func (c *Client) callObserverQuietly(call func(Observer)) (p any, stack []byte) {
	if !c.callbacks.enter() {
		return nil, nil
	}
	defer c.callbacks.leave()
	defer func() {
		if p = recover(); p != nil {
			stack = debug.Stack()
		}
	}()
	call(c.observer)
	return nil, nil
}

// notifier calls the logger and the Observer for the events that happen
// where nobody may wait for them: a lock's loss, which its expiry timer, a
// holder's Done or Err, Extend or the renewer may find, and the renewer's
// extensions. Done has closed before a loss is queued, and the renewer goes
// on with the next lock while the Observer hears of the last. One goroutine
// runs while events are queued, and delivers them one at a time, in order.
// Close waits, within its grace, for the events queued before it (see
// drain); the goroutine is not in the Client's WaitGroup, since an expiry
// timer may queue a loss while Close waits on it, and once Close has
// returned every callback does nothing, so the goroutine ends at once.
// Every Client has one, on its renewer.
type notifier struct {
	c *Client

	mu      sync.Mutex
	queue   []event         // guarded by mu
	spare   []event         // guarded by mu; the last delivered queue, for reuse
	running bool            // guarded by mu; the goroutine was started
	logged  map[string]bool // guarded by mu; Observer methods whose panic was logged
	dropped int             // guarded by mu; extension reports not queued since the last warning
	// idle is signalled (buffered 1) each time the goroutine ends, for
	// drain.
	idle chan struct{}
}

// maxQueued bounds the queue for auto-extension reports: an Observer slower
// than the renewals would otherwise make it grow without end. Past it they
// are dropped, and counted in a warning; a loss is never dropped.
const maxQueued = 1024

// event is a loss (lost set) or an auto-extension.
type event struct {
	lost bool
	key  string // the lost lock's name
	s    Stats  // the extension's
	err  error
}

// extended queues an auto-extension's report, if anyone listens.
func (n *notifier) extended(s Stats, err error) {
	c := n.c
	if c.observer == nil && (err == nil || !c.log.Enabled(context.Background(), slog.LevelDebug)) {
		return
	}
	n.post(event{s: s, err: err})
}

// lost queues a loss's report, if anyone listens.
func (n *notifier) lost(key string, err error) {
	c := n.c
	if c.observer == nil && !c.log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	n.post(event{lost: true, key: key, err: err})
}

func (n *notifier) post(e event) {
	n.mu.Lock()
	if !e.lost && len(n.queue) >= maxQueued {
		n.dropped++
		n.mu.Unlock()
		return
	}
	n.queue = append(n.queue, e)
	start := !n.running
	n.running = true
	n.mu.Unlock()
	if start {
		go n.run()
	}
}

// run delivers the queued events until none is left. An Observer that ends
// the goroutine (runtime.Goexit, as t.FailNow does) is no panic to recover:
// the events after its own are queued again, and a new goroutine goes on.
func (n *notifier) run() {
	var batch []event
	next := 0 // the index in batch of the event being delivered
	finished := false
	defer func() {
		if finished {
			return
		}
		n.mu.Lock()
		n.queue = append(slices.Clone(batch[min(next+1, len(batch)):]), n.queue...)
		n.mu.Unlock()
		go n.run() // running stays set
	}()
	for {
		n.mu.Lock()
		dropped := n.dropped
		n.dropped = 0
		batch = n.queue
		idle := len(batch) == 0
		if idle {
			n.running = false
		} else {
			n.queue, n.spare = n.spare[:0], nil
		}
		n.mu.Unlock()
		if dropped > 0 {
			n.c.log.Warn("redlock: Observer slower than the renewals: auto-extension reports dropped", "dropped", dropped)
		}
		if idle {
			finished = true
			select {
			case n.idle <- struct{}{}:
			default:
			}
			return
		}
		for i, e := range batch {
			next = i
			if e.lost {
				n.c.observeLost(e.key, e.err)
			} else {
				n.c.observeExtend(e.s, e.err)
			}
			batch[i] = event{} // let the Stats and errors go
		}
		n.mu.Lock()
		n.spare = batch[:0]
		n.mu.Unlock()
		batch = nil
	}
}

// drain waits until the events queued so far are delivered, or until d
// has passed: Close calls it, so that a loss found before Close is still
// reported.
func (n *notifier) drain(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		n.mu.Lock()
		running := n.running
		n.mu.Unlock()
		if !running {
			return
		}
		select {
		case <-n.idle:
		case <-t.C:
			return
		}
	}
}

// panicked logs, at Error, the first panic of the Observer's method name.
// Later ones are recovered silently: a faulty Observer called for every
// renewal of every lock would otherwise flood the log.
func (n *notifier) panicked(name string, p any, stack []byte) {
	n.mu.Lock()
	first := !n.logged[name]
	if first {
		if n.logged == nil {
			n.logged = make(map[string]bool)
		}
		n.logged[name] = true
	}
	n.mu.Unlock()
	if first {
		n.c.log.Error("redlock: Observer panicked; recovered, later panics of this method are not logged",
			"callback", name, "panic", fmt.Sprint(p), "stack", string(stack))
	}
}

// quietHandler passes log records to the user's handler until Close has
// returned, and drops them after: a lock's expiry timer or a straggling
// request must not log from a Client the caller has closed. It also drops a
// record whose handler panics.
type quietHandler struct {
	next slog.Handler
	c    *Client
}

// Enabled reports whether the user's handler wants records at level l.
func (h *quietHandler) Enabled(ctx context.Context, l slog.Level) (on bool) {
	defer func() {
		if recover() != nil {
			on = false
		}
	}()
	return h.next.Enabled(ctx, l)
}

// Handle passes r on, unless the Client has been closed.
func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.c.callbacks.enter() {
		return nil
	}
	defer h.c.callbacks.leave()
	// A handler that panics loses its record, not the goroutine that
	// logged it: a renewal, an expiry, a sender of the node's requests.
	defer func() { _ = recover() }()
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a quietHandler around the user's handler with attrs.
func (h *quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &quietHandler{next: h.next.WithAttrs(attrs), c: h.c}
}

// WithGroup returns a quietHandler around the user's handler with a group.
func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{next: h.next.WithGroup(name), c: h.c}
}

// NodeStatus is what a Client knows of one node, for diagnostics.
type NodeStatus struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Stalled is true while a request to the node has outlived its node
	// timeout without an answer: the node looks hung.
	Stalled bool
	// RunID is the node's run_id, as the node guard last saw it; "" when
	// the guard is off or has not seen the node.
	RunID string
	// Quarantined is the guard's reason for not counting the node's votes,
	// or "" when they count.
	Quarantined string
	// QuarantinedUntil is when the quarantine ends; zero when there is none.
	QuarantinedUntil time.Time
}

// Nodes returns what the Client knows of each node, in the order given to
// New: whether it looks hung, and what the node guard thinks of it.
func (c *Client) Nodes() []NodeStatus {
	now := c.now()
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		s := NodeStatus{Index: i, Addr: n.addr, Stalled: n.stalled.Load() > 0}
		n.guard.mu.Lock()
		s.RunID = n.guard.runID
		if now.Before(n.guard.until) {
			s.Quarantined, s.QuarantinedUntil = n.guard.reason, n.guard.until
		}
		n.guard.mu.Unlock()
		out[i] = s
	}
	return out
}

// callGate admits the calls of the Observer and the logger until Close,
// which then waits for those still running, within its grace: a stuck one
// cannot hold Close, nor the calls that come after it (a sync.RWMutex
// would queue them behind Close's Lock). The zero value admits calls. It is
// safe for concurrent use.
type callGate struct {
	mu       sync.Mutex
	closed   bool          // guarded by mu; no call is admitted
	inFlight int           // guarded by mu; calls admitted and running
	idle     chan struct{} // guarded by mu; closed when inFlight drops to 0 after close
}

// enter admits a call, unless the gate is closed. A call admitted must
// leave.
func (g *callGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inFlight++
	return true
}

func (g *callGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight--; g.inFlight == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// close admits no more calls, and waits until those running have left, or
// until deadline.
func (g *callGate) close(deadline time.Time) {
	g.mu.Lock()
	g.closed = true
	if g.inFlight == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}
