package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/transport"
)

// This file is the protocol of the requests a round sends to one node:
// each job's commands, and what their replies mean. The transport
// (internal/transport) sends the jobs of many rounds to a node together, and
// hands each its replies; a leg then takes the answer to its round.

// stallAfter is the nodes' transport.Config.StallAfter. Tests that hold a
// batch out change it before they build their Client.
var stallAfter = transport.DefaultStallAfter

// errNotSent is the failure of a job that was still queued at its deadline:
// the node had not answered the batch before it. It was never sent.
var errNotSent = fmt.Errorf("%w: not sent, the node had not answered its previous batch", ErrNodeTimeout)

// replicaWait is what a job needs for WithReplicaAck and WithFsyncAck: how
// many replicas must acknowledge its writes, whether the node must fsync
// them, how long the batch's WAIT and WAITAOF may take, and their results.
// Embedded as a pointer, it makes the job a transport.Acker and a
// transport.FsyncAcker; a nil one, the job of a Client with neither option,
// needs neither.
type replicaWait struct {
	want     int
	fsync    bool
	within   time.Duration // half the node timeout
	channel  string        // the target's barrier: a channel for WAIT, a key for WAITAOF
	acks     int64
	ackErr   error
	local    int64 // WAITAOF's local fsyncs: 1 once the node fsynced
	fsyncErr error
	// unfsynced is set once a batch's WAITAOF did not confirm (see
	// FsyncAcked).
	unfsynced bool
}

func (r *replicaWait) Replicas() int {
	if r == nil {
		return 0
	}
	return r.want
}
func (r *replicaWait) AckWithin() time.Duration { return r.within }
func (r *replicaWait) Acked(n int64, err error) { r.acks, r.ackErr = n, err }
func (r *replicaWait) Barrier() string          { return r.channel }

func (r *replicaWait) Fsync() bool { return r != nil && r.fsync && !r.unfsynced }

// FsyncAcked keeps a batch's WAITAOF result. One that did not confirm
// fails the job's vote, and the job's later batches (a GET check after a
// resent SET, an EVAL after NOSCRIPT) wait for no fsync: the write it
// covered may be the one the vote stands on (a resent SET that found its
// first copy's key), and a second wait would only spend the rest of the
// node timeout, so that the vote would fail as a timeout instead.
func (r *replicaWait) FsyncAcked(local int64, err error) {
	r.local, r.fsyncErr = local, err
	r.unfsynced = err != nil || local < 1
}

// counted turns a yes into a failure when too few replicas acknowledged
// it (ErrReplicaAck) or the node did not confirm its fsync (ErrFsyncAck):
// the node is then rolled back like any that failed.
func (r *replicaWait) counted(val int64, err error) (int64, error) {
	if val <= 0 || err != nil || r == nil {
		return val, err
	}
	if r.want > 0 {
		if e := replicaAckErr(r.want, r.acks, r.ackErr); e != nil {
			return 0, e
		}
	}
	if r.fsync {
		if e := fsyncAckErr(r.local, r.fsyncErr); e != nil {
			return 0, e
		}
	}
	return val, err
}

// newReplicaWait is the replicaWait of a job of t under cfg: nil when cfg
// asks for neither replicas nor fsyncs.
func newReplicaWait(cfg *config, t *target) *replicaWait {
	if cfg.replicaAck == 0 && !cfg.fsyncAck {
		return nil
	}
	return &replicaWait{want: cfg.replicaAck, fsync: cfg.fsyncAck, within: cfg.nodeTimeout / 2, channel: keyspace.Barrier(t.rkeys[0])}
}

// replicaAckErr turns a WAIT's outcome into the error of a yes that does
// not count, or nil when at least want replicas acknowledged.
func replicaAckErr(want int, got int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrReplicaAck, err)
	case got < int64(want):
		return fmt.Errorf("%w: %d of %d within the node timeout", ErrReplicaAck, got, want)
	}
	return nil
}

// The causes of an ErrFsyncAck that retrying will not fix: the node warns
// of them once (see persistentKind).
var (
	errNoWAITAOF = errors.New("the server lacks WAITAOF: WithFsyncAck needs Redis 7.2+ or Valkey 7.2+")
	errAOFOff    = errors.New("appendonly is off on the node: WAITAOF cannot confirm an fsync without an append-only file")
)

// fsyncAckErr turns a WAITAOF's outcome into the error of a yes that does
// not count, or nil when the node fsynced the write. Redis words WAITAOF's
// refusals only in its messages (ERR unknown command, ERR WAITAOF cannot be
// used when numlocal is set but appendonly is disabled), so they are told
// apart by them.
func fsyncAckErr(local int64, err error) error {
	switch {
	case err == nil && local >= 1:
		return nil
	case err == nil:
		return fmt.Errorf("%w: WAITAOF confirmed no fsync within the node timeout "+
			"(appendfsync always confirms at once, everysec within a second, no never; see Client.Check)", ErrFsyncAck)
	case redis.HasErrorPrefix(err, "unknown command"):
		return fmt.Errorf("%w: %w: %w", ErrFsyncAck, errNoWAITAOF, err)
	case redis.HasErrorPrefix(err, "WAITAOF cannot be used") && strings.Contains(err.Error(), "appendonly"):
		return fmt.Errorf("%w: %w: %w", ErrFsyncAck, errAOFOff, err)
	}
	return fmt.Errorf("%w: %w", ErrFsyncAck, err)
}

// leg is one node's part of a round: where its reply goes. The round's
// deadline (end) is the leg's.
type leg struct {
	*round
	n *node
}

// deliver hands the node's reply to the round, or to the round's late
// handler once the round has been decided.
func (lg *leg) deliver(val int64, err error) {
	r, n, c := lg.round, lg.n, lg.n.c
	if err != nil && redis.HasErrorPrefix(err, "READONLY") && n.readOnly.CompareAndSwap(false, true) {
		c.log.Warn("redlock: node is a read-only replica: it can never vote yes; give New the masters (Client.Check reports it too)",
			"node", n.index, "addr", n.addr, "err", err)
	}
	rp := reply{i: n.index, val: val, err: nodeErr(err)}
	r.mu.Lock()
	if r.stalled[n.index] {
		n.stalled.Add(-1)
	}
	if !r.decided {
		// The latency is read only for the votes it goes into: a late
		// reply's is never shown.
		rp.lat = c.now().Sub(r.start)
		r.in.ch <- rp
		r.mu.Unlock()
		return
	}
	late := r.late
	r.mu.Unlock()
	if late != nil {
		late.lateReply(rp)
	}
}

// acquireJob is one attempt's acquire request to one node. The attempt
// (sent.at) holds what every node's request shares.
type acquireJob struct {
	leg
	// sent names the attempt, and counts the writes of cmdSet's value.
	sent sendCounter
	cmd  *redis.Cmd
	// guard is the node guard's sample, with WithNodeGuard.
	guard *guardCmds
	*replicaWait
	args         [7]any // SET's, the longest of the plain commands
	how          acquireCmd
	evalFallback // for cmdScript
}

// guardCmds is what the node guard reads of a node with an acquire
// reply: its INFO server section and its clock.
type guardCmds struct {
	info *redis.StringCmd
	tm   *redis.TimeCmd
}

func (j *acquireJob) Deadline() time.Time { return j.end }
func (j *acquireJob) Fail(err error)      { j.leg.deliver(0, err) }

// Timed reports whether the node guard reads the batch's times.
func (j *acquireJob) Timed() bool { return j.sent.at.a.cfg.guard }

// InOrder reports whether the job sends waiting markers, which go before
// the acquire.
func (j *acquireJob) InOrder() bool {
	return j.sent.at.marks && len(j.sent.at.a.t.waiting) > 0
}

func (j *acquireJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	at := j.sent.at
	a := at.a
	ctx, t, tk := context.Background(), a.t, &at.value
	// The markers go first: a release between them and the acquire
	// deletes the marker and is announced, and one before them leaves the
	// key free for the acquire. Either way the waiter hears of it.
	if at.marks {
		for _, m := range t.waiting {
			cmds = append(cmds, redis.NewCmd(ctx, t.fl.mark(m, a.ttlArg)...))
		}
	}
	args := j.args[:0]
	switch j.how {
	case cmdSet:
		j.sent.n.Store(0)
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], &j.sent, "px", a.ttlArg, "nx")...)
	case cmdCheck:
		j.cmd = redis.NewCmd(ctx, append(args, "get", t.kargs[0])...)
	case cmdSetGet:
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], tk.arg, "px", a.ttlArg, "nx", "get")...)
	case cmdSetNX:
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], tk.arg, "px", a.ttlArg, "nx")...)
	default: // cmdScript
		j.cmd = t.evalAcquire(j.eval, *tk, a.ttl, a.ttlArg, &a.c.hooks)
	}
	cmds = append(cmds, j.cmd)
	if a.cfg.guard {
		// The guard's sample goes right after the vote, on the same
		// connection, so that it sees a restart or a clock jump that came
		// before the vote was counted.
		j.guard = &guardCmds{info: redis.NewStringCmd(ctx, "info", "server"), tm: redis.NewTimeCmd(ctx, "time")}
		cmds = append(cmds, j.guard.info, j.guard.tm)
	}
	return cmds
}

func (j *acquireJob) Done(sent, recv time.Time) bool {
	n, a, tk := j.n, j.sent.at.a, &j.sent.at.value
	c := a.c
	var val int64
	err := j.cmd.Err()
	switch j.how {
	case cmdSet:
		switch {
		case err == nil:
			val = 1 // OK: the key was free, it is ours now
		case errors.Is(err, redis.Nil) && j.sent.n.Load() > 1:
			// Written more than once: the first copy may have set it.
			j.how = cmdCheck
			return true
		case errors.Is(err, redis.Nil):
			err = nil // a plain no
		}
	case cmdCheck:
		switch v, e := j.cmd.Text(); {
		case e == nil && v == tk.value:
			val, err = 1, nil
		case e == nil || errors.Is(e, redis.Nil):
			val, err = 0, nil // another holder, or gone: not ours
		}
	case cmdSetGet:
		switch old, e := j.cmd.Text(); {
		case errors.Is(e, redis.Nil):
			val, err = 1, nil // the key was free: it is ours now
		case redis.HasErrorPrefix(e, "ERR syntax error"):
			// Redis before 7.0 refuses NX with GET; nothing was set.
			n.oldSet.Store(true)
			j.how = cmdScript
			return true
		case redis.HasErrorPrefix(e, "WRONGTYPE"):
			// A hash: a read lock or an owner lock, which SET GET
			// cannot read. The script answers a plain no there.
			j.how = cmdScript
			return true
		case e != nil:
		case old == tk.value:
			val = 1 // our own write, sent again by go-redis
		case tk.earlier(old):
			// An earlier attempt's leftover: the script takes it over.
			j.how = cmdScript
			return true
		}
	case cmdSetNX:
		switch e := j.cmd.Err(); {
		case errors.Is(e, redis.Nil):
			err = nil // a plain no
		case e == nil:
			val = 1
		}
	default: // cmdScript
		if j.resendAsEval(j.cmd) {
			return true
		}
		val, err = j.cmd.Int64()
	}
	if err != nil {
		err = a.t.fl.acquireErr(a.t, err)
	}
	if a.cfg.guard {
		g := j.guard
		if qerr := n.guard.observe(n, g.info.Val(), g.info.Err(), g.tm.Val(), g.tm.Err(), sent, recv, c.maxTTL(), a.cfg.driftFactor, c.log); qerr != nil && err == nil && val > 0 {
			err = qerr
		}
	}
	j.leg.deliver(j.counted(val, err))
	return false
}

// releaseJob releases an attempt's value on one node. It reports to a
// round, or, for the release that a late reply triggers, frees the node in
// the acquisition.
type releaseJob struct {
	leg
	// sent names the attempt, and counts the writes of the release.
	sent sendCounter
	cmd  *redis.Cmd
	// extra moves the job's deadline past its round's (see
	// attempt.handleLate). Only the goroutine that sends the job writes
	// it, before it does.
	extra time.Duration
	args  [9]any
	// announce announces the release to waiters; false for a rollback.
	announce bool
	// unlock is set for Unlock's release of the attempt's Lock: a resent
	// release may count as done (see Lock.release).
	unlock bool
	// free is set for the release that a late reply triggers: it frees
	// the node in the acquisition, and its round (see attempt.rollbackOn)
	// hears nothing.
	free bool
	// resent is set when the EVALSHA before the EVAL was written more than
	// once: a NOSCRIPT reply to a copy says nothing of the first copy,
	// which may have run before the node lost its scripts.
	resent bool
	// plan is Unlock's releasePlan when it does more than delete: the job
	// then lets the keys expire at plan.later (releaselater.lua) if it
	// goes out before it. nil for every other release, which keeps the
	// job small.
	plan *releasePlan
	evalFallback
}

// deadline gives a release releaseGrace past its round's deadline: a
// release has no validity to protect, deletes only its own value, and one
// dropped unsent (a sender starved of CPU for its whole deadline) would
// leave the key for its TTL.
func (j *releaseJob) Deadline() time.Time { return j.sendBy().Add(releaseGrace) }

// sendBy is the job's own deadline: its round's, and extra.
func (j *releaseJob) sendBy() time.Time { return j.end.Add(j.extra) }

// releaseGrace is how long past its round's deadline a queued release is
// still sent.
const releaseGrace = 5 * time.Second

func (j *releaseJob) Fail(err error) { j.finish(0, false, err) }

func (j *releaseJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	// The count is of one command: a NOSCRIPT reply to an EVALSHA written
	// once means it did nothing, so the EVAL starts a new count.
	j.sent.n.Store(0)
	t := j.sent.at.a.t
	if p := j.plan; p != nil {
		// The time left is measured as the job goes out, which may be
		// long after Unlock when the release was parked.
		switch left := p.later.Sub(j.n.c.now()); {
		case left > 0:
			j.cmd = t.evalReleaseLater(j.args[:0], j.eval, &j.sent, left, p.cut)
			return append(cmds, j.cmd)
		case p.keep:
			// The minimum hold is over, the lock-delay is not: only say
			// whether the node holds the keys.
			j.cmd = t.evalReleaseLater(j.args[:0], j.eval, &j.sent, 0, false)
			return append(cmds, j.cmd)
		}
	}
	j.cmd = t.evalRelease(j.args[:0], j.eval, j.n, &j.sent, j.announce)
	return append(cmds, j.cmd)
}

func (j *releaseJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		j.resent = j.sent.n.Load() > 1
		return true
	}
	v, err := j.cmd.Int64()
	j.finish(v, j.resent || j.sent.n.Load() > 1, err)
	return false
}

func (j *releaseJob) finish(v int64, resent bool, err error) {
	at := j.sent.at
	if j.free {
		at.a.mu.Lock()
		at.a.busy[j.n.index]--
		at.a.mu.Unlock()
		return
	}
	if l := at.lock; j.unlock && err == nil && v <= 0 && resent && l.byToken {
		// A release by token knows nothing of the hold's state: a copy
		// sent again that found the key gone cannot tell whether the first
		// copy deleted it.
		j.leg.deliver(0, errResentRelease)
		return
	}
	if l := at.lock; j.unlock && err == nil && v <= 0 && resent && !l.c.hooks.unsafeRetries && l.heldValidOn(j.n.index) {
		// go-redis sent the release again after its connection failed,
		// and the last copy found the key gone, or already taken by the
		// next holder, on a node that held it while it was still valid:
		// in the model, only the first copy of this release can have
		// deleted it.
		v = 1
	}
	j.leg.deliver(max(v, 0), err)
}

// errResentRelease is the vote of a node where a release by token was sent
// again and its last copy found nothing to release.
var errResentRelease = errors.New("redlock: the release was sent again and found the key gone: the first copy may have released it")

// extendJob extends a lock on one node.
type extendJob struct {
	leg
	l    *Lock
	ttl  time.Duration
	cmd  *redis.Cmd
	args [9]any
	evalFallback
	*replicaWait
}

func (j *extendJob) Deadline() time.Time { return j.end }

func (j *extendJob) Fail(err error) { j.leg.deliver(0, err) }

func (j *extendJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	l := j.l
	j.cmd = l.t.evalExtend(j.args[:0], j.eval, l.att.value.arg, j.ttl)
	return append(cmds, j.cmd)
}

func (j *extendJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	v, err := j.cmd.Int64()
	if j.l.cfg.guard {
		v, err = j.n.guarded(j.n.c, v, err)
	}
	j.leg.deliver(j.counted(v, err))
	return false
}

// fenceJob writes an attempt's fence back on one node.
type fenceJob struct {
	leg
	t     *target
	value string
	fence int64
	cmd   *redis.Cmd
	evalFallback
	*replicaWait
}

func (j *fenceJob) Deadline() time.Time { return j.end }
func (j *fenceJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *fenceJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmd = j.t.evalFence(j.eval, j.value, j.fence)
	return append(cmds, j.cmd)
}

func (j *fenceJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	j.leg.deliver(j.counted(j.cmd.Int64()))
	return false
}

// markJob sets the waiting markers of a lock's keys on one node that an
// attempt did not ask (a request of the same call was still in flight
// there), so that the holder's release is announced there too. Nobody
// waits for its reply.
type markJob struct {
	t      *target
	keys   []string
	ttlArg any
	end    time.Time
}

func (j *markJob) Deadline() time.Time { return j.end }
func (j *markJob) Fail(error)          {}

func (j *markJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	for _, m := range j.keys {
		cmds = append(cmds, redis.NewCmd(context.Background(), j.t.fl.mark(m, j.ttlArg)...))
	}
	return cmds
}

func (j *markJob) Done(time.Time, time.Time) bool { return false }

// unmarkSrc deletes a writer's waiting marker, and leaves a reader's. It is
// sent with EVAL, on the rare path of a writer that gave up: Redis caches
// it.
const unmarkSrc = `if redis.call('GET', KEYS[1]) == '1' then return redis.call('DEL', KEYS[1]) end return 0`

// unmarkJob deletes the writers' waiting markers of keys on one node.
type unmarkJob struct {
	keys []string
	end  time.Time
}

func (j *unmarkJob) Deadline() time.Time { return j.end }
func (j *unmarkJob) Fail(error)          {}

func (j *unmarkJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	for _, m := range j.keys {
		cmds = append(cmds, redis.NewCmd(context.Background(), "eval", unmarkSrc, 1, m))
	}
	return cmds
}

func (j *unmarkJob) Done(time.Time, time.Time) bool { return false }
