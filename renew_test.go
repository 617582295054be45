package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
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

// TestRenewalCountsAStalledButAnsweringNode: three redis-servers;
// node 2 has lost our key (it answers no at once), node 1 has one request
// stuck for ~2.5s (a late chunk: it is "stalled") but answers every new
// request within 5ms. A quorum (nodes 0 and 1) still holds the key and says
// yes to every renewal, well within the node timeout. A renewal round
// must wait for every node, stalled or not, up to its timeout: a round that
// ended once the nodes not stalled (0 and 2) had answered never counted
// node 1's yes, and the lock expired while a quorum would renew it. Nor
// may Inspect's slow read mark the node stalled for the lock path. Found
// by the third review of issue 26 (10/10 before the fix).
func TestRenewalCountsAStalledButAnsweringNode(t *testing.T) {
	srv, p1, cs := middleProxied(t)

	const ttl = 900 * time.Millisecond
	rec := &recorder{}
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond), WithObserver(rec))
	defer func() {
		if t.Failed() {
			rec.mu.Lock()
			for _, s := range rec.extends {
				t.Logf("renewal: yes %d no %d failed %d notwaited %d elapsed %v", s.Yes, s.No, s.Failed, s.NotWaited, s.Elapsed)
			}
			rec.mu.Unlock()
		}
	}()
	l, err := c.Lock(t.Context(), "stalled-renew", WithTTL(ttl), WithAutoExtend(true))
	require.NoError(t, err)
	locked := time.Now()

	// Node 2 loses the key: it answers no to every renewal, at once. The
	// Lock's round may have ended before its acquire got there.
	var keys []string
	require.Eventually(t, func() bool {
		keys, err = cs[2].Keys(t.Context(), "*").Result()
		return err == nil && len(keys) > 0
	}, 5*time.Second, time.Millisecond, "the acquire never reached node 2")
	require.NoError(t, cs[2].Del(t.Context(), keys...).Err())

	// Node 1 has the key (the Lock's round may have ended before its
	// acquire got there).
	d1 := srv[1].NewClient(t)
	require.Eventually(t, func() bool {
		n, _ := d1.Exists(t.Context(), keys...).Result()
		return int(n) == len(keys)
	}, time.Second, time.Millisecond)

	// Node 1: one request (Inspect's) held for 2.5s, so that the node is
	// stalled from Inspect's timeout on; every other request answers in
	// 5ms.
	p1.SetLate(1, 2500*time.Millisecond, 2500*time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Inspect(context.Background(), "stalled-renew") })
	time.Sleep(30 * time.Millisecond)
	p1.SetLate(0, 0, 0)
	p1.SetLatency(5*time.Millisecond, 0)
	t.Cleanup(wg.Wait)

	time.Sleep(time.Until(locked.Add(2300 * time.Millisecond)))
	require.NoError(t, l.Err(), "the lock ended while nodes 0 and 1 (a quorum) answered every renewal yes within 5ms")
	for _, i := range []int{0, 1} {
		n, err := cs[i].Exists(t.Context(), keys...).Result()
		require.NoError(t, err)
		require.EqualValues(t, len(keys), n, "node %d lost the key", i)
	}
	require.NoError(t, l.Unlock(t.Context()))
}

// TestRenewalCountsANodeItsOwnTimeoutStalled: as
// TestRenewalCountsAStalledButAnsweringNode, but the stall comes
// from a renewal itself: one renewal request to node 1 is answered after
// 2.5s (past the 100ms node timeout), which marks node 1 stalled; every
// retry must still wait for node 1's prompt yes, rather than end as soon as
// nodes 0 (yes) and 2 (no) have answered and let the lock expire.
func TestRenewalCountsANodeItsOwnTimeoutStalled(t *testing.T) {
	srv, p1, cs := middleProxied(t)

	const ttl = 900 * time.Millisecond
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
	l, err := c.Lock(t.Context(), "stalled-retry", WithTTL(ttl), WithAutoExtend(true))
	require.NoError(t, err)
	locked := time.Now()
	keys, err := cs[2].Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	d1 := srv[1].NewClient(t)
	require.Eventually(t, func() bool {
		n, _ := d1.Exists(t.Context(), keys...).Result()
		return int(n) == len(keys)
	}, time.Second, time.Millisecond)
	require.NoError(t, cs[2].Del(t.Context(), keys...).Err())

	// The first renewal (a third of the TTL in) to node 1 comes back
	// after 2.5s; everything after it in 5ms.
	time.Sleep(time.Until(locked.Add(250 * time.Millisecond)))
	p1.SetLate(1, 2500*time.Millisecond, 2500*time.Millisecond)
	require.Eventually(t, func() bool { return p1.Stats().Late >= 1 }, time.Second, time.Millisecond)
	p1.SetLate(0, 0, 0)
	p1.SetLatency(5*time.Millisecond, 0)

	time.Sleep(time.Until(locked.Add(2300 * time.Millisecond)))
	require.NoError(t, l.Err(), "the lock ended while nodes 0 and 1 (a quorum) answered every renewal but one yes within 5ms")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestCloseDuringRenewalRound: Close while a renewal round is out
// (every node answers in 40ms): Close returns promptly, the renewal does
// not settle or re-queue the locks, Done closes by Until, and no key is
// extended after Close returned.
func TestCloseDuringRenewalRound(t *testing.T) {
	ps, cs, direct := realProxied(t, 3)
	for _, p := range ps {
		p.SetLatency(40*time.Millisecond, 0)
	}
	c, err := New(cs, WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	var locks []*Lock
	for i := range 5 {
		l, err := c.Lock(t.Context(), "close-renew-"+string(rune('a'+i)), WithTTL(600*time.Millisecond), WithAutoExtend(true))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	// The first renewal is due 200ms in; it is out until ~240ms.
	time.Sleep(220 * time.Millisecond)
	began := time.Now()
	require.NoError(t, c.Close())
	closed := time.Since(began)
	require.Less(t, closed, 1500*time.Millisecond)
	// Every lock's Done closes by its Until.
	for _, l := range locks {
		select {
		case <-l.Done():
		case <-time.After(time.Until(l.Until()) + 200*time.Millisecond):
			t.Fatalf("Done open %v past Until", time.Since(l.Until()))
		}
	}
	// No key lives on past what it was given before Close returned.
	time.Sleep(900 * time.Millisecond)
	for i, d := range direct {
		keys, err := d.Keys(t.Context(), "*close-renew*").Result()
		require.NoError(t, err)
		require.Empty(t, keys, "node %d", i)
	}
	t.Logf("Close took %v", closed)
}

// middleProxied starts three redis-servers and returns clients of them,
// node 1's through a fault proxy, for the stalled-node renewal tests.
func middleProxied(t *testing.T) ([]*redistest.Server, *faultproxy.Proxy, []redis.UniversalClient) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.StartN(t, 3, redistest.Options{})
	p1, err := faultproxy.New(srv[1].Addr(), 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p1.Close() })
	rc := redis.NewClient(&redis.Options{Addr: p1.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	return srv, p1, []redis.UniversalClient{srv[0].NewClient(t), rc, srv[2].NewClient(t)}
}
