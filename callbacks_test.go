package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowFor is how long a slow callback blocks, unless the test ends first.
const slowFor = 2 * time.Second

// doneMargin is how late after Until a lock's Done may close: a scheduling
// delay on a busy machine, far below slowFor.
const doneMargin = 200 * time.Millisecond

// slowObserver counts every call as it begins, and blocks in the methods
// named in slow for slowFor, or until unblock.
type slowObserver struct {
	slow    map[string]bool
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	calls   map[string]int // guarded by mu
}

func newSlowObserver(slow ...string) *slowObserver {
	o := &slowObserver{slow: map[string]bool{}, release: make(chan struct{}), calls: map[string]int{}}
	for _, m := range slow {
		o.slow[m] = true
	}
	return o
}

func (o *slowObserver) call(name string) {
	o.mu.Lock()
	o.calls[name]++
	o.mu.Unlock()
	if o.slow[name] {
		select {
		case <-o.release:
		case <-time.After(slowFor):
		}
	}
}

func (o *slowObserver) count(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[name]
}

func (o *slowObserver) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.calls)
}

// unblock lets every slow call return at once; register it with t.Cleanup
// after newClient, so that it runs before Close waits for the callbacks.
func (o *slowObserver) unblock() { o.once.Do(func() { close(o.release) }) }

func (o *slowObserver) Attempted(Stats, error)   { o.call("Attempted") }
func (o *slowObserver) Extended(Stats, error)    { o.call("Extended") }
func (o *slowObserver) Lost(string, error)       { o.call("Lost") }
func (o *slowObserver) Released(Stats, error)    { o.call("Released") }
func (o *slowObserver) handler() *slowLogHandler { return &slowLogHandler{o: o} }

// slowLogHandler is a slog handler that keeps the messages of Warn and above
// and blocks on each as its observer's slow methods do.
type slowLogHandler struct {
	o    *slowObserver
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func (h *slowLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *slowLogHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	select {
	case <-h.o.release:
	case <-time.After(slowFor):
	}
	return nil
}
func (h *slowLogHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slowLogHandler) WithGroup(string) slog.Handler      { return h }

func (h *slowLogHandler) logged(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

// TestDoneClosesAtUntilDespiteSlowCallbacks: the logger and the Observer
// each take slowFor to hear of a loss. Done still closes at Until, whether
// the expiry timer or the holder's own Done call finds the validity over,
// and both still hear of the loss afterwards.
func TestDoneClosesAtUntilDespiteSlowCallbacks(t *testing.T) {
	t.Run("expiry timer", func(t *testing.T) {
		_, cs := minis(t, 5)
		obs := newSlowObserver("Lost")
		logs := obs.handler()
		c := newClient(t, cs, WithObserver(obs), WithLogger(slog.New(logs)),
			WithTTL(300*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
		t.Cleanup(obs.unblock)
		l, err := c.TryLock(t.Context(), "slow-callbacks-timer")
		require.NoError(t, err)
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done still open 10s after a 300ms TTL")
		}
		late := time.Since(l.Until())
		require.Less(t, late, doneMargin, "Done closed %v after Until, want less than %v (the callbacks take %v)", late, doneMargin, slowFor)
		require.ErrorIs(t, l.Err(), ErrLockLost)
		requireLossReported(t, obs, logs)
	})

	t.Run("holder's Done past Until", func(t *testing.T) {
		_, cs := minis(t, 5)
		obs := newSlowObserver("Lost")
		logs := obs.handler()
		c := newClient(t, cs, WithObserver(obs), WithLogger(slog.New(logs)), WithTTL(10*time.Second))
		t.Cleanup(obs.unblock)
		// The Client's clock jumps past Until, as after a pause of the
		// process; the expiry timer, on the real clock, is 10s away.
		var skew atomic.Int64
		c.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		l, err := c.TryLock(t.Context(), "slow-callbacks-holder")
		require.NoError(t, err)
		skew.Store(int64(time.Minute))
		start := time.Now()
		done := l.Done()
		took := time.Since(start)
		select {
		case <-done:
		default:
			t.Fatal("Done still open past Until")
		}
		require.Less(t, took, doneMargin, "Done took %v to return, want less than %v (the callbacks take %v)", took, doneMargin, slowFor)
		require.ErrorIs(t, l.Err(), ErrLockLost)
		requireLossReported(t, obs, logs)
	})
}

// requireLossReported waits until the logger, then the Observer, has heard
// of the loss, letting each slow callback return once it has begun.
func requireLossReported(t *testing.T, obs *slowObserver, logs *slowLogHandler) {
	t.Helper()
	require.Eventually(t, func() bool { return logs.logged("lock lost") }, 10*time.Second, time.Millisecond, "the loss was not logged")
	obs.unblock()
	require.Eventually(t, func() bool { return obs.count("Lost") == 1 }, 10*time.Second, time.Millisecond,
		"the loss was not reported: observer %v", obs)
}

// TestSlowObserverDelaysNoRenewal: the renewer serves every auto-extended
// lock of a Client. An Observer that takes slowFor to hear of a renewal, or
// of another lock's loss, must not hold up the renewals: both locks stay
// held for several TTLs.
func TestSlowObserverDelaysNoRenewal(t *testing.T) {
	// Shorter than slowFor, so that a renewal held up by the Observer
	// loses the lock; long enough that a loaded machine that stalls the
	// renewer a few hundred milliseconds does not.
	const ttl = time.Second
	holdBoth := func(t *testing.T, a, b *Lock) {
		t.Helper()
		firstA, firstB := a.Until(), b.Until()
		for deadline := time.Now().Add(4 * ttl); time.Now().Before(deadline); time.Sleep(ttl / 10) {
			require.NoError(t, a.Err(), "lock a lost while auto-extended")
			require.NoError(t, b.Err(), "lock b lost while auto-extended")
		}
		require.True(t, a.Until().After(firstA.Add(2*ttl)), "lock a was not renewed")
		require.True(t, b.Until().After(firstB.Add(2*ttl)), "lock b was not renewed")
	}

	t.Run("Extended", func(t *testing.T) {
		_, cs := minis(t, 5)
		obs := newSlowObserver("Extended")
		c := newClient(t, cs, WithObserver(obs), WithTTL(ttl), WithNodeTimeout(100*time.Millisecond))
		t.Cleanup(obs.unblock)
		a, err := c.Lock(t.Context(), "slow-extended-a", WithAutoExtend(true))
		require.NoError(t, err)
		time.Sleep(ttl / 6) // b's renewals come in batches of their own
		b, err := c.Lock(t.Context(), "slow-extended-b", WithAutoExtend(true))
		require.NoError(t, err)
		holdBoth(t, a, b)
		require.Positive(t, obs.count("Extended"), "the Observer never heard of a renewal")
		require.NoError(t, a.Unlock(t.Context()))
		require.NoError(t, b.Unlock(t.Context()))
	})

	t.Run("Lost", func(t *testing.T) {
		ms, cs := minis(t, 5)
		obs := newSlowObserver("Lost")
		c := newClient(t, cs, WithObserver(obs), WithTTL(ttl), WithNodeTimeout(100*time.Millisecond))
		t.Cleanup(obs.unblock)
		victim, err := c.Lock(t.Context(), "slow-lost-victim", WithAutoExtend(true))
		require.NoError(t, err)
		a, err := c.Lock(t.Context(), "slow-lost-a", WithAutoExtend(true))
		require.NoError(t, err)
		time.Sleep(ttl / 6)
		b, err := c.Lock(t.Context(), "slow-lost-b", WithAutoExtend(true))
		require.NoError(t, err)
		// The victim's token vanishes: its next renewal finds it gone.
		for _, m := range ms {
			m.Del("slow-lost-victim")
		}
		select {
		case <-victim.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the victim was not lost 5s after its key was deleted")
		}
		require.ErrorIs(t, victim.Err(), ErrLockLost)
		require.Eventually(t, func() bool { return obs.count("Lost") == 1 }, 5*time.Second, time.Millisecond, "Lost was not called")
		holdBoth(t, a, b)
		require.NoError(t, a.Unlock(t.Context()))
		require.NoError(t, b.Unlock(t.Context()))
	})
}

// panicObserver panics in every method, after counting the call.
type panicObserver struct{ lost, extended atomic.Int32 }

func (*panicObserver) Attempted(Stats, error) { panic("observer: Attempted") }
func (o *panicObserver) Extended(Stats, error) {
	o.extended.Add(1)
	panic("observer: Extended")
}
func (o *panicObserver) Lost(string, error) {
	o.lost.Add(1)
	panic("observer: Lost")
}
func (*panicObserver) Released(Stats, error) { panic("observer: Released") }

// TestPanickingObserverBreaksNothing: every method of the Observer panics.
// Lock, Extend, Unlock, auto-extension and both kinds of loss work as
// without it, and each method's panic is logged once, with its name.
func TestPanickingObserverBreaksNothing(t *testing.T) {
	const ttl = 300 * time.Millisecond
	ms, cs := minis(t, 5)
	obs := &panicObserver{}
	logs := &syncBuffer{}
	c := newClient(t, cs, WithObserver(obs), WithTTL(ttl), WithNodeTimeout(100*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))

	l, err := c.TryLock(t.Context(), "panicky")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "panicky")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))

	auto, err := c.TryLock(t.Context(), "panicky-auto", WithAutoExtend(true))
	require.NoError(t, err)
	first := auto.Until()
	require.Eventually(t, func() bool { return auto.Until().After(first.Add(ttl)) }, 5*time.Second, time.Millisecond,
		"auto-extension stopped")
	require.NoError(t, auto.Err())
	// A loss found by a renewal.
	for _, m := range ms {
		m.Del("panicky-auto")
	}
	select {
	case <-auto.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("auto-extended lock still held 5s after its key was deleted")
	}
	require.ErrorIs(t, auto.Err(), ErrLockLost)
	// A loss by expiry.
	exp, err := c.TryLock(t.Context(), "panicky-expiry")
	require.NoError(t, err)
	select {
	case <-exp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock still held 5s after its TTL")
	}
	require.ErrorIs(t, exp.Err(), ErrLockLost)
	require.Eventually(t, func() bool { return obs.lost.Load() == 2 }, 5*time.Second, time.Millisecond,
		"Lost calls: got %d, want 2", obs.lost.Load())

	// The Client still works.
	again, err := c.TryLock(t.Context(), "panicky")
	require.NoError(t, err)
	require.NoError(t, again.Unlock(t.Context()))

	require.Greater(t, obs.extended.Load(), int32(1), "Extended was called for Extend and the renewals")
	for _, name := range []string{"Attempted", "Extended", "Lost", "Released"} {
		n := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "Observer panicked") && strings.Contains(line, "callback="+name+" ") {
				require.Contains(t, line, "level=ERROR", "got %s, want it logged at Error", line)
				require.Contains(t, line, "observer: "+name, "got %s, want the panic's value", line)
				n++
			}
		}
		require.Equal(t, 1, n, "%s's panics logged %d times, want once; log:\n%s", name, n, logs.String())
	}
}
