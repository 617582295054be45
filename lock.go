package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Lock is a held lock, returned by Client.Lock and Client.TryLock, or a
// semaphore's permit, returned by Semaphore.Acquire and TryAcquire. It is safe
// for concurrent use: Extend and Unlock may run from different goroutines.
// It must not be copied.
type Lock struct {
	c        *Client
	att      *attempt // the attempt that won it; att.a.keys are its keys, as given
	cfg      *config
	t        *target
	fence    uint64
	acquired time.Time // start of the round that acquired it

	mu sync.Mutex
	// until stops moving once the lock has ended or its release began:
	// extensions only move it while err is nil, and a lock released at
	// Close was never handed out.
	until time.Time     // guarded by mu
	ttl   time.Duration // guarded by mu; the TTL of extensions, see Extend
	held  []bool        // guarded by mu; nodes known to have said yes
	stats Stats         // guarded by mu; the last round, without Nodes
	// statsOf is the outcome of that round, which Stats makes its Nodes
	// from, or statsNodes makes them, for a renewal; guarded by mu.
	statsOf    *outcome
	statsNodes func() []NodeVote
	err        error // guarded by mu; why it ended, nil while held
	// done is made by the first call of Done, and closed when the lock
	// ends: most holders never ask for it.
	done     chan struct{} // guarded by mu
	expiry   *time.Timer   // guarded by mu; fires at until
	released bool          // guarded by mu; Unlock was called
	capped   bool          // guarded by mu; the max hold cut a TTL
	// doneShut is set once the lock has ended and its renewals are
	// stopped: Done is closed from then on.
	doneShut bool // guarded by mu
	// byToken is set for the Lock that stands for a hold in a release by
	// token (Client.Release): it knows nothing of the hold's state. It
	// sits with the flags above, which it does not share a guard with, so
	// that their padding does not grow the Lock past its size class.
	byToken bool
	// handedOut is when the call that acquired the lock returned it, as a
	// time after acquired, for the Observer's HoldEnded: 0 for a lock
	// never handed out (released at Close, or standing for a release by
	// token), or when no Observer listens to HoldEnded. Guarded by mu.
	handedOut time.Duration

	// renewal is the lock's place in the renewer's queue; guarded by the
	// renewer's mu.
	renewal *renewal
}

// Key returns the key the lock was acquired on, without the key prefix. For
// a multi-key lock it is the first of Keys.
func (l *Lock) Key() string { return l.att.a.keys[0] }

// Keys returns the keys the lock holds, as given, without the key prefix.
func (l *Lock) Keys() []string { return slices.Clone(l.att.a.keys) }

// name is how errors and Stats name the lock: its keys, joined by commas.
func (l *Lock) name() string {
	keys := l.att.a.keys
	if len(keys) == 1 {
		return keys[0]
	}
	return strings.Join(keys, ",")
}

// Token returns the value that marks this lock on the nodes: the plain
// string stored under its key (for an owner lock, in the field "t:" +
// Token()). Each Lock or TryLock call draws a random UUID, and each of its
// attempts writes a value of its own: the UUID for the first attempt, and
// UUID.n for attempt n, so that a late message of one attempt can never
// touch the key another attempt counted. With WithLabel, a space and the
// label follow: Token is the whole stored string, as Inspect reports it.
func (l *Lock) Token() string { return l.att.value.value }

// Owner returns the owner given with WithOwner, or "" for a plain lock.
func (l *Lock) Owner() string { return l.t.owner }

// Fence returns the lock's fencing token when it was acquired WithFencing,
// and 0 otherwise. It is larger than the fence of every earlier holder of
// any of the lock's keys: pass it to the store the lock protects, and have
// the store reject writes that carry a smaller fence than one it has seen.
func (l *Lock) Fence() uint64 { return l.fence }

// Until returns the end of the lock's validity on the local clock: the start
// of the round that acquired (or last extended) it, plus the TTL, minus the
// clock drift. The time carries a monotonic reading, so time.Until(l.Until())
// is immune to wall-clock jumps on this machine. Past Until, another client
// may hold the lock.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Stats returns what the nodes answered in the lock's last round: the
// acquisition, the last Extend or auto-extension renewal, or Unlock.
func (l *Lock) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	switch {
	case l.statsOf != nil:
		s.Nodes = l.statsOf.nodeVotes(l.c)
	case l.statsNodes != nil:
		s.Nodes = l.statsNodes()
	}
	return s
}

func (l *Lock) markHeld(i int) {
	l.mu.Lock()
	l.held[i] = true
	l.mu.Unlock()
}

// Unlock releases the lock: on every node, a Lua script deletes the key only
// while it still holds this lock's value, so it never deletes another
// holder's key. Each node that deletes announces the release on pub/sub, so
// that waiters retry at once. Each node is bounded by the node timeout or, if
// longer, the TTL up to one second: a release has no validity to protect, so
// a busy node is given time to confirm rather than reported as failed. A
// node whose acquire request has not answered yet gets its release once the
// request returns, never before, so that the release cannot overtake it.
// Unlock first stops the renewals, then closes Done (Err returns
// ErrUnlocked), then releases. It returns as soon as the outcome is known;
// the requests to the slower nodes finish in the background.
//
// It returns nil when at least a quorum of nodes still held the lock. A
// release that go-redis sent again, after its connection failed, and whose
// last copy found the key gone (or taken by the next holder), before Until,
// on a node that held it, counts as released: the first copy deleted it.
// When the lock was lost or its validity had ended, when so many nodes said
// they no longer held it that a quorum cannot have, or when the lock was
// already unlocked, the error matches ErrNotHeld. When too few confirmed but the others failed or did
// not answer in time, it matches ErrUnconfirmed instead: the release still
// reaches them as their requests return. As a *QuorumError either says
// what each node answered. Either way the lock is over: call Unlock once.
//
// ctx's cancellation does not stop the release: Unlock with a cancelled ctx
// still releases, bounded as above, and returns nil when the release landed
// on a quorum.
//
// With WithMinHold(d), an Unlock before the acquisition plus d does not
// delete the keys: on each node that still holds this lock's value, it sets
// their expiry to the time left until then, measured on the local monotonic
// clock as the request goes out, and announces nothing, since the keys are
// not free. It returns nil when a quorum held the lock, as above. With
// WithLockDelay, an Unlock of a lock that was lost or whose validity had
// ended deletes nothing either: the keys expire the delay after the lock's
// end, and the error matches ErrNotHeld.
func (l *Lock) Unlock(ctx context.Context) error {
	c := l.c
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return &QuorumError{Stats: Stats{Op: OpUnlock, Key: l.name(), Quorum: l.t.quorum}, Reason: "already unlocked", sentinel: ErrNotHeld}
	}
	l.released = true
	// A lock that was lost, or whose validity has ended, is known not to
	// be held: a release that cannot be confirmed says so.
	now := c.now()
	over := l.err != nil || !now.Before(l.until)
	p := l.planRelease(now, over)
	handedOut := l.handedOut
	l.mu.Unlock()
	// A lock that was lost has had its HoldEnded, after Lost.
	ended := l.end(ErrUnlocked)
	// The release does not stop when ctx does: a caller whose ctx is
	// already cancelled (a shutdown, a deferred Unlock after a timeout)
	// still frees the nodes, within the release's own bound.
	err := l.releaseAs(over, p)
	if ended && handedOut > 0 {
		c.observeHoldEnded(HoldResult{Key: l.name(), Kind: l.t.kind(), ID: l.t.id, Held: max(now.Sub(l.acquired)-handedOut, 0), Err: err})
	}
	return err
}

// releasePlan is what Unlock's release does on the nodes, beside deleting
// the keys: the zero value deletes them, as every other release does (at
// Close, by token).
type releasePlan struct {
	// later is the end of the minimum hold (WithMinHold) when Unlock came
	// before it: the release lets the keys expire then (releaselater.lua)
	// rather than delete them, and cut says they outlive it on the nodes
	// that hold the lock, so that the script shortens them to it.
	later time.Time
	cut   bool
	// keep is set when the lock-delay (WithLockDelay) must run its course:
	// the lock was lost or its validity ended, so nothing deletes the keys.
	keep bool
}

// reasonLockDelay is the Reason of Unlock's error when the lock-delay
// keeps the keys.
const reasonLockDelay = "lock lost or its validity ended: its keys are left to expire after the lock-delay"

// planRelease decides Unlock's releasePlan at now, on the local monotonic
// clock; over says the lock was lost or its validity ended. l.mu must be
// held.
func (l *Lock) planRelease(now time.Time, over bool) releasePlan {
	cfg := l.cfg
	p := releasePlan{keep: over && cfg.lockDelay > 0}
	if cfg.minHold > 0 {
		if end := l.acquired.Add(cfg.minHold); now.Before(end) {
			// The nodes of the last quorum keep the keys past Until by
			// the drift and the lock-delay at least: a minimum hold that
			// ends before then is reached by shortening them. Otherwise
			// (a minimum hold longer than the TTL, or a lock that is over)
			// they are only lengthened to it.
			p.later = end
			p.cut = !over && !end.After(l.until.Add(cfg.lockDelay))
		}
	}
	return p
}

// release deletes the lock's keys on every node, announcing it to waiters,
// and says whether a quorum still held them; over says the lock was known to
// be over already. The caller must be inside a call of the Client. It takes
// no ctx: no caller's cancellation stops a release (see Unlock), and nothing
// of it reads a ctx's values.
func (l *Lock) release(over bool) error { return l.releaseAs(over, releasePlan{}) }

// releaseAs is release, as p says: with p.later set it lets the keys expire
// at the end of the minimum hold and announces nothing, since the keys are
// not free; with p.keep it leaves them to the lock-delay, and reports the
// lock not held whatever the nodes answer.
func (l *Lock) releaseAs(over bool, p releasePlan) error {
	c, at := l.c, l.att
	at.beginUnlock()
	if p.keep && p.later.IsZero() {
		// Nothing to send: the keys expire the lock-delay after the lock's
		// end, which is the point of the delay.
		st := Stats{Op: OpUnlock, Key: l.name(), Quorum: l.t.quorum}
		l.mu.Lock()
		l.stats, l.statsOf, l.statsNodes = st, nil, nil
		l.mu.Unlock()
		qe := &QuorumError{Stats: st, Reason: reasonLockDelay, sentinel: ErrNotHeld}
		c.observeRelease(st, qe)
		return qe
	}
	var plan *releasePlan // nil: a plain release, as almost every one is
	if !p.later.IsZero() {
		plan = new(releasePlan)
		*plan = p
	}
	// One allocation for the round's jobs: each node gets its own.
	jobs := make([]releaseJob, len(c.nodes))
	o := c.fanout(context.Background(), &spec{
		op:      OpUnlock,
		quorum:  l.t.quorum,
		timeout: l.cfg.releaseTimeout(),
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.sent.at, j.announce, j.unlock = at, true, true
			j.plan = plan
			switch at.claimRelease(lg.n.index, j) {
			case releaseNow:
				lg.n.pipe.Submit(j)
			case releaseParked:
				// Sent by the late handler once the acquire request
				// returns; if that is after this round's timeout, the
				// release still lands, uncounted.
			default:
				lg.deliver(0, ErrInFlight)
			}
		},
	})
	o.finish(nil)
	st := o.stats(OpUnlock, l.name(), l.t.quorum)
	l.mu.Lock()
	l.stats, l.statsOf = st, o
	l.mu.Unlock()
	if o.yes >= l.t.quorum && !p.keep {
		if p.later.IsZero() {
			// Wake this Client's next waiter now: the announcement may
			// not come, since its attempt, woken by the last release,
			// did not mark the keys.
			c.waitlist.releasedLocally(l.t.rkeys, at.value.value)
		}
		if c.observer != nil {
			c.observeRelease(o.withNodes(c, st), nil)
		}
		return nil
	}
	st = o.withNodes(c, st)
	qe := &QuorumError{Stats: st, sentinel: ErrNotHeld, ctxErr: o.ctxErr}
	if p.keep {
		qe.Reason = reasonLockDelay
	}
	if !over && len(c.nodes)-o.no >= l.t.quorum {
		// Too few said no to know the lock was not held: the others
		// failed or did not answer in time.
		qe.sentinel = ErrUnconfirmed
	}
	c.observeRelease(st, qe)
	return qe
}

// heldValidOn reports whether node i is known to have taken the lock, and
// the lock is still valid now. Called once its release began, when Until no
// longer moves.
func (l *Lock) heldValidOn(i int) bool {
	now := l.c.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[i] && now.Before(l.until)
}

// Extend resets the lock's TTL to the full TTL on every node that still holds
// its token. A Lua script compares the token, and never re-creates a key that
// is gone. Extend succeeds when a quorum of nodes extended before the current
// validity ended; Until then becomes the start of the extension plus the TTL,
// minus the drift. With WithTopUp (the default), a successful Extend then
// asks the nodes that never said yes to take the key, and they count from
// then on.
//
// The only option it takes is WithTTL, as redislock's Refresh takes a TTL:
// the new TTL is used for this extension and every later one, auto-extension
// included. A node never shortens a key's TTL, so a TTL shorter than the
// time the lock has left does not cut it short; Until never moves back.
// The max hold still caps it. A TTL that New would refuse is an
// ErrInvalidOption, and the lock is left as it was.
//
// Extend refuses once Until has passed, once the lock has ended (Done is
// closed: after Unlock, or once it was lost), or when WithMaxHold's cap
// leaves no room (the error then also matches ErrMaxHold). On failure Until
// is unchanged: the nodes that did extend keep the key for a full TTL, and
// Unlock still releases them. The error matches ErrNotHeld when a node said
// it no longer held the lock, or a quorum could not be reached; when ctx
// ended the call before any node said no, it matches ctx.Err() and not
// ErrNotHeld, since the lock may well still be held until Until.
func (l *Lock) Extend(ctx context.Context, opts ...ExtendOption) error {
	c, cfg := l.c, l.cfg
	if len(opts) > 0 {
		ttl, err := extendOptions(cfg, opts)
		if err != nil {
			return err
		}
		if ttl != 0 {
			l.mu.Lock()
			l.ttl = ttl
			l.mu.Unlock()
		}
	}
	l.mu.Lock()
	until, released, ended := l.until, l.released, l.err
	l.mu.Unlock()
	fail := func(reason string) error {
		err := &QuorumError{Stats: Stats{Op: OpExtend, Key: l.name(), Quorum: l.t.quorum}, Reason: reason, sentinel: ErrNotHeld}
		c.observeExtend(err.Stats, err)
		return err
	}
	if released {
		return fail("already unlocked")
	}
	if ended != nil {
		return fail("lock ended: " + bare(ended))
	}
	start := c.now()
	if !start.Before(until) {
		l.expire() // Done closes now, not when the timer gets to run
		return fail("validity ended " + start.Sub(until).Round(time.Microsecond).String() + " ago")
	}
	ttl, ok := l.extendTTL(start)
	if !ok {
		err := chain(ErrNotHeld, fmt.Errorf("%w: lock %q cannot be held past %v", ErrMaxHold, l.name(), l.cfg.maxHold))
		c.observeExtend(Stats{Op: OpExtend, Key: l.name(), Quorum: l.t.quorum}, err)
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()

	// The quorum must be reached within the remaining validity: past it,
	// the key may have expired on some nodes and been taken by another
	// client there.
	timeout := min(cfg.nodeTimeout, until.Sub(start))
	// One allocation for the round's jobs: each node gets its own.
	jobs := make([]extendJob, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op:      OpExtend,
		quorum:  l.t.quorum,
		timeout: timeout,
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.l, j.ttl, j.replicaWait = l, ttl, newReplicaWait(l.cfg, l.t)
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)
	e := extension{start: start, end: o.ended(), ttl: ttl, yes: o.yes, no: o.no, ctxErr: o.ctxErr}
	st := o.stats(OpExtend, l.name(), l.t.quorum)
	st.Drift = clockDrift(ttl, cfg.driftFactor)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)

	err := l.settleExtend(o, e, st)
	if err == nil {
		l.topUp(ttl)
	}
	if c.observer != nil {
		st = o.withNodes(c, st)
	}
	c.observeExtend(st, err)
	return err
}

// errExtendInterrupted is the sentinel of an Extend that the caller's ctx
// ended before any node said no: its error matches ctx.Err(), not ErrNotHeld.
var errExtendInterrupted = errors.New("redlock: extend interrupted")

// extendOptions returns the TTL that Extend's options set, validated as a
// lock call validates it, but against the lock's own node timeout, which its
// rounds keep using: 0 when they set none.
func extendOptions(cfg *config, opts []ExtendOption) (time.Duration, error) {
	var e extendConfig
	for _, o := range opts {
		if o != nil {
			o.applyExtend(&e)
		}
	}
	if !e.ttlSet {
		return 0, nil
	}
	got := *cfg
	got.ttl, got.nodeTimeoutSet = e.ttl, true
	if err := got.validate(); err != nil {
		return 0, err
	}
	return got.ttl, nil
}

// extension is one extension round's result for one lock: an Extend's, or
// a renewal batch's share of it.
type extension struct {
	start, end time.Time // of the round, on the Client's clock
	ttl        time.Duration
	yes, no    int
	// ctxErr is set when the caller's ctx ended the round (Extend only).
	ctxErr error
}

// stats returns the round's Stats, without Nodes.
func (e *extension) stats(l *Lock) Stats {
	drift := clockDrift(e.ttl, l.cfg.driftFactor)
	return Stats{Op: OpExtend, Key: l.name(), Quorum: l.t.quorum, Yes: e.yes, No: e.no,
		Elapsed: e.end.Sub(e.start), Drift: drift, Validity: validity(e.ttl, e.end.Sub(e.start), drift)}
}

// lost reports whether a quorum of nodes said they no longer hold the
// token: the lock is then gone, not merely unconfirmed.
func (e *extension) lost(l *Lock) bool { return e.no >= l.t.quorum }

// extVerdict is what settleExtension made of a round.
type extVerdict uint8

const (
	extWon         extVerdict = iota // Until moved, or stays where a longer one put it
	extEnded                         // the lock had ended: nothing can bring it back
	extInterrupted                   // the caller's ctx ended the round
	extShort                         // fewer yes votes than the quorum
	extLate                          // the quorum came after Until
	extNoValidity                    // the TTL left no validity after the round and the drift
)

// settleExtension is the one rule for every extension, Extend's and the
// renewals': it decides the round for l and, when it won, moves Until to
// the round's start plus its TTL minus the drift (never back), and
// schedules the next renewal of an auto-extended lock. st is e.stats(l).
// l.mu must be held.
//
// A round wins when a quorum said yes before Until, with validity left:
// past Until, the key may have expired on some nodes and been taken by
// another client there, and the nodes' yes then proves nothing.
func (l *Lock) settleExtension(e extension, st Stats) extVerdict {
	switch {
	case l.err != nil:
		// Unlock, or the expiry timer, ended the lock while the round was
		// in flight: an extension cannot bring it back.
		return extEnded
	case e.ctxErr != nil:
		return extInterrupted
	case e.yes < l.t.quorum:
		return extShort
	case !e.end.Before(l.until):
		return extLate
	case st.Validity <= 0:
		return extNoValidity
	}
	if next := e.start.Add(e.ttl - st.Drift); next.After(l.until) {
		l.until = next
	}
	if l.cfg.autoExtend {
		l.c.renewer.add(l, l.nextRenewal(e.start))
	}
	return extWon
}

// settleExtend applies an Extend's round (see settleExtension), and
// returns Extend's error.
func (l *Lock) settleExtend(o *outcome, e extension, st Stats) error {
	c := l.c
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats, l.statsOf = st, o
	fail := func(reason string, sentinel, ctxErr error) error {
		return &QuorumError{Stats: o.withNodes(c, st), Reason: reason, sentinel: sentinel, ctxErr: ctxErr}
	}
	switch l.settleExtension(e, st) {
	case extWon:
		return nil
	case extEnded:
		return fail("lock ended: "+bare(l.err), ErrNotHeld, nil)
	case extInterrupted:
		if e.no == 0 {
			// The caller gave up before any node said no: nothing says
			// the lock is lost.
			return fail("", errExtendInterrupted, e.ctxErr)
		}
		return fail("", ErrNotHeld, e.ctxErr)
	case extLate:
		return fail("validity ended before the quorum answered", ErrNotHeld, nil)
	case extNoValidity:
		return fail("no validity left", ErrNotHeld, nil)
	}
	return fail("", ErrNotHeld, nil)
}

// Done returns a channel that is closed when the lock ends: on Unlock, when
// its validity runs out on the local clock (Until passes), or when renewal
// finds it lost. Err then says why. Holders can select on it. Done and Err
// check Until themselves, so that a holder whose process was paused past
// Until finds the lock ended at once when it resumes, even before the
// expiry timer has run. The logger and the Observer hear of a loss after
// Done has closed, from another goroutine, so that a slow one cannot keep
// Done open.
//
// Until and Done follow the monotonic clock, which on Linux does not advance
// while the host is suspended (CLOCK_MONOTONIC): a holder whose host sleeps
// through its validity may find Done still open for as long as the sleep,
// while the nodes, whose clocks ran on, have let the key go.
func (l *Lock) Done() <-chan struct{} {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		if l.doneShut {
			return closedDone
		}
		l.done = make(chan struct{})
	}
	return l.done
}

// closedDone is Done of a lock that ended before anyone asked for it.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Err returns nil while the lock is held. Once Done is closed it returns why
// the lock ended: ErrUnlocked after Unlock, or an error that wraps
// ErrLockLost and the cause when the lock expired or was lost.
func (l *Lock) Err() error {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// expireIfPast ends the lock now when Until has passed, rather than when
// the expiry timer gets to run.
func (l *Lock) expireIfPast() {
	if l.c.hooks.timerOnlyExpiry {
		return
	}
	l.mu.Lock()
	past := l.err == nil && !l.c.now().Before(l.until)
	l.mu.Unlock()
	if past {
		l.expire()
	}
}

// start begins the lock's lifecycle once it is acquired, as the call hands
// it out: the expiry timer, and the renewals when auto-extension is on.
func (l *Lock) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c.events.holdEnded != nil {
		// acquired is the start of a round that took time: never 0.
		l.handedOut = max(l.c.now().Sub(l.acquired), 1)
	}
	l.expiry = time.AfterFunc(l.until.Sub(l.c.now()), l.expire)
	if l.cfg.autoExtend {
		l.c.renewer.add(l, l.nextRenewal(l.acquired))
	}
}

// nextRenewal is when the renewal after one that started at from is due: a
// third of the lock's TTL later. l.mu must be held.
func (l *Lock) nextRenewal(from time.Time) time.Time {
	return from.Add(l.ttl / 3)
}

// expire ends the lock when its validity has run out on the local clock. A
// successful extension may have moved Until since the timer was armed.
func (l *Lock) expire() {
	l.mu.Lock()
	if wait := l.until.Sub(l.c.now()); wait > 0 && l.err == nil {
		l.expiry.Reset(wait)
		l.mu.Unlock()
		return
	}
	var cause error = errValidityEnded
	if l.capped {
		cause = ErrMaxHold
	}
	l.mu.Unlock()
	l.end(chain(ErrLockLost, cause))
}

var errValidityEnded = errors.New("validity ended before a renewal succeeded")

// end ends the lock with err, once: Err returns err from then on, and Done
// closes once the renewals are stopped. A loss is then queued for the logger
// and the Observer. Later calls do nothing. It reports whether this call
// ended the lock.
func (l *Lock) end(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	if l.expiry != nil {
		l.expiry.Stop()
	}
	// How long a lost lock was held: until the loss was found, but no
	// longer than its validity, which a paused process may find long
	// after it ran out.
	hold, held := l.handedOut > 0, time.Duration(0)
	if hold {
		end := l.c.now()
		if l.until.Before(end) {
			end = l.until
		}
		held = max(end.Sub(l.acquired)-l.handedOut, 0)
	}
	l.mu.Unlock()
	if l.cfg.autoExtend {
		l.c.renewer.remove(l)
	}
	l.mu.Lock()
	l.doneShut = true
	if l.done != nil {
		close(l.done)
	}
	l.mu.Unlock()
	// Done closes first, and the logger and the Observer hear of the loss
	// on the notifier's goroutine: a slow one must neither keep the holder
	// acting on a lost lock nor hold up whoever found the loss (a holder's
	// Done or Err, the renewer).
	if errors.Is(err, ErrLockLost) {
		if hold {
			l.c.renewer.notify.lostHold(l, err, held)
		} else {
			l.c.renewer.notify.lost(l.name(), err)
		}
	}
	return true
}

// extendTTL is the TTL to ask for in an extension that starts at start: the
// lock's TTL (the configured one, or the last given to Extend), cut so that
// the lock does not outlive its max hold. ok is false when the cap leaves no
// validity. Once the cap has cut a TTL, the lock is marked to end with
// ErrMaxHold.
//
// Extend and the renewer both call it just before they send, so this is
// where an extension raises the node guard's max TTL: before the request
// goes out, since it may land even if the round fails.
func (l *Lock) extendTTL(start time.Time) (ttl time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ttl, ok = l.ttl, true
	if l.cfg.maxHold > 0 {
		if left := l.acquired.Add(l.cfg.maxHold).Sub(start); left < ttl {
			ttl = left.Truncate(time.Millisecond)
			l.capped = true
		}
		ok = ttl > clockDrift(ttl, l.cfg.driftFactor) && ttl >= time.Millisecond
	}
	if ok {
		// The nodes keep the keys the lock-delay longer.
		l.c.raiseMaxTTL(l.cfg.nodeTTL(ttl))
	}
	return ttl, ok
}

// Release ends the hold of key whose token is token, as Unlock of the Lock
// that took it would: a lock held by another Client or process, such as one
// whose token `redlock lock` printed (Lock.Token). It is for exclusive
// locks, plain or fenced, and with WithOwner for an owner's lock: opts must
// give the WithOwner of the acquisition, and the Client its WithKeyPrefix.
// Use ReleaseRead for a read lock and Semaphore.Release for a permit.
//
// It returns nil when a quorum of nodes released the hold, and otherwise
// an error as Unlock's: it matches ErrNotHeld when too many nodes no longer
// held the token (released, expired, or another token), and ErrUnconfirmed
// when too few answered to tell. The Lock that holds the token, if any,
// learns of it at its next renewal or Extend, and is lost. ctx does not
// stop the release, which is bounded as Unlock's is. An empty key or token
// gives an error that wraps ErrInvalidOption.
//
// It frees the keys at once, whatever WithMinHold or WithLockDelay the hold
// was taken with: it knows nothing of the hold's acquisition time nor of
// whether it is still valid. It is the operator's way to end a hold early.
func (c *Client) Release(ctx context.Context, key, token string, opts ...LockOption) error {
	return c.releaseToken(key, token, opts, plainFlavour)
}

// releaseToken releases the hold of flavour fl on key whose value is token,
// through the path of Unlock: a Lock that stands for the hold, with every
// node marked held and nothing in flight. It deletes at once, as every
// release but Unlock's does: see releasePlan.
func (c *Client) releaseToken(key, value string, opts []LockOption, fl *flavour) error {
	switch {
	case value == "":
		return fmt.Errorf("%w: token must not be empty", ErrInvalidOption)
	case fl.permits > 0 && value == permitsMember:
		// The member that keeps a semaphore's number of permits.
		return fmt.Errorf("%w: %q is not the token of a permit", ErrInvalidOption, value)
	}
	cfg, err := c.config(opts)
	if err != nil {
		return err
	}
	t, err := c.target([]string{key}, cfg, fl)
	if err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	a := c.newAcquisition(cfg, []string{key}, t)
	at := a.newAttempt()
	at.value = token{value: value, arg: value, raw: []byte(value)}
	held := make([]bool, len(c.nodes))
	for i := range held {
		held[i] = true
	}
	l := &Lock{c: c, att: at, cfg: cfg, t: t, until: c.now(), ttl: cfg.ttl, held: held, released: true, err: ErrUnlocked, byToken: true}
	a.mu.Lock()
	at.state, at.lock = won, l
	a.mu.Unlock()
	return l.release(false)
}
