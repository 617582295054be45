package redlock

import (
	"time"
)

// driftFloor is added to every drift allowance. Redis checks expiry with
// millisecond resolution, so a key can live up to a millisecond less than
// asked on each side; 2 ms covers that and the local timer's granularity.
const driftFloor = 2 * time.Millisecond

// Bounds of the default node timeout: a tenth of the TTL, but never below
// 2 ms nor above 100 ms. A node timeout much smaller than the TTL keeps a
// slow node from eating the validity. The cap bounds what a hung node costs
// the paths that wait for it (a failed attempt, a rollback); a successful
// round never waits for it. It stays far above a loaded machine's round
// trip, so that a busy but healthy node is not taken for a failed one.
const (
	minDefaultNodeTimeout = 2 * time.Millisecond
	maxDefaultNodeTimeout = 100 * time.Millisecond
)

// clockDrift is the allowance for the clocks of the nodes running faster than
// ours while the lock is held: ttl × factor + 2 ms. A node whose clock runs
// fast expires the key early, and another client may take it there before our
// local Until has passed; subtracting the drift keeps Until before the
// earliest expiry that bounded drift allows.
func clockDrift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// validity is how long a lock stays valid once its quorum answered:
// ttl − elapsed − drift. elapsed runs from before the first request was sent,
// because any node may have set its key at that instant.
func validity(ttl, elapsed, drift time.Duration) time.Duration {
	return ttl - elapsed - drift
}

// defaultNodeTimeout derives the node timeout from the TTL.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	d := ttl / 10
	if d < minDefaultNodeTimeout {
		d = minDefaultNodeTimeout
	}
	if d > maxDefaultNodeTimeout {
		d = maxDefaultNodeTimeout
	}
	return d
}

// clock reads the time. Go's time.Now carries a monotonic reading, and every
// duration here is a difference of two such readings, so wall-clock jumps on
// this machine do not change elapsed times or validity.
type clock func() time.Time
