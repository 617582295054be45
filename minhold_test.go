package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// minHoldLeft checks that every node keeps l's keys, each for about want:
// at most want (and the milliseconds the release rounds up), and more than
// want minus the margin. Unlock returns at its quorum, so a slower node may
// apply the release a little later: each node is given half a second.
func minHoldLeft(t *testing.T, cs []redis.UniversalClient, l *Lock, want, margin time.Duration) {
	t.Helper()
	for i, rc := range cs {
		for _, k := range l.t.rkeys {
			var got time.Duration
			ok := func() bool {
				got = rc.PTTL(context.Background(), k).Val()
				return got <= want+10*time.Millisecond && got > want-margin
			}
			deadline := time.Now().Add(500 * time.Millisecond)
			for !ok() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			require.True(t, ok(), "node %d keeps %s for %v, want about %v", i, k, got, want)
		}
	}
}

// minHoldGetsIn waits until other takes the hold of kind k on key, and
// returns when it had it.
func minHoldGetsIn(t *testing.T, k delayKind, other *Client, key string) time.Time {
	t.Helper()
	var got time.Time
	require.Eventually(t, func() bool {
		l, err := k.exclusive(t, other, key)
		if err != nil {
			return false
		}
		got = time.Now()
		_ = l.Unlock(context.Background())
		return true
	}, 20*time.Second, 20*time.Millisecond, "another Client never got in")
	return got
}

// TestMinHoldUnlockEarlyKeepsKeyUntilAcquisitionPlusMinHold: an Unlock
// before acquisition+d returns nil and leaves the keys, on every node, to
// expire at acquisition+d: another Client is kept out until then, and gets
// in after.
func TestMinHoldUnlockEarlyKeepsKeyUntilAcquisitionPlusMinHold(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	const minHold = 3 * time.Second
	// Every hold first, so that the test waits once for them all.
	locks := make([]*Lock, len(dkExclusive))
	for i, k := range dkExclusive {
		l, err := k.take(t, cl[0], "minhold-early-"+k.name, WithMinHold(minHold))
		require.NoError(t, err, k.name)
		delayHeldEverywhere(t, cs, l)
		require.NoError(t, l.Unlock(context.Background()), "%s: Unlock before the end of the minimum hold", k.name)
		locks[i] = l
	}
	for i, k := range dkExclusive {
		l, key := locks[i], "minhold-early-"+k.name
		require.ErrorIs(t, l.Err(), ErrUnlocked)
		// The time left, with a margin for a slow machine between the
		// acquisition and this read.
		minHoldLeft(t, cs, l, time.Until(l.acquired.Add(minHold)), 2*time.Second)
		_, err := k.exclusive(t, cl[1], key)
		require.ErrorIs(t, err, ErrNotAcquired, "%s: another Client got in during the minimum hold", k.name)
	}
	minHoldThenIn(t, cl[1], "minhold-early-", locks, minHold)
}

// minHoldThenIn waits, for each exclusive kind, until other takes the key
// (prefix + the kind's name) that locks[i] held, and requires that it did
// not before the lock's acquisition plus minHold.
func minHoldThenIn(t *testing.T, other *Client, prefix string, locks []*Lock, minHold time.Duration) {
	t.Helper()
	for i, k := range dkExclusive {
		t.Run(k.name, func(t *testing.T) {
			got := minHoldGetsIn(t, k, other, prefix+k.name)
			// The release sets the expiry no sooner than it is sent, for
			// the time then left: a quorum frees the keys no sooner than
			// the end of the minimum hold.
			end := locks[i].acquired.Add(minHold)
			require.False(t, got.Before(end.Add(-5*time.Millisecond)),
				"another Client got in %v before the minimum hold ended", end.Sub(got))
		})
	}
}

// TestMinHoldUnlockAfterFreesAtOnce: once acquisition+d has passed, Unlock
// frees the keys at once.
func TestMinHoldUnlockAfterFreesAtOnce(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	const minHold = 300 * time.Millisecond
	locks := make([]*Lock, len(dkExclusive))
	for i, k := range dkExclusive {
		l, err := k.take(t, cl[0], "minhold-after-"+k.name, WithMinHold(minHold))
		require.NoError(t, err, k.name)
		locks[i] = l
	}
	time.Sleep(time.Until(locks[len(locks)-1].acquired.Add(minHold + 100*time.Millisecond)))
	for i, k := range dkExclusive {
		t.Run(k.name, func(t *testing.T) {
			require.NoError(t, locks[i].Unlock(context.Background()))
			other, err := k.exclusive(t, cl[1], "minhold-after-"+k.name)
			require.NoError(t, err, "another Client right after an Unlock past the minimum hold")
			require.NoError(t, other.Unlock(context.Background()))
		})
	}
}

// TestMinHoldWithLockDelayCleanUnlock: a clean Unlock before the end of the
// minimum hold drops the lock-delay too: the keys expire at acquisition+d,
// not TTL+delay later.
func TestMinHoldWithLockDelayCleanUnlock(t *testing.T) {
	srv, _ := realNodes(t, 3)
	c := realClients(t, srv, 1, WithTTL(10*time.Second))[0]
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	l, err := c.TryLock(context.Background(), "minhold-delay", WithMinHold(2*time.Second), WithLockDelay(time.Minute))
	require.NoError(t, err)
	delayHeldEverywhere(t, cs, l)
	require.NoError(t, l.Unlock(context.Background()))
	minHoldLeft(t, cs, l, time.Until(l.acquired.Add(2*time.Second)), 2*time.Second)
}

// TestMinHoldLongerThanTTLWithAutoExtend: a minimum hold longer than the
// TTL, with auto-extension (ShedLock's lockAtLeastFor): the Unlock
// lengthens the keys, which live at most TTL+the renewal's wait, to
// acquisition+d, and another Client is kept out until then.
func TestMinHoldLongerThanTTLWithAutoExtend(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(2*time.Second), WithNodeTimeout(300*time.Millisecond))
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	const minHold = 6 * time.Second
	locks := make([]*Lock, len(dkExclusive))
	for i, k := range dkExclusive {
		l, err := k.take(t, cl[0], "minhold-long-"+k.name, WithMinHold(minHold), WithAutoExtend(true))
		require.NoError(t, err, k.name)
		locks[i] = l
	}
	// Past one renewal, then the Unlock: the keys have at most the TTL
	// left, and the minimum hold about 5s.
	time.Sleep(time.Until(locks[len(locks)-1].acquired.Add(time.Second)))
	for i, k := range dkExclusive {
		require.NoError(t, locks[i].Err(), "%s: the renewals failed", k.name)
		require.NoError(t, locks[i].Unlock(context.Background()), k.name)
	}
	for i, k := range dkExclusive {
		l, key := locks[i], "minhold-long-"+k.name
		// Without the lengthening the nodes would keep the keys at most
		// the TTL, 2s.
		minHoldLeft(t, cs, l, time.Until(l.acquired.Add(minHold)), 2*time.Second)
		_, err := k.exclusive(t, cl[1], key)
		require.ErrorIs(t, err, ErrNotAcquired, "%s: another Client got in during the minimum hold", k.name)
	}
	minHoldThenIn(t, cl[1], "minhold-long-", locks, minHold)
}

// minHoldScript runs releaselater.lua for value on keys, owner "" for a
// plain lock, as Unlock's job builds it.
func minHoldScript(t *testing.T, rc redis.UniversalClient, keys []string, value, owner string, left time.Duration, cut bool) int64 {
	t.Helper()
	tg := newTarget(plainFlavour, keys, "id", owner, false, 1)
	cmd := tg.evalReleaseLater(nil, true, value, left, cut)
	require.NoError(t, rc.Process(context.Background(), cmd))
	return cmd.Val().(int64)
}

// expireTime is the key's PEXPIRETIME: its expiry on the node's clock.
func expireTime(t *testing.T, rc redis.UniversalClient, key string) int64 {
	t.Helper()
	got, err := rc.Do(context.Background(), "pexpiretime", key).Int64()
	require.NoError(t, err)
	return got
}

// TestMinHoldReleaseLaterTwiceIsOnce: releaselater.lua run twice, the second
// time later (a copy that go-redis sent again, or that landed late), leaves
// the node as the first run left it: a cut expiry is not set again from the
// later copy, and an owner lock's other holds keep theirs.
func TestMinHoldReleaseLaterTwiceIsOnce(t *testing.T) {
	_, cs := realNodes(t, 1)
	rc, ctx := cs[0], context.Background()
	twice := func(t *testing.T, keys []string, value, owner string, wantFirst, wantCopy int64) {
		t.Helper()
		require.Equal(t, wantFirst, minHoldScript(t, rc, keys, value, owner, 3*time.Second, true), "the first run")
		first := make([]int64, len(keys))
		for i, k := range keys {
			first[i] = expireTime(t, rc, k)
		}
		time.Sleep(50 * time.Millisecond)
		require.Equal(t, wantCopy, minHoldScript(t, rc, keys, value, owner, 3*time.Second, true), "the copy")
		for i, k := range keys {
			require.Equal(t, first[i], expireTime(t, rc, k), "%s: the copy moved the expiry", k)
		}
	}
	t.Run("plain", func(t *testing.T) {
		require.NoError(t, rc.Set(ctx, "minhold-twice", "v", 10*time.Second).Err())
		twice(t, []string{"minhold-twice"}, "v", "", 1, 1)
		require.Equal(t, "v", rc.Get(ctx, "minhold-twice").Val())
		require.LessOrEqual(t, rc.PTTL(ctx, "minhold-twice").Val(), 3*time.Second)
	})
	t.Run("multi", func(t *testing.T) {
		keys := []string{"{minhold-twice}a", "{minhold-twice}b"}
		for _, k := range keys {
			require.NoError(t, rc.Set(ctx, k, "v", 10*time.Second).Err())
		}
		twice(t, keys, "v", "", 1, 1)
	})
	t.Run("owner, last hold", func(t *testing.T) {
		require.NoError(t, rc.HSet(ctx, "minhold-twice-owner", "owner", "o", "t:v", "1").Err())
		require.NoError(t, rc.PExpire(ctx, "minhold-twice-owner", 10*time.Second).Err())
		twice(t, []string{"minhold-twice-owner"}, "v", "o", 1, 1)
		require.Equal(t, map[string]string{"owner": "o", "t:v": "1"}, rc.HGetAll(ctx, "minhold-twice-owner").Val(),
			"the last hold stays, as a plain key's value does")
	})
	t.Run("owner, other holds", func(t *testing.T) {
		const key = "minhold-twice-owners"
		require.NoError(t, rc.HSet(ctx, key, "owner", "o", "t:v", "1", "t:w", "1").Err())
		require.NoError(t, rc.PExpire(ctx, key, 10*time.Second).Err())
		before := expireTime(t, rc, key)
		// The other hold counts on the key's expiry: never cut.
		twice(t, []string{key}, "v", "o", 1, 0)
		require.Equal(t, map[string]string{"owner": "o", "t:w": "1"}, rc.HGetAll(ctx, key).Val())
		require.Equal(t, before, expireTime(t, rc, key), "the other hold's expiry was changed")
	})
	t.Run("lengthen", func(t *testing.T) {
		// A minimum hold longer than what the key has left: each copy
		// lengthens it to its own time left, as a late copy of an
		// extension does, and never shortens what the first one set.
		require.NoError(t, rc.Set(ctx, "minhold-twice-long", "v", time.Second).Err())
		require.EqualValues(t, 1, minHoldScript(t, rc, []string{"minhold-twice-long"}, "v", "", 3*time.Second, false))
		first := expireTime(t, rc, "minhold-twice-long")
		require.Greater(t, rc.PTTL(ctx, "minhold-twice-long").Val(), 2*time.Second)
		require.EqualValues(t, 1, minHoldScript(t, rc, []string{"minhold-twice-long"}, "v", "", 3*time.Second, false))
		second := expireTime(t, rc, "minhold-twice-long")
		require.True(t, second >= first && second-first < 1000, "the copy moved the expiry from %d to %d, want as a single run", first, second)
		require.Equal(t, "v", rc.Get(ctx, "minhold-twice-long").Val())
	})
}

// TestMinHoldResentReleaseCountsOnce: go-redis sends Unlock's release
// again after it lost the replies of two nodes: Unlock still returns nil,
// the keys keep the expiry the first copy set.
func TestMinHoldResentReleaseCountsOnce(t *testing.T) {
	ms, ps, cs := proxiedNodes(t, 3)
	c := newClient(t, cs, WithTTL(10*time.Second))
	ctx := t.Context()

	l, err := c.TryLock(ctx, "minhold-resent", WithMinHold(5*time.Second))
	require.NoError(t, err)
	eventually(t, ms, "minhold-resent", l.Token())
	drained(t, cs)
	ps[0].LoseNext(1)
	ps[1].LoseNext(1)
	require.NoError(t, l.Unlock(ctx), "a release-later whose replies were lost and sent again")
	lostReplies(t, ps[0], 1)
	lostReplies(t, ps[1], 1)
	drained(t, cs)
	for i, m := range ms {
		// miniredis does not count time down: the TTL is what was set.
		v, _ := m.Get("minhold-resent")
		require.Equal(t, l.Token(), v, "node %d", i)
		got := m.TTL("minhold-resent")
		require.True(t, got > 0 && got <= 5*time.Second, "node %d keeps the key for %v, want at most the minimum hold", i, got)
	}
}

// TestMinHoldNeverTouchesAnotherHolder: releaselater.lua leaves a key that
// holds anything but the exact value alone, in both modes; and a holder
// whose lock expired and was taken by another Client leaves that Client's
// keys as they were when it unlocks.
func TestMinHoldNeverTouchesAnotherHolder(t *testing.T) {
	srv, cs := realNodes(t, 3)
	rc, ctx := cs[0], context.Background()
	for _, cut := range []bool{true, false} {
		require.NoError(t, rc.Set(ctx, "minhold-other", "theirs", 5*time.Second).Err())
		require.NoError(t, rc.HSet(ctx, "minhold-other-owner", "owner", "x", "t:v", "1").Err())
		require.NoError(t, rc.PExpire(ctx, "minhold-other-owner", 5*time.Second).Err())
		require.NoError(t, rc.HSet(ctx, "minhold-same-owner", "owner", "o", "t:w", "1").Err())
		require.NoError(t, rc.PExpire(ctx, "minhold-same-owner", 5*time.Second).Err())
		keys := []string{"minhold-other", "minhold-other-owner", "minhold-same-owner"}
		before := make([]int64, len(keys))
		for i, k := range keys {
			before[i] = expireTime(t, rc, k)
		}
		require.EqualValues(t, -1, minHoldScript(t, rc, keys[:1], "v", "", time.Minute, cut), "another value")
		require.EqualValues(t, -1, minHoldScript(t, rc, keys[1:2], "v", "o", time.Minute, cut), "another owner")
		require.EqualValues(t, 0, minHoldScript(t, rc, keys[2:], "v", "o", time.Minute, cut), "the owner without this hold")
		require.EqualValues(t, 0, minHoldScript(t, rc, []string{"minhold-gone"}, "v", "", time.Minute, cut), "a missing key")
		require.Zero(t, rc.Exists(ctx, "minhold-gone").Val(), "a missing key was created")
		for i, k := range keys {
			require.Equal(t, before[i], expireTime(t, rc, k), "cut=%v: %s's expiry was changed", cut, k)
		}
		require.Equal(t, "theirs", rc.Get(ctx, "minhold-other").Val())
		require.Equal(t, map[string]string{"owner": "x", "t:v": "1"}, rc.HGetAll(ctx, "minhold-other-owner").Val())
		require.Equal(t, map[string]string{"owner": "o", "t:w": "1"}, rc.HGetAll(ctx, "minhold-same-owner").Val())
	}

	// End to end: A's lock expires; B takes the key; A's late Unlock, in
	// its minimum hold, finds B's value and leaves it, though the time
	// left of A's minimum hold is longer than B's TTL.
	cl := realClients(t, srv, 2, WithTTL(time.Second))
	a, err := cl[0].TryLock(ctx, "minhold-taken", WithMinHold(30*time.Second))
	require.NoError(t, err)
	<-a.Done()
	var b *Lock
	require.Eventually(t, func() bool {
		var err error
		b, err = cl[1].TryLock(ctx, "minhold-taken", WithTTL(5*time.Second))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "B never took the expired key")
	delayHeldEverywhere(t, cs, b)
	before := make([]int64, len(cs))
	for i, rc := range cs {
		before[i] = expireTime(t, rc, "minhold-taken")
	}
	require.ErrorIs(t, a.Unlock(ctx), ErrNotHeld, "A's Unlock of a lock B holds")
	for i, rc := range cs {
		require.Equal(t, b.Token(), rc.Get(ctx, "minhold-taken").Val(), "node %d", i)
		require.Equal(t, before[i], expireTime(t, rc, "minhold-taken"), "node %d: A's Unlock moved B's expiry", i)
	}
	require.NoError(t, b.Extend(ctx))
	require.NoError(t, b.Unlock(ctx))
}

// TestMinHoldReleaseByTokenFreesAtOnce: Client.Release knows nothing of the
// hold's acquisition: it frees the keys at once, during the minimum hold,
// and after an Unlock left them to it.
func TestMinHoldReleaseByTokenFreesAtOnce(t *testing.T) {
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	ctx := context.Background()
	for _, unlockFirst := range []bool{false, true} {
		for _, k := range []delayKind{dkPlain} {
			key := "minhold-token-" + k.name
			l, err := k.take(t, cl[0], key, WithMinHold(time.Minute))
			require.NoError(t, err)
			if unlockFirst {
				require.NoError(t, l.Unlock(ctx))
			}
			var opts []LockOption
			if k.name == "owner" {
				opts = append(opts, WithOwner("owner-a"))
			}
			require.NoError(t, cl[1].Release(ctx, key, l.Token(), opts...), "%s: release by token", k.name)
			other, err := k.exclusive(t, cl[1], key)
			require.NoError(t, err, "%s: another Client right after the release by token", k.name)
			require.NoError(t, other.Unlock(ctx))
			_ = l.Unlock(ctx)
		}
	}
}

// TestMinHoldRefusedForReadersAndSemaphores: readers and permits refuse
// WithMinHold, in the call and as the Client's default.
func TestMinHoldRefusedForReadersAndSemaphores(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	ctx := t.Context()
	_, err := c.TryRLock(ctx, "minhold-reader", WithMinHold(time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "WithMinHold")
	_, err = c.Semaphore("minhold-sem", 2, WithMinHold(time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	s, err := c.Semaphore("minhold-sem", 2)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx, WithMinHold(time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	d := newClient(t, cs, WithMinHold(time.Second))
	_, err = d.TryRLock(ctx, "minhold-reader")
	require.ErrorIs(t, err, ErrInvalidOption)
	// Owner locks refuse it, and the lock-delay: the owner's other holds
	// would end a minimum hold early, and a stale hold outlive a clean
	// Unlock (the adversarial review of issue 28).
	_, err = c.TryLock(ctx, "minhold-owner", WithOwner("o"), WithMinHold(time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "WithMinHold cannot be used with WithOwner")
	_, err = c.TryLock(ctx, "delay-owner", WithOwner("o"), WithLockDelay(time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "WithLockDelay cannot be used with WithOwner")
	_, err = d.TryLock(ctx, "minhold-owner", WithOwner("o"))
	require.ErrorIs(t, err, ErrInvalidOption, "the Client's default too")
	// The exclusive kinds take it.
	for _, k := range dkExclusive {
		l, err := k.take(t, c, "minhold-ok-"+k.name, WithMinHold(time.Second))
		require.NoError(t, err, k.name)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestMinHoldRaisesMaxTTL: the node guard's max TTL covers a minimum hold
// longer than the TTL before the acquisition goes out.
func TestMinHoldRaisesMaxTTL(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(time.Second))
	l, err := c.TryLock(t.Context(), "minhold-maxttl", WithMinHold(20*time.Second))
	require.NoError(t, err)
	require.Equal(t, 20*time.Second, c.maxTTL())
	require.NoError(t, l.Unlock(t.Context()))
}
