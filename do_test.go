package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDoReleasesWhenFnPanics checks that a panic in fn, recovered further up
// as net/http does, leaves neither the key on the nodes nor a renewal
// running: another Client can take the key at once, long before its TTL
// could have run out. The panic reaches the caller with its own value. The
// same holds when the caller's ctx is already cancelled, and when fn ends
// its goroutine with runtime.Goexit (t.FailNow does).
func TestDoReleasesWhenFnPanics(t *testing.T) {
	// Long enough that the key's expiry cannot explain a free key.
	const ttl = 3 * time.Second
	type boom struct{ msg string }
	for _, tc := range []struct {
		name   string
		cancel bool // fn cancels the caller's ctx first
		goexit bool // fn calls runtime.Goexit instead of panicking
	}{
		{name: "panic"},
		{name: "panic after ctx cancelled", cancel: true},
		{name: "goexit", goexit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, cs := minis(t, 5)
			for _, m := range ms {
				m.ClockTTL(true)
			}
			c := newClient(t, cs, WithTTL(ttl))
			key := "do-panic"
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			want := &boom{"fn failed"}
			ran := make(chan struct{})
			var got any
			done := make(chan struct{})
			// Its own goroutine, so that Goexit ends only that one.
			go func() {
				defer close(done)
				defer func() { got = recover() }()
				_ = c.Do(ctx, key, func(context.Context) error {
					close(ran)
					if tc.cancel {
						cancel()
					}
					if tc.goexit {
						runtime.Goexit()
					}
					panic(want)
				})
			}()
			<-done
			start := time.Now()
			select {
			case <-ran:
			default:
				t.Fatalf("fn did not run")
			}
			if tc.goexit {
				require.Nil(t, got, "got panic %v, want none after Goexit", got)
			} else {
				require.Same(t, want, got, "got panic value %v, want %v", got, want)
			}

			eventually(t, ms, key, "")
			l, err := newClient(t, cs, WithTTL(ttl)).TryLock(t.Context(), key)
			require.NoError(t, err, "got %v, want the key free once Do has returned", err)
			require.Less(t, time.Since(start), ttl/2, "the key was freed by its expiry, not by Do")
			require.NoError(t, l.Unlock(t.Context()))
			require.Eventually(t, func() bool { return len(libraryGoroutines()) == 0 }, 2*time.Second, 10*time.Millisecond,
				"goroutines left running after fn panicked: %v", libraryGoroutines())
		})
	}
}

// TestDoRejectsNilFn checks that a nil fn is refused before a single command
// reaches a node.
func TestDoRejectsNilFn(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	before := make([]int, len(ms))
	for i, m := range ms {
		before[i] = m.CommandCount()
	}
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("Do panicked: %v", v)
			}
		}()
		return c.Do(t.Context(), "do-nil", nil)
	}()
	assert.ErrorIs(t, err, ErrInvalidOption, "got %v, want ErrInvalidOption", err)
	assert.ErrorContains(t, err, "fn must not be nil")
	for i, m := range ms {
		assert.False(t, m.Exists("do-nil"), "node %d: got the key, want nothing sent", i)
		assert.Equal(t, before[i], m.CommandCount(), "node %d: got commands, want none", i)
	}
}

// TestDoLeavesCallersOptsAlone races many calls of Do that share one opts
// slice with spare capacity: Do must not write into it. Run it under -race.
func TestDoLeavesCallersOptsAlone(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	opts := make([]LockOption, 1, 4)
	opts[0] = WithTTL(2 * time.Second)
	shared := opts[:1]

	const n = 16
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = c.Do(t.Context(), fmt.Sprintf("do-opts-%d", i), func(context.Context) error { return nil }, shared...)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}
	require.Nil(t, opts[:2][1], "got an option written into the caller's spare capacity, want none")
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
