package redlock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// delayKind is one kind of hold, taken by a Client with the given options,
// for the tests of WithLockDelay and WithMinHold.
type delayKind struct {
	name string
	// take takes the hold on key, its keys derived from key.
	take func(t *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error)
	// exclusive takes what the hold keeps others from: the lock itself, a
	// writer beside a reader, the last permit.
	exclusive func(t *testing.T, c *Client, key string) (*Lock, error)
}

// The kinds of hold: exclusive locks, then the shared ones.
var (
	dkPlain = delayKind{"plain",
		func(_ *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error) {
			return c.TryLock(context.Background(), key, opts...)
		},
		func(_ *testing.T, c *Client, key string) (*Lock, error) { return c.TryLock(context.Background(), key) }}
	dkMulti = delayKind{"multi",
		func(_ *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error) {
			return c.TryLockMulti(context.Background(), dkMultiKeys(key), opts...)
		},
		func(_ *testing.T, c *Client, key string) (*Lock, error) {
			// The second key alone: a multi-key lock holds each of them.
			return c.TryLock(context.Background(), dkMultiKeys(key)[1])
		}}
	dkFenced = delayKind{"fenced",
		func(_ *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error) {
			return c.TryLock(context.Background(), key, append(opts, WithFencing(true))...)
		},
		func(_ *testing.T, c *Client, key string) (*Lock, error) {
			return c.TryLock(context.Background(), key, WithFencing(true))
		}}
	dkReader = delayKind{"reader",
		func(_ *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error) {
			return c.TryRLock(context.Background(), key, opts...)
		},
		func(_ *testing.T, c *Client, key string) (*Lock, error) { return c.TryLock(context.Background(), key) }}
	dkPermit = delayKind{"permit",
		func(_ *testing.T, c *Client, key string, opts ...LockOption) (*Lock, error) {
			s, err := c.Semaphore(key, 1, opts...)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(context.Background())
		},
		func(_ *testing.T, c *Client, key string) (*Lock, error) {
			s, err := c.Semaphore(key, 1)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(context.Background())
		}}

	dkExclusive = []delayKind{dkPlain, dkMulti, dkFenced}
	dkAll       = []delayKind{dkPlain, dkMulti, dkFenced, dkReader, dkPermit}
)

// dkMultiKeys are the keys of a multi-key lock named key.
func dkMultiKeys(key string) []string { return []string{"{" + key + "}a", "{" + key + "}b"} }

// delayHeldFor returns how long node rc keeps l's hold: the shortest TTL of its
// keys, and for a reader or a permit the hold's own expiry when that is
// shorter (the field or score its script keeps, on the node's clock). It
// returns 0 when the hold is not there.
func delayHeldFor(t *testing.T, rc redis.UniversalClient, l *Lock) time.Duration {
	t.Helper()
	ctx := context.Background()
	least := time.Duration(-1)
	for _, k := range l.t.rkeys {
		d := rc.PTTL(ctx, k).Val()
		if d <= 0 {
			return 0
		}
		if least < 0 || d < least {
			least = d
		}
	}
	var own string
	switch {
	case l.t.fl.shared:
		f, err := rc.HGet(ctx, l.t.rkeys[0], "r:"+l.Token()).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		require.NoError(t, err)
		own = f
	case l.t.fl.permits > 0:
		s, err := rc.ZScore(ctx, l.t.rkeys[0], l.Token()).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		require.NoError(t, err)
		own = strconv.FormatInt(int64(s), 10)
	default:
		return least
	}
	e, err := strconv.ParseInt(own, 10, 64)
	require.NoError(t, err)
	now, err := rc.Time(ctx).Result()
	require.NoError(t, err)
	return min(least, time.Duration(e-now.UnixMilli())*time.Millisecond)
}

// delayHeldEverywhere waits until every node keeps l's hold (a round ends at
// its quorum, so the slower nodes may still be applying it), and returns
// how long each keeps it.
func delayHeldEverywhere(t *testing.T, cs []redis.UniversalClient, l *Lock) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(cs))
	for i, rc := range cs {
		require.Eventually(t, func() bool { out[i] = delayHeldFor(t, rc, l); return out[i] > 0 },
			5*time.Second, time.Millisecond, "node %d never kept the hold", i)
	}
	return out
}

// TestLockDelayNodesKeepTTLPlusDelay: with WithLockDelay(d), every kind of
// hold is kept TTL+d on the nodes, by the acquisition and by Extend, while
// Until stays about now+TTL.
func TestLockDelayNodesKeepTTLPlusDelay(t *testing.T) {
	srv, _ := realNodes(t, 3)
	c := realClients(t, srv, 1, WithTTL(3*time.Second))[0]
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	const ttl, delay, longer = 3 * time.Second, 6 * time.Second, 10 * time.Second
	for _, k := range dkAll {
		t.Run(k.name, func(t *testing.T) {
			l, err := k.take(t, c, "delay-ttl-"+k.name, WithLockDelay(delay))
			require.NoError(t, err)
			defer func() { _ = l.Unlock(context.Background()) }()
			left := time.Until(l.Until())
			require.True(t, left <= ttl && left > ttl/2, "Until is %v away, want about the TTL %v", left, ttl)
			// The margin is for a slow machine between the write and the
			// read; without the delay the nodes would keep it at most 3s.
			for i, got := range delayHeldEverywhere(t, cs, l) {
				require.True(t, got > ttl+delay-2*time.Second && got <= ttl+delay,
					"node %d keeps the hold %v, want about TTL+delay %v", i, got, ttl+delay)
			}

			require.NoError(t, l.Extend(context.Background(), WithTTL(longer)))
			left = time.Until(l.Until())
			require.True(t, left <= longer && left > longer/2, "Until is %v away after Extend, want about its TTL %v", left, longer)
			for i, rc := range cs {
				var got time.Duration
				require.Eventually(t, func() bool { got = delayHeldFor(t, rc, l); return got > longer }, 5*time.Second, time.Millisecond,
					"node %d keeps the hold %v after Extend, want about TTL+delay %v", i, got, longer+delay)
				require.True(t, got > longer+delay-2*time.Second && got <= longer+delay,
					"node %d keeps the hold %v after Extend, want about TTL+delay %v", i, got, longer+delay)
			}
		})
	}
}

// TestLockDelayRenewalsSendTTLPlusDelay: each auto-extension renewal keeps
// the hold TTL+d again. Past the acquisition's TTL+d minus the margin, only
// renewals that carry the delay can explain what the nodes keep.
func TestLockDelayRenewalsSendTTLPlusDelay(t *testing.T) {
	srv, _ := realNodes(t, 3)
	c := realClients(t, srv, 1, WithNodeTimeout(500*time.Millisecond))[0]
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	const ttl, delay = 3 * time.Second, 6 * time.Second
	kinds := []delayKind{dkPlain, dkReader, dkPermit}
	// Every hold first, so that the test waits once for them all.
	locks := make([]*Lock, len(kinds))
	for i, k := range kinds {
		l, err := k.take(t, c, "delay-renew-"+k.name, WithTTL(ttl), WithAutoExtend(true), WithLockDelay(delay))
		require.NoError(t, err, k.name)
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		locks[i] = l
	}
	// 4.5s in, the acquisition's TTL+delay has 4.5s left; renewals every
	// second keep the hold above 7.5s.
	time.Sleep(time.Until(locks[len(locks)-1].acquired.Add(4500 * time.Millisecond)))
	for i, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			l := locks[i]
			require.NoError(t, l.Err(), "the renewals failed")
			left := time.Until(l.Until())
			require.True(t, left <= ttl, "Until is %v away, want at most the TTL %v", left, ttl)
			held := 0
			for _, rc := range cs {
				if delayHeldFor(t, rc, l) > 6*time.Second {
					held++
				}
			}
			require.GreaterOrEqual(t, held, 2, "the hold is kept more than 6s on %d nodes, want a quorum of 2: the renewals did not send TTL+delay", held)
		})
	}
}

// TestLockDelayCleanUnlockFreesAtOnce: Unlock of a valid hold frees it at
// once, whatever the delay: another Client gets it right after.
func TestLockDelayCleanUnlockFreesAtOnce(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	for _, k := range dkAll {
		t.Run(k.name, func(t *testing.T) {
			key := "delay-clean-" + k.name
			l, err := k.take(t, cl[0], key, WithLockDelay(time.Minute))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(context.Background()))
			other, err := k.exclusive(t, cl[1], key)
			require.NoError(t, err, "another Client right after a clean Unlock")
			require.NoError(t, other.Unlock(context.Background()))
		})
	}
}

// delayCase is one kind of hold, with the lock-delay or without it (the
// negative control), for the tests that wait for holds to end.
type delayCase struct {
	k    delayKind
	d    time.Duration
	name string
	key  string
	l    *Lock // once taken
}

// delayCases crosses kinds with the delay d and without it.
func delayCases(prefix string, kinds []delayKind, d time.Duration) []delayCase {
	var out []delayCase
	for _, k := range kinds {
		out = append(out,
			delayCase{k: k, d: d, name: k.name, key: prefix + k.name},
			delayCase{k: k, name: k.name + "/negative control: no delay", key: prefix + k.name + "-control"})
	}
	return out
}

// TestLockDelayExpiredLockKeepsOthersOut: a hold left to expire (no Unlock,
// no auto-extension) keeps another Client out until d after its end, and
// then lets it in. Its negative control, d = 0, lets it in well before.
func TestLockDelayExpiredLockKeepsOthersOut(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(time.Second))
	const ttl, delay = time.Second, 5 * time.Second
	cases := delayCases("delay-expired-", []delayKind{dkPlain, dkReader, dkPermit}, delay)
	// Every hold first, so that the test waits once for them all.
	for i := range cases {
		tc := &cases[i]
		l, err := tc.k.take(t, cl[0], tc.key, WithLockDelay(tc.d))
		require.NoError(t, err, tc.name)
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		tc.l = l
	}
	for _, tc := range cases {
		<-tc.l.Done()
		require.ErrorIs(t, tc.l.Err(), ErrLockLost, tc.name)
	}
	// Right after the validity ended, the delayed holds still keep others
	// out.
	for _, tc := range cases {
		if tc.d > 0 {
			_, err := tc.k.exclusive(t, cl[1], tc.key)
			require.ErrorIs(t, err, ErrNotAcquired, "%s: another Client got in right after the validity ended", tc.name)
		}
	}
	// The controls first: they let the other Client in long before the
	// delayed holds end.
	slices.SortStableFunc(cases, func(a, b delayCase) int { return cmp.Compare(a.d, b.d) })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got time.Time
			require.Eventually(t, func() bool {
				other, err := tc.k.exclusive(t, cl[1], tc.key)
				if err != nil {
					return false
				}
				got = time.Now()
				_ = other.Unlock(context.Background())
				return true
			}, 15*time.Second, 20*time.Millisecond, "another Client never got in")
			// The nodes set the key no sooner than the acquisition began,
			// so a quorum frees it no sooner than TTL+d after.
			acquired := tc.l.acquired
			if end := acquired.Add(ttl + tc.d); tc.d > 0 {
				require.False(t, got.Before(end.Add(-5*time.Millisecond)),
					"another Client got in %v before the lock-delay ended", end.Sub(got))
			} else {
				require.True(t, got.Before(acquired.Add(ttl+delay)),
					"without the delay, another Client got in only %v after the acquisition", got.Sub(acquired))
			}
		})
	}
}

// TestLockDelayUnlockAfterValidityLeavesKeys: Unlock once the validity has
// ended, while the keys are still on the nodes, deletes nothing: the error
// says the lock is not held, and another Client stays out. A large drift
// factor makes the validity end well before the TTL. The negative control,
// without the delay, deletes the keys, and the other Client gets in at
// once.
func TestLockDelayUnlockAfterValidityLeavesKeys(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(3*time.Second), WithDriftFactor(0.4))
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	const delay = 10 * time.Second
	cases := delayCases("delay-late-unlock-", []delayKind{dkPlain, dkMulti, dkReader, dkPermit}, delay)
	// Every hold first, so that the test waits once for them all.
	for i := range cases {
		tc := &cases[i]
		l, err := tc.k.take(t, cl[0], tc.key, WithLockDelay(tc.d))
		require.NoError(t, err, tc.name)
		tc.l = l
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			delayHeldEverywhere(t, cs, l)
			<-l.Done()
			err := l.Unlock(context.Background())
			if tc.d == 0 {
				// The keys outlive the validity by the drift (1.2s): the
				// release deletes them, or they have expired.
				other, err := tc.k.exclusive(t, cl[1], tc.key)
				require.NoError(t, err, "without the delay, another Client right after the Unlock")
				require.NoError(t, other.Unlock(context.Background()))
				return
			}
			require.ErrorIs(t, err, ErrNotHeld, "Unlock after the validity ended")
			require.Contains(t, err.Error(), "lock-delay")
			for i, rc := range cs {
				got := delayHeldFor(t, rc, l)
				require.True(t, got > delay-3*time.Second, "node %d keeps the hold %v after the Unlock, want about the delay %v", i, got, delay)
			}
			_, err = tc.k.exclusive(t, cl[1], tc.key)
			require.ErrorIs(t, err, ErrNotAcquired, "another Client got in after an Unlock past the validity")
		})
	}
}

// TestLockDelayMaxHold: WithMaxHold caps the validity, and the keys live d
// past the cap, not past the TTL.
func TestLockDelayMaxHold(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(10*time.Second))
	l, err := c.TryLock(t.Context(), "delay-maxhold", WithMaxHold(2*time.Second), WithLockDelay(3*time.Second))
	require.NoError(t, err)
	defer func() { _ = l.Unlock(context.Background()) }()
	require.False(t, l.Until().After(l.acquired.Add(2*time.Second)), "Until is past the max hold")
	for i, m := range ms {
		require.Eventually(t, func() bool { return m.Exists("delay-maxhold") }, 5*time.Second, time.Millisecond)
		require.Equal(t, 5*time.Second, m.TTL("delay-maxhold"), "node %d: the key's TTL, want the max hold plus the delay", i)
	}
}

// TestLockDelayRaisesMaxTTL: the node guard's max TTL counts the delay:
// before the acquisition goes out, and before an Extend's.
func TestLockDelayRaisesMaxTTL(t *testing.T) {
	_, cs := minis(t, 3)
	for _, k := range dkAll {
		t.Run(k.name, func(t *testing.T) {
			c := newClient(t, cs, WithTTL(time.Second))
			require.Equal(t, time.Second, c.maxTTL())
			l, err := k.take(t, c, "delay-maxttl-"+k.name, WithLockDelay(4*time.Second))
			require.NoError(t, err)
			require.Equal(t, 5*time.Second, c.maxTTL(), "after the acquisition")
			require.NoError(t, l.Extend(t.Context(), WithTTL(3*time.Second)))
			require.Equal(t, 7*time.Second, c.maxTTL(), "after Extend")
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
	// A delay set in New counts from the first acquisition.
	c := newClient(t, cs, WithTTL(time.Second), WithLockDelay(2*time.Second))
	l, err := c.TryLock(t.Context(), "delay-maxttl-default")
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, c.maxTTL())
	require.NoError(t, l.Unlock(t.Context()))
}

// TestLockDelayDefaultSendsTTL: without the option, the nodes get the TTL
// alone, as before.
func TestLockDelayDefaultSendsTTL(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(7*time.Second))
	for _, k := range dkExclusive {
		l, err := k.take(t, c, "delay-none-"+k.name)
		require.NoError(t, err)
		for _, m := range ms {
			for _, rk := range l.t.rkeys {
				require.Eventually(t, func() bool { return m.Exists(rk) }, 5*time.Second, time.Millisecond)
				require.Equal(t, 7*time.Second, m.TTL(rk), "%s: %s", k.name, rk)
			}
		}
		require.NoError(t, l.Unlock(t.Context()))
	}
}
