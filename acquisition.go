package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// ttl is the TTL every attempt asks for, which the validity counts
	// from, and ttlArg what the nodes keep the keys for: ttl plus the
	// lock-delay (config.nodeTTL), in milliseconds, boxed once for every
	// request.
	ttl    time.Duration
	ttlArg any
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
	// decided is the error of the last attempt whose votes decided it, and
	// outaged is set when they showed too few nodes answering: an attempt
	// that the caller's ctx cuts short is judged by them (see judge), and
	// the call reports them (see abandon). Only the calling goroutine uses
	// these.
	decided *QuorumError
	outaged bool
	// fair is a fair call's place in its key's queue (see fair.go), and
	// nil for the other flavours. Only the calling goroutine uses it.
	fair *fairState

	mu sync.Mutex
	// busy counts, per node, this acquisition's requests in flight, of
	// every attempt. An attempt does not send to a busy node. Safety does
	// not need this, since every attempt has its own value; it bounds what
	// a hung node holds: one request per waiting Lock call, not one per
	// attempt until go-redis gives up. Guarded by mu.
	busy []int

	// mem backs busy when there are few enough nodes.
	mem [inlineNodes]int
}

// newAcquisition starts an acquisition of the target.
func (c *Client) newAcquisition(cfg *config, keys []string, t *target) *acquisition {
	a := &acquisition{c: c, cfg: cfg, keys: keys, t: t, ttl: cfg.acquireTTL()}
	if cfg.lockDelay > 0 || cfg.minHold > 0 {
		// The keys live the lock-delay past the TTL, and a release before
		// the end of the minimum hold keeps them up to minHold after the
		// acquisition: the node guard's max TTL must cover both before
		// the first request goes out (config raised it for the TTL).
		c.raiseMaxTTL(max(cfg.nodeTTL(cfg.ttl), cfg.minHold))
	}
	if ms := cfg.nodeTTL(a.ttl).Milliseconds(); c.ttlArg == ms {
		a.ttlArg = c.ttlArg // the usual TTL, boxed once for the Client
	} else {
		a.ttlArg = ms
	}
	if t.fair != nil {
		a.fair = &fairState{}
	}
	if n := len(c.nodes); n <= inlineNodes {
		a.busy = a.mem[:n]
	} else {
		a.busy = make([]int, n)
	}
	return a
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
// fencing its write-back round. Its fields from state on are guarded by the
// acquisition's mu.
type attempt struct {
	a     *acquisition
	value token
	// skipped marks the nodes that the attempt's current round does not
	// send to: each round sets it before it starts, on the calling
	// goroutine, which alone uses it.
	skipped []bool
	// fenceFailed holds, once the fence write-back failed, the nodes where
	// it failed and why. Only the calling goroutine uses it.
	fenceFailed map[int]error
	// marks is set when the attempt's acquire requests set the waiting
	// markers of the keys (t.waiting) first. It is set before they go out.
	marks bool

	state attemptState
	// unlocking is set when Unlock (or a release at Close) begins.
	unlocking bool
	lock      *Lock // once won
	// inflight counts, per node, this attempt's acquire and write-back
	// requests that have not returned. The attempt's own release waits for
	// them, so that it never overtakes the write it undoes.
	inflight []int
	// nodes is what the attempt knows of each node.
	nodes []attemptNode
	// parked holds, per node, Unlock's release that waits for a request of
	// the attempt still in flight there; the late handler sends it once the
	// node is idle. Made on first use when there are more than inlineNodes.
	parked []*releaseJob
	// idle, when a write-back waits for a node's acquire reply, is closed
	// (and cleared) when a request of the attempt returns. Made on first
	// use: most attempts have nobody waiting.
	idle chan struct{}

	// mem backs the per-node slices when there are few enough nodes, so
	// that an attempt costs one allocation for them all.
	mem struct {
		inflight [inlineNodes]int
		parked   [inlineNodes]*releaseJob
		nodes    [inlineNodes]attemptNode
		skipped  [inlineNodes]bool
	}
}

// attemptNode is what an attempt knows of one node.
type attemptNode struct {
	// mayHold is set when the node may hold the value: a request was sent
	// and did not come back with a plain no.
	mayHold bool
	// deferred is set when the node's rollback was left to the late
	// handler: a request was still in flight when it was due.
	deferred bool
	// released is set when a release of the value was sent to the node
	// (or is about to be): each node gets at most one.
	released bool
	// answered is set when the node's acquire reply has come, and acquired
	// when it said yes: the write-back to a node waits for its acquire
	// reply.
	answered, acquired bool
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
	// ticket is a fair call's ticket, or "0" before it has one; "" for
	// the other flavours (see fair.go).
	ticket string
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
	at := &attempt{a: a, value: attemptToken(a.t.id, a.made, a.cfg.label)}
	if a.c.hooks.sharedValue {
		at.value = attemptToken(a.t.id, 0, a.cfg.label)
	}
	if a.fair != nil {
		a.stale()
		at.value.ticket = a.fair.ticketArg()
		a.fair.sent = a.fair.sent || a.fair.ticket != ""
	}
	a.made++
	if n <= inlineNodes {
		at.inflight, at.parked = at.mem.inflight[:n], at.mem.parked[:n]
		at.nodes, at.skipped = at.mem.nodes[:n], at.mem.skipped[:n]
	} else {
		at.inflight, at.nodes, at.skipped = make([]int, n), make([]attemptNode, n), make([]bool, n)
	}
	return at
}

// attempt runs one attempt: the acquire round, and with fencing the
// write-back round. It returns the lock when it won, or the error otherwise.
func (a *acquisition) attempt(ctx context.Context) (*Lock, *QuorumError) {
	c, cfg, t := a.c, a.cfg, a.t
	at := a.newAttempt()
	ttl, ttlArg := a.ttl, a.ttlArg
	at.marks = a.waiting != nil && !a.woken
	a.woken = false
	// One allocation for the round's jobs: each node gets its own.
	jobs := make([]acquireJob, len(c.nodes))
	at.reserve()
	o := c.fanout(ctx, &spec{
		op:      OpLock,
		quorum:  t.quorum,
		timeout: cfg.nodeTimeout,
		life:    cfg.releaseTimeout(),
		skip:    func(i int) error { return at.skip(i, ErrInFlight) },
		waitNo:  a.fair != nil,
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.sent.at = at
			j.how = lg.n.acquireHow(t, at.value, &c.hooks)
			j.replicaWait = newReplicaWait(cfg, t)
			lg.n.pipe.Submit(j)
		},
	})
	at.gathered(o, true)
	switch {
	case a.fair == nil:
	case a.fair.ticket == "":
		// The first attempt: a refusal by a quorum drew the ticket.
		if m, ok := counters(o, t.quorum); ok && o.yes < t.quorum {
			a.setTicket(m)
		}
	case a.fair.read(o, t.quorum):
		a.fair.moved = true
	}
	if a.waiting != nil {
		// A node busy with an earlier attempt was not asked: mark the
		// keys there all the same, so that a release is announced by as
		// many nodes as hold it.
		for i, v := range o.votes {
			if errors.Is(v.err, ErrInFlight) {
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
	if ok && o.anyErr(ErrPermitsMismatch) {
		// A node's holders count other permits: neither bound holds.
		ok, reason = false, "semaphore permits disagree"
	}
	// From here on, a reply of the acquire round goes to the late handler.
	// The ones that came in between are counted now, while the attempt is
	// still deciding, so that the fence write-back sees them; the yes
	// votes among them become held nodes when the attempt wins, and the
	// rollback releases them when it loses.
	late := (*acquireLate)(at)
	for _, rp := range o.finish(late) {
		late.lateReply(rp)
	}

	var fence int64
	if ok && t.fence != nil {
		// The fence is the largest counter the quorum returned. It is
		// handed out only once a quorum has raised its counters to it, so
		// that every later quorum, which must meet this one, counts past
		// it.
		for i, v := range o.votes {
			if v.v == VoteYes {
				fence = max(fence, o.vals[i])
			}
		}
		if !c.hooks.noFenceWriteBack {
			var ctxErr error
			if ok, ctxErr = at.writeFence(ctx, fence, o.start(), ttl, &st); !ok {
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
			t:        t,
			fence:    uint64(fence),
			acquired: o.start(),
			until:    o.start().Add(ttl - st.Drift),
			ttl:      cfg.ttl,
			held:     make([]bool, len(c.nodes)),
			stats:    st,
			statsOf:  o,
		}
		if cfg.maxHold > 0 {
			l.capped = ttl < cfg.ttl
		}
		a.mu.Lock()
		// Every yes so far, in the round or after it: from now on the
		// late handler marks the later ones.
		for i, nd := range at.nodes {
			l.held[i] = nd.acquired
		}
		at.state, at.lock = won, l
		a.mu.Unlock()
		if c.observer != nil {
			c.observeAttempt(o.withNodes(c, st), nil)
		}
		return l, nil
	}

	a.mu.Lock()
	at.state = lost
	a.mu.Unlock()
	if a.waiting != nil && !at.marks {
		// Woken, and beaten to the keys: mark them where the winner
		// holds them. A release before the marks land is not announced;
		// the retry delay covers that narrow window.
		for i, v := range o.votes {
			if v.v == VoteNo {
				a.mark(i, ttlArg)
			}
		}
	}
	at.rollback(ctx)
	qerr := &QuorumError{Stats: o.withNodes(c, st), Reason: reason, sentinel: ErrNotAcquired, ctxErr: o.ctxErr, permits: t.fl.permits}
	// A node whose yes the fence write-back could not follow up failed
	// the attempt: its failure says why, and counts for the verdict.
	for i, err := range at.fenceFailed {
		if v := &qerr.Stats.Nodes[i]; v.Vote == VoteYes {
			v.Vote, v.Err = VoteFailed, fmt.Errorf("fence write-back: %w", err)
			qerr.Stats.Yes--
			qerr.Stats.Failed++
		}
	}
	qerr.unavailable = a.judge(qerr)
	st = qerr.Stats
	c.observeAttempt(st, qerr)
	return nil, qerr
}

// judge reports whether a failed attempt is an outage (see outage). An
// attempt that the caller's ctx cut short, whose votes decided nothing, is
// judged as the call's last attempt that they did decide: its nodes that had
// not answered yet may only be slower than the ctx. A call with no such
// attempt is judged by the attempt cut short, whose silent nodes had the
// whole wait to answer.
func (a *acquisition) judge(qerr *QuorumError) bool {
	if decided(&qerr.Stats) {
		a.decided, a.outaged = qerr, outage(&qerr.Stats)
		return a.outaged
	}
	if contended(&qerr.Stats) {
		return false
	}
	if a.decided != nil {
		return a.outaged
	}
	return outage(&qerr.Stats)
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
	a.mu.Lock()
	for i := range at.skipped {
		at.skipped[i] = !at.nodes[i].mayHold
		if at.skipped[i] {
			// Not asked, or it said no: nothing of ours to raise there.
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
		skip:    func(i int) error { return at.skip(i, errNotAsked) },
		start: func(ctx context.Context, lg *leg) {
			send := func(yes bool) {
				if !yes {
					// Not a yes: nothing to raise. A failure, not a no,
					// so that a failed acquire is still rolled back.
					lg.deliver(0, errNoAcquire)
					return
				}
				lg.n.pipe.Submit(&fenceJob{leg: *lg, t: t, value: at.value.value, fence: fence, replicaWait: newReplicaWait(a.cfg, t)})
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
	for i, v := range o.votes {
		if v.v == VoteFailed && v.err != errNoAcquire && v.err != errNotAsked {
			if at.fenceFailed == nil {
				at.fenceFailed = make(map[int]error)
			}
			at.fenceFailed[i] = v.err
		}
	}
	for _, rp := range o.finish(at) {
		at.lateReply(rp)
	}
	st.Elapsed = o.ended().Sub(start)
	st.Validity = validity(ttl, st.Elapsed, st.Drift)
	return o.yes >= t.quorum && st.Validity > 0 && o.ctxErr == nil, o.ctxErr
}

// acquireReply reports whether node i's acquire reply has come, and
// whether it was a yes.
func (at *attempt) acquireReply(i int) (answered, yes bool) {
	at.a.mu.Lock()
	defer at.a.mu.Unlock()
	return at.nodes[i].answered, at.nodes[i].acquired
}

// awaitAcquired waits for node i's acquire reply, and reports whether it
// was a yes. It reports false when ctx ends first.
func (at *attempt) awaitAcquired(ctx context.Context, i int) bool {
	a := at.a
	for {
		a.mu.Lock()
		answered, yes := at.nodes[i].answered, at.nodes[i].acquired
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

// reserve marks busy the nodes that have no request of this acquisition in
// flight, for the attempt's acquire round, and marks the others skipped: a
// node busy with an earlier attempt is not asked.
func (at *attempt) reserve() {
	a := at.a
	a.mu.Lock()
	for i := range a.busy {
		at.skipped[i] = a.busy[i] > 0
		if at.skipped[i] {
			continue
		}
		a.busy[i]++
		at.inflight[i]++
		at.nodes[i].mayHold = true
	}
	a.mu.Unlock()
}

// skip is the skip function of the attempt's current round: why, for the
// nodes it skips.
func (at *attempt) skip(i int, why error) error {
	if at.skipped[i] {
		return why
	}
	return nil
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
		if o.votes[i].v == VoteNo {
			at.nodes[i].mayHold = false
		}
		if acquire {
			at.nodes[i].answered, at.nodes[i].acquired = true, o.votes[i].v == VoteYes
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

// lateReply handles a reply of the attempt's write-back round that came
// after the round was gathered; acquireLate does the same for its acquire
// round.
//
// While the attempt is being decided or has won, it only counts the reply,
// and remembers a yes of a won attempt for diagnostics. Once the node has
// no request of the attempt left in flight, a release that was waiting for
// it goes out: the rollback of a lost attempt, or the release that Unlock
// parked there. A late yes, or an error that may hide one,
// is thus never left behind, and a release is never sent ahead of the write
// it undoes.
func (at *attempt) lateReply(rp reply) { at.handleLate(rp, false) }

// acquireLate is the late handler of an attempt's acquire round.
type acquireLate attempt

func (h *acquireLate) lateReply(rp reply) { (*attempt)(h).handleLate(rp, true) }

func (at *attempt) handleLate(rp reply, acquire bool) {
	a := at.a
	i := rp.i
	// A node that refuses connections is often too slow to say so within
	// the node timeout (go-redis dials again and again): its failure comes
	// here, and explains the timeouts of the next attempts.
	a.c.faults.seen(rp)
	a.mu.Lock()
	a.busy[i]--
	at.inflight[i]--
	if acquire {
		at.nodes[i].answered, at.nodes[i].acquired = true, rp.yes()
	}
	at.wakeLocked()
	switch {
	case rp.err == nil && rp.val <= 0:
		// A plain no, or a fair lock's place in the queue: our value is
		// not there.
		at.nodes[i].mayHold = false
	case acquire:
		at.nodes[i].mayHold = true // a yes, or an error that may hide one
	}
	l := at.lock
	markHeld := at.state == won && !at.unlocking && rp.yes()
	release := at.claimLocked(i)
	parked := at.unparkLocked(i)
	a.mu.Unlock()
	if markHeld {
		l.markHeld(i)
	}
	if release {
		at.rollbackOn(i)
	}
	if parked != nil {
		at.sendParked(parked)
	}
}

// unparkLocked takes Unlock's release parked on node i, once the node has
// no request of the attempt left in flight; nil otherwise. a.mu must be
// held.
func (at *attempt) unparkLocked(i int) *releaseJob {
	var parked *releaseJob
	if at.inflight[i] == 0 && at.parked != nil {
		parked, at.parked[i] = at.parked[i], nil
	}
	return parked
}

// sendParked sends Unlock's release that unparkLocked took: the node is
// idle now, so it goes out, with the time it would have had from here had
// it been sent now. Nothing else reads the job until it is submitted.
func (at *attempt) sendParked(parked *releaseJob) {
	if due := time.Now().Add(at.a.cfg.releaseTimeout()); due.After(parked.sendBy()) {
		parked.extra = due.Sub(parked.end)
	}
	parked.n.pipe.Submit(parked)
}

// claimLocked decides whether the late handler must roll back the lost
// attempt's value on node i now, and claims the node if so. a.mu must be
// held.
func (at *attempt) claimLocked(i int) bool {
	if at.inflight[i] > 0 || !at.nodes[i].deferred || at.nodes[i].released || at.state != lost || !at.nodes[i].mayHold {
		return false
	}
	at.nodes[i].released = true
	at.a.busy[i]++
	return true
}

// rollbackOn releases the lost attempt's value on one node, without
// announcing it. The request is bounded as Unlock's are, and frees the node
// when it returns.
func (at *attempt) rollbackOn(i int) {
	a := at.a
	n := a.c.nodes[i]
	// The job has no round to report to: this one, never fanned out, only
	// gives it its deadline.
	p := &struct {
		r round
		j releaseJob
	}{r: round{end: time.Now().Add(a.cfg.releaseTimeout())}}
	p.j.leg, p.j.free = leg{round: &p.r, n: n}, true
	p.j.sent.at = at
	n.pipe.Submit(&p.j)
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
	a.mu.Lock()
	for i := range at.skipped {
		at.skipped[i] = true
		switch {
		case !at.nodes[i].mayHold || at.nodes[i].released:
		case at.inflight[i] > 0:
			at.nodes[i].deferred = true
		default:
			// A release goes out even to a node busy with another
			// attempt: it deletes only its own value.
			at.skipped[i] = false
			at.nodes[i].released = true
			a.busy[i]++
		}
	}
	a.mu.Unlock()
	jobs := make([]releaseJob, len(a.c.nodes))
	o := a.c.fanout(context.WithoutCancel(ctx), &spec{
		op:      opRollback,
		timeout: a.cfg.nodeTimeout,
		life:    a.cfg.releaseTimeout(),
		waitAll: true,
		skip:    func(i int) error { return at.skip(i, errNotAsked) },
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.sent.at = at
			lg.n.pipe.Submit(j)
		},
	})
	a.freeRound(o)
	// A rollback that answers late only has to free its node.
	for _, rp := range o.finish(a) {
		a.lateReply(rp)
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

// lateReply frees the node of a rollback reply that came after its round.
func (a *acquisition) lateReply(rp reply) {
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
	case at.nodes[i].released:
		return releaseTaken
	case at.inflight[i] > 0:
		if at.parked == nil {
			at.parked = make([]*releaseJob, len(at.inflight))
		}
		at.nodes[i].released = true
		at.parked[i] = j
		return releaseParked
	}
	at.nodes[i].released = true
	return releaseNow
}

// mark sets the waiting markers of the keys on node i, without waiting for
// the reply.
func (a *acquisition) mark(i int, ttlArg any) {
	a.c.nodes[i].pipe.Submit(&markJob{t: a.t, keys: a.waiting, ttlArg: ttlArg, end: time.Now().Add(a.cfg.releaseTimeout())})
}

// unmark deletes, on every node, the writers' waiting markers of the keys
// that a writer which gave up had set, without waiting for the replies. A
// reader's marker ("r") is left alone. Another writer still waiting sets
// its marker again with its next attempt; meanwhile a reader may get in,
// which costs the preference, never safety.
func (a *acquisition) unmark() {
	for _, n := range a.c.nodes {
		n.pipe.Submit(&unmarkJob{keys: a.waiting, end: time.Now().Add(a.cfg.releaseTimeout())})
	}
}

// wait marks the acquisition as waiting for its keys' release: from the
// next attempt on, each attempt marks the keys first.
func (a *acquisition) wait() {
	a.waiting = a.t.waiting
}

// abandon ends an acquisition that will not win: it returns the error, with
// the ctx error when there is one: the error of the last attempt, or of the
// last attempt whose votes decided it when the ctx cut the last one short.
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
	if a.decided != nil && !decided(&last.Stats) && !contended(&last.Stats) {
		// The ctx cut the last attempt short: its nodes may only not
		// have answered yet. The attempt that the votes decided says
		// which nodes failed and why, or who holds the key.
		last = a.decided
	}
	// The Observer was given the attempt's error, and its Stats share the
	// votes: what follows writes on copies.
	cp := *last
	cp.Stats.Nodes = slices.Clone(last.Stats.Nodes)
	last = &cp
	last.ctxErr = ctxErr
	if !errors.Is(ctxErr, ErrClosed) {
		a.nameWrongTypes(&last.Stats)
	}
	return last
}
