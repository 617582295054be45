package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// TestNaturalNamesAreIndependentLocks takes locks on names that the library
// once derived from other lock keys by concatenation: each must be a lock of
// its own, which no Unlock, waiter or fence counter of the other touches.
func TestNaturalNamesAreIndependentLocks(t *testing.T) {
	_, cs := realNodes(t, 3)
	ctx := t.Context()
	c := newClient(t, cs, WithTTL(5*time.Second), WithRetryDelay(5*time.Millisecond, 10*time.Millisecond))

	t.Run("marker name", func(t *testing.T) {
		b, err := c.TryLock(ctx, "jobs:{q1}:waiting")
		require.NoError(t, err)
		a, err := c.TryLock(ctx, "jobs:{q1}")
		require.NoError(t, err)
		// A waiter on the first marks it, and gives up.
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Lock(wctx, "jobs:{q1}")
		cancel()
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, a.Unlock(ctx))
		for i, rc := range cs {
			v, err := rc.Get(ctx, "jobs:{q1}:waiting").Result()
			require.NoError(t, err, "node %d: the lock on jobs:{q1}:waiting is gone", i)
			require.Equal(t, b.Token(), v, "node %d: the lock on jobs:{q1}:waiting was overwritten", i)
		}
		require.NoError(t, b.Unlock(ctx), "the real holder's Unlock")
	})
	t.Run("fence name", func(t *testing.T) {
		f, err := c.TryLock(ctx, "acct", WithFencing(true))
		require.NoError(t, err)
		require.NoError(t, f.Unlock(ctx))
		for _, k := range []string{"{acct}:fence", "acct:fence"} {
			l, err := c.TryLock(ctx, k)
			require.NoError(t, err, "a lock on %q beside a fenced lock on acct", k)
			require.NoError(t, l.Unlock(ctx))
		}
	})
	t.Run("reserved", func(t *testing.T) {
		for _, k := range []string{"acct" + keyspace.Reserved + "fence", keyspace.Reserved} {
			_, err := c.TryLock(ctx, k)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.Contains(t, err.Error(), "reserves")
		}
		_, err := c.Inspect(ctx, "acct"+keyspace.Reserved+"fence")
		require.ErrorIs(t, err, ErrInvalidOption, "Inspect refuses what Lock refuses")
		cx := newClient(t, cs, WithTTL(5*time.Second), WithKeyPrefix("x\x00"))
		l, err := cx.TryLock(ctx, "redlock")
		require.NoError(t, err, "a key with part of the reserved sequence")
		require.NoError(t, l.Unlock(ctx))
		_, err = cx.TryLock(ctx, "redlock:fence")
		require.ErrorIs(t, err, ErrInvalidOption, "the reserved sequence across prefix and key")
	})
}

// TestPrefixScopedACLIsEnough runs every kind of lock as a user whose ACL
// allows only the Client's key prefix (~lk:* and &lk:*): every key and
// channel a lock uses must lie under it. Check finds a user that lacks
// either pattern.
func TestPrefixScopedACLIsEnough(t *testing.T) {
	srv, admin := realNodes(t, 3)
	ctx := t.Context()
	users := map[string]string{"scoped": "~lk:* &lk:*", "nochan": "~lk:* resetchannels", "nokeys": "~other:* &lk:*"}
	for _, rc := range admin {
		for u, pat := range users {
			args := []any{"ACL", "SETUSER", u, "on", ">pw", "+@all"}
			for _, p := range strings.Fields(pat) {
				args = append(args, p)
			}
			require.NoError(t, rc.Do(ctx, args...).Err())
		}
	}
	clients := func(user string) []redis.UniversalClient {
		out := make([]redis.UniversalClient, len(srv))
		for i, s := range srv {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: user, Password: "pw"})
			t.Cleanup(func() { _ = rc.Close() })
			out[i] = rc
		}
		return out
	}
	c := newClient(t, clients("scoped"), WithKeyPrefix("lk:"), WithTTL(5*time.Second))
	other := newClient(t, clients("scoped"), WithKeyPrefix("lk:"), WithTTL(5*time.Second),
		WithRetryDelay(time.Minute, time.Minute))

	for _, k := range []string{"plain", "{tag}x", "a{b"} {
		l, err := c.TryLock(ctx, k, WithFencing(true))
		require.NoError(t, err, "fenced %q", k)
		// A waiter marks the key and subscribes; it can only be woken by
		// the release's announcement, its retry delay being a minute.
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			w, err := other.Lock(wctx, k)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool {
			for _, rc := range admin {
				if rc.Exists(ctx, keyspace.Waiting("lk:"+k)).Val() == 0 {
					return false
				}
			}
			return true
		}, 10*time.Second, time.Millisecond, "the waiter did not mark %q", k)
		require.NoError(t, l.Unlock(ctx), "Unlock of %q with a waiter", k)
		require.NoError(t, <-got, "the waiter on %q", k)
	}
	r, err := c.TryRLock(ctx, "rw")
	require.NoError(t, err)
	require.NoError(t, r.Extend(ctx))
	require.NoError(t, r.Unlock(ctx))
	m, err := c.TryLockMulti(ctx, []string{"{m}1", "{m}2"})
	require.NoError(t, err)
	require.NoError(t, m.Unlock(ctx))
	sem, err := c.Semaphore("sem", 2)
	require.NoError(t, err)
	p, err := sem.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Unlock(ctx))
	o, err := c.TryLock(ctx, "owned", WithOwner("me"))
	require.NoError(t, err)
	require.NoError(t, o.Unlock(ctx))
	for i, rc := range admin {
		// Unlock returns once a quorum released: a loaded machine may
		// deliver the last node's release a little later.
		// The condition runs on another goroutine: it only records, and
		// the assertions run here.
		var keys, left []string
		var err error
		settled := func() bool {
			keys, err = rc.Keys(ctx, "*").Result()
			left = left[:0]
			for _, k := range keys {
				if !isFenceCounter(k) {
					left = append(left, k)
				}
			}
			return err == nil && len(left) == 0
		}
		for deadline := time.Now().Add(10 * time.Second); !settled() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, err)
		for _, k := range keys {
			require.True(t, strings.HasPrefix(k, "lk:"), "node %d: key %q outside the prefix", i, k)
		}
		require.Empty(t, left, "node %d: keys left behind", i)
	}

	check := func(user string) []Finding {
		cc := newClient(t, clients(user), WithKeyPrefix("lk:"))
		rep, err := cc.Check(ctx)
		require.NoError(t, err)
		var acl []Finding
		for _, f := range rep.Findings {
			if f.Check == "acl" {
				acl = append(acl, f)
			}
		}
		return acl
	}
	for _, f := range check("scoped") {
		require.Equal(t, SeverityOK, f.Severity, "scoped user: %s", f.Message)
	}
	for user, want := range map[string]string{"nochan": "release channels", "nokeys": "lock keys"} {
		fs := check(user)
		require.Len(t, fs, len(srv), "%s: one acl finding per node", user)
		for _, f := range fs {
			require.Equal(t, SeverityCritical, f.Severity, "%s: %s", user, f.Message)
			require.Contains(t, f.Message, want)
			require.Contains(t, f.Message, `"lk:"`)
		}
	}
}
