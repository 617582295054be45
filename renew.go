package redlock

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// renewer keeps a Client's auto-extended locks alive. One goroutine per
// Client, running while it holds such locks, waits for the earliest renewal
// that is due, takes every lock due soon after it too, and renews the whole
// batch with one pipeline per node. 10,000 held locks thus cost a few round
// trips per node per tick, not 10,000 goroutines and round trips.
type renewer struct {
	c *Client

	mu      sync.Mutex
	queue   renewQueue    // guarded by mu; by due time
	wake    chan struct{} // buffered 1: the head of the queue changed
	running bool          // guarded by mu; the loop goroutine was started

	// notify reports the renewals and every lock's loss to the logger and
	// the Observer, off this loop: a slow callback here would hold up the
	// renewals of every other lock.
	notify notifier
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, wake: make(chan struct{}, 1), notify: notifier{c: c, idle: make(chan struct{}, 1)}}
}

// renewal is a lock's place in the queue.
type renewal struct {
	l     *Lock
	due   time.Time
	index int // in the heap; -1 once removed
}

type renewQueue []*renewal

// Len, Less, Swap, Push and Pop implement heap.Interface, earliest due first.
func (q renewQueue) Len() int { return len(q) }

// Less orders by due time.
func (q renewQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

// Swap swaps two renewals and keeps their indexes right.
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

// Push adds a renewal.
func (q *renewQueue) Push(x any) {
	r := x.(*renewal)
	r.index = len(*q)
	*q = append(*q, r)
}

// Pop removes the last renewal.
func (q *renewQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	r.index = -1
	*q = old[:len(old)-1]
	return r
}

// add schedules l's next renewal at due. It is called from within a call of
// the Client, so the Client's WaitGroup is above zero when the loop starts.
func (r *renewer) add(l *Lock, due time.Time) {
	r.mu.Lock()
	if l.renewal != nil && l.renewal.index >= 0 {
		l.renewal.due = due
		heap.Fix(&r.queue, l.renewal.index)
	} else {
		l.renewal = &renewal{l: l, due: due}
		heap.Push(&r.queue, l.renewal)
	}
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		r.c.wg.Add(1)
		go r.loop()
	}
	r.poke()
}

// remove stops l's renewals. A batch already in flight may still extend it
// once; its result is then ignored. The loop is woken, so that it ends when
// no lock is left to renew.
func (r *renewer) remove(l *Lock) {
	r.mu.Lock()
	if l.renewal != nil && l.renewal.index >= 0 {
		heap.Remove(&r.queue, l.renewal.index)
	}
	r.mu.Unlock()
	r.poke()
}

func (r *renewer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop runs while there are locks to renew, and until the Client is closed:
// a Client that holds no auto-extended lock runs no goroutine.
func (r *renewer) loop() {
	defer r.c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, wait := r.due()
		if wait < 0 {
			return // nothing left: add starts a new loop
		}
		if len(batch) > 0 {
			r.renew(batch)
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-r.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-r.c.done:
			return
		}
	}
}

// due takes the locks whose renewal is due, with those due within a tenth of
// a renewal interval after them, so that locks taken at nearly the same time
// share a batch. When none is due it returns how long to wait; when the
// queue is empty, it marks the loop stopped and returns a negative wait.
func (r *renewer) due() ([]*Lock, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		r.running = false
		return nil, -1
	}
	now := r.c.now()
	head := r.queue[0]
	if wait := head.due.Sub(now); wait > 0 {
		return nil, wait
	}
	horizon := now.Add(head.l.cfg.ttl / 30)
	var batch []*Lock
	for len(r.queue) > 0 && !r.queue[0].due.After(horizon) {
		rn := heap.Pop(&r.queue).(*renewal)
		batch = append(batch, rn.l)
	}
	return batch, 0
}

// renew extends a batch of locks on every node, in one round, and settles
// each lock.
func (r *renewer) renew(batch []*Lock) {
	c := r.c
	start := c.now()
	timeout := time.Duration(0)
	var live []*Lock
	var liveTTL []time.Duration
	for _, l := range batch {
		if !start.Before(l.Until()) {
			// Past Until (the process was paused, or the machine starved
			// it): the lock is over, and a renewal must not bring the keys
			// back to life.
			l.expire()
			continue
		}
		ttl, ok := l.extendTTL(start)
		if !ok {
			// The max hold leaves no room: let the lock run out at Until.
			continue
		}
		live = append(live, l)
		liveTTL = append(liveTTL, ttl)
		timeout = max(timeout, l.cfg.nodeTimeout)
	}
	if len(live) == 0 {
		return
	}
	// A pipeline of many scripts takes longer than one command: allow a
	// generous 50µs a lock on top of the node timeout (a loaded 2-core
	// machine was seen at 15-30µs). A batch that times out fails all its
	// locks at once, and their retries join the next batch, so a deadline
	// that is too tight feeds on itself. Waiting past the earliest validity
	// of the batch is pointless, but the node timeout is always granted.
	timeout += time.Duration(len(live)) * 50 * time.Microsecond
	for _, l := range live {
		if left := l.Until().Sub(start); left < timeout {
			timeout = max(left, minTimeout(live))
		}
	}

	// Each node's job answers 1 once it holds the votes of every lock of
	// the batch; a node's votes are read only when its answer was
	// gathered, and so written before it.
	jobs := make([]renewJob, len(c.nodes))
	o := c.fanout(context.Background(), &spec{
		op:      OpExtend,
		quorum:  c.quorum,
		timeout: timeout,
		// Every node, stalled or not, up to the timeout: a node that
		// once answered late may answer this batch in time, and its yes
		// may be the quorum's (TestRenewalCountsAStalledButAnsweringNode).
		waitAll:     true,
		waitStalled: true,
		stop:        c.done,
		leg:         func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.locks, j.ttls = live, liveTTL
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)
	if o.ctxErr != nil {
		return // Close: the locks end with the Client
	}
	yes := make([]int, len(live))
	no := make([]int, len(live))
	for i := range c.nodes {
		if !o.got[i] {
			continue
		}
		for k, v := range jobs[i].votes {
			switch v {
			case VoteYes:
				yes[k]++
			case VoteNo:
				no[k]++
			}
		}
	}
	end := o.ended()
	for k, l := range live {
		l.settleRenewal(extension{start: start, end: end, ttl: liveTTL[k], yes: yes[k], no: no[k]},
			func() []NodeVote { return renewalVotes(c, o, jobs, k) })
	}
}

// renewalVotes returns the votes of the k-th lock of a renewal batch, as
// Stats.Nodes has them: each node's vote for that lock where the node's
// reply was gathered, and the node's vote in the round otherwise.
func renewalVotes(c *Client, o *outcome, jobs []renewJob, k int) []NodeVote {
	nv := o.nodeVotes(c)
	for i := range nv {
		if o.got[i] && k < len(jobs[i].votes) {
			nv[i].Vote = jobs[i].votes[k]
			if nv[i].Vote != VoteFailed {
				nv[i].Err = nil
			}
		}
	}
	return nv
}

// minTimeout is the smallest node timeout in a batch.
func minTimeout(locks []*Lock) time.Duration {
	d := locks[0].cfg.nodeTimeout
	for _, l := range locks[1:] {
		d = min(d, l.cfg.nodeTimeout)
	}
	return d
}

// settleRenewal applies one lock's renewal round (see settleExtension):
// a new Until on a win, the loss of the lock when a quorum reports the token
// gone, and otherwise a fast retry while validity lasts. A won round is
// followed by the top-up (see topup.go).
//
// The round becomes the lock's Stats, with nodes its Nodes, so that a node
// that a top-up made join shows there from the next round on.
func (l *Lock) settleRenewal(e extension, nodes func() []NodeVote) {
	c := l.c
	st := e.stats(l)
	l.mu.Lock()
	v := l.settleExtension(e, st)
	if v != extEnded {
		l.stats, l.statsOf, l.statsNodes = st, nil, nodes
	}
	switch {
	case v == extEnded:
		l.mu.Unlock()
		return
	case v != extWon && !e.lost(l):
		// Retry soon; the expiry timer ends the lock if validity runs out
		// first. The lock is re-queued under l.mu, where end sets l.err
		// before it removes the lock from the queue: a lock that Unlock or
		// the expiry timer ended is never queued again.
		retry := min(l.ttl/20, 100*time.Millisecond)
		c.renewer.add(l, c.now().Add(max(retry, time.Millisecond)))
	}
	l.mu.Unlock()
	if v == extWon {
		l.topUp(e.ttl)
		c.renewer.notify.extended(st, nil)
		return
	}
	c.renewer.notify.extended(st, &QuorumError{Stats: st, Reason: "renewal failed", sentinel: ErrNotHeld})
	if e.lost(l) {
		l.end(chain(ErrLockLost, &QuorumError{
			Stats:    st,
			Reason:   "a quorum of nodes no longer holds the token",
			sentinel: ErrNotHeld,
		}))
	}
}

// renewJob runs extend.lua for every lock of a renewal batch on one node,
// in one batch of the node's pipe, and keeps each lock's vote in votes
// before it answers its leg. A lock whose command failed votes VoteFailed;
// a network error fails them all.
type renewJob struct {
	leg
	locks []*Lock
	ttls  []time.Duration
	cmds  []*redis.Cmd
	votes []Vote // one per lock; written before the leg hears of it
	evalFallback
	// fsyncN and fsyncErr are the batch's WAITAOF result (WithFsyncAck).
	fsyncN   int64
	fsyncErr error
	// ackN and ackErr are the batch's WAIT result (WithReplicaAck).
	ackN   int64
	ackErr error
}

// Deadline is the round's.
func (j *renewJob) Deadline() time.Time { return j.end }

// Replicas is the most replicas any of the job's locks wants.
func (j *renewJob) Replicas() int {
	n := 0
	for _, l := range j.locks {
		n = max(n, l.cfg.replicaAck)
	}
	return n
}

// Acked keeps the batch's WAIT result.
func (j *renewJob) Acked(n int64, err error) { j.ackN, j.ackErr = n, err }

// Fsync reports whether a lock of the job wants its writes fsynced.
func (j *renewJob) Fsync() bool {
	for _, l := range j.locks {
		if l.cfg.fsyncAck {
			return true
		}
	}
	return false
}

// FsyncAcked keeps the batch's WAITAOF result.
func (j *renewJob) FsyncAcked(n int64, err error) { j.fsyncN, j.fsyncErr = n, err }

// Barrier is the barrier of the first lock that wants replicas or fsyncs:
// the channel of the WAIT's PUBLISH, the key of the WAITAOF's SET.
func (j *renewJob) Barrier() string {
	for _, l := range j.locks {
		if l.cfg.replicaAck > 0 || l.cfg.fsyncAck {
			return keyspace.Barrier(l.t.rkeys[0])
		}
	}
	return ""
}

// unacked returns why a yes of lock k does not count: too few replicas
// acknowledged it, or the node did not confirm its fsync; nil when it
// counts.
func (j *renewJob) unacked(k int) error {
	l := j.locks[k]
	if err := replicaAckErr(l.cfg.replicaAck, j.ackN, j.ackErr); l.cfg.replicaAck > 0 && err != nil {
		return err
	}
	if l.cfg.fsyncAck {
		return fsyncAckErr(j.fsyncN, j.fsyncErr)
	}
	return nil
}

// AckWithin is half the shortest node timeout of the job's locks.
func (j *renewJob) AckWithin() time.Duration {
	var w time.Duration
	for i, l := range j.locks {
		if i == 0 || l.cfg.nodeTimeout < w {
			w = l.cfg.nodeTimeout
		}
	}
	return w / 2
}

// Commands appends extend.lua for every lock of the batch.
func (j *renewJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	if j.cmds == nil {
		j.cmds = make([]*redis.Cmd, len(j.locks))
	}
	for i, l := range j.locks {
		j.cmds[i] = l.t.evalExtend(nil, j.eval, l.att.value.arg, j.ttls[i])
		cmds = append(cmds, j.cmds[i])
	}
	return cmds
}

// Done reads each lock's vote.
func (j *renewJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmds...) {
		// The node lost its script cache: send the script itself, for
		// every lock of the batch.
		return true
	}
	votes := make([]Vote, len(j.cmds))
	for i, cmd := range j.cmds {
		switch v, err := cmd.Int64(); {
		case err != nil:
			votes[i] = VoteFailed
		case v == 1 && j.unacked(i) != nil:
			votes[i] = VoteFailed // not on enough replicas, or not fsynced
		case v == 1:
			votes[i] = VoteYes
		default:
			votes[i] = VoteNo
		}
	}
	j.report(votes)
	return false
}

// Fail fails every lock of the batch on the node.
func (j *renewJob) Fail(err error) { j.leg.deliver(0, err) }

// report keeps the votes, with a quarantined node's yes turned into a
// failure, and answers the leg.
func (j *renewJob) report(votes []Vote) {
	if j.n.guard.status(j.n.c.now()) != nil {
		for i, l := range j.locks {
			if l.cfg.guard && votes[i] == VoteYes {
				votes[i] = VoteFailed
			}
		}
	}
	j.votes = votes
	j.leg.deliver(1, nil)
}
