package redlockgocron_test

import (
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	redlockgocron "github.com/redlockgo/redlock/contrib/gocron"
)

// TestLockerRunsEachTickOnce runs two real gocron schedulers, each with a
// Locker on a Client of its own, on 5 real servers: every tick of a job
// that fires each second runs on exactly one of them.
func TestLockerRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	servers := startServers(t)
	rec := newTicks()
	var stops []func()
	for _, who := range []string{"a", "b"} {
		lk, err := redlockgocron.NewLocker(newClient(t, servers), redlockgocron.WithSplay(splay))
		require.NoError(t, err)
		stops = append(stops, startScheduler(t, who, rec, gocron.WithDistributedLocker(lk)))
	}
	rec.waitFor(t, "", 8, time.Time{})
	for _, stop := range stops {
		stop()
	}
	rec.requireOnce(t)
	t.Logf("runs: %s", rec)
}

// TestLockerLock checks what gocron sees of one Lock: a held key is not
// waited for, and the key carries the prefix.
func TestLockerLock(t *testing.T) {
	t.Parallel()
	servers := startServers(t)
	c := newClient(t, servers)
	lk, err := redlockgocron.NewLocker(c, redlockgocron.WithKeyPrefix("jobs:"), redlockgocron.WithSplay(time.Hour))
	require.NoError(t, err)

	l, err := lk.Lock(t.Context(), "report")
	require.NoError(t, err)
	rl, ok := l.(*redlock.Lock)
	require.True(t, ok, "got %T, want *redlock.Lock", l)
	require.Equal(t, "jobs:report", rl.Key(), "got key %q, want jobs:report", rl.Key())

	// Another scheduler's Lock fails at once, without waiting for the TTL.
	other, err := redlockgocron.NewLocker(newClient(t, servers), redlockgocron.WithKeyPrefix("jobs:"))
	require.NoError(t, err)
	_, err = other.Lock(t.Context(), "report")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "got %v, want ErrNotAcquired", err)

	// With a splay, the key stays held after Unlock until the splay ends.
	require.NoError(t, l.Unlock(t.Context()))
	_, err = other.Lock(t.Context(), "report")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "after Unlock within the splay: got %v, want ErrNotAcquired", err)

	// WithLockOptions reaches the lock.
	fenced, err := redlockgocron.NewLocker(c, redlockgocron.WithLockOptions(redlock.WithFencing(true)))
	require.NoError(t, err)
	l, err = fenced.Lock(t.Context(), "fenced")
	require.NoError(t, err)
	require.NotZero(t, l.(*redlock.Lock).Fence(), "WithLockOptions(WithFencing(true)): got fence 0")
	require.NoError(t, l.Unlock(t.Context()))

	// Without a splay, Unlock frees the key.
	free, err := other.Lock(t.Context(), "daily")
	require.NoError(t, err)
	require.NoError(t, free.Unlock(t.Context()))
	again, err := lk.Lock(t.Context(), "daily")
	require.NoError(t, err, "after Unlock without a splay")
	require.NoError(t, again.Unlock(t.Context()))
}

func TestNewLockerRefuses(t *testing.T) {
	t.Parallel()
	_, err := redlockgocron.NewLocker(nil)
	require.ErrorIs(t, err, redlock.ErrInvalidOption, "nil Client: got %v", err)
	_, err = redlockgocron.NewLocker(&redlock.Client{}, redlockgocron.WithSplay(-time.Second))
	require.ErrorIs(t, err, redlock.ErrInvalidOption, "negative splay: got %v", err)
	require.ErrorContains(t, err, "splay must not be negative, got -1s")
	_, err = redlockgocron.NewLocker(&redlock.Client{}, nil)
	require.ErrorIs(t, err, redlock.ErrInvalidOption, "nil option: got %v", err)
}
