package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A lock taken by one Client is released by another that knows only its key
// and token, as `redlock release` does for a token `redlock lock` printed:
// the holder then finds it gone, a second release finds it not held, and a
// wrong token releases nothing.
func TestReleaseByToken(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	holder, other := cl[0], cl[1]
	ctx := context.Background()

	for _, tt := range []struct {
		name    string
		opts    []LockOption
		lock    func(key string) (*Lock, error)
		release func(key, token string) error
	}{
		{"plain", nil,
			func(key string) (*Lock, error) { return holder.TryLock(ctx, key) },
			func(key, token string) error { return other.Release(ctx, key, token) }},
		{"fenced", nil,
			func(key string) (*Lock, error) { return holder.TryLock(ctx, key, WithFencing(true)) },
			func(key, token string) error { return other.Release(ctx, key, token) }},
		{"owner", nil,
			func(key string) (*Lock, error) { return holder.TryLock(ctx, key, WithOwner("worker-7")) },
			func(key, token string) error { return other.Release(ctx, key, token, WithOwner("worker-7")) }},
		{"reader", nil,
			func(key string) (*Lock, error) { return holder.TryRLock(ctx, key) },
			func(key, token string) error { return other.ReleaseRead(ctx, key, token) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "release-" + tt.name
			l, err := tt.lock(key)
			require.NoError(t, err)

			err = tt.release(key, l.Token()+"x")
			require.ErrorIs(t, err, ErrNotHeld, "a wrong token must release nothing")
			require.NoError(t, l.Extend(ctx), "the holder lost its lock to a release with a wrong token")

			require.NoError(t, tt.release(key, l.Token()))
			require.ErrorIs(t, l.Extend(ctx), ErrNotHeld, "the holder still holds a lock released by its token")
			require.ErrorIs(t, tt.release(key, l.Token()), ErrNotHeld, "a second release")

			l2, err := tt.lock(key)
			require.NoError(t, err, "the key is not free after the release")
			require.NoError(t, l2.Unlock(ctx))
			_ = l.Unlock(ctx)
		})
	}
}

// A release by token waits for no acquisition: a reader's release leaves the
// other readers alone.
func TestReleaseReadLeavesOtherReaders(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	ctx := context.Background()
	r1, err := cl[0].TryRLock(ctx, "readers")
	require.NoError(t, err)
	r2, err := cl[0].TryRLock(ctx, "readers")
	require.NoError(t, err)
	require.NoError(t, cl[1].ReleaseRead(ctx, "readers", r1.Token()))
	require.ErrorIs(t, r1.Extend(ctx), ErrNotHeld)
	require.NoError(t, r2.Extend(ctx), "another reader lost its hold")
	_, err = cl[1].TryLock(ctx, "readers")
	require.ErrorIs(t, err, ErrNotAcquired, "a writer got in beside a reader")
	require.NoError(t, r2.Unlock(ctx))
}

// Bad input names the problem; a release with too few nodes up cannot be
// confirmed.
func TestReleaseErrors(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 1, WithTTL(10*time.Second))[0]
	ctx := context.Background()
	err := cl.Release(ctx, "k", "")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "token must not be empty")
	require.ErrorIs(t, cl.Release(ctx, "", "tok"), ErrInvalidOption)

	l, err := cl.TryLock(ctx, "down")
	require.NoError(t, err)
	srv[0].Kill()
	srv[1].Kill()
	err = cl.Release(ctx, "down", l.Token())
	require.ErrorIs(t, err, ErrUnconfirmed, "%v", err)
	require.False(t, errors.Is(err, ErrNotHeld))
	require.NoError(t, cl.Close())
	require.ErrorIs(t, cl.Release(ctx, "down", l.Token()), ErrClosed)
}

// A permit is released by its token, and the other permits stay.
func TestSemaphoreReleaseByToken(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	ctx := context.Background()
	s0, err := cl[0].Semaphore("permits", 2)
	require.NoError(t, err)
	s1, err := cl[1].Semaphore("permits", 2)
	require.NoError(t, err)
	p1, err := s0.TryAcquire(ctx)
	require.NoError(t, err)
	p2, err := s0.TryAcquire(ctx)
	require.NoError(t, err)
	_, err = s1.TryAcquire(ctx)
	require.ErrorIs(t, err, ErrNotAcquired, "a third permit of two")

	require.ErrorIs(t, s1.Release(ctx, p1.Token()+"x"), ErrNotHeld)
	require.NoError(t, s1.Release(ctx, p1.Token()))
	require.ErrorIs(t, p1.Extend(ctx), ErrNotHeld)
	require.NoError(t, p2.Extend(ctx), "another permit was released")
	p3, err := s1.TryAcquire(ctx)
	require.NoError(t, err, "the released permit is not free")
	require.NoError(t, p3.Unlock(ctx))
	require.NoError(t, p2.Unlock(ctx))
}
