package redlock

import (
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// advObserver records Lost calls; Lost of the first lock blocks for block,
// or calls runtime.Goexit when goexit is set.
type advObserver struct {
	block  time.Duration
	goexit bool
	mu     sync.Mutex
	lost   []string
	first  atomic.Bool
}

func (o *advObserver) Attempted(Stats, error) {}
func (o *advObserver) Extended(Stats, error)  {}
func (o *advObserver) Released(Stats, error)  {}
func (o *advObserver) Lost(key string, _ error) {
	o.mu.Lock()
	o.lost = append(o.lost, key)
	o.mu.Unlock()
	if o.first.CompareAndSwap(false, true) {
		if o.goexit {
			runtime.Goexit() // as t.FailNow or require.* would, in an Observer
		}
		time.Sleep(o.block)
	}
}

func (o *advObserver) lostKeys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lost...)
}

// TestLossBeforeCloseIsReported (found by the adversarial review): two locks are lost, both before
// Close is called. The Observer is still hearing of the first when Close
// is called; Close waits for it, then silences the Client, and the second
// loss, queued on the notifier before Close, is never reported to the
// Observer nor logged. Observer.Lost says it is "called once for a lock
// that ended without Unlock"; before 90d51b0 it was called from end().
func TestLossBeforeCloseIsReported(t *testing.T) {
	_, cs := minis(t, 3)
	obs := &advObserver{block: 500 * time.Millisecond}
	logs := &syncBuffer{}
	c, err := New(cs, WithObserver(obs), WithTTL(200*time.Millisecond), WithNodeTimeout(50*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	require.NoError(t, err)
	a, err := c.TryLock(t.Context(), "adv-a")
	require.NoError(t, err)
	<-a.Done()
	require.Eventually(t, func() bool { return len(obs.lostKeys()) == 1 }, 5*time.Second, time.Millisecond)
	b, err := c.TryLock(t.Context(), "adv-b")
	require.NoError(t, err)
	<-b.Done() // b is lost, before Close
	require.ErrorIs(t, b.Err(), ErrLockLost)
	require.NoError(t, c.Close())
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, []string{"adv-a", "adv-b"}, obs.lostKeys(), "losses reported; log:\n%s", logs.String())
}

// TestGoexitInObserverDoesNotStopTheNotifier (found by the adversarial review): an Observer method that ends its
// goroutine with runtime.Goexit (t.FailNow, require.*) is not a panic, so
// callObserverQuietly's recover does not see it, and notifier.run dies with
// running still true: no later loss or auto-extension is ever reported or
// logged, and every later event stays in the queue for good.
func TestGoexitInObserverDoesNotStopTheNotifier(t *testing.T) {
	_, cs := minis(t, 3)
	obs := &advObserver{goexit: true}
	logs := &syncBuffer{}
	c := newClient(t, cs, WithObserver(obs), WithTTL(200*time.Millisecond), WithNodeTimeout(50*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	a, err := c.TryLock(t.Context(), "adv-goexit-a")
	require.NoError(t, err)
	<-a.Done()
	require.Eventually(t, func() bool { return len(obs.lostKeys()) == 1 }, 5*time.Second, time.Millisecond)
	for i := range 3 {
		b, err := c.TryLock(t.Context(), "adv-goexit-b"+string(rune('0'+i)))
		require.NoError(t, err, "lock %d", i)
		<-b.Done()
	}
	time.Sleep(500 * time.Millisecond)
	n := &c.renewer.notify
	n.mu.Lock()
	queued, running := len(n.queue), n.running
	n.mu.Unlock()
	t.Logf("queued %d, running %v, lost reported %v", queued, running, obs.lostKeys())
	require.Len(t, obs.lostKeys(), 4, "later losses not reported (queued %d, running %v); log:\n%s", queued, running, logs.String())
}

// TestSlowObserverQueueIsBounded: while the Observer's Extended blocks,
// 3000 more auto-extension reports come. The notifier's queue must stop at
// maxQueued, count what it drops and say so, and still queue a loss (found
// by the adversarial review: with 100 renewing locks, 338, 838 and 1338
// events after 0.5, 1 and 1.5s, and growing).
func TestSlowObserverQueueIsBounded(t *testing.T) {
	_, cs := minis(t, 3)
	obs := newSlowObserver("Extended")
	logs := &syncBuffer{}
	c := newClient(t, cs, WithObserver(obs),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	t.Cleanup(obs.unblock)
	n := &c.renewer.notify
	n.extended(Stats{Key: "first"}, nil)
	require.Eventually(t, func() bool { return obs.count("Extended") == 1 }, 5*time.Second, time.Millisecond,
		"the notifier delivers the first report")
	for range 3000 {
		n.extended(Stats{Key: "k"}, nil)
	}
	n.lost("lost-key", ErrLockLost)
	n.mu.Lock()
	queued, dropped := len(n.queue), n.dropped
	n.mu.Unlock()
	require.Equal(t, maxQueued+1, queued, "the queue holds maxQueued reports and the loss")
	require.Equal(t, 3000-maxQueued, dropped, "the reports past the bound are counted")
	obs.unblock()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "dropped=1976") }, 10*time.Second, time.Millisecond,
		"the drops are logged; log:\n%s", logs.String())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "lost-key") }, 10*time.Second, time.Millisecond,
		"the loss is reported")
}
