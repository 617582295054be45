package redlockgocron_test

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis's pool retries a failed dial from a goroutine of its own,
	// which sees the pool closed only after its next second of sleep (see
	// the root package's TestMain).
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

const (
	// ttl is the locks' TTL in the real-server tests: short, so that a
	// takeover after a crash is quick, and long enough for renewals on a
	// busy machine.
	ttl = 2 * time.Second
	// splay is the tests' WithSplay: the two schedulers run in one
	// process, so their triggers differ only by how late each fires.
	splay = 400 * time.Millisecond
	// tickTimeout bounds each wait for ticks; a healthy run needs a few
	// seconds, a loaded machine more.
	tickTimeout = 30 * time.Second
)

// startServers starts 5 real redis-servers, the nodes of every scheduler
// in the test.
func startServers(t *testing.T) []*redistest.Server {
	t.Helper()
	return redistest.StartN(t, 5, redistest.Options{})
}

// newClient returns a redlock Client on go-redis clients of its own, as a
// scheduler in another process would have. A cleanup closes it (a second
// Close is harmless).
func newClient(t *testing.T, servers []*redistest.Server) *redlock.Client {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		nodes[i] = s.NewClient(t)
	}
	c, err := redlock.New(nodes, redlock.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startMinis starts 5 in-process miniredis nodes, for the fast tests.
func startMinis(t *testing.T) []*miniredis.Miniredis {
	t.Helper()
	ms := make([]*miniredis.Miniredis, 5)
	for i := range ms {
		ms[i] = miniredis.RunT(t)
	}
	return ms
}

// newMiniClient returns a redlock Client on go-redis clients of its own for
// the miniredis nodes ms. A cleanup closes it.
func newMiniClient(t *testing.T, ms []*miniredis.Miniredis) *redlock.Client {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(ms))
	for i, m := range ms {
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rc.Close() })
		nodes[i] = rc
	}
	c, err := redlock.New(nodes, redlock.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ticks records which scheduler ran each tick of the job "tick". A tick is
// the second its run started in: the job fires on every second, so a run
// more than a second late would count for the next tick.
type ticks struct {
	mu   sync.Mutex
	runs map[time.Time][]string // guarded by mu; tick -> schedulers, in run order
}

func newTicks() *ticks { return &ticks{runs: map[time.Time][]string{}} }

func (r *ticks) record(who string) {
	now := time.Now().Truncate(time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[now] = append(r.runs[now], who)
}

// snapshot returns a copy of the runs.
func (r *ticks) snapshot() map[time.Time][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[time.Time][]string, len(r.runs))
	for k, v := range r.runs {
		out[k] = slices.Clone(v)
	}
	return out
}

// count returns how many distinct ticks at or after from who ran; who ""
// counts every scheduler's.
func (r *ticks) count(who string, from time.Time) int {
	n := 0
	for tick, by := range r.snapshot() {
		if !tick.Before(from) && (who == "" || slices.Contains(by, who)) {
			n++
		}
	}
	return n
}

// waitFor waits until who ("" for any scheduler) has run n ticks at or
// after from.
func (r *ticks) waitFor(t *testing.T, who string, n int, from time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return r.count(who, from) >= n }, tickTimeout, 50*time.Millisecond,
		"waited %v for %d ticks of %q from %s; got %s", tickTimeout, n, who, from.Format("15:04:05.000"), r)
}

// last returns the latest tick and the scheduler that ran it first.
func (r *ticks) last() (time.Time, string) {
	runs := r.snapshot()
	if len(runs) == 0 {
		return time.Time{}, ""
	}
	tick := slices.MaxFunc(slices.Collect(maps.Keys(runs)), time.Time.Compare)
	return tick, runs[tick][0]
}

// first returns the earliest tick who ran at or after from, and whether
// there is one.
func (r *ticks) first(who string, from time.Time) (time.Time, bool) {
	var out time.Time
	for tick, by := range r.snapshot() {
		if slices.Contains(by, who) && !tick.Before(from) && (out.IsZero() || tick.Before(out)) {
			out = tick
		}
	}
	return out, !out.IsZero()
}

// latest returns the latest tick who ran, zero when none.
func (r *ticks) latest(who string) time.Time {
	var out time.Time
	for tick, by := range r.snapshot() {
		if slices.Contains(by, who) && tick.After(out) {
			out = tick
		}
	}
	return out
}

// requireOnce fails t for every tick that ran more than once.
func (r *ticks) requireOnce(t *testing.T) {
	t.Helper()
	for tick, by := range r.snapshot() {
		if len(by) > 1 {
			t.Errorf("tick %s ran %d times, by %v; want once\nall runs: %s", tick.Format("15:04:05"), len(by), by, r)
		}
	}
}

// String lists the runs in tick order, for failure messages.
func (r *ticks) String() string {
	runs := r.snapshot()
	var b strings.Builder
	for _, tick := range slices.SortedFunc(maps.Keys(runs), time.Time.Compare) {
		b.WriteString(tick.Format("15:04:05") + "=" + strings.Join(runs[tick], "+") + " ")
	}
	return b.String()
}

// startScheduler starts a gocron scheduler named who with one job, "tick",
// which fires on every second and records its run in rec. opts set the
// distribution (a Locker or an Elector). A cleanup shuts it down, if
// stop has not.
func startScheduler(t *testing.T, who string, rec *ticks, opts ...gocron.SchedulerOption) (stop func()) {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	require.NoError(t, err)
	_, err = s.NewJob(
		gocron.CronJob("* * * * * *", true),
		gocron.NewTask(func() { rec.record(who) }),
		gocron.WithName("tick"),
	)
	require.NoError(t, err)
	s.Start()
	var once sync.Once
	stop = func() {
		once.Do(func() { require.NoError(t, s.Shutdown(), "scheduler %s: Shutdown", who) })
	}
	t.Cleanup(stop)
	return stop
}
