package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
)

func TestUnlockNeverTouchesAnotherHolder(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "mine")
	require.NoError(t, err)
	// Our lock expired everywhere, and someone else took it on all but one node.
	for _, m := range ms[:4] {
		require.NoError(t, m.Set("mine", "new-holder"))
		m.SetTTL("mine", time.Minute)
	}
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.Contains(t, err.Error(), "not holding our token: nodes ")
	for _, m := range ms[:4] {
		require.Equal(t, time.Minute, m.TTL("mine"), "Extend changed another holder's TTL")
	}
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.LessOrEqual(t, qe.Stats.Yes, 1)
	eventually(t, ms[4:], "mine", "")
	eventually(t, ms[:4], "mine", "new-holder")
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld, "a second Unlock")
}

// TestUnlockWithCancelledCtxReleases: a deferred Unlock after the caller's
// ctx ended still frees the nodes, and says so.
func TestUnlockWithCancelledCtxReleases(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "unlock-cancelled")
	require.NoError(t, err)
	eventually(t, ms, "unlock-cancelled", l.Token())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, l.Unlock(ctx), "the release landed on every node")
	eventually(t, ms, "unlock-cancelled", "")
}

// TestUnlockReportsUnconfirmedRelease: three nodes hold the release's reply
// past the release's bounded wait. Too few nodes said no to say the lock was
// not held, so Unlock says the release is not confirmed, which is not
// ErrNotHeld; the release lands once the replies come.
func TestUnlockReportsUnconfirmedRelease(t *testing.T) {
	g := &gate{match: isRelease, open: make(chan struct{})}
	fast, fcs := minis(t, 2)
	slow, scs := minis(t, 3, g)
	cs := append(fcs, scs...)
	loadScripts(t, cs)
	c := newClient(t, cs, WithTTL(time.Second), WithNodeTimeout(50*time.Millisecond))
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "unconfirmed")
	require.NoError(t, err)
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, ErrUnconfirmed)
	require.NotErrorIs(t, err, ErrNotHeld, "a release that may have landed is not a lock that was not held")
	require.Contains(t, err.Error(), "release not confirmed")
	eventually(t, fast, "unconfirmed", "")
	eventually(t, slow, "unconfirmed", "") // the scripts ran; only the replies wait
	g.release()

	// The control: a lock that expired everywhere is not held.
	l, err = c.TryLock(t.Context(), "expired")
	require.NoError(t, err)
	for _, m := range append(fast, slow...) {
		m.Del("expired")
	}
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
}

func TestExtend(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Second))
	l, err := c.TryLock(t.Context(), "extend")
	require.NoError(t, err)
	eventually(t, ms, "extend", l.Token())
	for _, m := range ms {
		m.FastForward(600 * time.Millisecond)
	}
	before := l.Until()
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	require.True(t, l.Until().After(before), "got Until %v, want after %v", l.Until(), before)
	st := l.Stats()
	require.Equal(t, OpExtend, st.Op)
	for i, m := range ms {
		require.Eventually(t, func() bool { return m.TTL("extend") == time.Second }, 5*time.Second, time.Millisecond, "node %d", i)
	}
	// A key that is gone is not re-created.
	ms[0].Del("extend")
	ms[1].Del("extend")
	ms[2].Del("extend")
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.False(t, ms[0].Exists("extend"))
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld, "Extend after Unlock")
}

func TestExtendRefusesAfterUntil(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(100*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
	l, err := c.TryLock(t.Context(), "expired")
	require.NoError(t, err)
	eventually(t, ms, "expired", l.Token())
	time.Sleep(time.Until(l.Until()) + time.Millisecond)
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.Contains(t, err.Error(), "validity ended")
	// The nodes were not asked: miniredis time stood still, so our keys are
	// still there with their first TTL.
	for _, m := range ms {
		require.Equal(t, 100*time.Millisecond, m.TTL("expired"))
	}
	require.NoError(t, l.Unlock(t.Context()))
}

func TestExtendRecomputesUntilFromItsStart(t *testing.T) {
	_, cs := minis(t, 5)
	clk := &steppedClock{}
	c, err := New(cs)
	require.NoError(t, err)
	c.now = clk.now
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryLock(t.Context(), "until")
	require.NoError(t, err)
	clk.arm(3 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	require.Equal(t, clk.start().Add(DefaultTTL-clockDrift(DefaultTTL, DefaultDriftFactor)), l.Until())
	require.NoError(t, l.Unlock(t.Context()))
}

// TestExtendWithTTL: Extend takes WithTTL, as redislock's Refresh takes a
// TTL, uses it from then on, never shortens a key, and refuses any other
// option.
func TestExtendWithTTL(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Second), WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(t.Context(), "ext")
	require.NoError(t, err)
	ttlIs(t, ms, "ext", time.Second)

	require.NoError(t, l.Extend(t.Context(), WithTTL(5*time.Second)))
	ttlIs(t, ms, "ext", 5*time.Second)
	left := time.Until(l.Until())
	require.Greater(t, left, 4*time.Second, "Until must follow the new TTL")

	// A shorter TTL does not cut the key short, nor move Until back.
	until := l.Until()
	require.NoError(t, l.Extend(t.Context(), WithTTL(200*time.Millisecond)))
	// The nodes that answered the extension ran it: their keys keep 5s.
	yes := 0
	for _, v := range l.Stats().Nodes {
		if v.Vote == VoteYes {
			yes++
			require.Equal(t, 5*time.Second, ms[v.Index].TTL("ext"), "node %d: a shorter TTL must not shorten the key", v.Index)
		}
	}
	require.GreaterOrEqual(t, yes, 3)
	require.False(t, l.Until().Before(until), "Until moved back")

	// Extend without options keeps the last TTL given.
	for _, m := range ms {
		m.SetTTL("ext", 100*time.Millisecond)
	}
	require.NoError(t, l.Extend(t.Context()))
	ttlIs(t, ms, "ext", 200*time.Millisecond)

	for _, bad := range []struct {
		name string
		opt  ExtendOption
		want string
	}{
		{"negative ttl", WithTTL(-time.Second), "ttl must be positive"},
		{"ttl below the drift", WithTTL(time.Millisecond), "leaves no validity"},
	} {
		err := l.Extend(t.Context(), bad.opt)
		require.ErrorIs(t, err, ErrInvalidOption, bad.name)
		require.Contains(t, err.Error(), bad.want, bad.name)
	}
	require.NoError(t, l.Err(), "a refused option must leave the lock alone")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestExtendWithTTLIsValidatedAgainstTheLocksNodeTimeout: a lock's rounds
// keep the node timeout it was taken with, so a new TTL is judged against
// that one, not against the shorter one New would derive from the new TTL.
// A TTL that only the derived timeout would let through (validity left,
// renewals that fit) is refused, and the lock keeps its TTL.
func TestExtendWithTTLIsValidatedAgainstTheLocksNodeTimeout(t *testing.T) {
	ms, cs := minis(t, 3)
	// A 10s TTL derives a 100ms node timeout; 150ms would derive 15ms.
	c := newClient(t, cs, WithTTL(10*time.Second), WithNodeTimeout(0))
	l, err := c.TryLock(t.Context(), "ext-nt")
	require.NoError(t, err)
	err = l.Extend(t.Context(), WithTTL(90*time.Millisecond))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "node timeout 100ms")

	auto, err := c.TryLock(t.Context(), "ext-nt-auto", WithAutoExtend(true))
	require.NoError(t, err)
	err = auto.Extend(t.Context(), WithTTL(150*time.Millisecond))
	require.ErrorIs(t, err, ErrInvalidOption, "renewals of 150ms with a 100ms node timeout cannot fit")
	require.Contains(t, err.Error(), "auto-extension cannot work")
	ttlIs(t, ms, "ext-nt-auto", 10*time.Second)

	// One the lock's node timeout allows is taken.
	require.NoError(t, l.Extend(t.Context(), WithTTL(20*time.Second)))
	ttlIs(t, ms, "ext-nt", 20*time.Second)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, auto.Unlock(t.Context()))
}

// ttlIs waits until every node has key with the TTL want: a round returns
// at its quorum, before the slower nodes have answered.
func ttlIs(t *testing.T, ms []*miniredis.Miniredis, key string, want time.Duration) {
	t.Helper()
	for i, m := range ms {
		require.Eventually(t, func() bool { return m.TTL(key) == want }, 5*time.Second, time.Millisecond,
			"node %d: TTL of %q is %v, want %v", i, key, m.TTL(key), want)
	}
}

// TestExtendWithTTLIsCappedByMaxHold: a new TTL cannot carry the lock past
// its max hold.
func TestExtendWithTTLIsCappedByMaxHold(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(time.Second), WithMaxHold(2*time.Second), WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(t.Context(), "capped")
	require.NoError(t, err)
	require.NoError(t, l.Extend(t.Context(), WithTTL(time.Minute)))
	for i, m := range ms {
		require.LessOrEqual(t, m.TTL("capped"), 2*time.Second, "node %d", i)
	}
	require.LessOrEqual(t, time.Until(l.Until()), 2*time.Second)
	require.NoError(t, l.Unlock(t.Context()))
}

// TestExtendWithCancelledCtxIsNotNotHeld: an Extend that ctx ended before
// any node said no says ctx ended, not that the lock is lost, which the
// README's loop reads as "stop".
func TestExtendWithCancelledCtxIsNotNotHeld(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "ext-cancelled")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = l.Extend(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNotHeld)
	require.Equal(t, 1, strings.Count(err.Error(), "redlock:"), "one prefix: %v", err)
	require.NoError(t, l.Err(), "the lock is still held")
	require.NoError(t, l.Extend(t.Context()), "and can still be extended")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestExtendCannotReviveAnEndedLock(t *testing.T) {
	g := newScriptGate(scriptExtend)
	ms, cs := minis(t, 5, g)
	loadScripts(t, cs)
	c := newClient(t, cs)
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "revive")
	require.NoError(t, err)
	// TryLock returns at its quorum: an acquire still out would share the
	// Extend's batch, and the gate would hold its reply too, so that the
	// Unlock would wait for it.
	settled(t, l)
	before := l.Until()
	done := make(chan error, 1)
	go func() { done <- l.Extend(context.Background()) }()
	// Every node has extended, and holds its answer.
	require.Eventually(t, func() bool { return g.waiting.Load() == 5 }, 5*time.Second, time.Millisecond)
	// Past stallAfter, the release goes out on another connection rather
	// than wait behind the held replies.
	time.Sleep(2 * stallAfter)
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "revive", "")
	g.release()
	err = <-done
	require.ErrorIs(t, err, ErrNotHeld, "got %v from an Extend that ended after Unlock, want ErrNotHeld", err)
	require.Equal(t, before, l.Until(), "Extend moved Until of an unlocked lock")
	require.ErrorIs(t, l.Err(), ErrUnlocked)
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld)
}

func TestDoneClosesAtUntilWithoutAutoExtend(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(80*time.Millisecond), WithNodeTimeout(40*time.Millisecond))
	l, err := c.TryLock(t.Context(), "expires")
	require.NoError(t, err)
	require.NoError(t, l.Err())
	<-l.Done()
	require.False(t, time.Now().Before(l.Until()), "Done closed before Until")
	require.ErrorIs(t, l.Err(), ErrLockLost)
	require.ErrorIs(t, l.Err(), errValidityEnded)
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld)

	// Extend moves the expiry.
	l, err = c.TryLock(t.Context(), "expires-2")
	require.NoError(t, err)
	first := l.Until()
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	<-l.Done()
	require.False(t, time.Now().Before(l.Until()))
	require.True(t, l.Until().After(first))
}

func TestMajorityKilledClosesDoneWithinValidity(t *testing.T) {
	forEachBackend(t, "majority-killed", func(t *testing.T, n *lifecycleNodes) {
		const ttl = 300 * time.Millisecond
		c := newClient(t, n.clients, WithTTL(ttl), WithNodeTimeout(20*time.Millisecond))
		l, err := c.Lock(t.Context(), n.key, WithAutoExtend(true))
		require.NoError(t, err)
		n.kill(0)
		n.kill(1)
		n.kill(2)
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done did not close after a majority was killed")
		}
		closed := time.Now()
		require.ErrorIs(t, l.Err(), ErrLockLost)
		// Done closes at the end of the validity at the latest; the timer
		// fires at Until, so it can only be a scheduling delay late.
		require.WithinDuration(t, l.Until(), closed, ttl, "Done closed at %v, Until %v", closed, l.Until())
		require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
	})
}

// TestDoneRacesTheLocksEnd: sixteen goroutines ask for Done at times
// spread around a lock's end, by expiry, by Unlock, or by a renewal that
// finds the keys gone. Every channel they get must close,
// with Err set once it has; all of them but the shared closed one must be
// the same channel; and Done must be closed once the lock has ended. Done
// is made on first use, so a call that races the end must neither make a
// channel that nothing will close nor hand two callers different ones: a
// holder selecting on it would then go on writing after losing the lock.
func TestDoneRacesTheLocksEnd(t *testing.T) {
	const key = "done-races-end"
	_, cs := realNodes(t, 3)
	c := newClient(t, cs, WithNodeTimeout(30*time.Millisecond))
	ctx := t.Context()
	type asked struct {
		done   <-chan struct{}
		closed bool
		err    error
	}
	for round := range 30 {
		ttl := time.Duration(80+round%5*20) * time.Millisecond
		opts := []LockOption{WithTTL(ttl)}
		mode := round % 3
		if mode == 2 {
			opts = append(opts, WithAutoExtend(true))
		}
		l, err := c.Lock(ctx, key, opts...)
		require.NoError(t, err)
		// The askers come one after another over three quarters of a TTL,
		// from well before the end, from just before it, or from after
		// it: the first of them makes the channel before the end, while
		// it is under way, or once it is over.
		end := [3]time.Duration{ttl, ttl / 2, 2 * ttl / 3}[mode]
		first := end + [3]time.Duration{-ttl / 4, -ttl / 40, ttl / 10}[round/3%3]
		const askers = 16
		got := make(chan asked, askers)
		for g := range askers {
			go func() {
				time.Sleep(first + time.Duration(g)*ttl/20)
				d := l.Done()
				select {
				case <-d:
					got <- asked{d, true, l.Err()}
				case <-time.After(5 * time.Second):
					got <- asked{d, false, l.Err()}
				}
			}()
		}
		switch mode {
		case 0: // expiry, at Until
		case 1:
			time.Sleep(end)
			_ = l.Unlock(ctx)
		case 2: // the renewal after this finds the key gone on every node
			time.Sleep(ttl / 3)
			for _, rc := range cs {
				require.NoError(t, rc.Del(ctx, key).Err())
			}
		}
		var open <-chan struct{}
		for range askers {
			a := <-got
			require.True(t, a.closed, "round %d: Done open 5s after it was asked; Until %v, Err %v", round, l.Until(), a.err)
			require.Error(t, a.err, "round %d: Done closed with Err nil", round)
			if a.done == (<-chan struct{})(closedDone) {
				continue
			}
			if open == nil {
				open = a.done
			}
			require.True(t, open == a.done, "round %d: Done handed out two different channels", round)
		}
		select {
		case <-l.Done():
		default:
			t.Fatalf("round %d: Done open after the lock ended", round)
		}
		_ = l.Unlock(ctx)
	}
}

// TestExtendUntilNeverPastTheKeys: Extend with TTLs shorter and
// longer than the lock's, beside auto-extension, over nodes with jittery
// latency near the node timeout. After every successful Extend, a quorum
// of nodes must keep the key at least until Until (settleExtension now
// compares the round's end with l.until at settle time).
func TestExtendUntilNeverPastTheKeys(t *testing.T) {
	ps, cs, direct := realProxied(t, 3)
	for _, p := range ps {
		p.SetLatency(15*time.Millisecond, 25*time.Millisecond)
	}
	c := newClient(t, cs, WithNodeTimeout(60*time.Millisecond))
	l, err := c.Lock(t.Context(), "until-keys", WithTTL(400*time.Millisecond), WithAutoExtend(true))
	require.NoError(t, err)
	var keys []string
	require.Eventually(t, func() bool {
		keys, _ = direct[0].Keys(t.Context(), "*").Result()
		return len(keys) == 1
	}, time.Second, time.Millisecond)
	ttls := []time.Duration{250, 300, 400, 700, 1200}
	wins := 0
	stop := time.Now().Add(6 * time.Second)
	for i := 0; time.Now().Before(stop) && l.Err() == nil; i++ {
		err := l.Extend(t.Context(), WithTTL(ttls[i%len(ttls)]*time.Millisecond))
		if err != nil {
			continue
		}
		wins++
		u := l.Until()
		ok := 0
		for _, d := range direct {
			pttl, err := d.PTTL(t.Context(), keys[0]).Result()
			now := time.Now()
			if err == nil && pttl > 0 && !now.Add(pttl+2*time.Millisecond).Before(u) {
				ok++
			}
		}
		require.GreaterOrEqual(t, ok, 2, "Until %v is past the key's expiry on a quorum", time.Until(u))
	}
	t.Logf("%d successful extends; lock err %v", wins, l.Err())
	require.NotZero(t, wins)
}
