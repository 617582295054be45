package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// eventRecorder is an Observer with every optional event: it keeps what it
// heard, and the order in which it heard it.
type eventRecorder struct {
	mu        sync.Mutex
	order     []string // "Method key", in the order heard; guarded by mu
	began     []WaitInfo
	ended     []WaitResult
	queued    []QueuePlace
	holds     []HoldResult
	traced    []WaitInfo
	traceEnds []WaitResult
	lost      []error
	released  []error

	// beganHook, when set before use, runs in WaitBegan, outside mu.
	beganHook func(WaitInfo)
	// attemptedHook, when set before use, runs in Attempted, outside mu.
	attemptedHook func(Stats)
}

// The Observer and every optional interface: this fails to compile when
// one of them changes.
var _ interface {
	Observer
	WaitBeganObserver
	WaitEndedObserver
	QueuedObserver
	HoldEndedObserver
	LockTracer
} = (*eventRecorder)(nil)

func (r *eventRecorder) note(name, key string) {
	r.order = append(r.order, name+" "+key)
}

func (r *eventRecorder) Attempted(s Stats, _ error) {
	if r.attemptedHook != nil {
		r.attemptedHook(s)
	}
}

func (r *eventRecorder) Extended(Stats, error) {}

func (r *eventRecorder) Lost(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("Lost", key)
	r.lost = append(r.lost, err)
}

func (r *eventRecorder) Released(s Stats, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("Released", s.Key)
	r.released = append(r.released, err)
}

func (r *eventRecorder) WaitBegan(w WaitInfo) {
	r.mu.Lock()
	r.note("WaitBegan", w.Key)
	r.began = append(r.began, w)
	r.mu.Unlock()
	if r.beganHook != nil {
		r.beganHook(w)
	}
}

func (r *eventRecorder) WaitEnded(w WaitResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("WaitEnded", w.Key)
	r.ended = append(r.ended, w)
}

func (r *eventRecorder) Queued(p QueuePlace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note(fmt.Sprintf("Queued(%d)", p.Place), p.Key)
	r.queued = append(r.queued, p)
}

func (r *eventRecorder) HoldEnded(h HoldResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("HoldEnded", h.Key)
	r.holds = append(r.holds, h)
}

func (r *eventRecorder) TraceLock(_ context.Context, w WaitInfo) func(WaitResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("TraceLock", w.Key)
	r.traced = append(r.traced, w)
	return func(res WaitResult) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.note("TraceEnd", res.Key)
		r.traceEnds = append(r.traceEnds, res)
	}
}

// of returns the events about key, in order.
func (r *eventRecorder) of(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.order {
		if name, k, _ := strings.Cut(e, " "); k == key {
			out = append(out, name)
		}
	}
	return out
}

// count returns how many times method was heard about key.
func (r *eventRecorder) count(method, key string) int {
	n := 0
	for _, e := range r.of(key) {
		if e == method {
			n++
		}
	}
	return n
}

// endedOf returns the WaitEnded results about key.
func (r *eventRecorder) endedOf(key string) []WaitResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []WaitResult
	for _, w := range r.ended {
		if w.Key == key {
			out = append(out, w)
		}
	}
	return out
}

// traceEndsOf returns the tracer's end results about key.
func (r *eventRecorder) traceEndsOf(key string) []WaitResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []WaitResult
	for _, w := range r.traceEnds {
		if w.Key == key {
			out = append(out, w)
		}
	}
	return out
}

// holdsOf returns the HoldEnded results about key.
func (r *eventRecorder) holdsOf(key string) []HoldResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []HoldResult
	for _, h := range r.holds {
		if h.Key == key {
			out = append(out, h)
		}
	}
	return out
}

// waitUntilWaiting blocks until the recorder heard WaitBegan for key.
func waitUntilWaiting(t *testing.T, rec *eventRecorder, key string) {
	t.Helper()
	require.Eventually(t, func() bool { return rec.count("WaitBegan", key) > 0 }, 10*time.Second, time.Millisecond,
		"got no WaitBegan for %q, want one", key)
}

// requirePaired checks that key's WaitBegan and WaitEnded pair up: as many
// of each, each WaitEnded after its WaitBegan.
func requirePaired(t *testing.T, rec *eventRecorder, key string, want int) {
	t.Helper()
	open := 0
	for _, e := range rec.of(key) {
		switch e {
		case "WaitBegan":
			open++
		case "WaitEnded":
			open--
			require.GreaterOrEqual(t, open, 0, "got a WaitEnded before its WaitBegan: %v", rec.of(key))
		}
	}
	require.Equal(t, want, rec.count("WaitBegan", key), "got %d WaitBegan, want %d: %v", rec.count("WaitBegan", key), want, rec.of(key))
	require.Zero(t, open, "got %d WaitBegan without WaitEnded: %v", open, rec.of(key))
}

// heldElsewhere takes key with another Client on cs and returns the lock,
// unlocked when the test ends.
func heldElsewhere(t *testing.T, c *Client, key string) *Lock {
	t.Helper()
	l, err := c.TryLock(t.Context(), key)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	return l
}

func TestObserverEventsAreHeard(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &eventRecorder{}
	holder := newClient(t, cs)
	c := newClient(t, cs, WithObserver(rec), WithRetryDelay(20*time.Millisecond, 40*time.Millisecond))
	const key = "events-heard"
	held := heldElsewhere(t, holder, key)

	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(t.Context(), key)
		if err != nil {
			t.Errorf("Lock: got %v, want the lock", err)
		}
		got <- l
	}()
	waitUntilWaiting(t, rec, key)
	require.NoError(t, held.Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	require.NoError(t, l.Unlock(t.Context()))

	require.Equal(t, []string{"TraceLock", "WaitBegan", "WaitEnded", "TraceEnd", "Released", "HoldEnded"}, rec.of(key))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	w := rec.began[0]
	require.Equal(t, WaitInfo{Key: key, Kind: KindLock, ID: w.ID}, w)
	require.True(t, strings.HasPrefix(l.Token(), w.ID), "got token %q, want it to begin with the id %q", l.Token(), w.ID)
	require.Equal(t, w, rec.traced[0], "TraceLock's WaitInfo")
	e := rec.ended[0]
	require.Equal(t, w, e.WaitInfo)
	require.NoError(t, e.Err)
	require.GreaterOrEqual(t, e.Attempts, 2, "got %d attempts, want the failed one and the winner", e.Attempts)
	require.Positive(t, e.Waited)
	require.Zero(t, e.Place, "a plain lock has no place")
	require.Equal(t, e, rec.traceEnds[0], "the tracer's end gets what WaitEnded got")
	h := rec.holds[0]
	require.Equal(t, key, h.Key)
	require.Equal(t, KindLock, h.Kind)
	require.Equal(t, w.ID, h.ID)
	require.NoError(t, h.Err)
	require.GreaterOrEqual(t, h.Held, time.Duration(0))
}

func TestEventsCarryTheKind(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &eventRecorder{}
	c := newClient(t, cs, WithObserver(rec))
	ctx := t.Context()
	take := map[string]func() (*Lock, error){
		"kind-lock":  func() (*Lock, error) { return c.TryLock(ctx, "kind-lock") },
		"kind-owner": func() (*Lock, error) { return c.TryLock(ctx, "kind-owner", WithOwner("me")) },
		"kind-read":  func() (*Lock, error) { return c.TryRLock(ctx, "kind-read") },
		"kind-multi-a,kind-multi-b": func() (*Lock, error) {
			return c.TryLockMulti(ctx, []string{"kind-multi-a", "kind-multi-b"})
		},
		"kind-permit": func() (*Lock, error) {
			s, err := c.Semaphore("kind-permit", 2)
			require.NoError(t, err)
			return s.TryAcquire(ctx)
		},
	}
	want := map[string]Kind{"kind-lock": KindLock, "kind-owner": KindOwner, "kind-read": KindRead,
		"kind-multi-a,kind-multi-b": KindLock, "kind-permit": KindPermit}
	for key, f := range take {
		l, err := f()
		require.NoError(t, err, key)
		require.NoError(t, l.Unlock(ctx), key)
		ends := rec.traceEndsOf(key)
		require.Len(t, ends, 1, "%s: got %d ends", key, len(ends))
		require.Equal(t, want[key], ends[0].Kind, key)
		holds := rec.holdsOf(key)
		require.Len(t, holds, 1, "%s: got %d HoldEnded", key, len(holds))
		require.Equal(t, want[key], holds[0].Kind, key)
		require.Zero(t, rec.count("WaitBegan", key), "%s: a TryLock never waits", key)
	}
}

func TestWaitEventsPair(t *testing.T) {
	_, cs := minis(t, 5)
	holder := newClient(t, cs)
	fast := WithRetryDelay(20*time.Millisecond, 40*time.Millisecond)

	t.Run("cancel", func(t *testing.T) {
		rec := &eventRecorder{}
		c := newClient(t, cs, WithObserver(rec), fast)
		const key = "pair-cancel"
		heldElsewhere(t, holder, key)
		ctx, cancel := context.WithCancel(t.Context())
		rec.beganHook = func(WaitInfo) { cancel() }
		_, err := c.Lock(ctx, key)
		require.ErrorIs(t, err, context.Canceled)
		requirePaired(t, rec, key, 1)
		ended := rec.endedOf(key)
		require.ErrorIs(t, ended[0].Err, context.Canceled)
		require.ErrorIs(t, ended[0].Err, ErrNotAcquired)
	})

	t.Run("deadline", func(t *testing.T) {
		rec := &eventRecorder{}
		c := newClient(t, cs, WithObserver(rec), fast)
		const key = "pair-deadline"
		heldElsewhere(t, holder, key)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, key)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requirePaired(t, rec, key, 1)
		require.ErrorIs(t, rec.endedOf(key)[0].Err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, rec.endedOf(key)[0].Waited, 250*time.Millisecond)
	})

	t.Run("close", func(t *testing.T) {
		// WaitEnded of a call that Close ends is delivered before Close
		// returns: a gauge of waiters comes back to 0.
		rec := &eventRecorder{}
		c := newClient(t, cs, WithObserver(rec), fast)
		const key = "pair-close"
		heldElsewhere(t, holder, key)
		errs := make(chan error, 3)
		for range 3 { // the second and third queue behind the first
			go func() {
				_, err := c.Lock(context.Background(), key)
				errs <- err
			}()
		}
		require.Eventually(t, func() bool { return rec.count("WaitBegan", key) == 3 }, 10*time.Second, time.Millisecond,
			"got %v, want 3 WaitBegan", rec.of(key))
		require.NoError(t, c.Close())
		requirePaired(t, rec, key, 3)
		for range 3 {
			require.ErrorIs(t, <-errs, ErrClosed)
		}
		for _, e := range rec.endedOf(key) {
			require.ErrorIs(t, e.Err, ErrClosed)
		}
	})

	t.Run("panicking WaitBegan", func(t *testing.T) {
		rec := &eventRecorder{beganHook: func(WaitInfo) { panic("observer: WaitBegan") }}
		c := newClient(t, cs, WithObserver(rec), fast)
		const key = "pair-panic"
		held := heldElsewhere(t, holder, key)
		got := make(chan error, 1)
		go func() {
			l, err := c.Lock(t.Context(), key)
			if err == nil {
				err = l.Unlock(t.Context())
			}
			got <- err
		}()
		waitUntilWaiting(t, rec, key)
		require.NoError(t, held.Unlock(t.Context()))
		require.NoError(t, <-got, "the call goes on after the panic")
		requirePaired(t, rec, key, 1)
		require.NoError(t, rec.endedOf(key)[0].Err)
	})
}

func TestTryLockNeverReportsAWait(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &eventRecorder{}
	holder := newClient(t, cs)
	c := newClient(t, cs, WithObserver(rec))
	const key = "try-no-wait"
	heldElsewhere(t, holder, key)
	for range 3 {
		_, err := c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired)
	}
	require.Equal(t, []string{"TraceLock", "TraceEnd", "TraceLock", "TraceEnd", "TraceLock", "TraceEnd"}, rec.of(key))
	for _, e := range rec.traceEndsOf(key) {
		require.ErrorIs(t, e.Err, ErrNotAcquired)
		require.Equal(t, 1, e.Attempts)
	}
}

func TestHoldEnded(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	rec := &eventRecorder{}
	c := newClient(t, cs, WithObserver(rec), WithNodeTimeout(50*time.Millisecond))
	ctx := t.Context()

	// requireHold waits for key's one HoldEnded and checks that it came
	// after want's event.
	requireHold := func(t *testing.T, key, after string) HoldResult {
		t.Helper()
		require.Eventually(t, func() bool { return len(rec.holdsOf(key)) > 0 }, 10*time.Second, time.Millisecond,
			"got no HoldEnded for %q: %v", key, rec.of(key))
		events := rec.of(key)
		require.Equal(t, []string{"TraceLock", "TraceEnd", after, "HoldEnded"}, events)
		return rec.holdsOf(key)[0]
	}

	t.Run("unlock", func(t *testing.T) {
		const key = "hold-unlock"
		l, err := c.TryLock(ctx, key)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		h := requireHold(t, key, "Released")
		require.NoError(t, h.Err)
		require.GreaterOrEqual(t, h.Held, 20*time.Millisecond)
		require.Equal(t, l.t.id, h.ID)
	})

	t.Run("unlock not confirmed", func(t *testing.T) {
		const key = "hold-unconfirmed"
		l, err := c.TryLock(ctx, key)
		require.NoError(t, err)
		for _, m := range ms {
			m.Del(key)
		}
		uerr := l.Unlock(ctx)
		require.ErrorIs(t, uerr, ErrNotHeld)
		h := requireHold(t, key, "Released")
		require.ErrorIs(t, h.Err, ErrNotHeld)
		require.NotErrorIs(t, h.Err, ErrLockLost)
	})

	t.Run("expiry", func(t *testing.T) {
		const key, ttl = "hold-expiry", 300 * time.Millisecond
		l, err := c.TryLock(ctx, key, WithTTL(ttl))
		require.NoError(t, err)
		<-l.Done()
		h := requireHold(t, key, "Lost")
		require.ErrorIs(t, h.Err, ErrLockLost)
		require.LessOrEqual(t, h.Held, ttl, "got held %v, want at most the TTL: no later than Until", h.Held)
		// An Unlock after the loss reports no second end.
		_ = l.Unlock(ctx) // the nodes may still hold it: the drift cut Until short
		require.Len(t, rec.holdsOf(key), 1, "got %v, want one HoldEnded", rec.of(key))
	})

	t.Run("paused holder", func(t *testing.T) {
		// A holder that finds its lock ended long after Until (its
		// process was paused) held it until Until, not until then.
		var skew atomic.Int64
		pc := newClient(t, cs, WithObserver(rec), WithNodeTimeout(50*time.Millisecond))
		pc.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		const key, ttl = "hold-paused", 500 * time.Millisecond
		l, err := pc.TryLock(ctx, key, WithTTL(ttl))
		require.NoError(t, err)
		skew.Store(int64(time.Hour))
		require.ErrorIs(t, l.Err(), ErrLockLost)
		h := requireHold(t, key, "Lost")
		require.LessOrEqual(t, h.Held, ttl, "got held %v, want at most the TTL: no later than Until", h.Held)
	})

	t.Run("lost by renewal", func(t *testing.T) {
		const key = "hold-renewal"
		l, err := c.TryLock(ctx, key, WithTTL(600*time.Millisecond), WithAutoExtend(true))
		require.NoError(t, err)
		for _, m := range ms {
			m.Del(key)
		}
		<-l.Done()
		h := requireHold(t, key, "Lost")
		require.ErrorIs(t, h.Err, ErrLockLost)
		require.ErrorIs(t, h.Err, ErrNotHeld)
	})

	t.Run("max hold", func(t *testing.T) {
		const key = "hold-max"
		l, err := c.TryLock(ctx, key, WithTTL(300*time.Millisecond), WithAutoExtend(true), WithMaxHold(500*time.Millisecond))
		require.NoError(t, err)
		<-l.Done()
		h := requireHold(t, key, "Lost")
		require.ErrorIs(t, h.Err, ErrLockLost)
		require.ErrorIs(t, h.Err, ErrMaxHold)
		require.LessOrEqual(t, h.Held, 500*time.Millisecond)
	})
}

// TestQueuedReportsChangedPlaces drives the events of one call as a fair
// call's loop does: Queued only when the place changed, after WaitBegan,
// and the last place in WaitEnded; nothing for a call that may not wait.
func TestQueuedReportsChangedPlaces(t *testing.T) {
	_, cs := minis(t, 3)
	rec := &eventRecorder{}
	c := newClient(t, cs, WithObserver(rec))
	const key = "queued-places"
	events := func(wait bool) *callEvents {
		t.Helper()
		tg, err := c.target([]string{key}, &c.cfg, plainFlavour)
		require.NoError(t, err)
		ev := c.callEvents(t.Context(), c.newAcquisition(&c.cfg, []string{key}, tg), wait)
		return &ev
	}
	try := events(false)
	try.queued(1)
	try.began()
	try.finish(nil, ErrNotAcquired)
	require.Equal(t, []string{"TraceLock", "TraceEnd"}, rec.of(key), "a call that may not wait")

	rec = &eventRecorder{}
	c.events = eventsOf(rec)
	ev := events(true)
	for _, p := range []int{3, 3, 0, 2, 2, 1} {
		ev.queued(p)
	}
	ev.began()
	ev.finish(nil, ErrClosed)
	require.Equal(t, []string{"TraceLock", "WaitBegan", "Queued(3)", "Queued(2)", "Queued(1)", "WaitEnded", "TraceEnd"}, rec.of(key))
	require.Equal(t, 1, rec.endedOf(key)[0].Place)
	require.Equal(t, 1, rec.traceEndsOf(key)[0].Place)
}

func TestLockTracerEndsOncePerCall(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &eventRecorder{}
	block := make(chan struct{})
	rec.attemptedHook = func(s Stats) {
		if s.Key == "trace-blocked" {
			<-block
		}
	}
	holder := newClient(t, cs)
	c, err := New(cs, WithObserver(rec), WithNodeTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	l, err := c.Lock(ctx, "trace-won")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	heldElsewhere(t, holder, "trace-held")
	_, err = c.TryLock(ctx, "trace-held")
	require.ErrorIs(t, err, ErrNotAcquired)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Lock(cancelled, "trace-cancelled")
	require.ErrorIs(t, err, context.Canceled)

	// A call refused for its options is not traced.
	_, err = c.Lock(ctx, "trace-invalid", WithTTL(-time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)

	// A call in progress (its Observer blocked) holds Close: a call that
	// Close refuses meanwhile is traced, begun and ended at once.
	blocked := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "trace-blocked")
		blocked <- err
	}()
	require.Eventually(t, func() bool { return rec.count("TraceLock", "trace-blocked") == 1 }, 10*time.Second, time.Millisecond)
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	require.Eventually(t, c.isClosed, 10*time.Second, time.Millisecond)
	_, err = c.Lock(ctx, "trace-refused")
	require.ErrorIs(t, err, ErrClosed)
	close(block)
	<-closed
	require.ErrorIs(t, <-blocked, ErrClosed, "won during Close: released, and ErrClosed")

	// After Close, nothing.
	_, err = c.Lock(ctx, "trace-after")
	require.ErrorIs(t, err, ErrClosed)

	for key, want := range map[string]error{
		"trace-won": nil, "trace-held": ErrNotAcquired, "trace-cancelled": context.Canceled,
		"trace-blocked": ErrClosed, "trace-refused": ErrClosed,
	} {
		require.Equal(t, 1, rec.count("TraceLock", key), "%s: %v", key, rec.of(key))
		ends := rec.traceEndsOf(key)
		require.Len(t, ends, 1, "%s: got %d ends, want 1: %v", key, len(ends), rec.of(key))
		if want == nil {
			require.NoError(t, ends[0].Err, key)
		} else {
			require.ErrorIs(t, ends[0].Err, want, key)
		}
	}
	require.Empty(t, rec.of("trace-invalid"), "a call with bad options")
	require.Empty(t, rec.of("trace-after"), "a call after Close returned")
	require.Zero(t, rec.traceEndsOf("trace-cancelled")[0].Attempts, "ended before any attempt")
}

func TestNoEventsAfterClose(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	rec := &eventRecorder{}
	c, err := New(cs, WithObserver(rec), WithTTL(200*time.Millisecond), WithNodeTimeout(20*time.Millisecond))
	require.NoError(t, err)
	l, err := c.TryLock(t.Context(), "after-close-events")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	before := rec.of("after-close-events")
	<-l.Done() // the expiry timer fires after Close
	require.ErrorIs(t, l.Err(), ErrLockLost)
	time.Sleep(50 * time.Millisecond) // the notifier's goroutine would deliver by now
	_, err = c.Lock(t.Context(), "after-close-events")
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, before, rec.of("after-close-events"), "got events after Close, want none")
	require.Empty(t, rec.holdsOf("after-close-events"))
}

// TestLostThenHoldEndedInOrder: on the notifier's goroutine, each loss's
// HoldEnded follows its Lost, for many locks lost at once.
func TestLostThenHoldEndedInOrder(t *testing.T) {
	ms, cs := minis(t, 3)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	rec := &eventRecorder{}
	c := newClient(t, cs, WithObserver(rec), WithTTL(200*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
	var locks []*Lock
	for i := range 20 {
		l, err := c.TryLock(t.Context(), fmt.Sprintf("lost-order-%d", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	for i, l := range locks {
		<-l.Done()
		key := fmt.Sprintf("lost-order-%d", i)
		require.Eventually(t, func() bool { return len(rec.holdsOf(key)) == 1 }, 10*time.Second, time.Millisecond)
		require.Equal(t, []string{"TraceLock", "TraceEnd", "Lost", "HoldEnded"}, rec.of(key))
		require.True(t, errors.Is(rec.holdsOf(key)[0].Err, ErrLockLost))
	}
}
