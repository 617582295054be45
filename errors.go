package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotAcquired means the lock was not acquired: fewer than a quorum of
	// nodes said yes, or the acquisition took so long that no validity was
	// left. When the caller's ctx ended the wait, the error also matches
	// ctx.Err() under errors.Is.
	ErrNotAcquired = errors.New("redlock: not acquired")

	// ErrUnavailable is matched, beside ErrNotAcquired, by the error of an
	// acquisition that failed because fewer than a quorum of nodes
	// answered: the others failed, timed out or were quarantined by the
	// guard. It is an outage, not contention: it does not match when
	// enough nodes answered and the key was held elsewhere. The error of
	// Client.ValidateFence matches it too, beside ErrStaleFence, when too
	// few nodes answered to tell, and so does the error of
	// Election.Leader, instead of ErrNoLeader.
	ErrUnavailable = errors.New("redlock: unavailable: too few nodes answered for a quorum")

	// ErrNotHeld means Unlock or Extend found fewer than a quorum of nodes
	// still holding our token, or that the lock's validity had already
	// ended, or that it was already unlocked.
	ErrNotHeld = errors.New("redlock: not held")

	// ErrUnconfirmed means Unlock could not confirm the release on a
	// quorum, but too few nodes said they no longer held the lock to say
	// it was not held: the others failed, or had not answered within the
	// release's bounded wait (a node busy with a batch, or down). The
	// release still goes to them as their requests return, and the lock
	// has ended either way. It does not match ErrNotHeld.
	ErrUnconfirmed = errors.New("redlock: release not confirmed")

	// ErrInvalidOption is wrapped by every error about a bad option, node
	// list or key. The message names the problem.
	ErrInvalidOption = errors.New("redlock: invalid option")

	// ErrClosed is returned by calls made after Client.Close.
	ErrClosed = errors.New("redlock: client closed")

	// ErrInFlight is the cause in a VoteFailed of a node that still had a
	// request of the same acquisition in flight, so it was not asked again.
	ErrInFlight = errors.New("redlock: previous request to this node still in flight")

	// ErrNodeTimeout is the cause in a VoteFailed of a node that did not
	// answer within the node timeout: it may be down or hung. The vote's
	// error matches it, and its message says how long the node had, and
	// the node's last failure when one is known ("connection refused").
	ErrNodeTimeout = errors.New("redlock: no answer within the node timeout")

	// ErrNoAnswer is the Err of a VoteNotWaited: the node had not
	// answered yet when the round was decided without it, usually only
	// slower than the quorum. Its answer is still handled when it comes.
	ErrNoAnswer = errors.New("redlock: no answer before the decision")

	// ErrQuarantined is the cause in a VoteFailed of a node whose yes the
	// node guard did not count: it restarted less than the max TTL ago, or
	// its clock jumped. See WithNodeGuard.
	ErrQuarantined = errors.New("redlock: node quarantined by the guard")

	// ErrWrongType is the Err of a VoteNo from a node where the lock key
	// holds a value of a type no lock or semaphore of this library uses (a
	// list, a set, a sorted set that is not a semaphore...): some other
	// program's data, or a key name that clashes with it. No lock can be
	// taken there until it is removed.
	ErrWrongType = errors.New("redlock: the key holds a value of another type, not a lock")

	// ErrReplicaAck is the Err of a NodeError, in a VoteFailed, from a node
	// whose replicas did not acknowledge the write within the node timeout
	// (see WithReplicaAck): the key is on the master, but a failover could
	// lose it, so the node's yes does not count, and it is rolled back.
	ErrReplicaAck = errors.New("redlock: too few replicas acknowledged the write")

	// ErrFsyncAck is the Err of a NodeError, in a VoteFailed, from a node
	// that did not confirm with WAITAOF, within the node timeout, that it
	// fsynced the write (WithFsyncAck), or that cannot (no WAITAOF, or
	// appendonly off).
	ErrFsyncAck = errors.New("redlock: the node did not confirm the write was fsynced")

	// ErrStaleFence is matched by every error of Client.ValidateFence: the
	// fence cannot be shown to be the live holder's, because a newer fence
	// exists, the lock was released or lost, or too few nodes answered to
	// tell (the error then also matches ErrUnavailable). A resource refuses
	// the write on any of them.
	ErrStaleFence = errors.New("redlock: stale fence")

	// errNotAsked is the vote of a node that a round left out on purpose.
	errNotAsked = errors.New("not asked")

	// ErrLockLost is wrapped by Lock.Err when the lock ended without Unlock:
	// its validity ran out (no renewal, or renewals failed), a quorum of
	// nodes reported its token gone, or WithMaxHold's cap was reached. The
	// error also wraps the cause.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrUnlocked is what Lock.Err returns once Unlock has ended the lock.
	ErrUnlocked = errors.New("redlock: unlocked")

	// ErrMaxHold is wrapped, together with ErrLockLost, by Lock.Err when the
	// lock ended because WithMaxHold's cap was reached, and by Extend when
	// the cap leaves no room to extend.
	ErrMaxHold = errors.New("redlock: max hold reached")
)

// NodeError is the failure of one node in a round. It carries the node's
// index (its position in the slice given to New) and address, and unwraps to
// the cause.
type NodeError struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Err is what went wrong: a network or Redis error, or a timeout.
	Err error
}

// Error implements error.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: node %d (%s): %s", e.Index, e.Addr, describe(e.Err))
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError is the error of a round that did not reach its quorum: a failed
// acquisition (it matches ErrNotAcquired, and ErrUnavailable when too few
// nodes answered), or an Unlock or Extend that found the lock gone (it
// matches ErrNotHeld). It says what each node answered, and unwraps to the
// sentinel, to each NodeError, and to the caller's ctx.Err() when the ctx
// ended the call.
type QuorumError struct {
	// Stats is the round that failed: each node's vote, elapsed time,
	// drift and validity.
	Stats Stats
	// Reason says why, when it is not only the vote count: "no validity
	// left", "validity ended", "already unlocked".
	Reason string

	sentinel error
	ctxErr   error
	// unavailable is set on an acquisition's error when too few nodes
	// answered for a quorum (see outage): it then matches ErrUnavailable.
	// An attempt that the caller's ctx cut short is judged by the call's
	// last decided attempt (see acquisition.judge).
	unavailable bool
	// permits is a semaphore's number of permits, for the message of an
	// unavailable one; 0 for the other kinds.
	permits int
}

// Error implements error.
func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel.Error())
	fmt.Fprintf(&b, ": %s %q", e.Stats.Op, e.Stats.Key)
	if e.unavailable {
		b.WriteString(": ")
		b.WriteString(bare(ErrUnavailable))
		if e.permits > 0 {
			// Its quorum grows with the permits, up to every node: say
			// so, since "too few" then may mean one node down.
			fmt.Fprintf(&b, " (a semaphore of %d permits needs %d of %d nodes; only %d answered)",
				e.permits, e.Stats.Quorum, len(e.Stats.Nodes), answering(&e.Stats))
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if len(e.Stats.Nodes) > 0 {
		fmt.Fprintf(&b, ": %d/%d yes (quorum %d)", e.Stats.Yes, len(e.Stats.Nodes), e.Stats.Quorum)
		if e.Stats.Op == OpLock && e.Stats.Yes >= e.Stats.Quorum {
			// Only an attempt that had its quorum has a validity to
			// speak of: it was too slow, or lost its fence write-back.
			fmt.Fprintf(&b, ", validity %v", e.Stats.Validity.Round(time.Microsecond))
		}
		no := "taken"
		if e.Stats.Op != OpLock {
			no = "not holding our token"
		}
		nodeList(&b, e.Stats.Nodes, no, func(v NodeVote) bool { return v.Vote == VoteNo && v.Err == nil })
		holders(&b, e.Stats.Nodes)
		nodeList(&b, e.Stats.Nodes, "wrong type at the key (not a lock)", func(v NodeVote) bool { return v.Vote == VoteNo && errors.Is(v.Err, ErrWrongType) })
		// The nodes not waited for are left out: on healthy nodes every
		// conflict has some, slower than the decision. Stats has them.
		for _, v := range e.Stats.Nodes {
			if v.Vote == VoteFailed {
				fmt.Fprintf(&b, "; node %d (%s) failed: %s", v.Index, v.Addr, describe(v.Err))
			}
		}
	}
	if e.ctxErr != nil {
		fmt.Fprintf(&b, "; %v", e.ctxErr)
	}
	return b.String()
}

// holders writes `, held by "label"` after the list of nodes that said no,
// for the labels of the holders found there (see NodeVote.Holder), each
// once, in the nodes' order.
func holders(b *strings.Builder, votes []NodeVote) {
	sep := ", held by "
	for i, v := range votes {
		if v.Holder == "" || slices.ContainsFunc(votes[:i], func(w NodeVote) bool { return w.Holder == v.Holder }) {
			continue
		}
		b.WriteString(sep)
		b.WriteString(strconv.Quote(v.Holder))
		sep = ", "
	}
}

// decided reports whether the votes of a round decided it: a quorum said
// yes, or so many said no or failed that a quorum of yes was out of reach.
// A round that the caller's ctx cut short is not decided.
func decided(st *Stats) bool {
	n := len(st.Nodes)
	return n > 0 && (st.Yes >= st.Quorum || st.No+st.Failed > n-st.Quorum)
}

// unanswered counts the nodes that failed without an answer that speaks of
// the key: a network or Redis error, a timeout, a node busy or
// quarantined. A node that refused for the key's sake (a value of another
// type, disagreeing permits) answered.
func unanswered(st *Stats) int {
	k := 0
	for _, v := range st.Nodes {
		if v.Vote == VoteFailed && !errors.Is(v.Err, ErrPermitsMismatch) && !errors.Is(v.Err, ErrWrongType) &&
			!redis.HasErrorPrefix(v.Err, "WRONGTYPE") {
			k++
		}
	}
	return k
}

// answering counts the nodes that answered, or could have: in a decided
// round those not waited for count, since they were not given the time;
// in a round cut short they do not, since they did not answer within the
// whole wait.
func answering(st *Stats) int {
	k := len(st.Nodes) - unanswered(st)
	if !decided(st) {
		k -= st.NotWaited
	}
	return k
}

// contended reports whether a round that the ctx cut short shows enough of
// an answer to rule out an outage: a quorum of nodes answered, or some
// said the key is taken and the ones not heard from yet would make a
// quorum with those that answered. Its silent nodes were given less than
// their node timeout: they may only be slower than the ctx.
func contended(st *Stats) bool {
	answered := st.Yes + st.No
	for _, v := range st.Nodes {
		if v.Vote == VoteFailed && unanswered(&Stats{Nodes: []NodeVote{v}}) == 0 {
			answered++ // refused for the key's sake
		}
	}
	return answered >= st.Quorum || (st.No > 0 && answered+st.NotWaited >= st.Quorum)
}

// outage reports whether a failed acquisition's round shows too few nodes
// answering for a quorum. In a decided round that is when the failures
// alone put the quorum out of reach: a round lost to a mix of failures and
// noes still had a quorum of live nodes, and the key was taken on some.
func outage(st *Stats) bool {
	return len(st.Nodes) > 0 && answering(st) < st.Quorum
}

// describe says what went wrong on a node in the words of the network or
// the server, without our prefix: "connection refused" rather than go-redis's
// "dial tcp 10.0.0.1:6379: connect: connection refused", whose address the
// message names already.
func describe(err error) string {
	if err == io.EOF {
		return "the node closed the connection (EOF)"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && isNetErr(err) {
		return "lookup " + dns.Name + ": " + dns.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && isNetErr(err) && op.Err != nil {
		var sys *os.SyscallError
		inner := op.Err.Error()
		if errors.As(op.Err, &sys) {
			inner = sys.Err.Error()
		}
		if op.Op == "dial" {
			return inner
		}
		return op.Op + ": " + inner
	}
	return bare(err)
}

// isNetErr reports whether err is itself a network error, as go-redis
// returns them, rather than one of our errors that wraps one (a replica's
// WAIT that failed, say), whose own words must stay.
func isNetErr(err error) bool {
	switch err.(type) {
	case *net.OpError, *net.DNSError:
		return true
	}
	return false
}

// timeoutError is the ErrNodeTimeout of one node's vote: how long the node
// was waited for, or the timeout the network reported, and its last failure
// when one is known.
type timeoutError struct {
	after time.Duration // the node timeout; 0 when a network timeout
	// release is set for a release's round, whose bound is not the node
	// timeout (see config.releaseTimeout).
	release bool
	net     error // the network's timeout, when it was one
	last    error // the node's last failure before, if any
}

func (e *timeoutError) Error() string {
	var b strings.Builder
	switch {
	case e.release && e.after > 0:
		fmt.Fprintf(&b, "redlock: no answer within %v, the bound of a release", e.after)
	case e.after > 0:
		fmt.Fprintf(&b, "%s of %v", ErrNodeTimeout.Error(), e.after)
	default:
		b.WriteString(ErrNodeTimeout.Error())
	}
	if e.net != nil && !errors.Is(e.net, context.DeadlineExceeded) && !errors.Is(e.net, context.Canceled) {
		// The request's own deadline says nothing more; the network's
		// timeout says where it ran out.
		fmt.Fprintf(&b, " (%s)", describe(e.net))
	}
	if e.last != nil {
		fmt.Fprintf(&b, " (last error: %s)", describe(e.last))
	}
	return b.String()
}

// Unwrap returns ErrNodeTimeout, and the node's last failure: never the
// network's timeout, which may be a context error that the caller would
// take for its own ctx's (see nodeErr).
func (e *timeoutError) Unwrap() []error {
	if e.last != nil {
		return []error{ErrNodeTimeout, e.last}
	}
	return []error{ErrNodeTimeout}
}

// withLast is the error of a node that was not asked, or did not answer,
// with the node's last failure, which is likely why.
type withLast struct {
	err, last error
}

func (e *withLast) Error() string {
	return e.err.Error() + " (last error: " + describe(e.last) + ")"
}

func (e *withLast) Unwrap() []error { return []error{e.err, e.last} }

// chained is an error that wraps two: its message is the outer's, then the
// inner's without a second "redlock: " prefix.
type chained struct{ outer, inner error }

// chain wraps inner in outer, as fmt.Errorf("%w: %w") would, but with one
// "redlock: " prefix: "redlock: lock lost: not held: ...", not "redlock:
// lock lost: redlock: not held: ...".
func chain(outer, inner error) error { return &chained{outer, inner} }

func (e *chained) Error() string   { return e.outer.Error() + ": " + bare(e.inner) }
func (e *chained) Unwrap() []error { return []error{e.outer, e.inner} }

// bare returns err's message without the "redlock: " prefix, to be
// embedded in another of our messages.
func bare(err error) string { return strings.TrimPrefix(err.Error(), "redlock: ") }

// nodeList writes "; what: nodes i,j" for the votes that match, if any.
func nodeList(b *strings.Builder, votes []NodeVote, what string, match func(NodeVote) bool) {
	sep := "; " + what + ": nodes "
	for _, v := range votes {
		if match(v) {
			b.WriteString(sep)
			b.WriteString(strconv.Itoa(v.Index))
			sep = ","
		}
	}
}

// Unwrap returns the sentinel (ErrNotAcquired, ErrNotHeld or
// ErrUnconfirmed), ErrUnavailable when too few nodes answered an
// acquisition, a NodeError for each node that failed, ErrWrongType when a
// node holds a value of another type at the key, and the ctx error when the
// ctx ended the call.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.sentinel}
	if e.unavailable {
		errs = append(errs, ErrUnavailable)
	}
	wrongType := false
	for _, v := range e.Stats.Nodes {
		switch {
		case v.Vote == VoteFailed:
			errs = append(errs, &NodeError{Index: v.Index, Addr: v.Addr, Err: v.Err})
		case v.Vote == VoteNo && v.Err == ErrWrongType:
			wrongType = true
		}
	}
	if wrongType {
		errs = append(errs, ErrWrongType)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}
