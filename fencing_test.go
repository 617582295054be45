package redlock

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

var fenceSeed = flag.Uint64("fence.seed", 0, "seed of the fencing test's fault schedule (0: from the clock)")

func TestFenceIncreasesOnMiniredis(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithFencing(true))
	var last uint64
	for i := range 20 {
		l, err := c.TryLock(t.Context(), "fenced")
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, "hold %d", i)
		last = l.Fence()
		require.NoError(t, l.Unlock(t.Context()))
	}
	// The counters never expire, and they live beside the key in its slot.
	fk := keyspace.Fence("fenced")
	require.Equal(t, keyspace.Slot("fenced"), keyspace.Slot(fk))
	for _, m := range ms {
		require.True(t, m.Exists(fk))
		require.Zero(t, m.TTL(fk))
	}
	plain, err := c.TryLock(t.Context(), "fenced", WithFencing(false))
	require.NoError(t, err)
	require.Zero(t, plain.Fence(), "no fence without WithFencing")
	require.NoError(t, plain.Unlock(t.Context()))

	// A multi-key lock's fence is above the fences of each of its keys.
	l, err := c.TryLockMulti(t.Context(), []string{"fenced", "other"})
	require.NoError(t, err)
	require.Greater(t, l.Fence(), last)
	require.NoError(t, l.Unlock(t.Context()))
}

// fenceRun takes `holds` successive holds of one key with several Clients
// and goroutines, while a fault goroutine kills one node at a time and brings
// it back empty after more than the TTL (the spec's delayed restart). It
// returns the fences ordered by hold start.
func fenceRun(t *testing.T, holds int, hooks testHooks) []uint64 {
	t.Helper()
	redistest.Require(t)
	seed := *fenceSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("fencing: seed=%d (replay with -fence.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const ttl = 300 * time.Millisecond
	srv := redistest.StartN(t, 5, redistest.Options{})
	opts := []Option{WithTTL(ttl), WithFencing(true), WithNodeTimeout(50 * time.Millisecond),
		WithRetryDelay(time.Millisecond, 5*time.Millisecond)}
	var clients []*Client
	for range 3 {
		cs := make([]redis.UniversalClient, len(srv))
		for i, s := range srv {
			cs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			rc := cs[i]
			t.Cleanup(func() { _ = rc.Close() })
		}
		clients = append(clients, setHooks(newClient(t, cs, opts...), hooks))
	}

	type hold struct {
		start time.Time
		fence uint64
	}
	var (
		mu    sync.Mutex
		got   []hold
		taken atomic.Int64
		stop  = make(chan struct{})
	)
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(50+rng.IntN(100)) * time.Millisecond):
			}
			victim := srv[rng.IntN(len(srv))]
			victim.Kill()
			select {
			case <-stop:
			case <-time.After(ttl + 100*time.Millisecond):
			}
			victim.RestartEmpty()
		}
	}()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for taken.Add(1) <= int64(holds) {
					l, err := c.Lock(t.Context(), "fence-run")
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					mu.Lock()
					got = append(got, hold{time.Now(), l.Fence()})
					mu.Unlock()
					_ = l.Unlock(t.Context())
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-faults
	slices.SortFunc(got, func(a, b hold) int { return a.start.Compare(b.start) })
	fences := make([]uint64, len(got))
	for i, h := range got {
		fences[i] = h.fence
	}
	return fences
}

// backwards returns the places where the fence sequence does not increase.
func backwards(fences []uint64) []string {
	var bad []string
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			bad = append(bad, fmt.Sprintf("hold %d: fence %d after %d", i, fences[i], fences[i-1]))
		}
	}
	return bad
}

func TestFenceStrictlyIncreasesUnderRestarts(t *testing.T) {
	fences := fenceRun(t, 1000, testHooks{})
	require.Len(t, fences, 1000)
	bad := backwards(fences)
	require.Empty(t, bad, "the fence went backwards %d times", len(bad))
}

// TestFenceWithoutWriteBackGoesBackwards is the negative control: without
// the write-back, taking the max over one quorum is not enough, and the
// checker must see the fence go backwards.
func TestFenceWithoutWriteBackGoesBackwards(t *testing.T) {
	fences := fenceRun(t, 1000, testHooks{noFenceWriteBack: true})
	bad := backwards(fences)
	require.NotEmpty(t, bad, "without the write-back the fence should have gone backwards")
	t.Logf("without write-back: %d of %d holds went backwards, e.g. %s", len(bad), len(fences), bad[0])
}

// fencedNodes starts five miniredis nodes whose last slow ones hold the
// replies of the fence write-back until the gate opens, and a fencing Client
// on them.
func fencedNodes(t *testing.T, slow int) (fast, late []*miniredis.Miniredis, c *Client, g *gate) {
	t.Helper()
	g = newScriptGate(scriptFence)
	fast, fcs := minis(t, 5-slow)
	late, scs := minis(t, slow, g)
	cs := append(fcs, scs...)
	loadScripts(t, cs)
	c = newClient(t, cs, WithFencing(true), WithNodeTimeout(100*time.Millisecond))
	t.Cleanup(g.release)
	return fast, late, c, g
}

func TestLateFenceWriteBackIsReleased(t *testing.T) {
	t.Run("failed write-back", func(t *testing.T) {
		// Three of five nodes answer the write-back late: the attempt
		// fails, and their late answers must release what they hold.
		fast, slow, c, g := fencedNodes(t, 3)
		_, err := c.TryLock(t.Context(), "wb")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.Contains(t, err.Error(), "fence not written back")
		eventually(t, fast, "wb", "")
		for i, m := range slow {
			require.True(t, m.Exists("wb"), "slow node %d: the write-back has not answered, so it is not rolled back yet", i)
		}
		g.release()
		eventually(t, slow, "wb", "")
	})
	t.Run("unlock races the write-back", func(t *testing.T) {
		// Two nodes answer the write-back late; the lock is won on the
		// other three and unlocked at once.
		fast, slow, c, g := fencedNodes(t, 2)
		l, err := c.TryLock(t.Context(), "wb-unlock")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		eventually(t, fast, "wb-unlock", "")
		g.release()
		eventually(t, slow, "wb-unlock", "")
	})
}
