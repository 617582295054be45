package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is the acquisition state machine: the attempts of one Lock or
// TryLock call, their values, their rollback, the replies that come after
// an attempt was decided, and the nodes that are still busy.
//
// The safety rule it keeps: a release or rollback deletes only the exact
// value it was sent for, and no message delivered late can delete a key that
// a later round counted. go-redis gives up on a request at its ReadTimeout
// (or at the ctx deadline with ContextTimeoutEnabled), but the request may
// still reach the node later, and go-redis may send a write again when its
// reply was lost. So each attempt writes a value of its own: the
// acquisition's random id for the first attempt, and id.n for attempt n,
// followed by the label when the lock has one (see labelSep). A late
// rollback of attempt j can then only delete id.j, never the id.k that
// attempt k > j counted. So that leftovers of earlier attempts (a rollback
// that did not land yet) do not block the later ones, attempt k takes over a
// key that holds id.j with j < k; never the reverse, so that a late write of
// attempt j cannot replace the value attempt k counted.

// acquisition is one call of Lock or TryLock: one id, one or more attempts.
// It is shared by the call and the node goroutines its attempts started,
// which may answer after their attempt was decided.
type acquisition struct {
	c    *Client
	cfg  *config
	keys []string // as given
	t    *target
	// made counts the attempts so far. Only the calling goroutine uses it.
	made int
	// waiting holds the markers of the keys once the call waits for their
	// release, so that the holder's release is announced: an attempt sets
	// them first, in the same batch. An attempt that a release woke skips
	// them (woken): that release deleted the markers, and should it win,
	// its own Unlock wakes this Client's waiters without pub/sub, while
	// the other Clients' waiters, woken too, set theirs again. When such an
	// attempt fails, it marks the nodes that said no. Only the calling
	// goroutine uses these.
	waiting []string
	woken   bool

	mu sync.Mutex
	// busy counts, per node, this acquisition's requests in flight, of
	// every attempt. An attempt does not send to a busy node. Safety does
	// not need this, since every attempt has its own value; it bounds what
	// a hung node holds: one request per waiting Lock call, not one per
	// attempt until go-redis gives up. Guarded by mu.
	busy []int
}

// newAcquisition starts an acquisition of the target.
func (c *Client) newAcquisition(cfg *config, keys []string, t *target) *acquisition {
	return &acquisition{c: c, cfg: cfg, keys: keys, t: t, busy: make([]int, len(c.nodes))}
}

// errNoAcquire is the write-back vote of a node whose acquire did not say
// yes.
var errNoAcquire = errors.New("redlock: the node did not take the lock")

// attemptState is where an attempt stands.
type attemptState uint8

const (
	deciding attemptState = iota // its rounds are being gathered
	won                          // it is the lock
	lost                         // it failed and is rolled back
)

// attempt is one attempt of an acquisition: its acquire round, and with
// fencing its write-back round. Its fields after value are guarded by the
// acquisition's mu.
type attempt struct {
	a     *acquisition
	value token

	state attemptState
	lock  *Lock // once won
	// unlocking is set when Unlock (or a release at Close) begins.
	unlocking bool
	// inflight counts, per node, this attempt's acquire and write-back
	// requests that have not returned. The attempt's own release waits for
	// them, so that it never overtakes the write it undoes.
	inflight []int
	// mayHold marks the nodes that may hold the value: a request was sent
	// and did not come back with a plain no.
	mayHold []bool
	// deferred marks the nodes whose rollback was left to the late
	// handler: a request was still in flight when it was due.
	deferred []bool
	// parked holds, per node, Unlock's release that waits for a request of
	// the attempt still in flight there; the late handler sends it once the
	// node is idle. Made on first use.
	parked []*releaseJob
	// released marks the nodes a release of the value was sent to (or is
	// about to be): each node gets at most one.
	released []bool
	// idle, when a write-back waits for a node's acquire reply, is closed
	// (and cleared) when a request of the attempt returns. Made on first
	// use: most attempts have nobody waiting.
	idle chan struct{}
	// answered marks the nodes whose acquire reply has come, and acquired
	// those among them that said yes: the write-back to a node waits for
	// its acquire reply.
	answered []bool
	acquired []bool
}

// token is what one attempt writes on the nodes.
type token struct {
	// value is the plain string stored: id for attempt 0, else id.n; then,
	// with a label, labelSep and the label.
	value string
	id    string // the acquisition's random id
	n     int    // the attempt's number
	// The value boxed once for the commands' arguments, and its bytes for
	// those whose writes are counted.
	arg any
	raw []byte
}

// labelSep separates a value's attempt name from its label (see
// WithLabel). An id is a UUID, so the first space of a value is always the
// separator; the label itself may hold spaces. Without a label the value
// has no separator: the wire layout is the one it always was.
const labelSep = " "

// attemptToken names attempt n of the acquisition id, labelled with label
// unless it is empty.
func attemptToken(id string, n int, label string) token {
	tk := token{value: id, id: id, n: n}
	if n > 0 {
		tk.value = id + "." + strconv.Itoa(n)
	}
	if label != "" {
		tk.value += labelSep + label
	}
	tk.arg, tk.raw = tk.value, []byte(tk.value)
	return tk
}

// earlier reports whether v is the value of an earlier attempt of the same
// acquisition: a leftover that this attempt may take over. Its label plays
// no part: every attempt of an acquisition has the same one.
func (tk token) earlier(v string) bool {
	v, _, _ = strings.Cut(v, labelSep)
	if v == tk.id {
		return tk.n > 0
	}
	rest, ok := strings.CutPrefix(v, tk.id+".")
	if !ok {
		return false
	}
	n, err := strconv.Atoi(rest)
	return err == nil && n < tk.n
}

func (a *acquisition) newAttempt() *attempt {
	n := len(a.c.nodes)
	flags := make([]bool, 5*n)
	tk := attemptToken(a.t.id, a.made, a.cfg.label)
	if a.c.hooks.sharedValue {
		tk = attemptToken(a.t.id, 0, a.cfg.label)
	}
	a.made++
	return &attempt{
		a:        a,
		value:    tk,
		inflight: make([]int, n),
		mayHold:  flags[:n],
		deferred: flags[n : 2*n],
		released: flags[2*n : 3*n],
		answered: flags[3*n : 4*n],
		acquired: flags[4*n:],
	}
}

// attempt runs one attempt: the acquire round, and with fencing the
// write-back round. It returns the lock when it won, or the error otherwise.
func (a *acquisition) attempt(ctx context.Context) (*Lock, *QuorumError) {
	c, cfg, t := a.c, a.cfg, a.t
	at := a.newAttempt()
	ttl := cfg.acquireTTL()
	var ttlArg any = ttl.Milliseconds()
	// One allocation for the round's jobs: each node gets its own.
	jobs := make([]acquireJob, len(c.nodes))
	mark := a.waiting
	if a.woken {
		mark, a.woken = nil, false
	}
	o := c.fanout(ctx, &spec{
		op:      OpLock,
		quorum:  t.quorum,
		timeout: cfg.nodeTimeout,
		life:    cfg.releaseTimeout(),
		skip:    at.reserve(func(int) bool { return true }),
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			*j = acquireJob{leg: *lg, t: t, tk: &at.value, ttl: ttl, ttlArg: ttlArg, cfg: cfg, how: lg.n.acquireHow(t, at.value, &c.hooks), mark: mark, replicaWait: newReplicaWait(cfg, t)}
			lg.n.pipe.submit(j)
		},
	})
	at.gathered(o, true)
	if a.waiting != nil {
		// A node busy with an earlier attempt was not asked: mark the
		// keys there all the same, so that a release is announced by as
		// many nodes as hold it.
		for i, v := range o.votes {
			if v.Err == ErrInFlight {
				a.mark(i, ttlArg)
			}
		}
	}

	st := o.stats(OpLock, strings.Join(a.keys, ","), t.quorum)
	st.Drift = clockDrift(ttl, cfg.driftFactor)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)
	// The lock needs both: a quorum, and time left to use it.
	ok := o.yes >= t.quorum && st.Validity > 0 && o.ctxErr == nil
	reason := ""
	if o.yes >= t.quorum && o.ctxErr == nil && !ok {
		reason = "no validity left"
	}
	if ok && permitsRefused(o.votes) {
		// A node's holders count other permits: neither bound holds.
		ok, reason = false, "semaphore permits disagree"
	}
	// From here on, a reply of the acquire round goes to the late handler.
	// The ones that came in between are counted now, while the attempt is
	// still deciding, so that the fence write-back sees them; the yes
	// votes among them become held nodes when the attempt wins, and the
	// rollback releases them when it loses.
	for _, rp := range o.finish(at.lateAcquire) {
		at.lateAcquire(rp)
	}

	var fence int64
	if ok && t.fence != nil {
		// The fence is the largest counter the quorum returned. It is
		// handed out only once a quorum has raised its counters to it, so
		// that every later quorum, which must meet this one, counts past
		// it.
		for i, v := range st.Nodes {
			if v.Vote == VoteYes {
				fence = max(fence, o.vals[i])
			}
		}
		if !c.hooks.noFenceWriteBack {
			var ctxErr error
			if ok, ctxErr = at.writeFence(ctx, fence, o.start, ttl, &st); !ok {
				reason = "fence not written back to a quorum"
				if ctxErr != nil {
					o.ctxErr = ctxErr
				}
			}
		}
	}

	if ok {
		l := &Lock{
			c:        c,
			att:      at,
			cfg:      cfg,
			keys:     a.keys,
			t:        t,
			fence:    uint64(fence),
			acquired: o.start,
			done:     make(chan struct{}),
			until:    o.start.Add(ttl - st.Drift),
			ttl:      cfg.ttl,
			held:     make([]bool, len(c.nodes)),
			stats:    st,
		}
		if cfg.maxHold > 0 {
			l.holdEnd = o.start.Add(cfg.maxHold)
			l.capped = ttl < cfg.ttl
		}
		a.mu.Lock()
		// Every yes so far, in the round or after it: from now on the
		// late handler marks the later ones.
		copy(l.held, at.acquired)
		at.state, at.lock = won, l
		a.mu.Unlock()
		c.observeAttempt(st, nil)
		return l, nil
	}

	a.mu.Lock()
	at.state = lost
	a.mu.Unlock()
	if a.waiting != nil && mark == nil {
		// Woken, and beaten to the keys: mark them where the winner
		// holds them. A release before the marks land is not announced;
		// the retry delay covers that narrow window.
		for i, v := range st.Nodes {
			if v.Vote == VoteNo {
				a.mark(i, ttlArg)
			}
		}
	}
	at.rollback(ctx)
	qerr := &QuorumError{Stats: st, Reason: reason, sentinel: ErrNotAcquired, ctxErr: o.ctxErr}
	c.observeAttempt(st, qerr)
	return nil, qerr
}

// writeFence runs the fence write-back round of an attempt that reached its
// quorum, and says whether it reached a quorum too, within the validity. It
// updates st's elapsed time and validity to include the round. It goes to
// every node that may hold our value, including those whose acquire reply
// has not come yet: each of those waits for its reply, so that a quorum of
// fast nodes is not held up by a slow one, and a slow yes still counts. Its
// late replies go to the attempt's late handler, as the acquire round's do.
func (at *attempt) writeFence(ctx context.Context, fence int64, start time.Time, ttl time.Duration, st *Stats) (bool, error) {
	a := at.a
	c, t := a.c, a.t
	skip := make([]error, len(c.nodes))
	a.mu.Lock()
	for i := range skip {
		if !at.mayHold[i] {
			// Not asked, or it said no: nothing of ours to raise there.
			skip[i] = errNotAsked
			continue
		}
		// Only this attempt's acquire can keep the node busy: the attempt
		// did not send to a node busy with an earlier one.
		a.busy[i]++
		at.inflight[i]++
	}
	a.mu.Unlock()
	o := c.fanout(ctx, &spec{
		op:      OpLock,
		quorum:  t.quorum,
		timeout: a.cfg.nodeTimeout,
		life:    a.cfg.releaseTimeout(),
		skip:    func(i int) error { return skip[i] },
		start: func(ctx context.Context, lg *leg) {
			send := func(yes bool) {
				if !yes {
					// Not a yes: nothing to raise. A failure, not a no,
					// so that a failed acquire is still rolled back.
					lg.deliver(0, errNoAcquire)
					return
				}
				lg.n.pipe.submit(&fenceJob{leg: *lg, t: t, value: at.value.value, fence: fence, replicaWait: newReplicaWait(a.cfg, t)})
			}
			if answered, yes := at.acquireReply(lg.n.index); answered {
				send(yes)
				return
			}
			lg.wait(ctx, func(ctx context.Context) {
				yes := at.awaitAcquired(ctx, lg.n.index)
				if err := ctx.Err(); err != nil && !yes {
					lg.deliver(0, err)
					return
				}
				send(yes)
			})
		},
	})
	at.gathered(o, false)
	for _, rp := range o.finish(at.late) {
		at.late(rp)
	}
	st.Elapsed = o.end.Sub(start)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)
	return o.yes >= t.quorum && st.Validity > 0 && o.ctxErr == nil, o.ctxErr
}

// acquireReply reports whether node i's acquire reply has come, and
// whether it was a yes.
func (at *attempt) acquireReply(i int) (answered, yes bool) {
	at.a.mu.Lock()
	defer at.a.mu.Unlock()
	return at.answered[i], at.acquired[i]
}

// awaitAcquired waits for node i's acquire reply, and reports whether it
// was a yes. It reports false when ctx ends first.
func (at *attempt) awaitAcquired(ctx context.Context, i int) bool {
	a := at.a
	for {
		a.mu.Lock()
		answered, yes := at.answered[i], at.acquired[i]
		if at.idle == nil {
			at.idle = make(chan struct{})
		}
		idle := at.idle
		a.mu.Unlock()
		if answered {
			return yes
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return false
		}
	}
}

// reserve marks busy the chosen nodes that have no request of this
// acquisition in flight, and returns the skip function of a spec: it keeps
// the round off the other nodes.
func (at *attempt) reserve(on func(i int) bool) func(i int) error {
	a := at.a
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
			at.inflight[i]++
			at.mayHold[i] = true
		}
	}
	a.mu.Unlock()
	return func(i int) error { return skip[i] }
}

// gathered frees the nodes whose replies a round of the attempt gathered in
// time, and notes the ones that said a plain no; acquire is set for the
// acquire round. The others are freed by the late handler when their reply
// comes.
func (at *attempt) gathered(o *outcome, acquire bool) {
	a := at.a
	a.mu.Lock()
	for i, got := range o.got {
		if !got {
			continue
		}
		a.busy[i]--
		at.inflight[i]--
		if o.votes[i].Vote == VoteNo {
			at.mayHold[i] = false
		}
		if acquire {
			at.answered[i], at.acquired[i] = true, o.votes[i].Vote == VoteYes
		}
	}
	at.wakeLocked()
	a.mu.Unlock()
}

// wakeLocked wakes whoever waits for a node of the attempt to go idle.
// a.mu must be held.
func (at *attempt) wakeLocked() {
	if at.idle != nil {
		close(at.idle)
		at.idle = nil
	}
}

// late handles a reply of the attempt's acquire or write-back round that
// came after the round was gathered.
//
// While the attempt is being decided or has won, it only counts the reply,
// and remembers a yes of a won attempt for diagnostics. Once the node has
// no request of the attempt left in flight, a release that was waiting for
// it goes out: the rollback of a lost attempt, or the release that Unlock
// parked there. A late yes, or an error that may hide one,
// is thus never left behind, and a release is never sent ahead of the write
// it undoes.
func (at *attempt) late(rp reply) { at.handleLate(rp, false) }

// lateAcquire is late for the acquire round's replies.
func (at *attempt) lateAcquire(rp reply) { at.handleLate(rp, true) }

func (at *attempt) handleLate(rp reply, acquire bool) {
	a := at.a
	i := rp.i
	a.mu.Lock()
	a.busy[i]--
	at.inflight[i]--
	if acquire {
		at.answered[i], at.acquired[i] = true, rp.yes()
	}
	at.wakeLocked()
	switch {
	case rp.err == nil && rp.val == 0:
		at.mayHold[i] = false // a plain no: our value is not there
	case acquire:
		at.mayHold[i] = true // a yes, or an error that may hide one
	}
	l := at.lock
	markHeld := at.state == won && !at.unlocking && rp.yes()
	release := at.claimLocked(i)
	var parked *releaseJob
	if at.inflight[i] == 0 && at.parked != nil {
		parked, at.parked[i] = at.parked[i], nil
	}
	a.mu.Unlock()
	if markHeld {
		l.markHeld(i)
	}
	if release {
		at.rollbackOn(i)
	}
	if parked != nil {
		// The node is idle now: Unlock's release goes out, with the time
		// it would have had from here had it been sent now.
		parked.end = later(parked.end, time.Now().Add(a.cfg.releaseTimeout()))
		parked.n.pipe.submit(parked)
	}
}

// claimLocked decides whether the late handler must roll back the lost
// attempt's value on node i now, and claims the node if so. a.mu must be
// held.
func (at *attempt) claimLocked(i int) bool {
	if at.inflight[i] > 0 || !at.deferred[i] || at.released[i] || at.state != lost || !at.mayHold[i] {
		return false
	}
	at.released[i] = true
	at.a.busy[i]++
	return true
}

// rollbackOn releases the lost attempt's value on one node, without
// announcing it. The request is bounded as Unlock's are, and frees the node
// when it returns.
func (at *attempt) rollbackOn(i int) {
	a := at.a
	n := a.c.nodes[i]
	n.pipe.submit(&releaseJob{
		leg:   leg{c: a.c, n: n, end: time.Now().Add(a.cfg.releaseTimeout())},
		t:     a.t,
		value: &at.value,
		acq:   a,
	})
}

// rollback tells every node that may hold the value of a lost attempt to
// release it, and waits, bounded by the node timeout, until they answered:
// the nodes that said yes, and those that failed, since the write may have
// landed before the error. A node that said no holds another value, so
// nothing of ours is there. A node with a request of the attempt still in
// flight is left to the late handler, which releases it once the request
// returns: a release sent now could overtake it. The round uses a context
// detached from the caller's cancellation, so that a cancelled caller still
// cleans up.
func (at *attempt) rollback(ctx context.Context) {
	a := at.a
	on := make([]bool, len(a.busy))
	a.mu.Lock()
	for i := range on {
		switch {
		case !at.mayHold[i] || at.released[i]:
		case at.inflight[i] > 0:
			at.deferred[i] = true
		default:
			on[i] = true
			at.released[i] = true
		}
	}
	a.mu.Unlock()
	o := a.c.fanout(context.WithoutCancel(ctx), &spec{
		op:      opRollback,
		timeout: a.cfg.nodeTimeout,
		life:    a.cfg.releaseTimeout(),
		waitAll: true,
		skip:    a.reserveRelease(on),
		start: func(_ context.Context, lg *leg) {
			lg.n.pipe.submit(&releaseJob{leg: *lg, t: a.t, value: &at.value})
		},
	})
	a.freeRound(o)
	// A rollback that answers late only has to free its node.
	for _, rp := range o.finish(a.freeLate) {
		a.freeLate(rp)
	}
}

// reserveRelease marks busy the chosen nodes for a release round, and
// returns the skip function of its spec. A release goes out even to a node
// busy with another attempt: it deletes only its own value.
func (a *acquisition) reserveRelease(on []bool) func(i int) error {
	a.mu.Lock()
	for i, ok := range on {
		if ok {
			a.busy[i]++
		}
	}
	a.mu.Unlock()
	return func(i int) error {
		if !on[i] {
			return errNotAsked
		}
		return nil
	}
}

// freeRound frees the nodes of a release round whose replies were gathered
// in time.
func (a *acquisition) freeRound(o *outcome) {
	a.mu.Lock()
	for i, got := range o.got {
		if got {
			a.busy[i]--
		}
	}
	a.mu.Unlock()
}

// freeLate frees the node of a release reply that came after its round.
func (a *acquisition) freeLate(rp reply) {
	a.mu.Lock()
	a.busy[rp.i]--
	a.mu.Unlock()
}

// beginUnlock marks the won attempt as being unlocked: from now on, a node
// whose requests all returned is released by whoever finds it so first, the
// Unlock round or the late handler.
func (at *attempt) beginUnlock() {
	at.a.mu.Lock()
	at.unlocking = true
	at.a.mu.Unlock()
}

// releaseClaim is what claimRelease found.
type releaseClaim uint8

const (
	releaseNow    releaseClaim = iota // the node is idle: send it
	releaseParked                     // parked, until the node is idle
	releaseTaken                      // another release claimed the node
)

// claimRelease claims node i's release for Unlock's job j. When the node
// has an acquire or write-back request of the attempt in flight, j is
// parked, and the late handler sends it once the request returns, so that
// it cannot overtake the write it undoes; nobody waits for it meanwhile.
func (at *attempt) claimRelease(i int, j *releaseJob) releaseClaim {
	a := at.a
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case at.released[i]:
		return releaseTaken
	case at.inflight[i] > 0:
		if at.parked == nil {
			at.parked = make([]*releaseJob, len(at.inflight))
		}
		at.released[i] = true
		at.parked[i] = j
		return releaseParked
	}
	at.released[i] = true
	return releaseNow
}

// mark sets the waiting markers of the keys on node i, without waiting for
// the reply.
func (a *acquisition) mark(i int, ttlArg any) {
	a.c.nodes[i].pipe.submit(&markJob{t: a.t, keys: a.waiting, ttlArg: ttlArg, end: time.Now().Add(a.cfg.releaseTimeout())})
}

// unmark deletes, on every node, the writers' waiting markers of the keys
// that a writer which gave up had set, without waiting for the replies. A
// reader's marker ("r") is left alone. Another writer still waiting sets
// its marker again with its next attempt; meanwhile a reader may get in,
// which costs the preference, never safety.
func (a *acquisition) unmark() {
	for _, n := range a.c.nodes {
		n.pipe.submit(&unmarkJob{keys: a.waiting, end: time.Now().Add(a.cfg.releaseTimeout())})
	}
}

// wait marks the acquisition as waiting for its keys' release: from the
// next attempt on, each attempt marks the keys first.
func (a *acquisition) wait() {
	a.waiting = a.t.waiting
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
			Stats:    Stats{Op: OpLock, Key: strings.Join(a.keys, ","), Quorum: a.t.quorum},
			Reason:   reason,
			sentinel: ErrNotAcquired,
			ctxErr:   ctxErr,
		}
	}
	last.ctxErr = ctxErr
	if !errors.Is(ctxErr, ErrClosed) {
		a.nameWrongTypes(&last.Stats)
	}
	return last
}
