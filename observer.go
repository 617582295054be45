package redlock

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives what happens to a Client's locks, for metrics, tracing
// or logs. Set it with WithObserver. Its methods are called synchronously,
// from the goroutine that did the work, possibly from many goroutines at
// once: they must be safe for concurrent use, return quickly, and not call
// back into the Client. contrib/otel adapts it to OpenTelemetry metrics.
type Observer interface {
	// Attempted is called after each acquisition attempt, with the votes;
	// err is nil when the attempt won the lock.
	Attempted(s Stats, err error)
	// Extended is called after each extension, by Extend or by
	// auto-extension; err is nil when it succeeded. An extension made by
	// auto-extension reports the vote counts, not each node's vote.
	Extended(s Stats, err error)
	// Lost is called once for a lock that ended without Unlock: its validity
	// ran out, a quorum lost its token, or its max hold was reached. err
	// wraps ErrLockLost.
	Lost(key string, err error)
	// Released is called after each Unlock that reached the nodes; err is
	// nil when a quorum still held the lock.
	Released(s Stats, err error)
}

// observeAttempt reports an attempt to the Observer, and logs a failed one.
func (c *Client) observeAttempt(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: attempt failed", "key", s.Key, "yes", s.Yes, "no", s.No, "failed", s.Failed, "err", err)
	}
	if c.observer == nil {
		return
	}
	c.quietMu.RLock()
	defer c.quietMu.RUnlock()
	if !c.quiet {
		c.observer.Attempted(s, err)
	}
}

func (c *Client) observeExtend(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: extension failed", "key", s.Key, "err", err)
	}
	if c.observer == nil {
		return
	}
	c.quietMu.RLock()
	defer c.quietMu.RUnlock()
	if !c.quiet {
		c.observer.Extended(s, err)
	}
}

func (c *Client) observeLost(key string, err error) {
	c.log.Warn("redlock: lock lost", "key", key, "err", err)
	if c.observer == nil {
		return
	}
	c.quietMu.RLock()
	defer c.quietMu.RUnlock()
	if !c.quiet {
		c.observer.Lost(key, err)
	}
}

func (c *Client) observeRelease(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: release not confirmed", "key", s.Key, "err", err)
	}
	if c.observer == nil {
		return
	}
	c.quietMu.RLock()
	defer c.quietMu.RUnlock()
	if !c.quiet {
		c.observer.Released(s, err)
	}
}

// quietHandler passes log records to the user's handler until Close has
// returned, and drops them after: a lock's expiry timer or a straggling
// request must not log from a Client the caller has closed.
type quietHandler struct {
	next slog.Handler
	c    *Client
}

// Enabled reports whether the user's handler wants records at level l.
func (h *quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle passes r on, unless the Client has been closed.
func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	h.c.quietMu.RLock()
	defer h.c.quietMu.RUnlock()
	if h.c.quiet {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a quietHandler around the user's handler with attrs.
func (h *quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &quietHandler{next: h.next.WithAttrs(attrs), c: h.c}
}

// WithGroup returns a quietHandler around the user's handler with a group.
func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{next: h.next.WithGroup(name), c: h.c}
}

// NodeStatus is what a Client knows of one node, for diagnostics.
type NodeStatus struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Stalled is true while a request to the node has outlived its node
	// timeout without an answer: the node looks hung.
	Stalled bool
	// RunID is the node's run_id, as the node guard last saw it; "" when
	// the guard is off or has not seen the node.
	RunID string
	// Quarantined is the guard's reason for not counting the node's votes,
	// or "" when they count.
	Quarantined string
	// QuarantinedUntil is when the quarantine ends; zero when there is none.
	QuarantinedUntil time.Time
}

// Nodes returns what the Client knows of each node, in the order given to
// New: whether it looks hung, and what the node guard thinks of it.
func (c *Client) Nodes() []NodeStatus {
	now := c.now()
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		s := NodeStatus{Index: i, Addr: n.addr, Stalled: n.stalled.Load() > 0}
		n.guard.mu.Lock()
		s.RunID = n.guard.runID
		if now.Before(n.guard.until) {
			s.Quarantined, s.QuarantinedUntil = n.guard.reason, n.guard.until
		}
		n.guard.mu.Unlock()
		out[i] = s
	}
	return out
}
