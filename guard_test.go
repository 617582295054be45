package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

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

// TestGuardCoversExtendedTTL holds a lock on exactly the quorum of three
// real nodes, acquired with a 1s TTL and extended to 20s, restarts one of its
// two nodes empty, and has a second caller try the key for five seconds. The
// restarted node's yes and the free node's would make a quorum: the guard
// must keep the restarted node out for the 20s the extension asked for, not
// for the acquisition's 1s. The second caller is the holder's own Client, or
// another Client that has extended a lock of its own as long (the bound is
// per Client: one that never sent a 20s TTL cannot know of it).
func TestGuardCoversExtendedTTL(t *testing.T) {
	for _, sameClient := range []bool{true, false} {
		name := "second Client that extends as long"
		if sameClient {
			name = "same Client"
		}
		t.Run(name, func(t *testing.T) {
			redistest.Require(t)
			const (
				ttl      = time.Second
				extended = 20 * time.Second
				key      = "guard-extended"
			)
			srv := redistest.StartN(t, 3, redistest.Options{})
			opts := []Option{WithNodeGuard(true), WithTTL(ttl), WithNodeTimeout(200 * time.Millisecond)}
			clients := realClients(t, srv, 2, opts...)
			holder, second := clients[0], clients[1]
			if sameClient {
				second = holder
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// Each Client samples every node first. The guard keeps freshly
			// started nodes out until they have been up for the max TTL, so
			// Lock waits for that.
			for _, c := range clients {
				warm, err := c.Lock(ctx, "warm-up")
				require.NoError(t, err)
				if c != holder {
					require.NoError(t, warm.Extend(ctx, WithTTL(extended)))
				}
				require.NoError(t, warm.Unlock(t.Context()))
			}

			// A foreign value on node 2 leaves the holder nodes 0 and 1:
			// exactly the quorum. Node 2 is then freed.
			direct := make([]*redis.Client, len(srv))
			for i, s := range srv {
				direct[i] = s.NewClient(t)
			}
			require.NoError(t, direct[2].Set(ctx, key, "foreign", time.Minute).Err())
			// Without the top-up, which would add node 2 at the Extend
			// below: the guard is what this test is about.
			held, err := holder.Lock(ctx, key, WithTopUp(false))
			require.NoError(t, err)
			// Lock returns at the quorum: the acquisition's request to node
			// 2 may still be on its way, and would take the key there if it
			// landed after the foreign value is gone.
			a := held.att.a
			require.Eventually(t, func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.busy[2] == 0
			}, 10*time.Second, time.Millisecond, "the acquisition's request to node 2 never returned")
			require.NoError(t, direct[2].Del(ctx, key).Err())
			require.NoError(t, held.Extend(ctx, WithTTL(extended)))
			require.Greater(t, time.Until(held.Until()), extended/2, "got Until %v ahead, want about %v", time.Until(held.Until()), extended)
			for _, i := range []int{0, 1} {
				pttl, err := direct[i].PTTL(ctx, key).Result()
				require.NoError(t, err)
				require.Greater(t, pttl, extended/2, "node %d: got PTTL %v, want about %v", i, pttl, extended)
			}
			require.ErrorIs(t, direct[2].Get(ctx, key).Err(), redis.Nil, "node 2 holds the key: the holder must hold exactly nodes 0 and 1")

			restarted := time.Now()
			srv[0].RestartEmpty()
			// Well past the 1s TTL plus the second the uptime's rounding
			// may add to the quarantine.
			quarantined := 0
			for time.Since(restarted) < 5*time.Second {
				l, err := second.TryLock(t.Context(), key)
				if err == nil {
					at, left := time.Since(restarted), time.Until(held.Until())
					_ = l.Unlock(t.Context())
					t.Fatalf("a second holder got the key %v after node 0 restarted empty, with the first valid for %v more", at.Round(time.Millisecond), left.Round(time.Millisecond))
				}
				require.ErrorIs(t, err, ErrNotAcquired)
				if errors.Is(err, ErrQuarantined) {
					quarantined++
				}
				time.Sleep(50 * time.Millisecond)
			}
			require.Positive(t, quarantined, "got no quarantined vote, want node 0 quarantined")
			require.True(t, time.Now().Before(held.Until()), "the holder's validity ended during the test: it proves nothing")

			// The holder keeps only node 1: Extend says so, and leaves Until
			// alone.
			until := held.Until()
			err = held.Extend(t.Context())
			require.ErrorIs(t, err, ErrNotHeld, "got %v, want ErrNotHeld; votes %+v", err, held.Stats().Nodes)
			require.True(t, held.Until().Equal(until), "got Until %v, want it unchanged at %v", held.Until(), until)
			err = held.Unlock(t.Context())
			require.True(t, errors.Is(err, ErrNotHeld) || errors.Is(err, ErrUnconfirmed), "got %v, want ErrNotHeld or ErrUnconfirmed", err)
		})
	}
}

// ttlSends records, for every command sent to a node, its arguments and
// the Client's max TTL at the moment it went out.
type ttlSends struct {
	c    atomic.Pointer[Client]
	mu   sync.Mutex
	sent []ttlSend // guarded by mu
}

type ttlSend struct {
	nums  []int64 // the command's int64 arguments, TTLs among them
	bound time.Duration
}

func (h *ttlSends) record(cmds ...redis.Cmder) {
	c := h.c.Load()
	if c == nil {
		return
	}
	bound := c.maxTTL()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cmd := range cmds {
		// Only the plain numbers: other arguments may be buffers that
		// go-redis writes while it sends.
		var nums []int64
		for _, a := range cmd.Args() {
			if n, ok := a.(int64); ok {
				nums = append(nums, n)
			}
		}
		h.sent = append(h.sent, ttlSend{nums: nums, bound: bound})
	}
}

func (h *ttlSends) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ttlSends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}
func (h *ttlSends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// bounds returns the max TTL at the send of every command that carried ttl,
// in milliseconds, as an argument.
func (h *ttlSends) bounds(ttl time.Duration) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for _, s := range h.sent {
		if slices.Contains(s.nums, ttl.Milliseconds()) {
			out = append(out, s.bound)
		}
	}
	return out
}

// TestMaxTTLRaisedBeforeEveryTTLSent checks each path that sends a TTL to a
// node: the guard's max TTL already covers the TTL when the request goes
// out. Each path runs on a fresh Client whose bound is its 1s default, and
// sends an odd number of milliseconds that nothing else sends.
func TestMaxTTLRaisedBeforeEveryTTLSent(t *testing.T) {
	const ttl = 4307 * time.Millisecond
	paths := []struct {
		name string
		send func(t *testing.T, c *Client, h *ttlSends) *Lock // returns a lock to unlock
	}{
		{"TryLock WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			l, err := c.TryLock(t.Context(), "k", WithTTL(ttl))
			require.NoError(t, err)
			return l
		}},
		{"Extend WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			l, err := c.TryLock(t.Context(), "k")
			require.NoError(t, err)
			require.NoError(t, l.Extend(t.Context(), WithTTL(ttl)))
			return l
		}},
		{"semaphore TryAcquire WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			sem, err := c.Semaphore("k", 2)
			require.NoError(t, err)
			p, err := sem.TryAcquire(t.Context(), WithTTL(ttl))
			require.NoError(t, err)
			return p
		}},
		{"semaphore Extend WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			sem, err := c.Semaphore("k", 2)
			require.NoError(t, err)
			p, err := sem.TryAcquire(t.Context())
			require.NoError(t, err)
			require.NoError(t, p.Extend(t.Context(), WithTTL(ttl)))
			return p
		}},
		{"TryRLock WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			r, err := c.TryRLock(t.Context(), "k", WithTTL(ttl))
			require.NoError(t, err)
			return r
		}},
		{"reader Extend WithTTL", func(t *testing.T, c *Client, _ *ttlSends) *Lock {
			r, err := c.TryRLock(t.Context(), "k")
			require.NoError(t, err)
			require.NoError(t, r.Extend(t.Context(), WithTTL(ttl)))
			return r
		}},
		{"renewal", func(t *testing.T, c *Client, h *ttlSends) *Lock {
			// A renewal sends the lock's TTL, whatever set it. Set it
			// behind the back of every call that could raise the bound,
			// so that only the renewal itself can. The first renewal is
			// due a third of 3s after the acquisition.
			l, err := c.TryLock(t.Context(), "k", WithAutoExtend(true), WithTTL(3*time.Second))
			require.NoError(t, err)
			l.mu.Lock()
			l.ttl = ttl
			l.mu.Unlock()
			require.Eventually(t, func() bool { return len(h.bounds(ttl)) > 0 }, 10*time.Second, time.Millisecond,
				"no renewal sent the lock's TTL of %v", ttl)
			return l
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			h := &ttlSends{}
			_, cs := minis(t, 3, h)
			c := newClient(t, cs, WithTTL(time.Second), WithNodeTimeout(200*time.Millisecond))
			h.c.Store(c)
			l := p.send(t, c, h)
			got := h.bounds(ttl)
			require.NotEmpty(t, got, "no command carried the TTL %v", ttl)
			for _, b := range got {
				require.GreaterOrEqual(t, b, ttl, "got max TTL %v when a TTL of %v was sent, want at least the TTL", b, ttl)
			}
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}
