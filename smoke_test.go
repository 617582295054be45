package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestSmokeRealServers is the fast tier's one real-server test (go test
// -short skips every other): each kind of lock once on five real
// redis-servers, with the commands and scripts they run there. Two Clients
// contend, as two processes would.
func TestSmokeRealServers(t *testing.T) {
	redistest.Smoke(t)
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs, WithTTL(5*time.Second), WithNodeTimeout(500*time.Millisecond))
	other := realClients(t, srv, 1, WithTTL(5*time.Second), WithNodeTimeout(500*time.Millisecond))[0]
	ctx := t.Context()

	l, err := c.TryLock(ctx, "smoke", WithFencing(true), WithLabel("smoke"))
	require.NoError(t, err, "fenced lock")
	_, err = other.TryLock(ctx, "smoke")
	require.ErrorIs(t, err, ErrNotAcquired, "a second holder")
	require.NoError(t, l.Extend(ctx, WithTTL(10*time.Second)))
	require.NoError(t, l.Unlock(ctx))
	l, err = other.TryLock(ctx, "smoke")
	require.NoError(t, err, "after the release")
	require.NoError(t, l.Unlock(ctx))

	m, err := c.TryLockMulti(ctx, []string{"smoke:a", "smoke:b"})
	require.NoError(t, err, "multi-key lock")
	require.NoError(t, m.Extend(ctx))
	require.NoError(t, m.Unlock(ctx))

	o, err := c.TryLock(ctx, "smoke:owner", WithOwner("me"))
	require.NoError(t, err, "owner lock")
	o2, err := c.TryLock(ctx, "smoke:owner", WithOwner("me"))
	require.NoError(t, err, "reentrant")
	require.NoError(t, o2.Unlock(ctx))
	require.NoError(t, o.Unlock(ctx))

	r1, err := c.TryRLock(ctx, "smoke:rw")
	require.NoError(t, err, "reader")
	r2, err := other.TryRLock(ctx, "smoke:rw")
	require.NoError(t, err, "second reader")
	_, err = c.TryLock(ctx, "smoke:rw")
	require.ErrorIs(t, err, ErrNotAcquired, "a writer beside readers")
	require.NoError(t, r1.Extend(ctx))
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))

	s, err := c.Semaphore("smoke:sem", 2)
	require.NoError(t, err)
	p1, err := s.TryAcquire(ctx)
	require.NoError(t, err, "first permit")
	s2, err := other.Semaphore("smoke:sem", 2)
	require.NoError(t, err)
	p2, err := s2.TryAcquire(ctx)
	require.NoError(t, err, "second permit")
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, ErrNotAcquired, "a third permit of two")
	require.NoError(t, p1.Extend(ctx))
	require.NoError(t, p1.Unlock(ctx))
	require.NoError(t, p2.Unlock(ctx))

	for _, k := range []string{"smoke", "smoke:a", "smoke:b", "smoke:owner", "smoke:rw", "smoke:sem"} {
		realEventually(t, srv, k, "")
	}
}
