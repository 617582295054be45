package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLayoutsExcludeEachOther: every layout of this library (a plain lock, an
// owner lock, readers, a semaphore's permits) makes the key taken for the
// others, never "wrong type"; data of another program is named as such,
// whoever asks.
func TestLayoutsExcludeEachOther(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
	sem := func(key string) *Semaphore {
		s, err := c.Semaphore(key, 2)
		require.NoError(t, err)
		return s
	}
	ctx := t.Context()
	holders := map[string]func(key string) (*Lock, error){
		"lock":      func(key string) (*Lock, error) { return c.TryLock(ctx, key) },
		"owner":     func(key string) (*Lock, error) { return c.TryLock(ctx, key, WithOwner("o")) },
		"reader":    func(key string) (*Lock, error) { return c.TryRLock(ctx, key) },
		"semaphore": func(key string) (*Lock, error) { return sem(key).TryAcquire(ctx) },
	}
	askers := map[string]func(key string) (*Lock, error){
		"lock":      func(key string) (*Lock, error) { return c.TryLock(ctx, key) },
		"reader":    func(key string) (*Lock, error) { return c.TryRLock(ctx, key) },
		"semaphore": func(key string) (*Lock, error) { return sem(key).TryAcquire(ctx) },
	}
	for hn, hold := range holders {
		for an, ask := range askers {
			t.Run(hn+" then "+an, func(t *testing.T) {
				key := hn + "-" + an
				h, err := hold(key)
				require.NoError(t, err)
				l, err := ask(key)
				if hn == an && hn != "lock" {
					// Readers share; a semaphore of 2 has a permit left.
					require.NoError(t, err)
					require.NoError(t, l.Unlock(ctx))
				} else {
					require.ErrorIs(t, err, ErrNotAcquired)
					require.NotErrorIs(t, err, ErrWrongType, "a %s's key is taken for a %s, not of a wrong type", hn, an)
				}
				require.NoError(t, h.Unlock(ctx))
			})
		}
	}
	// Data of another program: a sorted set without '#permits' and a list.
	for _, m := range ms {
		_, err := m.ZAdd("scores", 1, "alice")
		require.NoError(t, err)
		_, err = m.Lpush("jobs", "a")
		require.NoError(t, err)
	}
	for an, ask := range askers {
		for _, key := range []string{"scores", "jobs"} {
			_, err := ask(key)
			require.ErrorIs(t, err, ErrWrongType, "%s on %s", an, key)
			require.ErrorIs(t, err, ErrNotAcquired, "%s on %s", an, key)
		}
	}
	for i, m := range ms {
		require.Equal(t, "zset", m.Type("scores"), "node %d: the foreign set must be left alone", i)
		members, err := m.ZMembers("scores")
		require.NoError(t, err)
		require.Equal(t, []string{"alice"}, members, "node %d", i)
		require.Equal(t, "list", m.Type("jobs"), "node %d", i)
	}
}

// TestRedsyncWireLayout checks that we and a client using redsync's layout
// (SET key value NX PX ttl, and its compare-and-delete script) exclude each
// other on the same keys.
func TestRedsyncWireLayout(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	const redsyncDelete = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`
	redsyncLock := func(key, value string) int {
		n := 0
		for _, rc := range cs {
			ok, err := rc.SetNX(t.Context(), key, value, 8*time.Second).Result()
			require.NoError(t, err)
			if ok {
				n++
			}
		}
		return n
	}
	redsyncUnlock := func(key, value string) {
		for _, rc := range cs {
			require.NoError(t, rc.Eval(t.Context(), redsyncDelete, []string{key}, value).Err())
		}
	}

	// Our lock is a plain string holding the token, with the TTL in ms.
	l, err := c.TryLock(t.Context(), "shared")
	require.NoError(t, err)
	eventually(t, ms, "shared", l.Token())
	for _, m := range ms {
		require.Equal(t, DefaultTTL, m.TTL("shared"))
	}
	require.Zero(t, redsyncLock("shared", "redsync-value"), "redsync took a key we hold")
	redsyncUnlock("shared", "redsync-value")
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "shared", "")

	// A key that redsync holds blocks us.
	require.Equal(t, 5, redsyncLock("shared", "redsync-value"))
	_, err = c.TryLock(t.Context(), "shared")
	require.ErrorIs(t, err, ErrNotAcquired)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Zero(t, qe.Stats.Yes)
	require.GreaterOrEqual(t, qe.Stats.No, 3)
	redsyncUnlock("shared", "redsync-value")
	l, err = c.TryLock(t.Context(), "shared")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
}
