package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrPermitsMismatch means a semaphore key is held by holders that use a
// different number of permits than the semaphore asking for it. Every
// holder of a key must agree on its permits: with two numbers, neither
// bound holds. The error names both.
var ErrPermitsMismatch = errors.New("redlock: semaphore permits disagree")

// Semaphore is a counting semaphore over the Client's nodes: at most its
// number of permits of holders at once, each holding a permit as a *Lock.
// It is created by Client.Semaphore, holds only its configuration, and is
// safe for concurrent use. Its zero value is not usable.
//
// Each node keeps the key as a sorted set: one member per holder, scored
// by the holder's expiry on the node's own clock, so that expired holders
// never count, and one member that records the number of permits. A node
// gives a permit when fewer than that many live holders are there. A
// permit is won on Quorum() nodes, more than the lock's majority once
// there are several permits: see Quorum and docs/SEMAPHORE.md.
//
// Locks and semaphores exclude each other: a node where the key holds a
// string (a plain lock of this library, of redsync, or of any client of
// the reference layout) or a hash (an owner lock) gives no permit, and a
// lock is never taken where the key holds a semaphore's sorted set.
type Semaphore struct {
	c      *Client
	key    string
	quorum int
	fl     *flavour // its permits' flavour, which holds the permits
	opts   []LockOption
}

// Semaphore returns a counting semaphore of permits permits on key. The
// options apply to every permit, as they would to a lock; Acquire and
// TryAcquire may add more. WithFencing and WithOwner are not supported for
// semaphores. It returns an error that wraps ErrInvalidOption when permits
// is less than 1, the key is empty, or an option is bad. It does no I/O:
// the permits are checked against the nodes' on every acquisition.
func (c *Client) Semaphore(key string, permits int, opts ...LockOption) (*Semaphore, error) {
	if permits < 1 {
		return nil, fmt.Errorf("%w: permits must be at least 1, got %d", ErrInvalidOption, permits)
	}
	s := &Semaphore{c: c, key: key, fl: permitFlavour(permits), opts: slices.Clone(opts)}
	cfg, err := c.config(s.opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.target([]string{key}, cfg, s.fl); err != nil {
		return nil, err
	}
	s.quorum = semaphoreQuorum(len(c.nodes), permits)
	return s, nil
}

// semaphoreQuorum returns the smallest quorum Q for which any k+1 holders,
// each with Q of the n nodes, share a node: (k+1)·Q > k·n, by pigeonhole.
// That node would have counted k+1 live holders, which it never allows.
// For k = 1 it is the lock's majority.
func semaphoreQuorum(n, k int) int {
	return k*n/(k+1) + 1
}

// Key returns the semaphore's key, without the key prefix.
func (s *Semaphore) Key() string { return s.key }

// Permits returns the number of permits: how many holders the semaphore
// allows at once.
func (s *Semaphore) Permits() int { return s.fl.permits }

// Quorum returns the number of nodes that must give a permit:
// floor(k·N/(k+1)) + 1 for k permits on N nodes. Any k+1 sets of that many
// nodes share a node, and that node never counts more than k live holders.
// It is the lock's majority for k = 1, and grows to N as k grows: with 5
// nodes it is 3 for k = 1, 4 for k = 2 or 3, and 5 for k ≥ 4, so that the
// semaphore then stops when one node is down. More nodes buy the tolerance
// back: see docs/SEMAPHORE.md.
func (s *Semaphore) Quorum() int { return s.quorum }

// Acquire takes a permit, waiting as long as ctx allows, as Client.Lock
// waits for a lock: after a failed attempt it listens for a holder's
// release, and tries again when one is announced or after the retry delay.
// The permit is a *Lock with everything a lock has: Until, Done and Err,
// Extend, auto-extension and Unlock, each needing Quorum() nodes.
//
// On failure every node that may hold our permit is told to release it,
// including those that had not answered. The error matches ErrNotAcquired
// (and ctx.Err() when ctx ended the wait), as Lock's does. When a node
// that answered holds live holders that use a different number of permits,
// the attempt fails even if a quorum said yes, and Acquire stops at once
// with an error that matches ErrPermitsMismatch and ErrNotAcquired, and
// names both numbers: waiting would not help.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, opts, true)
}

// TryAcquire makes exactly one attempt to take a permit. On failure it
// behaves as Acquire does, and returns an error that matches
// ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, opts, false)
}

func (s *Semaphore) acquire(ctx context.Context, opts []LockOption, wait bool) (*Lock, error) {
	all := s.opts
	if len(opts) > 0 {
		all = append(slices.Clip(s.opts), opts...)
	}
	return s.c.acquire(ctx, []string{s.key}, all, wait, s.fl)
}

// checkPermit refuses the options a permit cannot have.
func checkPermit(_ []string, cfg *config) error {
	switch {
	case cfg.fencing:
		return fmt.Errorf("%w: WithFencing is not supported for semaphores", ErrInvalidOption)
	case cfg.owner != "":
		return fmt.Errorf("%w: WithOwner is not supported for semaphores", ErrInvalidOption)
	}
	return nil
}

// permitQuorum is the quorum of a permit of a semaphore of permits permits
// (see semaphoreQuorum), or the lock's majority under the
// majoritySemaphore test hook.
func permitQuorum(c *Client, permits int) int {
	if c.hooks.majoritySemaphore {
		return c.quorum
	}
	return semaphoreQuorum(len(c.nodes), permits)
}

// permitsPrefix starts semacquire.lua's error reply when the key's live
// holders use other permits; the number follows.
const permitsPrefix = "PERMITS "

// permitsMember is the sorted set member that records a semaphore's
// permits, as minus its score.
const permitsMember = "#permits"

// permitsErr is the permit flavour's acquireErr: it turns semacquire.lua's
// permits error into one that matches ErrPermitsMismatch and names both
// numbers; other errors are returned as they are.
func permitsErr(t *target, err error) error {
	if !redis.HasErrorPrefix(err, strings.TrimSpace(permitsPrefix)) {
		return err
	}
	msg := err.Error()
	if i := strings.Index(msg, permitsPrefix); i >= 0 {
		msg = msg[i+len(permitsPrefix):]
	}
	theirs, perr := strconv.Atoi(strings.TrimSpace(msg))
	if perr != nil {
		return err
	}
	return fmt.Errorf("%w: key %q is held with %d permits, this semaphore has %d",
		ErrPermitsMismatch, t.rkeys[0], theirs, t.fl.permits)
}

// permitsRefused reports whether a node refused for disagreeing permits.
// Only a permit's vote can carry ErrPermitsMismatch (see permitsErr), so
// it never finds one in the votes of another flavour.
func permitsRefused(votes []NodeVote) bool {
	for _, v := range votes {
		if errors.Is(v.Err, ErrPermitsMismatch) {
			return true
		}
	}
	return false
}

// permitsMismatch returns the error of an attempt that a node refused for
// disagreeing permits, or nil. It is qerr itself: the node's vote names
// both numbers, and its NodeError makes qerr match ErrPermitsMismatch.
func permitsMismatch(qerr *QuorumError) error {
	if permitsRefused(qerr.Stats.Nodes) {
		return qerr
	}
	return nil
}

// Release ends the permit whose token is token, as Unlock of the Lock that
// Acquire returned would: a permit of another Client or process, such as
// one whose token `redlock lock -permits` printed. It leaves the other
// permits alone. The Client must have the WithKeyPrefix of the
// acquisition. Its result is Client.Release's.
func (s *Semaphore) Release(ctx context.Context, token string) error {
	return s.c.releaseToken(s.key, token, s.opts, s.fl)
}
