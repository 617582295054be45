package redlock

import (
	"bytes"
	"context"
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
	// Learn the clocks.
	for range 3 {
		l, err := c.TryLock(t.Context(), "jump")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	}
	require.Contains(t, logs.String(), "INFO server failed", "miniredis has no INFO server: the guard says it cannot watch restarts")

	// Node 0's clock jumps 5s ahead: its yes no longer counts.
	ms[0].SetTime(time.Now().Add(5 * time.Second))
	l, err := c.TryLock(t.Context(), "jump")
	require.NoError(t, err, "four nodes are enough")
	v := l.Stats().Nodes[0]
	if v.Vote == VoteFailed && !errorsIsNoAnswer(v.Err) {
		require.ErrorIs(t, v.Err, ErrQuarantined)
		require.Contains(t, v.Err.Error(), "clock jumped by")
	}
	require.Eventually(t, func() bool { return c.nodes[0].guard.status(time.Now()) != nil }, 5*time.Second, time.Millisecond)
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

func errorsIsNoAnswer(err error) bool {
	return err == ErrNoAnswer
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
			fresh := realClients(t, srv, 1, opts...)[0]
			_, err = fresh.TryLock(t.Context(), "restart")
			require.ErrorIs(t, err, ErrQuarantined)
			require.Contains(t, err.Error(), "less than the max TTL")
			// The restart took the lock from a majority: it is lost.
			require.ErrorIs(t, held.Unlock(t.Context()), ErrNotHeld)
		})
	}
}
