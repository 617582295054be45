package redlock

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
	if c.observer != nil {
		c.observer.Attempted(s, err)
	}
}

func (c *Client) observeExtend(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: extension failed", "key", s.Key, "err", err)
	}
	if c.observer != nil {
		c.observer.Extended(s, err)
	}
}

func (c *Client) observeLost(key string, err error) {
	c.log.Warn("redlock: lock lost", "key", key, "err", err)
	if c.observer != nil {
		c.observer.Lost(key, err)
	}
}

func (c *Client) observeRelease(s Stats, err error) {
	if err != nil {
		c.log.Debug("redlock: release not confirmed", "key", s.Key, "err", err)
	}
	if c.observer != nil {
		c.observer.Released(s, err)
	}
}
