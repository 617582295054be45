package redlock

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// This file is the key namespace of a lock: the Client's key prefix, the
// checks of the keys a call gives, and the names derived from them (the
// waiting markers, release channels and fence counters of
// internal/keyspace), gathered in the target that one acquisition holds.

// target is what one acquisition holds on every node: its keys, id, owner
// and flavour. It is built once, by newTarget (Client.target adds its
// lock-delay), and never changed once shared. Each attempt writes a value
// of its own, derived from the id (see token).
type target struct {
	fl    *flavour // the kind of hold: see flavour.go
	rkeys []string // the Redis keys: prefix + keys as given
	id    string   // the acquisition's random id
	owner string   // WithOwner's id for the owner flavour, else ""
	fence []string // the keys' fence counters; nil without fencing
	// quorum is the number of yes votes every round of the target needs,
	// by the flavour's rule: the Client's majority for a lock, more for a
	// semaphore of several permits (see semaphoreQuorum).
	quorum int

	// waiting and chans are the keys' waiting markers and release
	// channels (see internal/keyspace).
	waiting, chans []string

	// The same, boxed once for the commands' arguments: rkeys, then
	// scriptKeys, then the lock keys followed by their waiting markers (the
	// KEYS of the release scripts and of rlock.lua), then the channels,
	// then owner.
	kargs, skargs, relKeys, chanArgs []any
	ownerArg                         any

	// delay is the lock-delay (WithLockDelay): the extension builders
	// add it to the TTL they send, so that the nodes keep the keys that
	// much past the validity. Client.target sets it, before the target is
	// shared.
	delay time.Duration

	// fair is a fair lock's queue keys (see fair.go); nil for the other
	// flavours.
	fair *fairKeys

	// election is set for the target of an Election's Campaign: its events
	// carry KindElection. Client.Election sets it, before the target is
	// shared.
	election bool
	// events are the wait events of a Campaign's acquisition that won,
	// which acquireTarget leaves to Campaign to finish: the call has not
	// succeeded until its term record is stored. Only the campaigning
	// goroutine uses them.
	events *callEvents
}

// kind is what the Observer's events say the target's holds are: the
// flavour's kind, or KindElection for a Campaign.
func (t *target) kind() Kind {
	if t.election {
		return KindElection
	}
	return t.fl.kind
}

// target checks the keys of an acquisition of flavour fl, and the options
// the flavour refuses, and builds what it will hold: WithOwner makes a
// plain lock an owner lock (see flavour.with). The error wraps
// ErrInvalidOption and names the problem.
func (c *Client) target(keys []string, cfg *config, fl *flavour) (*target, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys given", ErrInvalidOption)
	}
	fl = fl.with(cfg)
	rkeys := make([]string, len(keys))
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if k == "" {
			if len(keys) == 1 {
				return nil, fmt.Errorf("%w: key must not be empty", ErrInvalidOption)
			}
			return nil, fmt.Errorf("%w: key %d must not be empty", ErrInvalidOption, i)
		}
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("%w: key %q is given twice (at %d and %d)", ErrInvalidOption, k, j, i)
		}
		seen[k] = i
		rkeys[i] = cfg.keyPrefix + k
		if err := keyspace.Check(rkeys[i]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	if err := fl.check(keys, cfg); err != nil {
		return nil, err
	}
	t := newTarget(fl, rkeys, uuid.NewString(), cfg.owner, cfg.fencing, fl.quorum(c, fl.permits))
	t.delay = cfg.lockDelay
	if err := c.checkSlots(t); err != nil {
		return nil, err
	}
	return t, nil
}

// newTarget builds the target of flavour fl on the Redis keys rkeys, for
// the acquisition id, with the keys' fence counters when fencing is set: it
// names the keys' markers and channels, and boxes the commands' arguments.
// It is the only place a target is made. It checks nothing: see
// Client.target.
func newTarget(fl *flavour, rkeys []string, id, owner string, fencing bool, quorum int) *target {
	t := &target{fl: fl, rkeys: rkeys, id: id, owner: owner, quorum: quorum}
	if fencing {
		t.fence = make([]string, len(rkeys))
		for i, rk := range rkeys {
			t.fence[i] = keyspace.Fence(rk)
		}
	}
	t.box()
	if fl.kind == KindFair {
		t.fair = newFairKeys(rkeys[0], t.fence)
	}
	return t
}

// box names the target's markers and channels, and fills its boxed
// arguments.
func (t *target) box() {
	n := len(t.rkeys)
	names := make([]string, 2*n)
	t.waiting, t.chans = names[:n:n], names[n:]
	for i, rk := range t.rkeys {
		t.waiting[i], t.chans[i] = keyspace.Waiting(rk), keyspace.Channel(rk)
	}
	keys := t.scriptKeys()
	boxed := make([]any, len(keys)+3*n)
	for i, k := range keys {
		boxed[i] = k
	}
	// The lock keys are the first of keys: boxed once, for both.
	rel := boxed[len(keys) : len(keys)+2*n]
	for i := range n {
		rel[i], rel[n+i] = boxed[i], t.waiting[i]
		boxed[len(keys)+2*n+i] = t.chans[i]
	}
	// Each capped, so that no append to one writes over the next.
	t.skargs = boxed[:len(keys):len(keys)]
	t.kargs = boxed[:n:n]
	t.relKeys = rel[: 2*n : 2*n]
	t.chanArgs = boxed[len(keys)+2*n:]
	t.ownerArg = t.owner
}

// scriptKeys returns the lock keys, followed by the fence counters when there
// are any.
func (t *target) scriptKeys() []string {
	if t.fence == nil {
		return t.rkeys
	}
	return append(slices.Clip(t.rkeys), t.fence...)
}

// plainSingle reports whether the target has the standard wire layout: one
// key of the standard flavour (a plain lock), and no fence counter.
func (t *target) plainSingle() bool {
	return t.fl.standard && len(t.rkeys) == 1 && t.fence == nil
}

// checkSlots refuses, on a Redis Cluster node, keys that do not share a hash
// slot: a script can only touch keys of one slot there.
func (c *Client) checkSlots(t *target) error {
	keys := t.scriptKeys()
	if len(keys) < 2 {
		return nil
	}
	cluster := false
	for _, n := range c.nodes {
		if _, ok := n.client.(*redis.ClusterClient); ok {
			cluster = true
		}
	}
	if !cluster {
		return nil
	}
	first := keyspace.Slot(keys[0])
	for _, k := range keys[1:] {
		if keyspace.Slot(k) != first {
			return fmt.Errorf("%w: keys %q and %q are in different hash slots of a Redis Cluster: "+
				"use hash tags so that they share one, such as {order:42}:a and {order:42}:b",
				ErrInvalidOption, keys[0], k)
		}
	}
	return nil
}
