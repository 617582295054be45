package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

func TestMultiTakesEveryKeyOrNone(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	// Two nodes hold "b" for someone else: they must not take "a" or "c".
	require.NoError(t, ms[0].Set("b", "other"))
	require.NoError(t, ms[1].Set("b", "other"))
	l, err := c.TryLockMulti(t.Context(), []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, l.Keys())
	require.Equal(t, "a", l.Key())
	for _, k := range []string{"a", "b", "c"} {
		eventually(t, ms[2:], k, l.Token())
	}
	for i := range 2 {
		require.False(t, ms[i].Exists("a"), "node %d took a without b", i)
		require.False(t, ms[i].Exists("c"), "node %d took c without b", i)
	}
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))
	for _, k := range []string{"a", "c"} {
		eventually(t, ms, k, "")
	}
	eventually(t, ms[2:], "b", "")
	eventually(t, ms[:2], "b", "other")
}

func TestMultiConflictsWithSingleBothWays(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	single, err := c.TryLock(t.Context(), "y")
	require.NoError(t, err)
	_, err = c.TryLockMulti(t.Context(), []string{"x", "y", "z"})
	require.ErrorIs(t, err, ErrNotAcquired, "a multi-key lock took a key held alone")
	require.NoError(t, single.Unlock(t.Context()))

	multi, err := c.TryLockMulti(t.Context(), []string{"x", "y", "z"})
	require.NoError(t, err)
	for _, k := range []string{"x", "y", "z"} {
		_, err := c.TryLock(t.Context(), k)
		require.ErrorIs(t, err, ErrNotAcquired, "a single-key lock took %q from a multi-key lock", k)
	}
	_, err = c.TryLockMulti(t.Context(), []string{"z", "w"})
	require.ErrorIs(t, err, ErrNotAcquired, "overlapping multi-key locks")
	require.NoError(t, multi.Unlock(t.Context()))
	l, err := c.TryLockMulti(t.Context(), []string{"z", "w"})
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
}

func TestMultiRejectsBadKeys(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs)
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{nil, "no keys given"},
		{[]string{}, "no keys given"},
		{[]string{"a", "", "b"}, "key 1 must not be empty"},
		{[]string{"a", "b", "a"}, `key "a" is given twice (at 0 and 2)`},
	} {
		_, err := c.TryLockMulti(t.Context(), tc.keys)
		require.ErrorIs(t, err, ErrInvalidOption, "%q", tc.keys)
		require.Contains(t, err.Error(), tc.want)
		_, err = c.LockMulti(t.Context(), tc.keys)
		require.ErrorIs(t, err, ErrInvalidOption, "%q", tc.keys)
	}
	_, err := c.TryLockMulti(t.Context(), []string{"a", "b"}, WithOwner("me"))
	require.ErrorIs(t, err, ErrInvalidOption)
	for _, m := range ms {
		require.Empty(t, m.Keys())
	}
}

func TestMultiOpposedOrdersDoNotDeadlock(t *testing.T) {
	_, cs := minis(t, 5)
	c1 := newClient(t, cs, WithRetryDelay(time.Millisecond, 4*time.Millisecond), WithNodeTimeout(time.Second))
	c2 := newClient(t, ownClients(t, cs), WithRetryDelay(time.Millisecond, 4*time.Millisecond), WithNodeTimeout(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	holding := map[string]bool{}
	var wg sync.WaitGroup
	for g, order := range [][]string{{"p", "q", "r"}, {"r", "q", "p"}, {"q", "p"}, {"r", "p"}} {
		c := c1
		if g%2 == 1 {
			c = c2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				l, err := c.LockMulti(ctx, order)
				if err != nil {
					t.Errorf("%v: %v", order, err)
					return
				}
				mu.Lock()
				for _, k := range order {
					if holding[k] {
						t.Errorf("%q held twice", k)
					}
					holding[k] = true
				}
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				for _, k := range order {
					holding[k] = false
				}
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}

func TestMultiAutoExtendAndWake(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	c := newClient(t, cs, WithTTL(300*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	l, err := c.LockMulti(t.Context(), []string{"m1", "m2"}, WithAutoExtend(true))
	require.NoError(t, err)
	time.Sleep(700 * time.Millisecond)
	require.NoError(t, l.Err(), "auto-extension of a multi-key lock")
	// A waiter on one of the keys wakes when the multi-key lock is released.
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(t.Context(), "m2", WithRetryDelay(time.Minute, time.Minute))
		if err == nil {
			err = w.Unlock(t.Context())
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return subscribed(t, cs, "m2") }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Unlock(t.Context()))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not wake")
	}
}

func TestMultiOnClusterNeedsHashTags(t *testing.T) {
	ms, cs := minis(t, 2)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{ms[0].Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	c := newClient(t, append([]redis.UniversalClient{cluster}, cs...))
	_, err := c.TryLockMulti(t.Context(), []string{"order:1:stock", "order:1:payment"})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "hash tags")
	_, err = c.TryLock(t.Context(), "order:1", WithFencing(true))
	require.NotErrorIs(t, err, ErrInvalidOption, "a key and its fence counter share a slot")

	require.Equal(t, keyspace.Slot("{order:1}:stock"), keyspace.Slot("{order:1}:payment"))
}

// TestMultiEveryPatternOfTakenKeys takes a multi-key lock while each node
// has, at random, none or some of the keys held by another: a node votes yes
// only when it had all of them free.
func TestMultiEveryPatternOfTakenKeys(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(time.Second))
	for p := range 1 << 5 {
		key := func(k string) string { return fmt.Sprintf("%s-%d", k, p) }
		mine := []string{key("k1"), key("k2"), key("k3")}
		free := 0
		for i, m := range ms {
			if p&(1<<i) != 0 {
				require.NoError(t, m.Set(mine[i%3], "other"))
			} else {
				free++
			}
		}
		l, err := c.TryLockMulti(t.Context(), mine)
		if free >= 3 {
			require.NoError(t, err, "pattern %05b", p)
			require.NoError(t, l.Unlock(t.Context()))
		} else {
			require.ErrorIs(t, err, ErrNotAcquired, "pattern %05b", p)
		}
		for i, m := range ms {
			var others []string
			if p&(1<<i) != 0 {
				others = []string{mine[i%3]}
			}
			got := keysOf(m, mine)
			for end := time.Now().Add(5 * time.Second); !slices.Equal(got, others) && time.Now().Before(end); got = keysOf(m, mine) {
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, others, got, "pattern %05b node %d: the keys still there after 5s", p, i)
		}
	}
}

func keysOf(m *miniredis.Miniredis, keys []string) []string {
	var out []string
	for _, k := range keys {
		if m.Exists(k) {
			out = append(out, k)
		}
	}
	return out
}
