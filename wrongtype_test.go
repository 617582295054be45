package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestWrongTypeIsNamed: a list at the lock key is named as a value of
// another type, for TryLock's SET NX and for Lock's later attempts.
func TestWrongTypeIsNamed(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	for _, m := range ms[:3] {
		_, err := m.Lpush("jobs", "a")
		require.NoError(t, err)
	}
	require.NoError(t, ms[3].Set("jobs", "someone-else"))
	// inFlight allows, for a Lock call cut short by its ctx, a node that
	// its last attempt did not ask, because a request of an earlier
	// attempt was still out (seen on a loaded machine): nothing names it.
	check := func(err error, inFlight bool) {
		t.Helper()
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, ErrWrongType)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		var named []string
		for i := range 3 {
			v := qe.Stats.Nodes[i]
			if inFlight && v.Vote == VoteFailed && errors.Is(v.Err, ErrInFlight) {
				continue
			}
			require.Equal(t, VoteNo, v.Vote, "node %d", i)
			require.ErrorIs(t, v.Err, ErrWrongType, "node %d", i)
			named = append(named, strconv.Itoa(i))
		}
		require.NotEmpty(t, named)
		require.Contains(t, err.Error(), "wrong type at the key (not a lock): nodes "+strings.Join(named, ","))
		require.NotErrorIs(t, qe.Stats.Nodes[3].Err, ErrWrongType, "a string is a lock: taken, not wrong type")
		require.Equal(t, 3-len(named), qe.Stats.Failed, "only nodes not asked may fail")
	}
	_, err := c.TryLock(t.Context(), "jobs")
	check(err, false)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "jobs")
	check(err, true)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// An owner lock's hash is a lock: taken, not wrong type.
	o, err := c.TryLock(t.Context(), "owned", WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "owned")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NotErrorIs(t, err, ErrWrongType)
	require.NoError(t, o.Unlock(t.Context()))
	for i, m := range ms[:3] {
		typ := m.Type("jobs")
		require.Equal(t, "list", typ, "node %d: the foreign list must be left alone", i)
	}
	eventually(t, []*miniredis.Miniredis{ms[4]}, "jobs", "")
}

// TestRealWrongTypeIsNamed: on real redis-servers, a list at the key is
// named for TryLock's SET NX (through TYPE) and for Lock's later attempts,
// whose SET ... GET gets WRONGTYPE, and an owner lock's hash is not.
func TestRealWrongTypeIsNamed(t *testing.T) {
	redistest.Require(t)
	srv := redistest.StartN(t, 3, redistest.Options{})
	c := realClients(t, srv, 1, WithRetryDelay(time.Millisecond, 5*time.Millisecond))[0]
	for _, s := range srv[:2] {
		require.NoError(t, s.NewClient(t).RPush(t.Context(), "real-jobs", "a").Err())
	}
	_, err := c.TryLock(t.Context(), "real-jobs")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrWrongType)
	require.Contains(t, err.Error(), "wrong type at the key (not a lock): nodes 0,1")

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "real-jobs")
	require.ErrorIs(t, err, ErrWrongType)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Zero(t, qe.Stats.Failed, "WRONGTYPE is a no, not a failure: %v", err)

	o, err := c.TryLock(t.Context(), "real-owned", WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "real-owned")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NotErrorIs(t, err, ErrWrongType, "an owner lock is a lock")
	require.NoError(t, o.Unlock(t.Context()))
}
