package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkRWLockWriterWait measures how long a writer waits for a key that
// readers hold continuously: 16 reader goroutines each hold a read lock for
// 2 to 10 ms (drawn from a seeded source, so that the holds do not fall into
// step) and take it again at once, so that some reader nearly always holds
// the key. Each iteration is one writer's Lock, from its call to its
// return; a writer gives up after 2 s, and the give-ups count as 2 s. It
// reports the wait's percentiles with the writer preference (new readers
// wait behind a waiting writer) and without it (a test-only switch).
//
//	go test -run '^$' -bench RWLock -benchtime 50x
func BenchmarkRWLockWriterWait(b *testing.B) {
	for _, pref := range []bool{true, false} {
		b.Run(fmt.Sprintf("preference=%v", pref), func(b *testing.B) {
			cs := benchNodes(b)
			c, err := New(cs, WithTTL(5*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const key, readers, giveUp = "rw:bench", 16, 2 * time.Second
			setHooks(c, testHooks{noWriterPref: !pref})
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for g := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(1, uint64(g)))
					hold := func() time.Duration { return 2*time.Millisecond + time.Duration(rnd.Int64N(int64(8*time.Millisecond))) }
					time.Sleep(hold())
					for ctx.Err() == nil {
						r, err := c.RLock(ctx, key)
						if err != nil {
							continue // ctx ended, or an attempt failed
						}
						time.Sleep(hold())
						_ = r.Unlock(context.Background())
					}
				}()
			}
			time.Sleep(50 * time.Millisecond) // let the readers settle in
			waits := make([]time.Duration, 0, b.N)
			starved := 0
			b.ResetTimer()
			for range b.N {
				wctx, cancel := context.WithTimeout(context.Background(), giveUp)
				start := time.Now()
				w, err := c.Lock(wctx, key)
				waited := time.Since(start)
				cancel()
				if err != nil {
					starved++
					waited = giveUp
				} else {
					time.Sleep(time.Millisecond)
					_ = w.Unlock(context.Background())
				}
				waits = append(waits, waited)
				time.Sleep(10 * time.Millisecond) // readers take the key back
			}
			b.StopTimer()
			stop()
			wg.Wait()
			slices.Sort(waits)
			p := func(q float64) time.Duration { return waits[int(q*float64(len(waits)-1))] }
			b.ReportMetric(float64(p(0.5).Microseconds())/1000, "wait-p50-ms")
			b.ReportMetric(float64(p(0.99).Microseconds())/1000, "wait-p99-ms")
			b.ReportMetric(float64(starved), "gave-up")
			b.Logf("preference=%v writers=%d wait p50=%v p90=%v p99=%v max=%v gave up=%d", pref, len(waits), p(0.5), p(0.9), p(0.99), waits[len(waits)-1], starved)
		})
	}
}
