package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// keysFor returns n distinct keys under prefix, built before any timing so
// that the harness's own allocations stay out of the measures.
func keysFor(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	return keys
}

// warm runs a few lock+unlock cycles so that pools are dialled, scripts are
// loaded and the runtime has settled before a measure.
func warm(ctx context.Context, cs []*contender, tag string, n int) {
	for _, c := range cs {
		lat := make([]time.Duration, n)
		seqOps(ctx, c, keysFor("warm:"+tag+":"+c.name, n), lat, nil, 0, nil)
	}
}

// seqOps runs lock+unlock on each key in turn from one goroutine and writes
// each cycle's latency into lat, and the Lock call's alone into lockLat
// when it is not nil. With a budget it stops once the budget is spent. It
// returns how many cycles ran, and counts the failures into errs.
func seqOps(ctx context.Context, c *contender, keys []string, lat, lockLat []time.Duration, budget time.Duration, errs *errCount) int {
	begin := time.Now()
	for i, k := range keys {
		if budget > 0 && i > 0 && time.Since(begin) > budget {
			return i
		}
		t0 := time.Now()
		h, err := c.lock(ctx, k)
		if lockLat != nil {
			lockLat[i] = time.Since(t0)
		}
		if err != nil {
			errs.lockFailed(err)
		} else if err := h.Unlock(ctx); err != nil {
			errs.unlockFailed(err)
		}
		lat[i] = time.Since(t0)
	}
	return len(keys)
}

// errCount counts failed Lock and Unlock calls, by kind (see errKind), and
// keeps the first error of each call to show in the report. It is safe for
// concurrent use; a nil *errCount counts nothing.
type errCount struct {
	mu                  sync.Mutex
	lock, unlock        int            // guarded by mu
	firstLock, firstUnl string         // guarded by mu
	lockKinds, unlKinds map[string]int // guarded by mu
}

func (e *errCount) lockFailed(err error) {
	if e == nil {
		return
	}
	k := errKind(err)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lock++
	if e.lock == 1 {
		e.firstLock = err.Error()
		e.lockKinds = map[string]int{}
	}
	e.lockKinds[k]++
}

func (e *errCount) unlockFailed(err error) {
	if e == nil {
		return
	}
	k := errKind(err)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unlock++
	if e.unlock == 1 {
		e.firstUnl = err.Error()
		e.unlKinds = map[string]int{}
	}
	e.unlKinds[k]++
}

func (e *errCount) total() int {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lock + e.unlock
}

// unlocks is the number of failed Unlock calls.
func (e *errCount) unlocks() int {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unlock
}

// String reads "3 (Lock 1, Unlock 2)", or "0".
func (e *errCount) String() string {
	if e.total() == 0 {
		return "0"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprintf("%d (Lock %d, Unlock %d)", e.lock+e.unlock, e.lock, e.unlock)
}

// pingOne measures single PINGs on one node.
func pingOne(ctx context.Context, rc *redis.Client, n int) []time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		t0 := time.Now()
		_ = rc.Ping(ctx).Err()
		lat[i] = time.Since(t0)
	}
	return lat
}

// pingQuorum sends PING to every node at once, one goroutine each as the
// floor does, and measures the time to the quorum-th reply: one round trip
// of a quorum fan-out, the unit the floor pays twice per lock+unlock.
func pingQuorum(ctx context.Context, rcs []*redis.Client, n int) []time.Duration {
	q := len(rcs)/2 + 1
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range lat {
		ch := make(chan struct{}, len(rcs))
		t0 := time.Now()
		for _, rc := range rcs {
			wg.Go(func() {
				_ = rc.Ping(ctx).Err()
				ch <- struct{}{}
			})
		}
		for range q {
			<-ch
		}
		lat[i] = time.Since(t0)
	}
	wg.Wait()
	return lat
}

// parResult is one round of the parallel measure.
type parResult struct {
	ops        int
	perSec     float64
	lat        latencies
	readsPerOp float64 // read events on the servers per lock+unlock: batches the client wrote
}

// parallel runs g goroutines doing lock+unlock on distinct keys for d.
func parallel(ctx context.Context, c *contender, g int, d time.Duration, prefix string, errs *errCount) parResult {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		lats  = make([][]time.Duration, g)
	)
	for w := range g {
		lats[w] = make([]time.Duration, 0, 1024)
		wg.Go(func() {
			buf := []byte(prefix + ":" + strconv.Itoa(w) + ":")
			base := len(buf)
			<-start
			deadline := time.Now().Add(d)
			for i := 0; ; i++ {
				key := string(strconv.AppendInt(buf[:base], int64(i), 10))
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				h, err := c.lock(ctx, key)
				if err != nil {
					errs.lockFailed(err)
				} else if err := h.Unlock(ctx); err != nil {
					errs.unlockFailed(err)
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	all := slices.Concat(lats...)
	return parResult{
		ops:    len(all),
		perSec: float64(len(all)) / elapsed.Seconds(),
		lat:    summarise(all),
	}
}

// tenure is one hold of the contended lock.
type tenure struct {
	g         int       // the goroutine that held it
	waitStart time.Time // when it began to ask for the lock
	acquired  time.Time // when Lock returned
	unlocking time.Time // when it called Unlock
	unlocked  time.Time // when Unlock returned
}

// contResult is one round of the contended measure.
type contResult struct {
	acquisitions  int     // within the window
	perSec        float64 // acquisitions per second of the window
	total         int     // all acquisitions, the drain after the window included
	failedCalls   int     // Lock calls that gave up (redsync's 32 tries)
	waitP50       time.Duration
	waitP99       time.Duration
	waitMax       time.Duration
	gapP50        time.Duration // Unlock returned → a different goroutine acquired
	gapP99        time.Duration
	handoffs      int     // consecutive pairs with a different holder
	sameShare     float64 // share of consecutive pairs with the same holder
	minPer        int     // fewest acquisitions by one goroutine
	maxPer        int     // most acquisitions by one goroutine
	overlaps      int     // an acquisition before the previous holder called Unlock
	cmdsPerAcq    float64 // commands the servers processed per acquisition, those scripts ran included
	sentPerAcq    float64 // commands the client sent per acquisition (hooks, plus SUBSCRIBE and UNSUBSCRIBE)
	cmdBreakdown  map[string]float64
	unlockErrs    int
	unlockReturns time.Duration // median Unlock duration
}

// contended runs g goroutines on one key: each asks for the lock, holds it
// for hold, unlocks, and asks again at once. Goroutines stop asking at the
// end of the window; a goroutine already waiting then still gets its turn,
// so that the long waits are measured rather than cut off.
func contended(ctx context.Context, cl *cluster, nodes int, c *contender, g int, hold, d time.Duration, key string) contResult {
	var (
		mu      sync.Mutex
		tenures []tenure
		failed  atomic.Int64
		uerrs   atomic.Int64
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	// Waiters get at most this long after the window; only a broken
	// contender needs it.
	hard, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()

	before := cl.counts(ctx, nodes)
	c.clients.countSent(true)
	sent := c.clients.sentSoFar()
	var windowEnd time.Time
	for w := range g {
		wg.Go(func() {
			<-start
			for time.Now().Before(windowEnd) {
				t := tenure{g: w, waitStart: time.Now()}
				var h held
				for {
					var err error
					if h, err = c.lockAs(hard, w, key); err == nil {
						break
					}
					if hard.Err() != nil {
						return
					}
					failed.Add(1) // redsync gave up after its tries: ask again
				}
				t.acquired = time.Now()
				time.Sleep(hold)
				t.unlocking = time.Now()
				if err := h.Unlock(ctx); err != nil {
					uerrs.Add(1)
				}
				t.unlocked = time.Now()
				mu.Lock()
				tenures = append(tenures, t)
				mu.Unlock()
			}
		})
	}
	begin := time.Now()
	windowEnd = begin.Add(d)
	close(start)
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // let UNSUBSCRIBE reach the servers
	sent = c.clients.sentSoFar() - sent
	c.clients.countSent(false)
	delta := total(countsSince(cl.counts(ctx, nodes), before))

	slices.SortFunc(tenures, func(a, b tenure) int { return a.acquired.Compare(b.acquired) })
	r := contResult{total: len(tenures), failedCalls: int(failed.Load()), unlockErrs: int(uerrs.Load())}
	per := make([]int, g)
	var waits, gaps, unl []time.Duration
	same, pairs := 0, 0
	for i, t := range tenures {
		if !t.waitStart.After(windowEnd) {
			waits = append(waits, t.acquired.Sub(t.waitStart))
		}
		unl = append(unl, t.unlocked.Sub(t.unlocking))
		if t.acquired.After(windowEnd) {
			continue
		}
		r.acquisitions++
		per[t.g]++
		if i == 0 {
			continue
		}
		prev := tenures[i-1]
		if t.acquired.Before(prev.unlocking) {
			r.overlaps++
		}
		pairs++
		if t.g == prev.g {
			same++
			continue
		}
		gaps = append(gaps, t.acquired.Sub(prev.unlocked))
	}
	r.perSec = float64(r.acquisitions) / d.Seconds()
	r.waitP50, r.waitP99, r.waitMax = pct(waits, 50), pct(waits, 99), pct(waits, 100)
	r.gapP50, r.gapP99 = pct(gaps, 50), pct(gaps, 99)
	r.handoffs = len(gaps)
	if pairs > 0 {
		r.sameShare = float64(same) / float64(pairs)
	}
	r.minPer, r.maxPer = slices.Min(per), slices.Max(per)
	r.unlockReturns = pct(unl, 50)
	if r.total > 0 {
		r.cmdsPerAcq = float64(delta.cmds) / float64(r.total)
		// The hooks miss pub/sub commands, which no script runs.
		r.sentPerAcq = float64(sent+delta.byName["subscribe"]+delta.byName["unsubscribe"]) / float64(r.total)
		r.cmdBreakdown = make(map[string]float64)
		for k, v := range delta.byName {
			r.cmdBreakdown[k] = float64(v) / float64(r.total)
		}
	}
	return r
}

// allocResult is one round of the allocation measure.
type allocResult struct {
	allocs, bytes float64 // per lock+unlock
}

// allocations counts heap allocations and bytes per lock+unlock, over every
// goroutine of the process: the library's request goroutines are part of
// the cost. The keys are built beforehand.
func allocations(ctx context.Context, c *contender, keys []string) allocResult {
	lat := make([]time.Duration, len(keys))
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	seqOps(ctx, c, keys, lat, nil, 0, nil)
	// The replies of the slowest nodes to the last cycle belong to it.
	time.Sleep(20 * time.Millisecond)
	runtime.ReadMemStats(&m1)
	n := float64(len(keys))
	return allocResult{
		allocs: float64(m1.Mallocs-m0.Mallocs) / n,
		bytes:  float64(m1.TotalAlloc-m0.TotalAlloc) / n,
	}
}

// roundName names one round of a measure in the progress output.
func roundName(measure string, round, rounds int) string {
	return fmt.Sprintf("%s round %d/%d", measure, round+1, rounds)
}
