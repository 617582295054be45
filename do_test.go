package redlock

import (
	"context"
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
