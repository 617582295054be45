package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// syncBuffer is a bytes.Buffer that a logger may write from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestGuardQuarantinesClockJump(t *testing.T) {
	ms, cs := minis(t, 5)
	logs := &syncBuffer{}
	c := newClient(t, cs, WithNodeGuard(true), WithTTL(2*time.Second), WithNodeTimeout(200*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	// Learn the clocks: until every node's guard has a sample. One round
	// is not always enough on a loaded machine: a request still queued at
	// the node timeout is dropped unsent, and its node not sampled.
	round := 0
	lockOnce := func(prefix string) {
		// A key of its own each time: Unlock returns at the quorum, and
		// a slower node's acquire may land after the test has looked
		// (its release follows it), so a reused key could still be taken.
		round++
		if l, err := c.TryLock(t.Context(), fmt.Sprintf("%s-%d", prefix, round)); err == nil {
			require.NoError(t, l.Unlock(t.Context()))
		}
	}
	require.Eventually(t, func() bool {
		lockOnce("learn")
		for _, n := range c.nodes {
			n.guard.mu.Lock()
			seen := n.guard.clockSeen
			n.guard.mu.Unlock()
			if !seen {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the guard did not sample every node")
	require.Contains(t, logs.String(), "INFO server failed", "miniredis has no INFO server: the guard says it cannot watch restarts")

	// Node 0's clock jumps 5s ahead: its yes no longer counts.
	ms[0].SetTime(time.Now().Add(5 * time.Second))
	l, err := c.TryLock(t.Context(), "jump")
	require.NoError(t, err, "four nodes are enough")
	v := l.Stats().Nodes[0]
	if v.Vote == VoteFailed {
		require.ErrorIs(t, v.Err, ErrQuarantined)
		require.Contains(t, v.Err.Error(), "clock jumped by")
	}
	// Node 0's sample may come too late for that round, or not at all (its
	// request dropped unsent): later rounds sample it again.
	require.Eventually(t, func() bool {
		if c.nodes[0].guard.status(time.Now()) != nil {
			return true
		}
		lockOnce("probe")
		return false
	}, 10*time.Second, time.Millisecond, "node 0 was not quarantined")
	require.Contains(t, logs.String(), "quarantines a node")
	st := c.Nodes()
	require.Len(t, st, 5)
	require.Contains(t, st[0].Quarantined, "clock jumped")
	require.True(t, st[0].QuarantinedUntil.After(time.Now()))
	require.Empty(t, st[3].Quarantined)
	require.Equal(t, ms[3].Addr(), st[3].Addr)
	require.NoError(t, l.Unlock(t.Context()))

	// Jumps on a majority: no lock while they are quarantined.
	ms[1].SetTime(time.Now().Add(-3 * time.Second))
	ms[2].SetTime(time.Now().Add(4 * time.Second))
	for range 2 { // the first round may be decided before all samples land
		_, err = c.TryLock(t.Context(), "jump-2")
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrQuarantined)
	require.Contains(t, err.Error(), "quarantined")
}

func TestGuardLearnsRestartsFromInfo(t *testing.T) {
	runID, up, ok := parseServerInfo("# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n")
	require.True(t, ok)
	require.Equal(t, "abc123", runID)
	require.Equal(t, 42*time.Second, up)
	_, _, ok = parseServerInfo("# Clients\r\nconnected_clients:1\r\n")
	require.False(t, ok)
}

// TestGuardStopsOverlapAfterEmptyRestart restarts a majority of the nodes
// empty, at once, while a lock is held: the spec's broken case. Without the
// guard a second client gets the lock too; with it, the restarted nodes do
// not vote until the max TTL has passed.
func TestGuardStopsOverlapAfterEmptyRestart(t *testing.T) {
	for _, guard := range []bool{false, true} {
		name := "without guard"
		if guard {
			name = "with guard"
		}
		t.Run(name, func(t *testing.T) {
			redistest.Require(t)
			srv := redistest.StartN(t, 5, redistest.Options{})
			opts := []Option{WithNodeGuard(guard), WithTTL(2 * time.Second), WithNodeTimeout(200 * time.Millisecond)}
			clients := realClients(t, srv, 2, opts...)
			a, b := clients[0], clients[1]
			// b has seen the nodes before the restart. With the guard, the
			// freshly started nodes only vote once they have been up for
			// the max TTL, so Lock waits for that first.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			warm, err := b.Lock(ctx, "warm-up")
			require.NoError(t, err)
			require.NoError(t, warm.Unlock(t.Context()))

			held, err := a.Lock(ctx, "restart")
			require.NoError(t, err)
			realEventually(t, srv, "restart", held.Token())
			for _, s := range srv[:3] {
				s.RestartEmpty()
			}
			second, err := b.TryLock(t.Context(), "restart")
			overlap := err == nil && time.Now().Before(held.Until())
			if !guard {
				require.True(t, overlap, "without the guard the empty restart should let a second holder in: %v", err)
				require.NoError(t, second.Unlock(t.Context()))
				return
			}
			require.False(t, overlap, "the guard let a second holder in after an empty restart")
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorIs(t, err, ErrQuarantined)
			require.Contains(t, err.Error(), "restarted")
			// A fresh Client that never saw the nodes also keeps them out:
			// their uptime is below the max TTL.
			// b's quarantined yes votes are rolled back; under load that
			// may come after TryLock returned.
			realEventually(t, srv[:3], "restart", "")
			fresh := realClients(t, srv, 1, opts...)[0]
			_, err = fresh.TryLock(t.Context(), "restart")
			require.ErrorIs(t, err, ErrQuarantined)
			require.Contains(t, err.Error(), "less than the max TTL")
			// The restart took the lock from a majority: it is lost. A
			// restarted node whose old connection fails the release makes
			// it unconfirmed rather than not held; never a success.
			err = held.Unlock(t.Context())
			require.True(t, errors.Is(err, ErrNotHeld) || errors.Is(err, ErrUnconfirmed), "got %v, want ErrNotHeld or ErrUnconfirmed", err)
		})
	}
}

// guardSample is one synthetic observation for nodeGuard.observe: the local
// time the request went out, its round trip, and how far the node's clock is
// from a fixed origin when it answered.
type guardSample struct {
	sent time.Duration // local time since the origin
	rtt  time.Duration
	node time.Duration // node time since the origin
}

// observeSamples feeds samples to a fresh guard, with an INFO text of a node
// that has been up for a day and never restarts, and returns the error of
// the last one.
func observeSamples(t *testing.T, maxTTL time.Duration, factor float64, samples ...guardSample) error {
	t.Helper()
	var (
		g     nodeGuard
		n     = &node{index: 0, addr: "fake:6379"}
		log   = slog.New(slog.DiscardHandler)
		local = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		clock = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(7 * time.Minute) // any offset
		err   error
	)
	for _, s := range samples {
		sent := local.Add(s.sent)
		recv := sent.Add(s.rtt)
		uptime := 24*time.Hour + s.sent
		info := fmt.Sprintf("# Server\r\nrun_id:abc123\r\nuptime_in_seconds:%d\r\n", int64(uptime/time.Second))
		err = g.observe(n, info, nil, clock.Add(s.node), nil, sent, recv, maxTTL, factor, log)
	}
	return err
}

// TestGuardClockAllowanceScalesWithGap checks that the clock-jump allowance
// grows with the time between two samples, so that an idle node's normal
// drift is not taken for a jump, while a real jump still is.
func TestGuardClockAllowanceScalesWithGap(t *testing.T) {
	const (
		ttl    = 10 * time.Second
		factor = 0.01 // 36 s over an hour
		rtt    = time.Millisecond
	)
	tests := []struct {
		name       string
		gap        time.Duration // local time between the two samples
		nodeMoved  time.Duration // how far the node's clock moved meanwhile
		quarantine bool
	}{
		{"idle hour, node half the factor fast", time.Hour, time.Hour + 18*time.Second, false},
		{"idle hour, node half the factor slow", time.Hour, time.Hour - 18*time.Second, false},
		{"short gap, small drift", 100 * time.Millisecond, 100*time.Millisecond + 50*time.Millisecond, false},
		{"short gap, jump of two TTLs", 100 * time.Millisecond, 100*time.Millisecond + 2*ttl, true},
		{"short gap, jump just over the fixed allowance", time.Second, time.Second + 150*time.Millisecond, true},
		{"idle hour, jump of ten minutes", time.Hour, time.Hour + 10*time.Minute, true},
		{"idle hour, jump back of ten minutes", time.Hour, time.Hour - 10*time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := observeSamples(t, ttl, factor,
				guardSample{sent: 0, rtt: rtt, node: 0},
				guardSample{sent: tt.gap, rtt: rtt, node: tt.nodeMoved},
			)
			if !tt.quarantine {
				require.NoError(t, err, "got %v, want no quarantine: drift within the factor over the gap is not a jump", err)
				return
			}
			require.ErrorIs(t, err, ErrQuarantined, "got %v, want a quarantine", err)
			require.Contains(t, err.Error(), "clock jumped by", "got %q, want a clock jump", err)
		})
	}
}
