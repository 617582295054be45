package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestSemaphoreQuorumTable(t *testing.T) {
	want := map[int][]int{ // N -> Q for k = 1..6
		3: {2, 3, 3, 3, 3, 3},
		5: {3, 4, 4, 5, 5, 5},
		7: {4, 5, 6, 6, 6, 7},
	}
	for n, qs := range want {
		_, cs := minis(t, n)
		c := newClient(t, cs)
		for k := 1; k <= 6; k++ {
			s, err := c.Semaphore(fmt.Sprintf("sem-table-%d-%d", n, k), k)
			require.NoError(t, err)
			require.Equal(t, qs[k-1], s.Quorum(), "N=%d k=%d: got quorum %d, want %d", n, k, s.Quorum(), qs[k-1])
		}
	}
}

// TestSemaphoreQuorumIsTightByPigeonhole checks the arithmetic by brute
// force: with Q nodes each, k+1 holders always share a node, and with Q-1
// there is a placement where no node counts more than k of them.
func TestSemaphoreQuorumIsTightByPigeonhole(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for k := 1; k <= 4; k++ {
			q := semaphoreQuorum(n, k)
			require.LessOrEqual(t, q, n)
			require.False(t, spreadable(n, k, q), "N=%d k=%d Q=%d: %d holders fit with no node counting more than %d", n, k, q, k+1, k)
			if q > 1 {
				require.True(t, spreadable(n, k, q-1), "N=%d k=%d: Q=%d is not the smallest safe quorum", n, k, q)
			}
		}
	}
}

// spreadable reports whether k+1 holders, each on q of n nodes, can be
// placed so that no node counts more than k of them. Round-robin placement
// (holder j on nodes j·q, j·q+1, ... mod n) is optimal: it loads no node
// more than ceil((k+1)·q/n), which every placement reaches somewhere.
func spreadable(n, k, q int) bool {
	load := make([]int, n)
	for j := range k + 1 {
		for i := range q {
			load[(j*q+i)%n]++
		}
	}
	return slices.Max(load) <= k
}

func TestSemaphoreRefusesBadPermitsAndOptions(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	for _, k := range []int{0, -1} {
		_, err := c.Semaphore("sem-bad", k)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("got %d", k))
	}
	_, err := c.Semaphore("", 2)
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = c.Semaphore("sem-bad", 2, WithFencing(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	s, err := c.Semaphore("sem-bad", 2)
	require.NoError(t, err)
	_, err = s.TryAcquire(t.Context(), WithOwner("me"))
	require.ErrorIs(t, err, ErrInvalidOption)
}

func TestSemaphoreGrantsPermitsAndNoMore(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-count", 3)
	require.NoError(t, err)
	ctx := t.Context()
	var held []*Lock
	for i := range 3 {
		l, err := s.TryAcquire(ctx)
		require.NoError(t, err, "permit %d", i+1)
		require.Equal(t, 4, l.Stats().Quorum)
		held = append(held, l)
	}
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, ErrNotAcquired, "got %v, want the 4th permit refused", err)

	require.NoError(t, held[1].Unlock(ctx))
	l, err := s.TryAcquire(ctx)
	require.NoError(t, err, "a released permit is reusable")
	held[1] = l
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	for i, m := range ms {
		require.Eventually(t, func() bool { return !m.Exists("sem-count") }, 5*time.Second, time.Millisecond,
			"node %d: key left after the last permit was released", i)
	}
}

// placeHolder puts a foreign holder of a semaphore of permits permits on
// node m, as another client's semacquire.lua would, expiring at exp on the
// node's clock (unix milliseconds).
func placeHolder(t *testing.T, m *miniredis.Miniredis, key, member string, permits int, exp int64) {
	t.Helper()
	_, err := m.ZAdd(key, float64(-permits), "#permits")
	require.NoError(t, err)
	_, err = m.ZAdd(key, float64(exp), member)
	require.NoError(t, err)
}

func TestSemaphoreExpiredHoldersDoNotCount(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-exp", 1)
	require.NoError(t, err)
	past := time.Now().Add(-time.Second).UnixMilli()
	future := time.Now().Add(time.Hour).UnixMilli()
	for _, m := range ms {
		placeHolder(t, m, "sem-exp", "ghost", 1, past)
	}
	l, err := s.TryAcquire(t.Context())
	require.NoError(t, err, "an expired holder must not count")
	for i, m := range ms {
		require.Eventually(t, func() bool {
			members, _ := m.ZMembers("sem-exp")
			return !slices.Contains(members, "ghost") && len(members) == 2
		}, 5*time.Second, time.Millisecond, "node %d: the expired holder was not removed", i)
	}
	require.NoError(t, l.Unlock(t.Context()))

	// A live one does count.
	for _, m := range ms {
		placeHolder(t, m, "sem-exp", "alive", 1, future)
	}
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrNotAcquired)

	// The key's own TTL follows its longest-lived holder: FastForward
	// past it removes the key. (A key of its own: the refused attempt's
	// slowest node may still answer yes, and be rolled back, later.)
	s, err = c.Semaphore("sem-exp-ttl", 1)
	require.NoError(t, err)
	l, err = s.TryAcquire(t.Context(), WithTTL(3*time.Second))
	require.NoError(t, err)
	for _, m := range ms {
		require.Eventually(t, func() bool { return m.TTL("sem-exp-ttl") > 0 }, 5*time.Second, time.Millisecond)
		ttl := m.TTL("sem-exp-ttl")
		require.LessOrEqual(t, ttl, 3*time.Second)
		m.FastForward(4 * time.Second)
		require.False(t, m.Exists("sem-exp-ttl"), "TTL was %v", ttl)
	}
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
}

func TestSemaphorePermitsMustAgree(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	two, err := c.Semaphore("sem-agree", 2)
	require.NoError(t, err)
	three, err := c.Semaphore("sem-agree", 3)
	require.NoError(t, err)
	l, err := two.TryAcquire(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = three.Acquire(ctx) // stops at once: waiting cannot help
	require.Less(t, time.Since(start), 3*time.Second)
	require.ErrorIs(t, err, ErrPermitsMismatch)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorContains(t, err, "held with 2 permits")
	require.ErrorContains(t, err, "this semaphore has 3")
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "sem-agree", "") // Unlock returns at its quorum

	// Once nobody holds it, the key takes the new number.
	l, err = three.TryAcquire(t.Context())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))

	// Two nodes whose holders count 3 permits are enough to refuse.
	future := time.Now().Add(time.Hour).UnixMilli()
	for _, m := range ms[:2] {
		placeHolder(t, m, "sem-agree-minority", "other", 3, future)
	}
	s, err := c.Semaphore("sem-agree-minority", 2)
	require.NoError(t, err)
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrPermitsMismatch)
	require.ErrorContains(t, err, `key "sem-agree-minority" is held with 3 permits, this semaphore has 2`)
}

func TestSemaphorePermitExtendsAndUnlocks(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-extend", 2, WithTTL(2*time.Second))
	require.NoError(t, err)
	l, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	before := l.Until()
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	require.True(t, l.Until().After(before), "got Until %v, want after %v", l.Until(), before)
	require.Equal(t, 4, l.Stats().Quorum)
	require.NoError(t, l.Unlock(t.Context()))
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld)
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
}

func TestSemaphorePermitAutoExtends(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
	// A TTL of a second, so that a loaded machine that stalls the
	// renewer for a few hundred milliseconds does not lose the permit:
	// each renewal has about two thirds of the TTL to reach its quorum.
	const ttl = time.Second
	s, err := c.Semaphore("sem-auto", 2, WithTTL(ttl), WithAutoExtend(true))
	require.NoError(t, err)
	l, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	first := l.Until()
	time.Sleep(ttl * 5 / 2)
	select {
	case <-l.Done():
		t.Fatalf("permit lost: %v", l.Err())
	default:
	}
	require.True(t, l.Until().After(first.Add(ttl)), "got Until %v, want renewed past %v", l.Until(), first)
	require.NoError(t, l.Unlock(t.Context()))
}

// takeBothPermits takes both permits of a 2-permit semaphore on key, and
// waits until both are on every node: TryAcquire returns at its quorum (4
// of 5), and a waiter that starts before the last node's acquire lands may
// take that node's permit first; b then does not hold it there, and its
// release rightly says so.
func takeBothPermits(t *testing.T, c *Client, cs []redis.UniversalClient, key string) (a, b *Lock) {
	t.Helper()
	s, err := c.Semaphore(key, 2)
	require.NoError(t, err)
	a, err = s.TryAcquire(t.Context())
	require.NoError(t, err)
	b, err = s.TryAcquire(t.Context())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, rc := range cs {
			for _, l := range []*Lock{a, b} {
				if rc.ZScore(t.Context(), key, l.Token()).Err() != nil {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "both permits on every node")
	return a, b
}

// acquireAndUnlock waits for a permit of s in the background, for at most
// within, and unlocks it at once; the channel gets the first error.
func acquireAndUnlock(t *testing.T, s *Semaphore, within time.Duration) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		l, err := s.Acquire(ctx)
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	return got
}

func TestSemaphoreAcquireWakesOnRelease(t *testing.T) {
	_, cs := minis(t, 5)
	// A long retry delay: only the release's announcement can wake the
	// waiter in time.
	c := newClient(t, cs, WithRetryDelay(10*time.Second, 10*time.Second))
	a, b := takeBothPermits(t, c, cs, "sem-wake")

	// A second Client, as another process: no local wake-up.
	other := newClient(t, cs, WithRetryDelay(10*time.Second, 10*time.Second))
	so, err := other.Semaphore("sem-wake", 2)
	require.NoError(t, err)
	got := acquireAndUnlock(t, so, 5*time.Second)
	require.Eventually(t, func() bool { return marked(t, cs, "sem-wake") }, 5*time.Second, time.Millisecond)
	start := time.Now()
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, <-got)
	require.Less(t, time.Since(start), 3*time.Second, "the waiter was not woken by the release")
	require.NoError(t, b.Unlock(t.Context()))
}

func TestSemaphoreRollbackLeavesNothing(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-rollback", 2)
	require.NoError(t, err)
	future := time.Now().Add(time.Hour).UnixMilli()
	// Two nodes full: 3 yes, short of the quorum of 4.
	for _, m := range ms[:2] {
		placeHolder(t, m, "sem-rollback", "x", 2, future)
		placeHolder(t, m, "sem-rollback", "y", 2, future)
	}
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrNotAcquired)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, 4, qe.Stats.Quorum)
	for i, m := range ms[2:] {
		require.Eventually(t, func() bool { return !m.Exists("sem-rollback") }, 5*time.Second, time.Millisecond,
			"node %d: the failed attempt's permit was not rolled back", i+2)
	}
	for i, m := range ms[:2] {
		members, err := m.ZMembers("sem-rollback")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"#permits", "x", "y"}, members, "node %d", i)
	}
}

func TestSemaphoreAndLocksExcludeEachOther(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-mixed", 3)
	require.NoError(t, err)
	// A redsync lock: a plain random string at the key.
	for _, m := range ms {
		require.NoError(t, m.Set("sem-mixed", "redsync-token"))
	}
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrNotAcquired, "a string at the key is a held lock")
	for i, m := range ms {
		got, err := m.Get("sem-mixed")
		require.NoError(t, err)
		require.Equal(t, "redsync-token", got, "node %d: the lock was touched", i)
	}
	for _, m := range ms {
		m.Del("sem-mixed")
	}
	l, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "sem-mixed")
	require.ErrorIs(t, err, ErrNotAcquired, "a lock must not be taken where a semaphore holds the key")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestSemaphoreMajorityQuorumIsNotEnough is the negative control of
// docs/SEMAPHORE.md. N=5, k=2: holder i can reach only its node set Hi,
// because every other node is full of blockers while it asks. H1={1,2,3},
// H2={3,4,5}, H3={1,2,4}: no node ever counts more than 2 of them, yet
// with a majority quorum each wins 3 nodes, and three holders of two
// permits hold at once. With the semaphore's quorum of 4 none of them can:
// the third fails, as do the first two.
func TestSemaphoreMajorityQuorumIsNotEnough(t *testing.T) {
	for _, majority := range []bool{true, false} {
		t.Run(fmt.Sprintf("majority=%v", majority), func(t *testing.T) {
			ms, cs := minis(t, 5)
			c := setHooks(newClient(t, cs), testHooks{majoritySemaphore: majority})
			key := "sem-control"
			s, err := c.Semaphore(key, 2)
			require.NoError(t, err)
			// The script is loaded up front, so that each acquire is one
			// EVALSHA: the test counts the nodes' commands to know that
			// every node answered before it moves the blockers. A round
			// decides at its quorum, and a slower node's request must
			// not land after its blockers are gone.
			for _, rc := range cs {
				require.NoError(t, rc.ScriptLoad(t.Context(), scripts[scriptSemAcquire].src).Err())
			}
			sets := [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}}
			far := time.Now().Add(time.Hour).UnixMilli()
			var won []*Lock
			for h, set := range sets {
				var blocked []int
				for i := range ms {
					if !contains(set, i) {
						blocked = append(blocked, i)
						placeHolder(t, ms[i], key, "blocker-a", 2, far)
						placeHolder(t, ms[i], key, "blocker-b", 2, far)
					}
				}
				before := make([]int, len(ms))
				for i, m := range ms {
					before[i] = m.CommandCount()
				}
				l, err := s.TryAcquire(t.Context())
				for i, m := range ms {
					require.Eventually(t, func() bool { return m.CommandCount() > before[i] }, 5*time.Second, time.Millisecond,
						"node %d never got H%d's request", i, h+1)
				}
				if majority {
					require.NoError(t, err, "H%d: got %v, want a permit on a majority", h+1, err)
				} else {
					require.ErrorIs(t, err, ErrNotAcquired, "H%d: got a permit on %d nodes, want it refused", h+1, 3)
				}
				if l != nil {
					won = append(won, l)
				}
				// The blockers go; the holders stay, on their own set only.
				for _, i := range blocked {
					_, _ = ms[i].ZRem(key, "blocker-a")
					_, _ = ms[i].ZRem(key, "blocker-b")
				}
				for i, m := range ms {
					members, _ := m.ZMembers(key)
					require.LessOrEqual(t, len(members)-1, 2, "node %d counts %v", i, members)
				}
			}
			if majority {
				require.Len(t, won, 3, "the control must show 3 holders of 2 permits")
			} else {
				require.Empty(t, won)
			}
			for _, l := range won {
				_ = l.Unlock(t.Context())
			}
		})
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestSemaphoreOnRealRedisWithKilledNodes runs on 5 redis-servers: with
// k=2 the quorum is 4, so one killed node is tolerated and two are not.
func TestSemaphoreOnRealRedisWithKilledNodes(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs)
	s, err := c.Semaphore("sem-real", 2)
	require.NoError(t, err)
	require.Equal(t, 4, s.Quorum())
	a, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	b, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, a.Unlock(t.Context()))
	// Unlock returns at its quorum: wait for the last node too.
	for i, rc := range cs {
		require.Eventually(t, func() bool {
			return errors.Is(rc.ZScore(t.Context(), "sem-real", a.Token()).Err(), redis.Nil)
		}, 5*time.Second, time.Millisecond,
			"node %d: the release never landed", i)
	}

	srv[4].Kill()
	l, err := s.TryAcquire(t.Context())
	require.NoError(t, err, "one node down is within the tolerance of 1")
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))

	srv[3].Kill()
	_, err = s.TryAcquire(t.Context())
	require.ErrorIs(t, err, ErrNotAcquired, "two nodes down is beyond the tolerance")
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, 2, qe.Stats.Failed)
	err = b.Unlock(t.Context())
	require.Error(t, err, "3 nodes cannot confirm a release that needs 4")
	require.False(t, errors.Is(err, ErrNotHeld) && !strings.Contains(err.Error(), "quorum"), "got %v", err)
}

// TestSemaphoreInspect: Inspect reads a semaphore's sorted set: its permits,
// the quorum they need, and the live permits a quorum holds; a holder whose
// expiry has passed on the node's clock is not listed; a sorted set without
// '#permits' is foreign.
func TestSemaphoreInspect(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(10*time.Second))
	s, err := c.Semaphore("sem-inspect", 2)
	require.NoError(t, err)
	a, err := s.TryAcquire(t.Context())
	require.NoError(t, err)
	b, err := s.TryAcquire(t.Context(), WithLabel("job-b"))
	require.NoError(t, err)
	want := []string{a.Token(), b.Token()}
	slices.Sort(want)
	// TryAcquire returns at its quorum of 4: the fifth node's request may
	// still be in flight.
	require.Eventually(t, func() bool {
		h, err := c.Inspect(t.Context(), "sem-inspect")
		if err != nil || h.Count != 2 || len(h.Nodes) != 5 {
			return false
		}
		for _, nh := range h.Nodes {
			if nh.Count != 2 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "Inspect never saw both permits on every node")
	h, err := c.Inspect(t.Context(), "sem-inspect")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.False(t, h.Shared)
	require.Equal(t, 2, h.Permits)
	require.Equal(t, 4, h.Quorum, "two permits on five nodes need four")
	require.Equal(t, want, h.Tokens)
	require.Positive(t, h.Remaining)
	for _, nh := range h.Nodes {
		require.Equal(t, "semaphore", nh.Layout, "node %d", nh.Index)
		require.Equal(t, 2, nh.Permits, "node %d", nh.Index)
		require.Equal(t, want, nh.Tokens, "node %d", nh.Index)
	}
	require.Contains(t, []string{"", "job-b"}, h.Nodes[0].Label, "the label of node 0's first permit")

	// a's expiry passes on two nodes' clocks (its member's score is moved
	// back): it is then on three nodes only, short of the quorum.
	for _, m := range ms[:2] {
		_, err := m.ZAdd("sem-inspect", 1, a.Token())
		require.NoError(t, err)
	}
	h, err = c.Inspect(t.Context(), "sem-inspect")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, []string{b.Token()}, h.Tokens)
	require.EqualValues(t, 1, h.Count)
	require.Equal(t, "job-b", h.Label)
	require.Equal(t, []string{b.Token()}, h.Nodes[0].Tokens, "an expired holder is not listed")
	require.ErrorIs(t, a.Unlock(t.Context()), ErrNotHeld, "a is gone on two nodes: too few hold it")
	require.NoError(t, b.Unlock(t.Context()))
	h, err = c.Inspect(t.Context(), "sem-inspect")
	require.NoError(t, err)
	require.False(t, h.Held)

	// Somebody else's sorted set.
	for _, m := range ms {
		_, err := m.ZAdd("scores", 1, "alice")
		require.NoError(t, err)
	}
	h, err = c.Inspect(t.Context(), "scores")
	require.NoError(t, err)
	require.False(t, h.Held)
	for _, nh := range h.Nodes {
		require.Equal(t, "foreign", nh.Layout, "node %d", nh.Index)
	}
}
