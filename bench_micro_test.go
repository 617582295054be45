package redlock

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/redistest"
)

// The micro-benchmarks time Lock+Unlock on 5 nodes with the Client's
// defaults, so that a regression in latency or allocations shows in a plain
//
//	go test -run '^$' -bench LockUnlock -benchmem
//
// They run on miniredis always, and on real redis-servers when one can be
// found (redistest.Available); otherwise that half is skipped. They are only
// Benchmark functions, so a plain go test does not run them. The side-by-side
// comparison with redsync and the floor client lives in bench/, a module of
// its own; see docs/PERFORMANCE.md.

const microNodes = 5

// microBackends returns the backends to benchmark on: name and a function
// that starts 5 nodes of it for b.
func microBackends() []struct {
	name  string
	nodes func(b *testing.B) []redis.UniversalClient
} {
	return []struct {
		name  string
		nodes func(b *testing.B) []redis.UniversalClient
	}{
		{"miniredis", microMiniredis},
		{"redis-server", microRedisServer},
	}
}

func microMiniredis(b *testing.B) []redis.UniversalClient {
	b.Helper()
	cs := make([]redis.UniversalClient, microNodes)
	for i := range cs {
		m := miniredis.RunT(b)
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		b.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return cs
}

func microRedisServer(b *testing.B) []redis.UniversalClient {
	_, cs := microServers(b)
	return cs
}

// microServers starts 5 real redis-servers for b, and returns them with a
// client of each; it skips b when redis-server cannot be found.
func microServers(b *testing.B) ([]*redistest.Server, []redis.UniversalClient) {
	b.Helper()
	if !redistest.Available() {
		b.Skip("redis-server not found: install it or set REDIS_SERVER to run the real-Redis benchmarks")
	}
	srv := redistest.StartN(b, microNodes, redistest.Options{})
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(b)
	}
	return srv, cs
}

// microClient returns a Client with the defaults on n fresh nodes, closed by
// b.Cleanup, after a few cycles that dial the pools and load the scripts.
func microClient(b *testing.B, nodes []redis.UniversalClient) *Client {
	b.Helper()
	c, err := New(nodes)
	if err != nil {
		b.Fatalf("New: got %v, want no error", err)
	}
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	for i := range 20 {
		l, err := c.Lock(ctx, "micro:warm:"+strconv.Itoa(i))
		if err != nil {
			b.Fatalf("Lock: got %v, want no error", err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: got %v, want no error", err)
		}
	}
	return c
}

// BenchmarkLockUnlock is one goroutine taking and releasing a new key each
// time: the latency of (a) in docs/PERFORMANCE.md, and its allocations (e).
func BenchmarkLockUnlock(b *testing.B) {
	for _, be := range microBackends() {
		b.Run(be.name, func(b *testing.B) {
			lockUnlockLoop(b, microClient(b, be.nodes(b)), "micro:seq:")
		})
	}
}

// lockUnlockLoop times b.N sequential Lock+Unlock cycles of c, each on a
// new key under prefix.
func lockUnlockLoop(b *testing.B, c *Client, prefix string) {
	b.Helper()
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l, err := c.Lock(ctx, keys[i])
		if err != nil {
			b.Fatalf("Lock: got %v, want no error", err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: got %v, want no error", err)
		}
	}
}

// BenchmarkLockUnlockParallel is GOMAXPROCS×8 goroutines, each on its own
// keys: the throughput of (b) in docs/PERFORMANCE.md.
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, be := range microBackends() {
		b.Run(be.name, func(b *testing.B) {
			c := microClient(b, be.nodes(b))
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			var ids atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				prefix := "micro:par:" + strconv.FormatInt(ids.Add(1), 10) + ":"
				for i := 0; pb.Next(); i++ {
					l, err := c.Lock(ctx, prefix+strconv.Itoa(i))
					if err != nil {
						b.Errorf("Lock: got %v, want no error", err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Errorf("Unlock: got %v, want no error", err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLockUnlockPaused is BenchmarkLockUnlock on 5 real redis-servers,
// one of them stopped with SIGSTOP after the warm-up: the latency of (d) in
// docs/PERFORMANCE.md, where the library must decide without the hung node
// at no cost to the caller.
func BenchmarkLockUnlockPaused(b *testing.B) {
	srv, nodes := microServers(b)
	c := microClient(b, nodes)
	// Cleanups run last-in first-out: the node resumes before the Client
	// closes, so that Close does not wait out the paused requests.
	paused := srv[microNodes-1]
	paused.Pause()
	b.Cleanup(paused.Resume)
	lockUnlockLoop(b, c, "micro:paused:")
}
