package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redlockgo/redlock"
)

// renewResult is the renewal measure (g).
type renewResult struct {
	locks      int
	ttl        time.Duration
	takers     int           // goroutines that take and release the locks
	acquire    time.Duration // to take all the locks
	window     time.Duration
	idleCPU    float64   // process CPU seconds per second, before any lock
	cpu        float64   // process CPU seconds per second while holding them
	reads      []float64 // per node: read events per second (total_reads_processed), one per batch the client wrote
	cmds       []float64 // per node: commands per second (total_commands_processed)
	serverCPU  []float64 // per node: redis-server CPU seconds per second
	lost       int       // locks whose Done closed during the window
	unlockErrs int
	// firstUnlockErr is the first Unlock error, if any.
	firstUnlockErr string
}

// processCPU returns the user plus system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// takers is how many goroutines take, and later release, the locks of the
// renewal measure. Fewer than the parallel measure's 32: the renewals of the
// first locks start while the last are still being taken, and the point is
// to measure the renewals, not a saturated machine.
const takers = 8

// renewals has one Client hold n auto-extended locks and measures what
// keeping them costs over the window: this process's CPU (getrusage), the
// batches (read events) and commands each node processed (INFO stats), and
// each redis-server's CPU (INFO cpu).
func renewals(ctx context.Context, cl *cluster, nodes, n int, ttl, window time.Duration, logf func(string, ...any)) (*renewResult, error) {
	cs := newClientSet(cl.addrs(nodes))
	defer cs.close()
	c, err := redlock.New(cs.universal(), redlock.WithTTL(ttl), redlock.WithAutoExtend(true))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := &renewResult{locks: n, ttl: ttl, window: window, takers: takers}

	// Warm the pools, then take the idle baseline.
	for i := range 50 {
		l, err := c.Lock(ctx, "g:warm:"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		_ = l.Unlock(ctx)
	}
	cpu0, t0 := processCPU(), time.Now()
	time.Sleep(time.Second)
	r.idleCPU = (processCPU() - cpu0).Seconds() / time.Since(t0).Seconds()

	locks := make([]*redlock.Lock, n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, takers)
	)
	start := time.Now()
	for range takers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				l, err := c.Lock(ctx, "g:"+strconv.Itoa(i))
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				locks[i] = l
			}
		})
	}
	wg.Wait()
	r.acquire = time.Since(start)
	select {
	case err := <-errs:
		return nil, fmt.Errorf("bench: taking %d locks: %w", n, err)
	default:
	}
	logf("  (g) %d locks taken in %v; measuring %v of renewals", n, r.acquire.Round(time.Millisecond), window)

	// Start the window once the renewals of the first locks are under way.
	time.Sleep(ttl / 3)
	before := cl.counts(ctx, nodes)
	srv0 := cl.serverCPU(ctx, nodes)
	cpu0, t0 = processCPU(), time.Now()
	time.Sleep(window)
	cpu1, el := processCPU(), time.Since(t0)
	srv1 := cl.serverCPU(ctx, nodes)
	// serverCPU's INFO is one more command and read per node, after the
	// counts' own; take them out too.
	d := countsSince(cl.counts(ctx, nodes), before)
	r.cpu = (cpu1 - cpu0).Seconds() / el.Seconds()
	for i := range nodes {
		r.reads = append(r.reads, float64(d[i].reads-2)/el.Seconds())
		r.cmds = append(r.cmds, float64(d[i].cmds)/el.Seconds())
		r.serverCPU = append(r.serverCPU, (srv1[i]-srv0[i]).Seconds()/el.Seconds())
	}
	for _, l := range locks {
		if l.Err() != nil {
			r.lost++
		}
	}

	next.Store(0)
	var (
		uerrs atomic.Int64
		first sync.Once
	)
	for range takers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := locks[i].Unlock(ctx); err != nil {
					uerrs.Add(1)
					first.Do(func() { r.firstUnlockErr = err.Error() })
				}
			}
		})
	}
	wg.Wait()
	r.unlockErrs = int(uerrs.Load())
	return r, nil
}

// renewBefore is the "before" column of the renewal report (g): the same
// measure taken before the pipelined transport of issue 12, with the
// library at the commit its source names, by `go run . -only g` (full
// sizes: 10000 locks, 10 s window) on the 2-core machine, nothing else
// running. Update it by hand; a zero figure prints as n/a.
var renewBefore = struct {
	source       string
	idleCPU, cpu float64 // client CPU seconds per second
	reads, cmds  float64 // per node per second, medians over the nodes
	serverCPU    float64 // redis-server CPU seconds per second, median over the nodes
}{
	source:    "the library at commit 9d0b397, before the pipelined transport (`go run . -only g`, 10 s window, 2026-11-23)",
	idleCPU:   0.0003,
	cpu:       0.1027,
	reads:     74.3,
	cmds:      39998,
	serverCPU: 0.0447,
}
