package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestAutoExtendHoldsForFiveTTLs(t *testing.T) {
	forEachBackend(t, "auto-extend", func(t *testing.T, n *lifecycleNodes) {
		// The node timeout is far above a loaded machine's round trip: this
		// test is about renewal, not about slow nodes.
		const ttl = 400 * time.Millisecond
		c := newClient(t, n.clients, WithTTL(ttl), WithNodeTimeout(100*time.Millisecond))
		l, err := c.Lock(t.Context(), n.key, WithAutoExtend(true))
		require.NoError(t, err)
		first := l.Until()
		deadline := time.Now().Add(5 * ttl)
		for time.Now().Before(deadline) {
			require.NoError(t, l.Err(), "lost while auto-extended")
			// The key is alive on the nodes past the original TTL.
			time.Sleep(ttl / 5)
		}
		require.NoError(t, l.Err())
		require.True(t, l.Until().After(first.Add(3*ttl)), "Until did not move: first %v, now %v", first, l.Until())
		select {
		case <-l.Done():
			t.Fatalf("Done closed while held: %v", l.Err())
		default:
		}
		for i := range 5 {
			require.True(t, n.keyOn(i), "node %d lost the key", i)
		}
		require.NoError(t, l.Unlock(t.Context()))
		<-l.Done()
		require.ErrorIs(t, l.Err(), ErrUnlocked)
		require.NotErrorIs(t, l.Err(), ErrLockLost)
		// No renewal brings the key back.
		time.Sleep(ttl / 2)
		for i := range 5 {
			require.False(t, n.keyOn(i), "node %d holds the key after Unlock", i)
		}
		require.Zero(t, c.renewer.queue.Len(), "Unlock left the lock in the renewal queue")
	})
}

func TestLostTokenEndsLockAtOnce(t *testing.T) {
	forEachBackend(t, "token-gone", func(t *testing.T, n *lifecycleNodes) {
		const ttl = 3 * time.Second
		c := newClient(t, n.clients, WithTTL(ttl))
		l, err := c.Lock(t.Context(), n.key, WithAutoExtend(true))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			for i := range 5 {
				if !n.keyOn(i) {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond)
		// A majority forgets the token (for example a restart without data):
		// the next renewal hears "gone" from a quorum and ends the lock long
		// before Until.
		n.drop(0)
		n.drop(1)
		n.drop(2)
		select {
		case <-l.Done():
		case <-time.After(ttl):
			t.Fatal("Done did not close when a quorum lost the token")
		}
		require.ErrorIs(t, l.Err(), ErrLockLost)
		require.ErrorIs(t, l.Err(), ErrNotHeld)
		require.True(t, time.Now().Before(l.Until()), "the loss was noticed by renewal, not by expiry")
	})
}

func TestMaxHoldIsHonoured(t *testing.T) {
	forEachBackend(t, "max-hold", func(t *testing.T, n *lifecycleNodes) {
		const ttl, maxHold = 200 * time.Millisecond, 700 * time.Millisecond
		c := newClient(t, n.clients, WithTTL(ttl), WithNodeTimeout(50*time.Millisecond))
		start := time.Now()
		l, err := c.Lock(t.Context(), n.key, WithAutoExtend(true), WithMaxHold(maxHold))
		require.NoError(t, err)
		returned := time.Now() // the hold started between start and returned
		<-l.Done()
		require.ErrorIs(t, l.Err(), ErrLockLost)
		require.ErrorIs(t, l.Err(), ErrMaxHold)
		require.False(t, l.Until().After(returned.Add(maxHold)), "Until %v is past the max hold", l.Until().Sub(start))
		require.True(t, l.Until().After(start.Add(2*ttl)), "renewals stopped early: held %v", l.Until().Sub(start))
		require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld)
		// The keys run out with the hold on the nodes as well.
		require.Eventually(t, func() bool {
			for i := range 5 {
				if n.keyOn(i) {
					return false
				}
			}
			return true
		}, 2*time.Second, time.Millisecond)
	})
}

// A renewal in flight when Unlock ends the lock must not queue the lock
// again: the renewer would extend keys that belong to nobody, and keep its
// goroutine running. The gate holds the renewal's replies until Unlock has
// returned; the renewal then settles a yes from every node.
func TestRenewalCannotReviveAnUnlockedLock(t *testing.T) {
	g := newScriptGate(scriptExtend)
	ms, cs := minis(t, 5, g)
	loadScripts(t, cs)
	rec := &recorder{}
	c := newClient(t, cs, WithObserver(rec))
	t.Cleanup(g.release)
	// The first renewal comes at a third of the TTL, and may wait for its
	// replies up to the node timeout (1 s): time for the Unlock.
	const ttl = 3 * time.Second
	l, err := c.TryLock(t.Context(), "revive-renewal", WithTTL(ttl), WithAutoExtend(true))
	require.NoError(t, err)
	settled(t, l)
	require.Eventually(t, func() bool { return g.waiting.Load() == 5 }, 5*time.Second, time.Millisecond,
		"the first renewal did not reach every node")
	time.Sleep(2 * stallAfter) // the release goes out beside the held batch
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "revive-renewal", "")
	g.release()
	require.Eventually(t, func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return !c.renewer.running
	}, 5*time.Second, time.Millisecond, "the renewer still runs after the only lock was unlocked")
	// A lock queued again would be renewed within a third of the TTL.
	time.Sleep(ttl/3 + 200*time.Millisecond)
	require.EqualValues(t, 5, g.waiting.Load(), "extensions sent after Unlock: want only the first renewal's 5")
	_, extends, _, _ := rec.counts()
	require.Zero(t, extends, "the renewal that ended after Unlock was settled as an extension")
	require.ErrorIs(t, l.Err(), ErrUnlocked)
	for i, m := range ms {
		require.False(t, m.Exists("revive-renewal"), "node %d: the key came back", i)
	}
}

// manualClock is a Client's clock that moves only when the test moves it:
// the renewer's due times and the locks' validity then follow the test, not
// the machine's speed.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (m *manualClock) now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

// advance moves the clock by d, and wakes the renewer to look at its queue.
func (m *manualClock) advance(c *Client, d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
	c.renewer.poke()
}

// extendBatches is a go-redis hook that records, for each pipeline that
// carries extensions, how many it carries.
type extendBatches struct {
	mu    sync.Mutex
	sizes []int
}

func (h *extendBatches) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *extendBatches) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *extendBatches) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if isScript(cmd, scriptExtend) {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.sizes = append(h.sizes, n)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (h *extendBatches) batches() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sizes)
}

// TestRenewalsDueTogetherShareABatch: the renewer renews the locks due
// within a thirtieth of the TTL of the first one in one batch, one
// pipeline per node, and leaves the later ones to a batch of their own. On
// a clock of the test's, four locks are taken at 0, three at 50 ms and two
// at 500 ms, with a TTL of 3 s: their renewals are due at 1 s, 1.05 s and
// 1.5 s.
func TestRenewalsDueTogetherShareABatch(t *testing.T) {
	hooks := []*extendBatches{{}, {}, {}}
	ms, cs := minis(t, 3)
	for i, rc := range cs {
		rc.AddHook(hooks[i])
	}
	loadScripts(t, cs) // no NOSCRIPT: a resent batch would count twice
	clk := &manualClock{t: time.Now()}
	c := newClient(t, cs, WithTTL(3*time.Second))
	c.now = clk.now
	take := func(n int, prefix string) []*Lock {
		var ls []*Lock
		for i := range n {
			l, err := c.TryLock(t.Context(), fmt.Sprintf("%s-%d", prefix, i), WithAutoExtend(true))
			require.NoError(t, err)
			ls = append(ls, l)
		}
		return ls
	}
	first := take(4, "batch-first")
	clk.advance(c, 50*time.Millisecond)
	near := take(3, "batch-near")
	clk.advance(c, 450*time.Millisecond)
	later := take(2, "batch-later")
	// Every key is on every node before the renewals start.
	before := map[*Lock]time.Time{}
	for _, l := range append(append(slices.Clone(first), near...), later...) {
		eventually(t, ms, l.Key(), l.Token())
		before[l] = l.Until()
	}
	renewed := func(ls []*Lock) func() bool {
		return func() bool {
			for _, l := range ls {
				if !l.Until().After(before[l]) {
					return false
				}
			}
			return true
		}
	}
	for i, h := range hooks {
		require.Empty(t, h.batches(), "node %d: got renewals before any was due", i)
	}

	clk.advance(c, 500*time.Millisecond) // 1 s
	require.Eventually(t, renewed(first), 5*time.Second, time.Millisecond, "the locks due at 1 s were not renewed")
	for i, h := range hooks {
		require.Equal(t, []int{7}, h.batches(), "node %d: got batches %v, want one of the 7 locks due within 100 ms", i, h.batches())
	}
	require.Eventually(t, renewed(near), 5*time.Second, time.Millisecond, "the locks due at 1.05 s were not renewed")
	for _, l := range later {
		require.Equal(t, before[l], l.Until(), "a lock due at 1.5 s was renewed at 1 s")
	}

	clk.advance(c, 500*time.Millisecond) // 1.5 s
	require.Eventually(t, renewed(later), 5*time.Second, time.Millisecond,
		"the locks due at 1.5 s were not renewed")
	for i, h := range hooks {
		require.Equal(t, []int{7, 2}, h.batches(), "node %d: got batches %v, want the 2 locks due at 1.5 s alone", i, h.batches())
	}
}

// TestFailedRenewalIsRetriedWithinValidity: a renewal that a quorum neither
// confirmed nor refused (two of three nodes fail) leaves the lock held, and
// is tried again soon, not a third of the TTL later; once the nodes answer,
// the retry extends the lock. A clock of the test's decides when each
// renewal is due.
func TestFailedRenewalIsRetriedWithinValidity(t *testing.T) {
	ms, cs := minis(t, 3)
	loadScripts(t, cs)
	rec := &recorder{}
	clk := &manualClock{t: time.Now()}
	const ttl = 3 * time.Second
	c := newClient(t, cs, WithTTL(ttl), WithObserver(rec))
	c.now = clk.now
	l, err := c.TryLock(t.Context(), "renewal-retried", WithAutoExtend(true))
	require.NoError(t, err)
	eventually(t, ms, "renewal-retried", l.Token())
	first := l.Until()
	extensions := func() []Stats {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Clone(rec.extends)
	}

	ms[0].SetError("ERR injected failure")
	ms[1].SetError("ERR injected failure")
	clk.advance(c, ttl/3) // the first renewal is due
	require.Eventually(t, func() bool { return len(extensions()) == 1 }, 5*time.Second, time.Millisecond,
		"the first renewal was not reported")
	st := extensions()[0]
	require.Equal(t, 1, st.Yes, "got %d yes votes, want 1: two nodes fail", st.Yes)
	require.Zero(t, st.No)
	require.NoError(t, l.Err(), "a renewal that failed on two nodes of three must not end the lock")
	require.Equal(t, first, l.Until(), "a failed renewal moved Until")

	ms[0].SetError("")
	ms[1].SetError("")
	// The retry comes a twentieth of the TTL later, at most 100 ms: long
	// before the next regular renewal.
	clk.advance(c, 100*time.Millisecond)
	require.Eventually(t, func() bool { return len(extensions()) >= 2 }, 5*time.Second, time.Millisecond,
		"the failed renewal was not tried again")
	st = extensions()[1]
	require.GreaterOrEqual(t, st.Yes, 2, "got %d yes votes on the retry, want a quorum", st.Yes)
	require.True(t, l.Until().After(first), "the retry did not extend the lock: Until %v, first %v", l.Until(), first)
	require.NoError(t, l.Err())
	require.NoError(t, l.Unlock(t.Context()))
}
