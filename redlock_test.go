package redlock

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadInput(t *testing.T) {
	_, cs := minis(t, 3)
	var nilClient *redis.Client
	sameServer := redis.NewClient(&redis.Options{Addr: cs[0].(*redis.Client).Options().Addr})
	t.Cleanup(func() { _ = sameServer.Close() })
	cases := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes given"},
		{"nil node", []redis.UniversalClient{cs[0], nil, cs[2]}, nil, "node 1 is nil"},
		{"typed nil node", []redis.UniversalClient{cs[0], nilClient}, nil, "node 1 is nil"},
		{"same client twice", []redis.UniversalClient{cs[0], cs[1], cs[0]}, nil, "node 2 is the same client as node 0"},
		{"same server twice", []redis.UniversalClient{cs[0], cs[1], sameServer}, nil, "node 2 points at the same server as node 0"},
		{"zero ttl", cs, []Option{WithTTL(0)}, "ttl must be positive, got 0s"},
		{"negative ttl", cs, []Option{WithTTL(-time.Second)}, "ttl must be positive, got -1s"},
		{"sub-ms ttl", cs, []Option{WithTTL(time.Microsecond)}, "ttl must be at least 1ms"},
		{"ttl eaten by drift", cs, []Option{WithTTL(2 * time.Millisecond)}, "leaves no validity after clock drift"},
		{"ttl eaten by node timeout", cs, []Option{WithTTL(100 * time.Millisecond), WithNodeTimeout(98 * time.Millisecond)}, "leaves no validity"},
		{"negative drift", cs, []Option{WithDriftFactor(-0.1)}, "drift factor must be in [0, 0.5), got -0.1"},
		{"drift of one half", cs, []Option{WithDriftFactor(0.5)}, "drift factor must be in [0, 0.5), got 0.5"},
		{"NaN drift", cs, []Option{WithDriftFactor(math.NaN())}, "drift factor must be in [0, 0.5), got NaN"},
		{"negative node timeout", cs, []Option{WithNodeTimeout(-time.Millisecond)}, "node timeout must not be negative"},
		{"retry min above max", cs, []Option{WithRetryDelay(time.Second, time.Millisecond)}, "retry delay must satisfy"},
		{"negative retry", cs, []Option{WithRetryDelay(-time.Millisecond, time.Millisecond)}, "retry delay must satisfy"},
		{"zero retry", cs, []Option{WithRetryDelay(0, 0)}, "retry delay must satisfy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.nodes, tc.opts...)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNewRejectsRing(t *testing.T) {
	_, cs := minis(t, 3)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := New([]redis.UniversalClient{cs[0], cs[1], ring})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "node 2 is a *redis.Ring")
}

func TestBadCallOptionsAndKey(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs)
	_, err := c.TryLock(t.Context(), "")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "key must not be empty")
	_, err = c.Lock(t.Context(), "bad-opts", WithTTL(-1))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "ttl must be positive")
	for _, m := range ms {
		require.Empty(t, m.Keys(), "a rejected call must not touch the nodes")
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	holder, err := c.TryLock(t.Context(), "wait")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "wait")
	require.ErrorIs(t, err, ErrNotAcquired)

	got := make(chan *Lock)
	go func() {
		l, err := c.Lock(t.Context(), "wait")
		if err != nil {
			t.Errorf("Lock: got %v, want the lock", err)
		}
		got <- l
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, holder.Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	require.NotEqual(t, holder.Token(), l.Token(), "each acquisition has a fresh token")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestLockStopsWhenCtxEnds(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Millisecond, 2*time.Millisecond))
	holder, err := c.TryLock(t.Context(), "ctx")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "ctx")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Stats.Nodes, 5, "the last attempt's votes are kept")
	require.Less(t, qe.Stats.Yes, 3)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = c.Lock(ctx, "ctx")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	// The failed attempts left nothing of theirs: every node holds the
	// holder's token, or nothing (where a waiter's attempt beat the
	// holder's slower request and then rolled back).
	require.Eventually(t, func() bool {
		held := 0
		for _, m := range ms {
			got, err := m.Get("ctx")
			switch {
			case err == nil && got == holder.Token():
				held++
			case err == nil:
				return false
			}
		}
		return held >= 3
	}, 5*time.Second, time.Millisecond)
}

// After a failed attempt, the wait adds a draw in [0, the attempt's
// duration]: on a machine where attempts outlast the retry delay's range,
// contenders' attempts would otherwise collide again and again.
func TestRetrySpreadCoversTheAttempt(t *testing.T) {
	require.Zero(t, spread(0))
	require.Zero(t, spread(-time.Millisecond))
	const took = 10 * time.Millisecond
	low, high := 0, 0
	for range 1000 {
		d := spread(took)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, took)
		if d < took/2 {
			low++
		} else {
			high++
		}
	}
	// Uniform: each half gets about 500 of 1000; 300 is far below.
	require.Greater(t, low, 300, "draws below half the attempt's duration")
	require.Greater(t, high, 300, "draws above half the attempt's duration")
}

func TestConcurrentClientsNeverOverlap(t *testing.T) {
	_, cs := minis(t, 5)
	var clients []*Client
	for range 3 {
		// Each Client has its own go-redis clients, as separate processes would.
		own := make([]redis.UniversalClient, len(cs))
		for i, rc := range cs {
			own[i] = redis.NewClient(&redis.Options{Addr: rc.(*redis.Client).Options().Addr})
			t.Cleanup(func() { _ = own[i].Close() })
		}
		clients = append(clients, newClient(t, own, WithRetryDelay(time.Millisecond, 3*time.Millisecond), WithNodeTimeout(time.Second)))
	}
	var (
		mu      sync.Mutex
		holding int
		total   int
	)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					l, err := c.Lock(t.Context(), "contended")
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					mu.Lock()
					holding++
					total++
					if holding != 1 {
						t.Errorf("got %d holders, want 1", holding)
					}
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
					mu.Lock()
					holding--
					mu.Unlock()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	require.Equal(t, 3*4*10, total)
}

func TestCloseStopsWaitersAndRejectsCalls(t *testing.T) {
	_, cs := minis(t, 3)
	c, err := New(cs)
	require.NoError(t, err)
	holder, err := c.TryLock(t.Context(), "close")
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := c.Lock(t.Context(), "close")
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Close())
	err = <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.TryLock(t.Context(), "close")
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, holder.Unlock(t.Context()), ErrClosed)
}

func TestCloseIsBoundedWithAHungNode(t *testing.T) {
	ms, _ := minis(t, 4)
	cs := make([]redis.UniversalClient, 0, 5)
	for _, m := range ms {
		rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ReadTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rc.Close() })
		cs = append(cs, rc)
	}
	// Reads without a timeout: go-redis waits for the hung node forever.
	hung := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = hung.Close() })
	c, err := New(append(cs, hung), WithNodeTimeout(50*time.Millisecond))
	require.NoError(t, err)
	l, err := c.TryLock(t.Context(), "hung")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatalf("Close had not returned after 30s with a hung node and no read timeout")
	}
	// A second with reads that never time out; the margin is for a
	// loaded machine.
	require.Less(t, time.Since(start), 10*time.Second)
	require.ErrorIs(t, func() error { _, err := c.TryLock(t.Context(), "x"); return err }(), ErrClosed)
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
