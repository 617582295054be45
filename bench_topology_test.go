package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/redistest"
)

// BenchmarkTopology measures lock+unlock on each deployment of
// docs/DEPLOYMENT.md, on real servers of this machine: five single
// masters; five Redis Clusters of three masters; five masters with a
// replica each, with and without WithReplicaAck(1); the same under
// Sentinel, through FailoverClients, with WithReplicaAck(1). For each it
// reports the sequential p50 and the ops/s of 32 goroutines on 64 keys.
//
//	go test -run '^$' -bench Topology -benchtime 3s .
func BenchmarkTopology(b *testing.B) {
	redistest.Require(b)
	type topology struct {
		name  string
		nodes func(b *testing.B) []redis.UniversalClient
		opts  []Option
	}
	singles := func(b *testing.B) []redis.UniversalClient {
		cs := make([]redis.UniversalClient, 5)
		for i, s := range redistest.StartN(b, 5, redistest.Options{}) {
			cs[i] = s.NewClient(b)
		}
		return cs
	}
	clusters := func(b *testing.B) []redis.UniversalClient { _, cs := clusterNodes(b, 5); return cs }
	replicated := func(b *testing.B) []redis.UniversalClient { return masterClients(startReplicas(b, 5, false)) }
	sentinel := func(b *testing.B) []redis.UniversalClient {
		nodes := startReplicas(b, 5, false)
		return failoverClients(b, startSentinel(b, nodes), len(nodes))
	}
	for _, tp := range []topology{
		{"5-masters", singles, nil},
		{"5-clusters", clusters, nil},
		{"5-masters-with-replicas", replicated, nil},
		{"5-masters-with-replicas-ack", replicated, []Option{WithReplicaAck(1)}},
		{"5-sentinel-ack", sentinel, []Option{WithReplicaAck(1)}},
	} {
		b.Run(tp.name, func(b *testing.B) {
			cs := tp.nodes(b)
			c := newClient(b, cs, append([]Option{WithTTL(10 * time.Second), WithNodeTimeout(100 * time.Millisecond)}, tp.opts...)...)
			ctx := context.Background()
			b.Run("sequential", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for i := 0; b.Loop(); i++ {
					start := time.Now()
					l, err := c.TryLock(ctx, fmt.Sprintf("seq:%d", i%64))
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			})
			b.Run("parallel-32", func(b *testing.B) {
				var n, next atomic.Int64
				var wg sync.WaitGroup
				stop := make(chan struct{})
				b.ResetTimer()
				start := time.Now()
				for range 32 {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							key := fmt.Sprintf("par:%d", next.Add(1)%64)
							l, err := c.TryLock(ctx, key)
							if err != nil {
								continue // another goroutine holds the key
							}
							_ = l.Unlock(ctx)
							n.Add(1)
						}
					})
				}
				for n.Load() < int64(b.N) {
					time.Sleep(time.Millisecond)
				}
				close(stop)
				wg.Wait()
				b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "ops/s")
			})
		})
	}
}
