package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// lifecycleNodes gives the lifecycle tests five nodes whose TTLs run in real
// time: miniredis with ClockTTL, or real redis-servers.
type lifecycleNodes struct {
	clients []redis.UniversalClient
	kill    func(i int)      // the node stops answering for good
	keyOn   func(i int) bool // the test key is on node i
	drop    func(i int)      // delete the test key on node i, without a message
	key     string
}

func forEachBackend(t *testing.T, key string, fn func(t *testing.T, n *lifecycleNodes)) {
	t.Run("miniredis", func(t *testing.T) {
		ms, cs := minis(t, 5)
		for _, m := range ms {
			m.ClockTTL(true)
		}
		fn(t, &lifecycleNodes{
			clients: cs, key: key,
			kill:  func(i int) { ms[i].Close() },
			keyOn: func(i int) bool { return ms[i].Exists(key) },
			drop:  func(i int) { ms[i].Del(key) },
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		srv, cs := realNodes(t, 5)
		fn(t, &lifecycleNodes{
			clients: cs, key: key,
			kill: func(i int) { srv[i].Kill() },
			keyOn: func(i int) bool {
				n, _ := cs[i].Exists(context.Background(), key).Result()
				return n == 1
			},
			drop: func(i int) { cs[i].Del(context.Background(), key) },
		})
	})
}

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

func TestDoCancelsFnOnLoss(t *testing.T) {
	forEachBackend(t, "do-loss", func(t *testing.T, n *lifecycleNodes) {
		const ttl = 300 * time.Millisecond
		c := newClient(t, n.clients, WithTTL(ttl))
		started := make(chan struct{})
		errFn := errors.New("fn saw its ctx end")
		var cause error
		err := c.Do(t.Context(), n.key, func(ctx context.Context) error {
			close(started)
			// Once the key is on every node, a majority forgets it.
			require.Eventually(t, func() bool {
				for i := range 5 {
					if !n.keyOn(i) {
						return false
					}
				}
				return true
			}, 5*time.Second, time.Millisecond)
			for i := range 3 {
				n.drop(i)
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return errFn
		})
		<-started
		require.ErrorIs(t, err, ErrLockLost)
		require.ErrorIs(t, err, errFn)
		require.NotErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, cause, ErrLockLost)
	})
}

func TestDoTellsNotAcquiredFromLost(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	holder, err := c.TryLock(t.Context(), "do-busy")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err = c.Do(ctx, "do-busy", func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrLockLost)
	require.False(t, ran)
	require.NoError(t, holder.Unlock(t.Context()))

	// On success Do returns fn's error, and the lock is released.
	errFn := errors.New("fn failed")
	var inside *Lock
	err = c.Do(t.Context(), "do-busy", func(ctx context.Context) error {
		inside, _ = c.TryLock(ctx, "do-busy")
		return errFn
	})
	require.ErrorIs(t, err, errFn)
	require.NotErrorIs(t, err, ErrLockLost)
	require.Nil(t, inside, "the key was free inside Do")
	l, err := c.TryLock(t.Context(), "do-busy")
	require.NoError(t, err, "Do did not release")
	require.NoError(t, l.Unlock(t.Context()))
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

func TestWaiterWakesOnRelease(t *testing.T) {
	forEachBackend(t, "wake", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients)
		holder, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		// Waiters whose fallback delay is far longer than the test: only the
		// release message can wake them in time.
		other := newClient(t, ownClients(t, n.clients))
		got := make(chan error, 1)
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			l, err := other.Lock(t.Context(), n.key, WithRetryDelay(time.Minute, time.Minute))
			if err == nil {
				err = l.Unlock(t.Context())
			}
			got <- err
		}()
		<-waiting
		// Wait until the waiter is subscribed on every node.
		require.Eventually(t, func() bool { return subscribed(t, n.clients, n.key) }, 5*time.Second, time.Millisecond)
		require.NoError(t, holder.Unlock(t.Context()))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter did not wake on release")
		}
	})
}

func TestWaiterFallsBackToDelayWithoutMessage(t *testing.T) {
	forEachBackend(t, "no-message", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithRetryDelay(5*time.Millisecond, 10*time.Millisecond))
		holder, err := c.TryLock(t.Context(), n.key, WithTTL(time.Minute))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return n.keyOn(0) && n.keyOn(1) && n.keyOn(2) && n.keyOn(3) && n.keyOn(4) }, 5*time.Second, time.Millisecond)
		got := make(chan error, 1)
		go func() {
			l, err := c.Lock(t.Context(), n.key)
			if err == nil {
				err = l.Unlock(t.Context())
			}
			got <- err
		}()
		time.Sleep(30 * time.Millisecond)
		// The holder vanishes without a release message, as an expiry would.
		for i := range 5 {
			n.drop(i)
		}
		require.NoError(t, <-got)
		_ = holder
	})
}

func TestOneSubscriptionPerNodePerClient(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Second, time.Second))
	holders := make([]*Lock, 3)
	for k := range holders {
		var err error
		holders[k], err = c.TryLock(t.Context(), fmt.Sprintf("subs-%d", k))
		require.NoError(t, err)
	}
	var waiting atomic.Int32
	done := make(chan error, 12)
	for k := range 12 {
		go func() {
			waiting.Add(1)
			l, err := c.Lock(t.Context(), fmt.Sprintf("subs-%d", k%3))
			if err == nil {
				err = l.Unlock(t.Context())
			}
			done <- err
		}()
	}
	for _, key := range []string{"subs-0", "subs-1", "subs-2"} {
		require.Eventually(t, func() bool { return subscribed(t, cs, key) }, 5*time.Second, time.Millisecond)
	}
	for i, s := range srv {
		n, err := s.NewClient(t).PubSubNumSub(t.Context(), releaseChannel("subs-0")).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n[releaseChannel("subs-0")], "node %d: 4 waiters of one Client share one subscription", i)
		clients, err := s.NewClient(t).ClientList(t.Context()).Result()
		require.NoError(t, err)
		require.Equal(t, 1, countSubscribers(clients), "node %d: got %d subscription connections, want 1", i, countSubscribers(clients))
	}
	for _, h := range holders {
		require.NoError(t, h.Unlock(t.Context()))
	}
	for range 12 {
		require.NoError(t, <-done)
	}
}

// countSubscribers counts the connections in a CLIENT LIST reply that are in
// subscriber mode.
func countSubscribers(list string) int {
	n := 0
	for _, line := range splitLines(list) {
		if containsField(line, "sub=") && !containsField(line, "sub=0") {
			n++
		}
	}
	return n
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func containsField(line, f string) bool {
	for i := 0; i+len(f) <= len(line); i++ {
		if line[i:i+len(f)] == f && (i == 0 || line[i-1] == ' ') {
			return true
		}
	}
	return false
}

// subscribed reports whether someone listens for releases of key on every
// node.
func subscribed(t *testing.T, cs []redis.UniversalClient, key string) bool {
	for _, rc := range cs {
		n, err := rc.PubSubNumSub(t.Context(), releaseChannel(key)).Result()
		if err != nil || n[releaseChannel(key)] == 0 {
			return false
		}
	}
	return true
}

// marked reports whether a waiter on key is fully in place on every node:
// subscribed to its release channel, and its waiting marker set, so that
// each node's release is announced to it. A release that lands between the
// two is not announced by that node.
func marked(t *testing.T, cs []redis.UniversalClient, key string) bool {
	if !subscribed(t, cs, key) {
		return false
	}
	for _, rc := range cs {
		if n, err := rc.Exists(t.Context(), keyspace.Waiting(key)).Result(); err != nil || n == 0 {
			return false
		}
	}
	return true
}

// ownClients opens a second set of go-redis clients to the same servers.
func ownClients(t *testing.T, cs []redis.UniversalClient) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(cs))
	for i, rc := range cs {
		c := redis.NewClient(&redis.Options{Addr: rc.(*redis.Client).Options().Addr})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

func TestCloseLeavesNoGoroutine(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	c, err := New(cs, WithTTL(200*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "leak", WithAutoExtend(true))
	require.NoError(t, err)
	held, err := c.TryLock(t.Context(), "leak-2")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "leak-2") // subscribes, then gives up
	require.ErrorIs(t, err, ErrNotAcquired)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, held.Unlock(t.Context()))
	require.NoError(t, c.Close())
	// A goroutine that has just called wg.Done may still be on its way out:
	// give it a moment, as goleak does.
	require.Eventually(t, func() bool { return len(libraryGoroutines()) == 0 }, 2*time.Second, 10*time.Millisecond,
		"goroutines of the library outlived Close: %v", libraryGoroutines())
}

// libraryGoroutines returns the stacks of goroutines that run library code,
// other than tests'. The miniredis servers' own goroutines are not counted.
func libraryGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// A library goroutine runs a method of one of its types; tests'
		// goroutines have a frame in a _test.go file.
		if strings.Contains(g, "github.com/redlockgo/redlock.(*") && !strings.Contains(g, "_test.go:") {
			out = append(out, g)
		}
	}
	return out
}

// TestNoGoroutineOutlivesItsCall checks, without Close, that a Client runs no
// goroutine once its calls are over: the renewer stops with the last
// auto-extended lock, and the pub/sub connections close with the last
// waiter.
func TestNoGoroutineOutlivesItsCall(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	c := newClient(t, cs, WithTTL(300*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	none := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool { return len(libraryGoroutines()) == 0 }, 2*time.Second, 10*time.Millisecond,
			"%s left goroutines running: %v", what, libraryGoroutines())
	}

	l, err := c.Lock(t.Context(), "no-leak", WithAutoExtend(true))
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond) // at least one renewal
	require.NoError(t, l.Err())
	require.NoError(t, l.Unlock(t.Context()))
	none("Unlock of an auto-extended lock")

	holder, err := c.TryLock(t.Context(), "no-leak")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(t.Context(), "no-leak")
		if err == nil {
			err = w.Unlock(t.Context())
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return subscribed(t, cs, "no-leak") }, 5*time.Second, time.Millisecond)
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-got)
	none("a Lock that waited")
}
