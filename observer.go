package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
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
// Observer written today keeps compiling and working. New looks for them
// once: WaitBeganObserver, WaitEndedObserver, QueuedObserver,
// HoldEndedObserver and LockTracer.
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

// Kind names a kind of hold in the Observer's events.
type Kind string

// The kinds of hold.
const (
	// KindLock is a plain lock: Lock, TryLock, LockMulti, Do and their kin.
	KindLock Kind = "lock"
	// KindOwner is an owner (reentrant) lock, WithOwner.
	KindOwner Kind = "owner"
	// KindFair is a fair lock, WithFair.
	KindFair Kind = "fair"
	// KindRead is a reader's hold of RLock.
	KindRead Kind = "read"
	// KindPermit is a permit of a Semaphore.
	KindPermit Kind = "permit"
	// KindElection is a leadership, taken by an Election's Campaign.
	KindElection Kind = "election"
)

// WaitInfo names the acquisition call that a wait event is about.
type WaitInfo struct {
	// Key is the lock's name as Stats.Key gives it: its key without the
	// key prefix, or a multi-key lock's keys joined by commas.
	Key string
	// Kind is the kind of hold the call takes.
	Kind Kind
	// ID is the call's random acquisition id: the Token of the Lock it
	// returns begins with it. It tells apart the events of calls on one
	// key.
	ID string
}

// WaitResult is how an acquisition call ended: WaitEnded gets it for a
// call that waited, and a LockTracer's end for every call it traced.
type WaitResult struct {
	WaitInfo
	// Waited is the time from the start of the call to its return, its
	// first attempt included.
	Waited time.Duration
	// Attempts is the number of attempts the call made; 0 when it ended
	// before the first.
	Attempts int
	// Place is the last place in the queue that a fair call learned (1 is
	// next), or 0 when it learned none.
	Place int
	// Err is nil when the call acquired the lock, and otherwise the error
	// the call returned.
	Err error
}

// QueuePlace is a fair call's place in the queue of its key: 1 is next.
type QueuePlace struct {
	WaitInfo
	Place int
}

// HoldResult is how a hold that a call handed out ended.
type HoldResult struct {
	// Key, Kind and ID are as the WaitInfo of the call that acquired the
	// hold gave them.
	Key  string
	Kind Kind
	ID   string
	// Held is the time from the moment the call returned the Lock to the
	// start of Unlock or, for a lock that was lost, to the moment the loss
	// was found, but no later than Until.
	Held time.Duration
	// Err is nil when Unlock confirmed the release (it returned nil),
	// Unlock's error when it did not, and the error Lost got, which wraps
	// ErrLockLost, when the lock was lost.
	Err error
}

// WaitBeganObserver is an Observer that also hears when an acquisition
// call begins to wait.
type WaitBeganObserver interface {
	// WaitBegan is called at most once per call, on the calling goroutine,
	// when a call that may wait (Lock, LockMulti, RLock, a Semaphore's
	// Acquire, Campaign: not their Try kin) begins to: after its first
	// attempt failed, or before any attempt when it queues behind the
	// Client's other waiters for the key. WaitEnded is then called for the
	// same call, exactly once, even when WaitBegan panicked.
	WaitBegan(w WaitInfo)
}

// WaitEndedObserver is an Observer that also hears when a call that waited
// returns.
type WaitEndedObserver interface {
	// WaitEnded is called exactly once for each call that began to wait
	// (see WaitBeganObserver), on the calling goroutine, just before the
	// call returns, whatever ended it: the lock acquired, the ctx, Close,
	// an error. Close waits for waiting calls to return before it
	// silences the Observer, so WaitBegan minus WaitEnded counts the calls
	// waiting now and comes back to 0: it never drifts.
	WaitEnded(r WaitResult)
}

// QueuedObserver is an Observer that also hears a fair call's place in
// the queue.
type QueuedObserver interface {
	// Queued is called on the calling goroutine of a waiting fair call
	// (WithFair) each time an attempt tells it a place in the queue other
	// than the last one it was told, after WaitBegan and before WaitEnded.
	Queued(p QueuePlace)
}

// HoldEndedObserver is an Observer that also hears when a hold ends.
type HoldEndedObserver interface {
	// HoldEnded is called once for each Lock a call returned, when it
	// ends: by Unlock, right after Released, on Unlock's goroutine; or
	// by a loss (its validity ran out, a quorum lost its token, its max
	// hold was reached), right after Lost, on the goroutine that calls
	// Lost. An Unlock after the loss reports nothing more. A hold that
	// ends once Close has returned is not reported.
	HoldEnded(r HoldResult)
}

// LockTracer is an Observer that also traces each acquisition call: Lock,
// TryLock, LockMulti, TryLockMulti, RLock, TryRLock, a Semaphore's Acquire
// and TryAcquire, and an Election's Campaign. A Campaign is traced, and
// waits, as each acquisition of the leadership's lock, which ends once its
// term record is stored: one that took the lock but had to resign it before
// the record reached a quorum ends with an error (and reports no
// HoldEnded); when the lock was lost first and it campaigns again, the next
// acquisition is traced as a call of its own.
type LockTracer interface {
	// TraceLock is called when a call begins, on the calling goroutine,
	// with the caller's ctx: a call refused for its options or keys
	// (ErrInvalidOption) is not traced. The end it returns, unless nil,
	// is called exactly once, on the same goroutine, just before the call
	// returns. A call that Close refused (ErrClosed) gets both at once,
	// unless Close has returned: from then on neither is called.
	TraceLock(ctx context.Context, w WaitInfo) (end func(WaitResult))
}

// events holds the optional interfaces of the Client's Observer, which New
// finds once: an event that nobody listens to costs one nil check.
type events struct {
	waitBegan WaitBeganObserver
	waitEnded WaitEndedObserver
	queued    QueuedObserver
	holdEnded HoldEndedObserver
	tracer    LockTracer
}

// eventsOf finds the optional interfaces that o implements.
func eventsOf(o Observer) events {
	var e events
	e.waitBegan, _ = o.(WaitBeganObserver)
	e.waitEnded, _ = o.(WaitEndedObserver)
	e.queued, _ = o.(QueuedObserver)
	e.holdEnded, _ = o.(HoldEndedObserver)
	e.tracer, _ = o.(LockTracer)
	return e
}

// errCallPanicked is the Err of a WaitResult for a call that panicked:
// the events still pair up.
var errCallPanicked = errors.New("redlock: the call panicked")

// callEvents delivers the wait events of one acquisition call. The call
// makes it, once it is registered with the Client, and calls finish on
// every return path: Close waits for registered calls before it silences
// the Observer, so a WaitBegan or TraceLock the call delivered is always
// followed by its WaitEnded or end. Only the calling goroutine uses it.
type callEvents struct {
	c     *Client
	a     *acquisition
	wait  bool      // the call may wait: not a TryLock
	start time.Time // the call's start; zero when nobody needs it
	// traceEnd is the end that the LockTracer returned, or nil.
	traceEnd func(WaitResult)
	waiting  bool // the call began to wait: WaitEnded is owed
	place    int  // the last place in the queue reported
	info     WaitInfo
	infoSet  bool // info is filled in
}

// callEvents starts the events of the call that acquires a; wait says it
// may wait. It calls the LockTracer, if any, with ctx.
func (c *Client) callEvents(ctx context.Context, a *acquisition, wait bool) callEvents {
	ev := callEvents{c: c, a: a, wait: wait}
	e := &c.events
	if e.waitEnded != nil || e.tracer != nil {
		ev.start = c.now()
	}
	if tr := e.tracer; tr != nil {
		w := ev.waitInfo()
		var end func(WaitResult)
		c.callObserver("TraceLock", func(Observer) { end = tr.TraceLock(ctx, w) })
		ev.traceEnd = end
	}
	return ev
}

// waitInfo is the call's WaitInfo, made the first time it is asked for.
func (ev *callEvents) waitInfo() WaitInfo {
	if !ev.infoSet {
		ev.info, ev.infoSet = waitInfoOf(ev.a.keys, ev.a.t), true
	}
	return ev.info
}

// waitInfoOf is the WaitInfo of a call that acquires t on keys.
func waitInfoOf(keys []string, t *target) WaitInfo {
	name := keys[0]
	if len(keys) > 1 {
		name = strings.Join(keys, ",")
	}
	return WaitInfo{Key: name, Kind: t.kind(), ID: t.id}
}

// began reports, once, that the call begins to wait. A call that may not
// wait (TryLock) never does.
func (ev *callEvents) began() {
	if !ev.wait || ev.waiting {
		return
	}
	// Set before the Observer hears of it: a WaitBegan that panics is
	// still paired.
	ev.waiting = true
	if o := ev.c.events.waitBegan; o != nil {
		w := ev.waitInfo()
		ev.c.callObserver("WaitBegan", func(Observer) { o.WaitBegan(w) })
	}
}

// queued reports the call's place in the queue (1 is next) when it
// differs from the last one reported. A queued call waits: WaitBegan comes
// first, if it has not yet.
func (ev *callEvents) queued(place int) {
	if !ev.wait || place <= 0 || place == ev.place {
		return
	}
	ev.began()
	ev.place = place
	if o := ev.c.events.queued; o != nil {
		p := QueuePlace{WaitInfo: ev.waitInfo(), Place: place}
		ev.c.callObserver("Queued", func(Observer) { o.Queued(p) })
	}
}

// finish reports how the call ended: it returned l, or err. acquireTarget
// defers it, so that it runs once on every path, a panic's included (l and
// err are then both nil).
func (ev *callEvents) finish(l *Lock, err error) {
	c := ev.c
	waitEnded := c.events.waitEnded
	if !ev.waiting {
		waitEnded = nil
	}
	end := ev.traceEnd
	if waitEnded == nil && end == nil {
		return
	}
	ev.traceEnd = nil
	if l == nil && err == nil {
		err = errCallPanicked
	}
	r := WaitResult{WaitInfo: ev.waitInfo(), Waited: c.now().Sub(ev.start), Attempts: ev.a.made, Place: ev.place, Err: err}
	if waitEnded != nil {
		c.callObserver("WaitEnded", func(Observer) { waitEnded.WaitEnded(r) })
	}
	if end != nil {
		c.callObserver("TraceLock end", func(Observer) { end(r) })
	}
}

// traceRefused traces a call that Close refused before it was registered:
// TraceLock and its end, at once, within one pass through the callback
// gate, so that Close cannot come between them.
func (c *Client) traceRefused(ctx context.Context, keys []string, t *target, err error) {
	tr := c.events.tracer
	if tr == nil {
		return
	}
	w := waitInfoOf(keys, t)
	c.callObserver("TraceLock", func(Observer) {
		if end := tr.TraceLock(ctx, w); end != nil {
			end(WaitResult{WaitInfo: w, Err: err})
		}
	})
}

// observeHoldEnded reports the end of a hold to the Observer.
func (c *Client) observeHoldEnded(r HoldResult) {
	if o := c.events.holdEnded; o != nil {
		c.callObserver("HoldEnded", func(Observer) { o.HoldEnded(r) })
	}
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
	// hold is set for the loss of a Lock that a call handed out: HoldEnded
	// follows Lost, with r.
	hold bool
	r    HoldResult
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
	n.postLoss(event{lost: true, key: key, err: err})
}

// lostHold queues the loss of l, which a call handed out and which was
// held for held: Lost, then HoldEnded.
func (n *notifier) lostHold(l *Lock, err error, held time.Duration) {
	e := event{lost: true, key: l.name(), err: err}
	if n.c.events.holdEnded != nil {
		e.hold = true
		e.r = HoldResult{Key: e.key, Kind: l.t.kind(), ID: l.t.id, Held: held, Err: err}
	}
	n.postLoss(e)
}

func (n *notifier) postLoss(e event) {
	c := n.c
	if c.observer == nil && !c.log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	n.post(e)
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
				if e.hold {
					n.c.observeHoldEnded(e.r)
				}
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
