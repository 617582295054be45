package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// This file is Client.ValidateFence: one read-only round that asks every
// node who holds a lock key and where the key's fence counter stands, and
// the rule that says from the answers whether a fence is still the live
// holder's.

// ValidateFence returns nil when fence, the Lock.Fence of a lock taken with
// WithFencing, is still the fence of the live holder of key: a quorum of
// nodes hold key for one holder (one value at a plain key, one owner at an
// owner lock) and have key's fence counter at exactly fence. Every error it
// returns matches ErrStaleFence, so that a resource refuses the write on
// any of them. The key is given as to Lock, without the Client's key
// prefix, which applies. For a lock of several keys (LockMulti), give any
// one of them: each has its own counter, and the lock's fence was written
// to each.
//
// It reads each node once, with a script that writes nothing, bounded by
// the node timeout and by ctx. It waits for every node that answers within
// the node timeout, not only the first quorum, so that faster nodes of
// another holder do not hide the holder's quorum; a node already known to
// hang is not waited for. Like Inspect, it tells neither the Observer nor
// the logger. Its answer is a snapshot: the lock may change hands as it
// returns. A resource that checks and then writes has that window; one that
// keeps the largest fence it has seen and refuses smaller ones in the same
// write does not (docs/FENCING.md).
//
// Why a stale fence cannot pass. The holder H of fence f got it once its
// write-back had set key's counter to f on a quorum W of nodes, while it
// held key there (docs/FENCING.md). Counters never go down. A fenced holder
// that takes key later on a node of W increments the counter past f there
// (acquire.lua), or raises it to its own fence, which is larger (a top-up):
// either way that node never shows f again. Now say a quorum Y of nodes
// hold key for one holder with the counter at f. Y meets W at some node x,
// where the counter is still f: nobody took key at x since H's write-back,
// so x's holder, and with it Y's, is H, and H holds key on a quorum. Once H
// released the key on a quorum or lost it there, no quorum holds it for H;
// once a newer holder's write-back reached a quorum, no quorum has the
// counter at f. Counting nodes holder by holder, not "key held, counter at
// f" alone, is what keeps a node whose counter is f by coincidence (one
// outside W, whose counter was below f when someone else took key there)
// from completing a quorum with H's last nodes.
//
// The argument needs every lock on key to be fenced: a lock taken without
// WithFencing (or by another Redlock client) takes key and leaves the
// counters as they were, so the last fenced holder's fence passes while it
// holds. Such a lock's own Fence is 0, which no counter holds: it never
// passes. A live holder's fence may also fail, the safe way, in the case
// that docs/FENCING.md describes ("A live holder refused").
//
// The error also matches ErrUnavailable when too few nodes answered to tell
// (they failed, timed out, or were quarantined by the node guard, and could
// have made the quorum): it names those nodes and unwraps to a *NodeError
// for each. It matches ctx.Err() when ctx ended first, ErrInvalidOption
// for a bad key (checked as Lock checks it), and ErrClosed after Close.
func (c *Client) ValidateFence(ctx context.Context, key string, fence uint64) error {
	if key == "" {
		return chain(ErrStaleFence, fmt.Errorf("%w: key must not be empty", ErrInvalidOption))
	}
	rkey := c.cfg.keyPrefix + key
	if err := keyspace.Check(rkey); err != nil {
		return chain(ErrStaleFence, fmt.Errorf("%w: %w", ErrInvalidOption, err))
	}
	fkey := keyspace.Fence(rkey)
	// On a Redis Cluster the script needs both keys in one slot, as a
	// fenced Lock of key does.
	if err := c.checkSlots(&target{rkeys: []string{rkey}, fence: []string{fkey}}); err != nil {
		return chain(ErrStaleFence, err)
	}
	if err := c.enter(); err != nil {
		return chain(ErrStaleFence, err)
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return chain(ErrStaleFence, err)
	}

	fc := &fenceCheck{keys: []any{rkey, fkey}, fence: fence, guard: c.cfg.guard}
	// One allocation for the round's jobs: each node gets its own.
	jobs := make([]validateFenceJob, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op:      "validatefence",
		quorum:  c.quorum,
		timeout: c.cfg.nodeTimeout,
		// The answer is due within the node timeout, but a request may
		// run on, as an acquire's does: a deadline as short as the node
		// timeout would, on a machine too busy to meet it, make each
		// request dial anew and miss it again. A late answer is dropped.
		life: c.cfg.releaseTimeout(),
		// The holder's quorum may be among the slower nodes.
		waitAll: true,
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.fc = fc
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)

	// A node's view is read only when its answer was gathered, and so
	// written before it; a late answer writes only its own job.
	views := make([]*fenceView, len(c.nodes))
	for i := range jobs {
		if o.got[i] && o.votes[i].v != VoteFailed {
			views[i] = &jobs[i].view
		}
	}
	holder, best := fenceQuorum(views, fence)
	if best >= c.quorum && o.ctxErr == nil {
		return nil
	}
	e := &staleFenceError{key: key, fence: fence, quorum: c.quorum, holder: holder, best: best,
		views: views, votes: o.nodeVotes(c), ctxErr: o.ctxErr}
	// Too few answers to tell: the nodes that did not answer could have
	// made the holder's quorum. A ctx that ended the round is the caller's
	// doing, not an outage.
	unanswered := 0
	for i := range e.votes {
		v := &e.votes[i]
		if v.Vote == VoteNotWaited && o.ctxErr == nil {
			// The round waits for every node but those already hung.
			v.Vote, v.Err = VoteFailed, c.faults.explain(i, errHung)
		}
		if v.Vote == VoteFailed || v.Vote == VoteNotWaited {
			unanswered++
		}
	}
	e.unavailable = o.ctxErr == nil && best+unanswered >= c.quorum
	return e
}

// errHung is the failure of a node that a ValidateFence did not wait for:
// an earlier request to it has been unanswered past its node timeout.
var errHung = fmt.Errorf("%w: not waited for, since an earlier request to the node is still unanswered past it", ErrNodeTimeout)

// fenceCheck is what every node's request of one ValidateFence shares.
type fenceCheck struct {
	keys  []any // the lock key and its fence counter, boxed once
	fence uint64
	guard bool // WithNodeGuard: a quarantined node's yes does not count
}

// fenceView is what one node said of a fence: see validatefence.lua.
type fenceView struct {
	layout  string // "plain", "owner", "" (free) or "other"
	holder  string // the value at a plain key, the owner of an owner lock
	counter string // as stored; "" when missing
}

// Layouts of a lock key as validatefence.lua names them.
const (
	fencePlain = "plain"
	fenceOwner = "owner"
	fenceFree  = ""
	fenceOther = "other"
)

// group names the holder of a view: a plain value and an owner never name
// the same one.
func (v *fenceView) group() string {
	if v.layout == fenceOwner {
		return "o:" + v.holder
	}
	return "v:" + v.holder
}

// taken reports whether the node holds the key for some holder.
func (v *fenceView) taken() bool { return v.layout == fencePlain || v.layout == fenceOwner }

// at reports whether the node holds the key for some holder with the
// counter at exactly fence. A missing counter is at no fence.
func (v *fenceView) at(fence uint64) bool {
	if !v.taken() {
		return false
	}
	n, err := strconv.ParseUint(v.counter, 10, 64)
	return err == nil && n == fence
}

// fenceQuorum returns the holder that most of the views hold the key for
// with the counter at fence, and how many they are; nil views did not
// answer.
func fenceQuorum(views []*fenceView, fence uint64) (holder string, most int) {
	count := make(map[string]int, len(views))
	for _, v := range views {
		if v != nil && v.at(fence) {
			g := v.group()
			if count[g]++; count[g] > most {
				holder, most = g, count[g]
			}
		}
	}
	return holder, most
}

// validateFenceJob reads one node's view of a fence.
type validateFenceJob struct {
	leg
	fc   *fenceCheck
	cmd  *redis.Cmd
	args [5]any
	evalFallback
	// view is written by Done before the answer is delivered, and read
	// only once it was gathered.
	view fenceView
}

func (j *validateFenceJob) Deadline() time.Time { return j.end }
func (j *validateFenceJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *validateFenceJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	args := withKeys(evalStart(j.args[:0], scriptValidateFence, j.eval), j.fc.keys)
	j.cmd = redis.NewCmd(context.Background(), args...)
	return append(cmds, j.cmd)
}

func (j *validateFenceJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	var yes int64
	err := j.read()
	if err == nil && j.view.at(j.fc.fence) {
		yes = 1
	}
	if j.fc.guard {
		yes, err = j.n.guarded(j.n.c, yes, err)
	}
	j.leg.deliver(yes, err)
	return false
}

// read parses the script's reply into the job's view.
func (j *validateFenceJob) read() error {
	vals, err := j.cmd.Slice()
	if err != nil {
		return err
	}
	var s [3]string
	ok := len(vals) == len(s)
	for i := 0; ok && i < len(s); i++ {
		s[i], ok = vals[i].(string)
	}
	if !ok {
		return fmt.Errorf("redlock: validatefence.lua answered %v", vals)
	}
	j.view = fenceView{layout: s[0], holder: s[1], counter: s[2]}
	return nil
}

// staleFenceError is the error of a ValidateFence that did not find the
// fence's holder on a quorum. It says what each node answered.
type staleFenceError struct {
	key    string // as the caller gave it
	fence  uint64
	quorum int
	holder string // the group of fenceQuorum's holder; "" when none
	best   int    // the nodes that hold the key for it, at the fence
	views  []*fenceView
	votes  []NodeVote
	// unavailable is set when the nodes that did not answer could have
	// made the quorum.
	unavailable bool
	ctxErr      error
}

func (e *staleFenceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: key %q, fence %d", ErrStaleFence.Error(), e.key, e.fence)
	if e.unavailable {
		b.WriteString(": ")
		b.WriteString(bare(ErrUnavailable))
	}
	fmt.Fprintf(&b, ": %d/%d nodes hold it at that fence (quorum %d)", e.best, len(e.votes), e.quorum)
	if e.fence == 0 {
		b.WriteString(" (fence 0 is no fence: the lock was taken without WithFencing)")
	}
	e.list(&b, "the key is free", func(v *fenceView) bool { return v.layout == fenceFree })
	e.list(&b, "a newer fence", func(v *fenceView) bool { return v.taken() && e.cmp(v) > 0 })
	e.list(&b, "an older or no fence", func(v *fenceView) bool { return v.taken() && e.cmp(v) < 0 })
	e.list(&b, "at that fence for another holder", func(v *fenceView) bool { return v.at(e.fence) && v.group() != e.holder })
	e.list(&b, "not a fenced lock at the key", func(v *fenceView) bool { return v.layout == fenceOther })
	for _, v := range e.votes {
		if v.Vote == VoteFailed {
			fmt.Fprintf(&b, "; node %d (%s) failed: %s", v.Index, v.Addr, describe(v.Err))
		}
	}
	if e.ctxErr != nil {
		fmt.Fprintf(&b, "; %v", e.ctxErr)
	}
	return b.String()
}

// cmp compares a node's counter with the fence: a missing or unreadable
// counter is below every fence.
func (e *staleFenceError) cmp(v *fenceView) int {
	n, err := strconv.ParseUint(v.counter, 10, 64)
	switch {
	case err != nil || n < e.fence:
		return -1
	case n > e.fence:
		return 1
	}
	return 0
}

// list writes "; what: nodes i,j" for the nodes that answered with a view
// that matches, if any.
func (e *staleFenceError) list(b *strings.Builder, what string, match func(*fenceView) bool) {
	sep := "; " + what + ": nodes "
	for i, v := range e.views {
		if v != nil && match(v) {
			b.WriteString(sep)
			b.WriteString(strconv.Itoa(i))
			sep = ","
		}
	}
}

// Unwrap returns ErrStaleFence, ErrUnavailable when too few nodes answered
// to tell, a *NodeError for each node that failed, and ctx's error when ctx
// ended the call.
func (e *staleFenceError) Unwrap() []error {
	errs := []error{ErrStaleFence}
	if e.unavailable {
		errs = append(errs, ErrUnavailable)
	}
	for _, v := range e.votes {
		if v.Vote == VoteFailed {
			errs = append(errs, &NodeError{Index: v.Index, Addr: v.Addr, Err: v.Err})
		}
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}
