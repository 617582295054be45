package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// rwNodes gives a read-write test five nodes whose TTLs and TIME run in
// real time: miniredis with ClockTTL, or real redis-servers.
func rwBackends(t *testing.T, fn func(t *testing.T, cs []redis.UniversalClient)) {
	t.Run("miniredis", func(t *testing.T) {
		ms, cs := minis(t, 5)
		for _, m := range ms {
			m.ClockTTL(true)
		}
		fn(t, cs)
	})
	t.Run("redis-server", func(t *testing.T) {
		_, cs := realNodes(t, 5)
		fn(t, cs)
	})
}

// readers returns the reader fields of key on one node, as field -> expiry.
func readers(t *testing.T, c redis.UniversalClient, key string) map[string]string {
	t.Helper()
	m, err := c.HGetAll(context.Background(), key).Result()
	require.NoError(t, err)
	delete(m, "mode")
	return m
}

// eventuallyGone waits until key is missing on every node.
func eventuallyGone(t *testing.T, cs []redis.UniversalClient, key string) {
	t.Helper()
	for i, c := range cs {
		gone := func() bool {
			n, err := c.Exists(context.Background(), key).Result()
			return err == nil && n == 0
		}
		if assert.Eventually(t, gone, 5*time.Second, time.Millisecond) {
			continue
		}
		// Say what is left, so that a loaded run can be diagnosed from its log.
		ctx := context.Background()
		typ, _ := c.Type(ctx, key).Result()
		fields, _ := c.HGetAll(ctx, key).Result()
		pttl, _ := c.PTTL(ctx, key).Result()
		t.Fatalf("node %d: key %q never went: type %s, fields %v, pttl %v", i, key, typ, fields, pttl)
	}
}

func TestRLockManyReadersAtOnce(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key, k = "rw:many", 20
		c := newClient(t, cs, WithTTL(10*time.Second))
		locks := make([]*Lock, k)
		var wg sync.WaitGroup
		errs := make([]error, k)
		for i := range k {
			wg.Go(func() {
				locks[i], errs[i] = c.TryRLock(t.Context(), key)
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "reader %d: got an error, want the read lock", i)
		}
		_, err := c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "writer while %d readers hold: got %v, want ErrNotAcquired", k, err)
		for _, l := range locks {
			require.NoError(t, l.Unlock(t.Context()))
		}
		eventuallyGone(t, cs, key)
		w, err := c.TryLock(t.Context(), key)
		require.NoError(t, err, "writer after the readers left")
		require.NoError(t, w.Unlock(t.Context()))
	})
}

func TestRWWriterAndReadersExcludeEachOther(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:exclude"
		c := newClient(t, cs, WithTTL(10*time.Second))
		r, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err)
		_, err = c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "writer while a reader holds")
		require.False(t, errors.Is(err, ErrWrongType), "a read lock is not a foreign value: got %v", err)
		// A later attempt (SET NX GET, then acquire.lua) sees it as taken
		// too, and never as an earlier attempt's leftover.
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err = c.Lock(ctx, key, WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
		cancel()
		require.ErrorIs(t, err, ErrNotAcquired, "waiting writer while a reader holds")
		require.NoError(t, r.Unlock(t.Context()))
		eventuallyGone(t, cs, key)

		w, err := c.TryLock(t.Context(), key)
		require.NoError(t, err)
		_, err = c.TryRLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "reader while a writer holds")
		require.NoError(t, w.Unlock(t.Context()))
		r, err = c.TryRLock(t.Context(), key)
		require.NoError(t, err, "reader after the writer left")
		require.NoError(t, r.Unlock(t.Context()))
	})
}

func TestRLockExpiryIndependentOfOtherReaders(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:expiry"
		c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
		// The short reader is abandoned: never extended, never unlocked.
		short, err := c.TryRLock(t.Context(), key, WithTTL(300*time.Millisecond))
		require.NoError(t, err)
		long, err := c.TryRLock(t.Context(), key, WithTTL(2*time.Second))
		require.NoError(t, err)
		shortField := "r:" + short.Token()
		// The long reader keeps extending while the short one expires.
		deadline := time.Now().Add(700 * time.Millisecond)
		for time.Now().Before(deadline) {
			require.NoError(t, long.Extend(t.Context()))
			time.Sleep(50 * time.Millisecond)
		}
		// The short reader's field may linger until a script drops it,
		// but it no longer counts: its Extend fails, and when the long
		// reader leaves the key goes at once.
		require.ErrorIs(t, short.Extend(t.Context()), ErrNotHeld, "extend of an expired reader: want ErrNotHeld")
		require.NoError(t, long.Unlock(t.Context()))
		eventuallyGone(t, cs, key)
		for i, n := range cs {
			require.NotContains(t, readers(t, n, key), shortField, "node %d", i)
		}
		w, err := c.TryLock(t.Context(), key)
		require.NoError(t, err, "writer after the long reader left and the short one expired")
		require.NoError(t, w.Unlock(t.Context()))
	})
}

func TestRLockUnlockOfOneReaderLeavesTheOthers(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:one"
		c := newClient(t, cs, WithTTL(10*time.Second))
		a, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err)
		b, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err)
		// TryRLock returns at its quorum: wait for b on every node.
		for i, n := range cs {
			require.Eventually(t, func() bool {
				_, ok := readers(t, n, key)["r:"+b.Token()]
				return ok
			}, 5*time.Second, time.Millisecond, "node %d never got the second reader", i)
		}
		require.NoError(t, a.Unlock(t.Context()))
		for i, n := range cs {
			require.Eventually(t, func() bool {
				r := readers(t, n, key)
				_, hasA := r["r:"+a.Token()]
				return !hasA
			}, 5*time.Second, time.Millisecond, "node %d kept the unlocked reader", i)
			require.Contains(t, readers(t, n, key), "r:"+b.Token(), "node %d lost the other reader", i)
		}
		require.NoError(t, b.Extend(t.Context()), "the other reader extends")
		_, err = c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "writer while the other reader holds")
		require.NoError(t, b.Unlock(t.Context()))
		eventuallyGone(t, cs, key)
	})
}

func TestRWWaitingWriterBlocksNewReaders(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:pref"
		c := newClient(t, cs, WithTTL(5*time.Second))
		r, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		errc := make(chan error, 1)
		go func() {
			w, err := c.Lock(t.Context(), key)
			errc <- err
			got <- w
		}()
		// Wait until the writer has marked the key on a quorum.
		require.Eventually(t, func() bool {
			n := 0
			for _, rc := range cs {
				if v, _ := rc.Get(context.Background(), keyspace.Waiting(key)).Result(); v == "1" {
					n++
				}
			}
			return n >= 3
		}, 5*time.Second, time.Millisecond, "the writer never marked the key")
		_, err = c.TryRLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "new reader while a writer waits")
		// The preference can be turned off (test switch).
		noPref := setHooks(newClient(t, cs, WithTTL(5*time.Second)), testHooks{noWriterPref: true})
		r2, err := noPref.TryRLock(t.Context(), key)
		require.NoError(t, err, "new reader without writer preference")
		require.NoError(t, r2.Unlock(t.Context()))
		// An existing reader may still extend.
		require.NoError(t, r.Extend(t.Context()), "existing reader extends while a writer waits")
		require.NoError(t, r.Unlock(t.Context()))
		select {
		case err := <-errc:
			require.NoError(t, err, "writer once the readers left")
		case <-time.After(5 * time.Second):
			t.Fatal("writer did not get the lock after the readers left")
		}
		w := <-got
		require.NoError(t, w.Unlock(t.Context()))
		// The writer's Unlock deleted its marker: readers come in again.
		r, err = c.TryRLock(t.Context(), key)
		require.NoError(t, err, "reader after the writer's Unlock")
		require.NoError(t, r.Unlock(t.Context()))
	})
}

// TestRWWriterThatGivesUpTakesItsMarkerBack: a writer whose wait ends
// deletes its marker, so that new readers do not wait out its TTL; a
// reader's marker is left.
func TestRWWriterThatGivesUpTakesItsMarkerBack(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:giveup"
		c := newClient(t, cs, WithTTL(10*time.Second))
		r, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err = c.Lock(ctx, key)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Eventually(t, func() bool {
			for _, rc := range cs {
				if n, _ := rc.Exists(context.Background(), keyspace.Waiting(key)).Result(); n != 0 {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond, "the writer that gave up left its marker (TTL 10s)")
		r2, err := c.TryRLock(t.Context(), key)
		require.NoError(t, err, "a new reader once the writer gave up")
		require.NoError(t, r2.Unlock(t.Context()))

		require.NoError(t, r.Unlock(t.Context()))

		// The script leaves a reader's marker: it only serves to announce
		// releases.
		for i, rc := range cs {
			bg := context.Background()
			require.NoError(t, rc.Set(bg, keyspace.Waiting(key), "r", time.Minute).Err())
			n, err := rc.Eval(bg, unmarkSrc, []string{keyspace.Waiting(key)}).Int()
			require.NoError(t, err)
			require.Zero(t, n, "node %d: a reader's marker was deleted", i)
			require.NoError(t, rc.Set(bg, keyspace.Waiting(key), "1", time.Minute).Err())
			n, err = rc.Eval(bg, unmarkSrc, []string{keyspace.Waiting(key)}).Int()
			require.NoError(t, err)
			require.Equal(t, 1, n, "node %d: a writer's marker was kept", i)
		}
	})
}

func TestRLockWaitingReaderWakesOnWriterUnlock(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:wake"
		w1 := newClient(t, cs, WithTTL(10*time.Second))
		r1 := newClient(t, cs, WithTTL(10*time.Second))
		w, err := w1.TryLock(t.Context(), key)
		require.NoError(t, err)
		done := make(chan error, 1)
		var rl *Lock
		go func() {
			// A long retry delay: only the announcement can wake it soon.
			var err error
			rl, err = r1.RLock(t.Context(), key, WithRetryDelay(20*time.Second, 20*time.Second))
			done <- err
		}()
		// The announcement wakes the reader once it is subscribed, and
		// its marker is there, on a quorum: wait for both on every node.
		for i, rc := range cs {
			require.Eventually(t, func() bool {
				v, _ := rc.Get(context.Background(), keyspace.Waiting(key)).Result()
				subs, _ := rc.PubSubNumSub(context.Background(), releaseChannel(key)).Result()
				return v == "r" && subs[releaseChannel(key)] > 0
			}, 5*time.Second, time.Millisecond, "node %d: the reader never marked the key and subscribed", i)
		}
		start := time.Now()
		require.NoError(t, w.Unlock(t.Context()))
		select {
		case err := <-done:
			require.NoError(t, err)
			require.Less(t, time.Since(start), 5*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting reader did not wake on the writer's Unlock")
		}
		require.NoError(t, rl.Unlock(t.Context()))
	})
}

func TestRLockRollbackLeavesNothing(t *testing.T) {
	ms, cs := minis(t, 5)
	const key = "rw:rollback"
	// Three nodes hold a writer's plain value: the reader gets two yes
	// votes, fails, and must take them back.
	for _, m := range ms[:3] {
		require.NoError(t, m.Set(key, "someone-else"))
	}
	c := newClient(t, cs)
	_, err := c.TryRLock(t.Context(), key)
	require.ErrorIs(t, err, ErrNotAcquired)
	for i, m := range ms[3:] {
		require.Eventually(t, func() bool { return !m.Exists(key) }, 5*time.Second, time.Millisecond,
			"node %d: the failed reader attempt left its field", i+3)
	}
	for i, m := range ms[:3] {
		got, err := m.Get(key)
		require.NoError(t, err)
		require.Equal(t, "someone-else", got, "node %d: got %q, want the writer's value", i, got)
	}
}

func TestRLockBlockedByForeignPlainLock(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key = "rw:redsync"
		// redsync and node-redlock store a random string with SET NX PX.
		for _, rc := range cs {
			require.NoError(t, rc.Set(context.Background(), key, "cmVkc3luYw==", 10*time.Second).Err())
		}
		c := newClient(t, cs)
		_, err := c.TryRLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "reader while a redsync lock holds")
		for i, rc := range cs {
			v, err := rc.Get(context.Background(), key).Result()
			require.NoError(t, err)
			require.Equal(t, "cmVkc3luYw==", v, "node %d", i)
		}
	})
}

func TestRLockAutoExtend(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key, ttl = "rw:auto", 400 * time.Millisecond
		c := newClient(t, cs, WithTTL(ttl), WithNodeTimeout(100*time.Millisecond))
		r, err := c.RLock(t.Context(), key, WithAutoExtend(true))
		require.NoError(t, err)
		time.Sleep(3 * ttl)
		select {
		case <-r.Done():
			t.Fatalf("reader lost while auto-extended: %v", r.Err())
		default:
		}
		_, err = c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "writer while an auto-extended reader holds")
		require.NoError(t, r.Unlock(t.Context()))
		eventuallyGone(t, cs, key)
	})
}

func TestRLockRefusesOwnerAndFencing(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	for _, o := range []LockOption{WithOwner("x"), WithFencing(true)} {
		_, err := c.TryRLock(t.Context(), "rw:opts", o)
		require.ErrorIs(t, err, ErrInvalidOption)
	}
}

func TestRDoReadersRunTogether(t *testing.T) {
	_, cs := minis(t, 5)
	const key = "rw:do"
	c := newClient(t, cs, WithTTL(5*time.Second))
	var entered sync.WaitGroup
	entered.Add(2)
	leave := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			errs[i] = c.RDo(t.Context(), key, func(ctx context.Context) error {
				// Both readers are inside at once before either leaves.
				entered.Done()
				<-leave
				return nil
			})
		})
	}
	entered.Wait()
	_, err := c.TryLock(t.Context(), key)
	require.ErrorIs(t, err, ErrNotAcquired, "writer while two RDo readers run")
	close(leave)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "RDo %d", i)
	}
	w, err := c.Lock(t.Context(), key)
	require.NoError(t, err, "writer after the RDo readers returned")
	require.NoError(t, w.Unlock(t.Context()))
}

func TestRLockAfterScriptFlush(t *testing.T) {
	_, cs := realNodes(t, 5)
	const key = "rw:noscript"
	c := newClient(t, cs, WithTTL(5*time.Second))
	r, err := c.TryRLock(t.Context(), key)
	require.NoError(t, err)
	for _, rc := range cs {
		require.NoError(t, rc.ScriptFlush(context.Background()).Err())
	}
	require.NoError(t, r.Extend(t.Context()), "extend after NOSCRIPT")
	r2, err := c.TryRLock(t.Context(), key)
	require.NoError(t, err, "acquire after NOSCRIPT")
	for _, rc := range cs {
		require.NoError(t, rc.ScriptFlush(context.Background()).Err())
	}
	require.NoError(t, r.Unlock(t.Context()), "unlock after NOSCRIPT")
	require.NoError(t, r2.Unlock(t.Context()))
	eventuallyGone(t, cs, key)
}

func TestRWMixedReadersAndWritersNeverOverlap(t *testing.T) {
	rwBackends(t, func(t *testing.T, cs []redis.UniversalClient) {
		const key, workers, rounds = "rw:mixed", 8, 25
		var (
			mu               sync.Mutex
			readers, writers int
			maxReaders       int
			unconfirmed      atomic.Int32
		)
		enter := func(write bool) {
			mu.Lock()
			defer mu.Unlock()
			if write {
				writers++
				if writers != 1 || readers != 0 {
					t.Errorf("writer in with %d writers and %d readers: want it alone", writers, readers)
				}
				return
			}
			readers++
			maxReaders = max(maxReaders, readers)
			if writers != 0 {
				t.Errorf("reader in with %d writers: want none", writers)
			}
		}
		leave := func(write bool) {
			mu.Lock()
			defer mu.Unlock()
			if write {
				writers--
			} else {
				readers--
			}
		}
		var wg sync.WaitGroup
		for g := range workers {
			// Each worker is its own Client, as separate processes are.
			c := newClient(t, cs, WithTTL(10*time.Second), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(14, uint64(g)))
				for range rounds {
					write := rnd.IntN(4) == 0
					var l *Lock
					var err error
					if write {
						l, err = c.Lock(t.Context(), key)
					} else {
						l, err = c.RLock(t.Context(), key)
					}
					if err != nil {
						t.Errorf("write=%v: %v", write, err)
						return
					}
					enter(write)
					time.Sleep(time.Duration(rnd.IntN(2000)) * time.Microsecond)
					leave(write)
					if err := l.Unlock(t.Context()); errors.Is(err, ErrUnconfirmed) {
						// A loaded machine may answer after Unlock's bounded
						// wait: the keys still go, and the TTL is the bound.
						unconfirmed.Add(1)
					} else if err != nil {
						t.Errorf("unlock, write=%v: got %v, want nil or ErrUnconfirmed", write, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := unconfirmed.Load(); n > 0 {
			t.Logf("%d releases unconfirmed within Unlock's wait", n)
		}
		t.Logf("at most %d readers at once", maxReaders)
	})
}

func TestRLockInspect(t *testing.T) {
	_, cs := minis(t, 5)
	const key = "rw:inspect"
	c := newClient(t, cs, WithTTL(10*time.Second))
	a, err := c.TryRLock(t.Context(), key)
	require.NoError(t, err)
	b, err := c.TryRLock(t.Context(), key, WithLabel("reader-b"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := c.Inspect(t.Context(), key)
		return err == nil && h.Count == 2
	}, 5*time.Second, time.Millisecond, "Inspect never saw both readers on a quorum")
	h, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	require.True(t, h.Held && h.Shared, "got Held=%v Shared=%v, want both", h.Held, h.Shared)
	want := []string{a.Token(), b.Token()}
	slices.Sort(want)
	require.Equal(t, want, h.Tokens)
	read := 0
	for _, nh := range h.Nodes {
		if nh.Layout == "read" {
			read++
		}
	}
	require.GreaterOrEqual(t, read, h.Quorum, "nodes with the read layout: got %d, want at least %d", read, h.Quorum)
	require.Positive(t, h.Remaining)
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, b.Unlock(t.Context()))
}
