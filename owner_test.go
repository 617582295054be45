package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOwnerNestedHolds(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Millisecond, 2*time.Millisecond))
	outer, err := c.Lock(t.Context(), "re", WithOwner("worker-1"))
	require.NoError(t, err)
	require.Equal(t, "worker-1", outer.Owner())
	inner, err := c.TryLock(t.Context(), "re", WithOwner("worker-1"))
	require.NoError(t, err, "the owner re-enters at once")
	innermost, err := c.TryLock(t.Context(), "re", WithOwner("worker-1"))
	require.NoError(t, err)
	eventuallyCount(t, ms, "re", 3)
	require.Equal(t, "worker-1", ms[0].HGet("re", "owner"))

	require.NoError(t, innermost.Unlock(t.Context()))
	eventuallyCount(t, ms, "re", 2)
	require.NoError(t, inner.Unlock(t.Context()))
	eventuallyCount(t, ms, "re", 1)
	// Still held: others are blocked.
	_, err = c.TryLock(t.Context(), "re")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, outer.Unlock(t.Context()))
	eventuallyCount(t, ms, "re", 0)
	l, err := c.TryLock(t.Context(), "re")
	require.NoError(t, err, "released at zero")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestOwnerMixedOwnersAndPlainLocks(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	a, err := c.TryLock(t.Context(), "mixed", WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "mixed", WithOwner("b"))
	require.ErrorIs(t, err, ErrNotAcquired, "another owner")
	_, err = c.TryLock(t.Context(), "mixed")
	require.ErrorIs(t, err, ErrNotAcquired, "a plain lock")
	require.NoError(t, a.Unlock(t.Context()))

	plain, err := c.TryLock(t.Context(), "mixed")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "mixed", WithOwner("a"))
	require.ErrorIs(t, err, ErrNotAcquired, "an owner on a plain lock")
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	for _, v := range qe.Stats.Nodes {
		require.NotEqual(t, VoteFailed, v.Vote, "a plain key is taken, not an error, for an owner lock: node %d: %v", v.Index, v.Err)
	}
	require.NoError(t, plain.Unlock(t.Context()))
}

func TestOwnerSharedByTwoProcesses(t *testing.T) {
	ms, cs := minis(t, 5)
	p1 := newClient(t, cs)
	p2 := newClient(t, ownClients(t, cs))
	l1, err := p1.TryLock(t.Context(), "shared-owner", WithOwner("job-7"))
	require.NoError(t, err)
	l2, err := p2.TryLock(t.Context(), "shared-owner", WithOwner("job-7"))
	require.NoError(t, err, "the same owner id in another process")
	eventuallyCount(t, ms, "shared-owner", 2)
	require.NoError(t, l1.Unlock(t.Context()))
	_, err = p1.TryLock(t.Context(), "shared-owner")
	require.ErrorIs(t, err, ErrNotAcquired, "the other process still holds it")
	require.NoError(t, l2.Extend(t.Context()))
	require.NoError(t, l2.Unlock(t.Context()))
	eventuallyCount(t, ms, "shared-owner", 0)
}

func TestOwnerExpiryInTheMiddleOfNesting(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	// A TTL long enough that a loaded machine does not see it run out
	// between the acquisitions and the check.
	c := newClient(t, cs, WithTTL(2*time.Second), WithNodeTimeout(50*time.Millisecond))
	outer, err := c.TryLock(t.Context(), "nest", WithOwner("x"))
	require.NoError(t, err)
	inner, err := c.TryLock(t.Context(), "nest", WithOwner("x"))
	require.NoError(t, err)
	// A nested acquisition with a shorter TTL does not shorten the lock.
	short, err := c.TryLock(t.Context(), "nest", WithOwner("x"), WithTTL(60*time.Millisecond))
	if err == nil {
		_ = short.Unlock(t.Context())
	}
	holding := 0
	for i, m := range ms {
		if m.Exists("nest") {
			holding++
			require.Greater(t, m.TTL("nest"), time.Second, "node %d: the nested 60ms TTL shortened the lock", i)
		}
	}
	require.GreaterOrEqual(t, holding, 3)

	// Nobody extends: the key expires while nested.
	<-outer.Done()
	require.ErrorIs(t, outer.Err(), ErrLockLost)
	require.Eventually(t, func() bool {
		for _, m := range ms {
			if m.Exists("nest") {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	other, err := c.TryLock(t.Context(), "nest", WithOwner("y"))
	require.NoError(t, err, "another owner takes the expired lock")
	require.ErrorIs(t, inner.Unlock(t.Context()), ErrNotHeld)
	require.ErrorIs(t, outer.Extend(t.Context()), ErrNotHeld)
	require.ErrorIs(t, outer.Unlock(t.Context()), ErrNotHeld)
	eventuallyCount(t, ms, "nest", 1)
	for _, m := range ms {
		require.Equal(t, "y", m.HGet("nest", "owner"), "the old owner's unlock touched the new owner's lock")
	}
	require.NoError(t, other.Unlock(t.Context()))
}
