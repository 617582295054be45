package redlock

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// nodeGuard watches one node for the two things Redlock's safety assumes
// but no client checks: that a node which lost its data stays out for longer
// than the max TTL (Client.maxTTL: the longest TTL the Client has sent, so
// that it outlasts every key of its holds the node may have lost), and that
// its clock does not jump. It learns the node's run_id and uptime (INFO
// server) and its clock (TIME) with every acquisition, sent right after the
// acquire command in the same pipeline, on the same connection, so that it
// sees a restart or a clock jump that happened before the node voted, or
// while it did, before the vote is counted.
//
// A node that restarted less than the max TTL ago, or whose clock moved
// away from our monotonic clock by more than the drift allowance, is
// quarantined: its yes does not count, for acquisitions or extensions,
// until the max TTL has passed. It is safe for concurrent use.
type nodeGuard struct {
	mu        sync.Mutex
	runID     string    // guarded by mu; "" until known
	noInfo    bool      // guarded by mu; the node does not serve INFO server
	until     time.Time // guarded by mu; quarantined before this time
	reason    string    // guarded by mu; why
	clockSeen bool      // guarded by mu; the fields below are set
	lastNode  time.Time // guarded by mu; the node's clock at the last sample
	lastLocal time.Time // guarded by mu; our monotonic clock then
	lastRTT   time.Duration
}

// observe takes one sample of the node: its INFO server text (or the error
// that came instead), its TIME, and the local times around the request. It
// returns the quarantine error to vote with, or nil.
func (g *nodeGuard) observe(n *node, info string, infoErr error, nodeTime time.Time, timeErr error,
	sent, recv time.Time, maxTTL time.Duration, driftFactor float64, log *slog.Logger) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if infoErr == nil {
		runID, uptime, ok := parseServerInfo(info)
		if ok {
			// uptime_in_seconds is the difference of two whole-second
			// readings: the node may be up to a second younger than it says.
			// Take the latest start it allows, so that the quarantine is
			// never cut short.
			started := recv.Add(-max(uptime-time.Second, 0))
			switch {
			case g.runID == "" && recv.Sub(started) < maxTTL:
				g.quarantine(n, started.Add(maxTTL), fmt.Sprintf("node started %v ago, less than the max TTL %v", recv.Sub(started).Round(time.Millisecond), maxTTL), log)
			case g.runID != "" && runID != g.runID:
				g.quarantine(n, started.Add(maxTTL), fmt.Sprintf("node restarted (run_id %s, was %s)", short(runID), short(g.runID)), log)
			}
			g.runID = runID
		}
	} else if !g.noInfo {
		g.noInfo = true
		log.Warn("redlock: node guard cannot watch restarts on this node: INFO server failed",
			"node", n.index, "addr", n.addr, "err", infoErr)
	}
	if timeErr == nil {
		// The node read its clock somewhere between sent and recv: compare
		// how far its clock moved since the last sample with how far our
		// monotonic clock did. Our own wall clock plays no part.
		rtt := recv.Sub(sent)
		local := sent.Add(rtt / 2)
		if g.clockSeen {
			elapsed := local.Sub(g.lastLocal)
			jump := nodeTime.Sub(g.lastNode) - elapsed
			// A clock that runs up to driftFactor fast or slow moves that
			// much over the whole gap, not just over a TTL: after an idle
			// hour the allowance is rate × hour. A jump smaller than that
			// cannot be told from drift, so the longer the node sat idle,
			// the larger a jump must be for the guard to see it.
			if abs(jump) > rtt/2+g.lastRTT/2+clockDrift(max(elapsed, maxTTL), driftFactor) {
				g.quarantine(n, recv.Add(maxTTL), fmt.Sprintf("node clock jumped by %v", jump.Round(time.Millisecond)), log)
			}
		}
		// Follow the clock's slow drift; only a sudden move is a jump.
		g.lastNode, g.lastLocal, g.lastRTT, g.clockSeen = nodeTime, local, rtt, true
	}
	return g.check(recv)
}

// quarantine keeps the node's yes out until t. g.mu must be held.
func (g *nodeGuard) quarantine(n *node, t time.Time, reason string, log *slog.Logger) {
	if t.After(g.until) {
		g.until, g.reason = t, reason
	}
	log.Warn("redlock: node guard quarantines a node", "node", n.index, "addr", n.addr,
		"reason", reason, "for", time.Until(t).Round(time.Millisecond))
}

// check returns the quarantine error at now, or nil. g.mu must be held.
func (g *nodeGuard) check(now time.Time) error {
	if now.Before(g.until) {
		return fmt.Errorf("%w: %s; excluded for %v more", ErrQuarantined, g.reason, g.until.Sub(now).Round(time.Millisecond))
	}
	return nil
}

// status returns the quarantine error at now, or nil.
func (g *nodeGuard) status(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.check(now)
}

// parseServerInfo reads run_id and uptime_in_seconds from INFO server.
func parseServerInfo(info string) (runID string, uptime time.Duration, ok bool) {
	var haveID, haveUp bool
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, found := strings.CutPrefix(line, "run_id:"); found {
			runID, haveID = v, true
		} else if v, found := strings.CutPrefix(line, "uptime_in_seconds:"); found {
			if s, err := strconv.ParseInt(v, 10, 64); err == nil {
				uptime, haveUp = time.Duration(s)*time.Second, true
			}
		}
	}
	return runID, uptime, haveID && haveUp
}

func short(runID string) string {
	if len(runID) > 8 {
		return runID[:8]
	}
	return runID
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
