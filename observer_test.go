package redlock

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestObserverSeesEveryKindOfEvent(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	rec := &recorder{}
	c := newClient(t, cs, WithObserver(rec), WithTTL(300*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(t.Context(), "observed")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "observed")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))

	auto, err := c.TryLock(t.Context(), "observed-auto", WithAutoExtend(true))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, e, _, _ := rec.counts(); return e >= 2 }, 5*time.Second, time.Millisecond,
		"auto-extension is reported")
	require.NoError(t, auto.Unlock(t.Context()))

	expiring, err := c.TryLock(t.Context(), "observed-expiry")
	require.NoError(t, err)
	<-expiring.Done()
	// Lost comes after Done has closed, from the notifier's goroutine.
	require.Eventually(t, func() bool { _, _, l, _ := rec.counts(); return l >= 1 }, 5*time.Second, time.Millisecond,
		"the loss is reported")

	a, e, lost, released := rec.counts()
	require.Equal(t, 4, a, "attempts")
	require.GreaterOrEqual(t, e, 2, "extensions")
	require.Equal(t, 1, lost, "losses")
	require.Equal(t, 2, released, "releases")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NoError(t, rec.attempts[0])
	require.ErrorIs(t, rec.attempts[1], ErrNotAcquired)
	require.ErrorIs(t, rec.lost[0], ErrLockLost)
	require.Equal(t, OpExtend, rec.extends[0].Op)
	require.Equal(t, "observed", rec.extends[0].Key)
}

func TestLoggerIsSilentByDefaultAndHidesTokens(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		m.ClockTTL(true)
	}
	logs := &syncBuffer{}
	c := newClient(t, cs, WithTTL(100*time.Millisecond), WithNodeTimeout(50*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	l, err := c.TryLock(t.Context(), "logged")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "logged")
	require.ErrorIs(t, err, ErrNotAcquired)
	<-l.Done() // lost by expiry: logged at Warn, just after Done closes
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "lock lost") }, 5*time.Second, time.Millisecond,
		"log: %s", logs.String())
	require.NotContains(t, logs.String(), l.Token(), "a token was logged at Info or above")

	silent := newClient(t, cs) // no logger: the default discards
	require.NotNil(t, silent.log)
	require.False(t, silent.log.Enabled(t.Context(), slog.LevelError))
}

// countingHandler counts the log records it gets.
type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestNothingIsReportedAfterClose(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &recorder{}
	logs := &countingHandler{}
	c, err := New(cs, WithObserver(rec), WithLogger(slog.New(logs)), WithTTL(200*time.Millisecond), WithNodeTimeout(20*time.Millisecond))
	require.NoError(t, err)
	l, err := c.TryLock(t.Context(), "after-close")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, _, lostBefore, _ := rec.counts()
	logsBefore := logs.n.Load()
	<-l.Done() // the expiry timer fires after Close
	require.ErrorIs(t, l.Err(), ErrLockLost)
	time.Sleep(10 * time.Millisecond) // the Observer is called before Done closes; margin for the logger
	_, _, lostAfter, _ := rec.counts()
	require.Equal(t, lostBefore, lostAfter, "got Observer.Lost after Close, want nothing")
	require.Equal(t, logsBefore, logs.n.Load(), "got log records after Close, want none")
	require.True(t, strings.Contains(l.Err().Error(), "validity ended"))
}
