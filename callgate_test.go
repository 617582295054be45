package redlock

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// blockingLostObserver blocks in Lost until release is closed.
type blockingLostObserver struct {
	entered chan struct{}
	release chan struct{}
}

func (o *blockingLostObserver) Attempted(Stats, error) {}
func (o *blockingLostObserver) Extended(Stats, error)  {}
func (o *blockingLostObserver) Released(Stats, error)  {}
func (o *blockingLostObserver) Lost(string, error) {
	select {
	case o.entered <- struct{}{}:
	default:
	}
	<-o.release
}

// blockingHandler blocks in Handle (a logger writing to a stuck sink).
type blockingHandler struct {
	entered chan struct{}
	release chan struct{}
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) Handle(context.Context, slog.Record) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	return nil
}
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler      { return h }

// TestCloseBoundedWithStuckCallback (found by the second adversarial
// review): Close's doc says it waits for requests in flight "but not
// forever": at most the longest ReadTimeout plus a second (4s here). An
// Observer, or a logger, stuck in a call for a loss held a read lock that
// Close then waited for with no bound.
func TestCloseBoundedWithStuckCallback(t *testing.T) {
	for _, which := range []string{"observer", "logger"} {
		t.Run(which, func(t *testing.T) {
			_, cs := realNodes(t, 3)
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			var opts []Option
			if which == "observer" {
				opts = append(opts, WithObserver(&blockingLostObserver{entered: entered, release: release}))
			} else {
				opts = append(opts, WithLogger(slog.New(&blockingHandler{entered: entered, release: release})))
			}
			c, err := New(cs, append(opts, WithTTL(200*time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.TryLock(t.Context(), "k"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered: // the loss reached the stuck callback
			case <-time.After(5 * time.Second):
				t.Fatal("the callback was never called for the loss")
			}
			done := make(chan struct{})
			start := time.Now()
			go func() { _ = c.Close(); close(done) }()
			select {
			case <-done:
				t.Logf("Close returned after %v", time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatalf("Close has not returned after %v with a %s stuck in a call (documented bound: ReadTimeout+1s = 4s)", time.Since(start), which)
			}
		})
	}
}

// recloseObserver closes the Client from Lost: a "shut down when the lock is
// lost" Observer.
type recloseObserver struct {
	c      *Client
	closed chan struct{}
}

func (o *recloseObserver) Attempted(Stats, error) {}
func (o *recloseObserver) Extended(Stats, error)  {}
func (o *recloseObserver) Released(Stats, error)  {}
func (o *recloseObserver) Lost(string, error) {
	_ = o.c.Close()
	close(o.closed)
}

// TestObserverMayCloseTheClient (found by the second adversarial review):
// Close called from the Observer's Lost, on the notifier goroutine, waited
// out drain's grace for itself, then took a write lock under its own read
// lock: a deadlock. It must return within its grace.
func TestObserverMayCloseTheClient(t *testing.T) {
	_, cs := realNodes(t, 3)
	o := &recloseObserver{closed: make(chan struct{})}
	c, err := New(cs, WithObserver(o), WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	o.c = c
	if _, err := c.TryLock(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close called from Observer.Lost has not returned after 15s (quietMu self-deadlock)")
	}
}
