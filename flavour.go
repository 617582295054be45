package redlock

import "fmt"

// This file is the table of flavours: the kinds of hold a target takes. A
// flavour is chosen once, when the target is built (see Client.target):
// Lock, TryLock, LockMulti and Do take a plain lock, or an owner lock with
// WithOwner; RLock, TryRLock and RDo a reader; a Semaphore's Acquire and
// TryAcquire a permit. Everything the kinds do differently is a field of
// their flavour, so that the acquisition, release, extension, renewal and
// waiting machinery asks the flavour, and never tests for a kind.
//
// Fencing is not a flavour: it is a property of the target (its fence
// counters), which plain and owner locks may have.

// flavour is one kind of hold. The plain, owner and reader flavours are the
// package's values below; a permit's is made once per Semaphore, by
// permitFlavour, since it carries the semaphore's permits. None is changed
// once made: a target only points at one.
type flavour struct {
	// acquire, release and extend are the flavour's scripts, each with the
	// builder of its KEYS and ARGV (see scripts.go).
	acquire acquireScript
	release releaseScript
	// releaseOne is the release of a target of one key and no fence
	// counter, on a node that is not a Redis Cluster node:
	// releaseplain.lua for a plain lock, which costs what a plain
	// compare-and-delete costs, and release for the others.
	releaseOne releaseScript
	extend     extendScript
	// standard is set for the flavour whose key is a plain string, the
	// wire layout of redsync and the reference clients: a target of one
	// such key and no fence counter is taken with SET NX, and no script
	// (see target.plainSingle).
	standard bool
	// topUp is set for the flavours whose extensions may ask the nodes
	// that never said yes to take the key (WithTopUp, topup.lua): the
	// exclusive locks, plain and owner.
	topUp bool

	// quorum returns how many nodes of c every round of a hold of the
	// flavour needs, given its permits.
	quorum func(c *Client, permits int) int
	// permits is a semaphore's number of permits, and 0 for the other
	// flavours.
	permits int
	// acquireErr returns the error that a node's error reply to the
	// acquire script gives the node's vote: a permit's names both numbers
	// of a disagreement on the permits (see permitsErr).
	acquireErr func(t *target, err error) error

	// check refuses the keys and options the flavour cannot have, with an
	// error that wraps ErrInvalidOption.
	check func(keys []string, cfg *config) error
	// owned is the flavour a call takes instead WithOwner: the owner lock,
	// for a plain one. It is nil where check refuses WithOwner.
	owned *flavour
	// fairly is the flavour a call takes instead WithFair: the fair lock,
	// for a plain one. It is nil where check refuses WithFair.
	fairly *flavour

	// shared is set for the flavour whose holds share a key: readers. A
	// waiting reader queues only behind waiting writers, and readers that
	// wait in a row are woken together (see waitlist).
	shared bool
	// mark returns the command that sets a waiting marker of the flavour
	// (see writerMark and readerMark).
	mark func(marker string, ttlArg any) []any
	// unmark is set when a waiting call that gives up deletes the markers
	// it set (see acquisition.unmark): a writer's marker holds new readers
	// back, and must not outlive its wait.
	unmark bool

	// kind names the flavour in the Observer's events.
	kind Kind
}

var (
	// plainFlavour is a plain lock: one string per key, holding the
	// attempt's value, as redsync and the reference clients keep it.
	plainFlavour = &flavour{
		acquire:    acquireScript{scriptAcquire, lockAcquireArgs},
		release:    releaseScript{scriptRelease, lockReleaseArgs},
		releaseOne: releaseScript{scriptReleasePlain, releasePlainArgs},
		extend:     extendScript{scriptExtend, lockExtendArgs},
		standard:   true,
		topUp:      true,
		quorum:     majority,
		acquireErr: keepErr,
		check:      checkNothing,
		owned:      ownerFlavour,
		fairly:     fairFlavour,
		mark:       writerMark,
		unmark:     true,
		kind:       KindLock,
	}
	// ownerFlavour is an owner (reentrant) lock, WithOwner: a hash per
	// key, with one field per hold of the owner (see holds.lua).
	ownerFlavour = &flavour{
		acquire:    acquireScript{scriptAcquire, lockAcquireArgs},
		release:    releaseScript{scriptRelease, lockReleaseArgs},
		releaseOne: releaseScript{scriptRelease, lockReleaseArgs},
		extend:     extendScript{scriptExtend, lockExtendArgs},
		topUp:      true,
		quorum:     majority,
		acquireErr: keepErr,
		check:      refuseFair("WithFair cannot be used with WithOwner: a reentrant hold would have to pass the queue", checkOwner),
		mark:       writerMark,
		unmark:     true,
		kind:       KindOwner,
	}
	// fairFlavour is a fair lock, WithFair: a plain lock on the nodes,
	// taken through a queue ordered by ticket (see fair.go and
	// fairacquire.lua). It is released, extended and topped up as a plain
	// lock is; SET NX, which cannot see the queue, never takes it.
	fairFlavour = &flavour{
		acquire:    acquireScript{scriptFairAcquire, fairAcquireArgs},
		release:    releaseScript{scriptRelease, lockReleaseArgs},
		releaseOne: releaseScript{scriptReleasePlain, releasePlainArgs},
		extend:     extendScript{scriptExtend, lockExtendArgs},
		topUp:      true,
		quorum:     majority,
		acquireErr: keepErr,
		check:      checkFair,
		mark:       writerMark,
		// A fair call that gives up leaves the marker: the calls behind
		// it count on every release of a queued key being announced, and
		// no reader waits behind a fair key's marker. It expires in a TTL.
		unmark: false,
		kind:   KindFair,
	}
	// readerFlavour is a shared hold of RLock (see rwlock.go).
	readerFlavour = &flavour{
		acquire:    acquireScript{scriptRLock, rlockArgs},
		release:    releaseScript{scriptRUnlock, runlockArgs},
		releaseOne: releaseScript{scriptRUnlock, runlockArgs},
		extend:     extendScript{scriptRExtend, rextendArgs},
		quorum:     readQuorum,
		acquireErr: keepErr,
		check:      refuseFair("WithFair is not supported for RLock", refuseMinHold("WithMinHold cannot be used with RLock", checkReader)),
		shared:     true,
		mark:       readerMark,
		kind:       KindRead,
	}
)

// permitFlavour returns the flavour of a permit of a semaphore of permits
// permits (see semaphore.go). Client.Semaphore makes it once.
func permitFlavour(permits int) *flavour {
	return &flavour{
		acquire:    acquireScript{scriptSemAcquire, semAcquireArgs},
		release:    releaseScript{scriptSemRelease, lockReleaseArgs},
		releaseOne: releaseScript{scriptSemRelease, lockReleaseArgs},
		extend:     extendScript{scriptSemExtend, lockExtendArgs},
		quorum:     permitQuorum,
		permits:    permits,
		acquireErr: permitsErr,
		check:      refuseFair("WithFair is not supported for semaphores", refuseMinHold("WithMinHold is not supported for semaphores", checkPermit)),
		mark:       writerMark,
		unmark:     true,
		kind:       KindPermit,
	}
}

// with returns the flavour of a call of f under cfg: WithFair makes a plain
// lock a fair lock, and WithOwner an owner lock.
func (f *flavour) with(cfg *config) *flavour {
	if cfg.fair && f.fairly != nil {
		// Its check refuses WithOwner.
		return f.fairly
	}
	if cfg.owner != "" && f.owned != nil {
		return f.owned
	}
	return f
}

// majority is the quorum of a lock: the Client's N/2+1.
func majority(c *Client, _ int) int { return c.quorum }

// keepErr gives a vote the node's error as it is.
func keepErr(_ *target, err error) error { return err }

// checkNothing refuses nothing: a plain lock takes every option.
func checkNothing([]string, *config) error { return nil }

// refuseMinHold returns check, refusing WithMinHold first, with msg, for
// the shared holds: readers and permits. Their release before the end of
// the minimum hold would have to keep one holder's share of the key (a
// reader's field, a permit's member) until then, which releaselater.lua
// does not do. WithLockDelay needs nothing of them: their scripts keep each
// holder's expiry from the TTL they are sent, delay included.
func refuseMinHold(msg string, check func([]string, *config) error) func([]string, *config) error {
	return func(keys []string, cfg *config) error {
		if cfg.minHold > 0 {
			return fmt.Errorf("%w: %s", ErrInvalidOption, msg)
		}
		return check(keys, cfg)
	}
}

// refuseFair returns check, refusing WithFair first, with msg, for the
// flavours that have no queue.
func refuseFair(msg string, check func([]string, *config) error) func([]string, *config) error {
	return func(keys []string, cfg *config) error {
		if cfg.fair {
			return fmt.Errorf("%w: %s", ErrInvalidOption, msg)
		}
		return check(keys, cfg)
	}
}

// checkFair refuses the keys and options a fair lock cannot have: several
// keys (one queue per key could not order a call that waits for several)
// and WithOwner (a reentrant hold would have to pass the queue).
func checkFair(keys []string, cfg *config) error {
	switch {
	case len(keys) > 1:
		return fmt.Errorf("%w: WithFair locks one key; a multi-key lock has no single queue to wait in", ErrInvalidOption)
	case cfg.owner != "":
		return fmt.Errorf("%w: WithFair cannot be used with WithOwner: a reentrant hold would have to pass the queue", ErrInvalidOption)
	}
	return nil
}

// checkOwner refuses the keys and options an owner lock cannot have. A
// minimum hold and a lock-delay are refused: they keep an acquisition's
// field in the owner's key past its Unlock or its end, while the owner's
// other acquisitions release the key by their own count (release.lua), so
// the key would be freed before the minimum hold ended, or kept by a stale
// field past a clean Unlock of the owner's next hold.
func checkOwner(keys []string, cfg *config) error {
	switch {
	case len(keys) > 1:
		return fmt.Errorf("%w: WithOwner locks one key; a multi-key lock cannot be reentrant", ErrInvalidOption)
	case cfg.minHold > 0:
		return fmt.Errorf("%w: WithMinHold cannot be used with WithOwner: the owner's other holds of the key would release it before the minimum hold ends", ErrInvalidOption)
	case cfg.lockDelay > 0:
		return fmt.Errorf("%w: WithLockDelay cannot be used with WithOwner: the owner re-enters a delayed key at once, and the stale hold would then keep the key past the next clean Unlock", ErrInvalidOption)
	}
	return nil
}
