package redlock

// The mixed workload of the chaos suite: a seeded, model-based mix of every
// kind of hold the library offers, on keys that look alike, from Clients
// whose callbacks misbehave, while other Clients are closed with their calls
// in flight. A scenario runs it with chaosScenario.mix; the checker reads
// the history it records (chaos_check_test.go). TestChaosClusterNodes
// (cluster_test.go) runs it on Redis Cluster nodes. Run its scenarios, and
// its negative control, with:
//
//	go test -race -count=1 -run '^TestChaos$/^(mix-|control-mix-)' -v .
//	go test -race -count=1 -run '^TestChaos$/^mix-late-delivery$' -v . -chaos.seed=1234
//
// Each worker draws, again and again, from its own generator:
//   - what to take: a plain, fenced, multi-key or owner lock (reentrant, and
//     sometimes nested), a reader or a writer, a permit of a semaphore of 1,
//     2 or 3 permits (fixed per key: holders of a key must agree), Do,
//     whose fn panics now and then, a fair lock (WithFair) on a fenced key,
//     or an Election's Campaign on one of two election keys, which every
//     Client of the scenario Observes all along
//     (chaos_fair_election_test.go);
//   - what to do while holding: little; Extend with a shorter or a longer
//     TTL; auto-extension past the TTL; WithMaxHold; an Unlock raced against
//     Extend and a renewal; holding past the TTL; never unlocking;
//   - with which of issue 28's options: WithTopUp(false) now and then (the
//     default tops up); WithLockDelay, most often beside the holds that
//     overrun, expire or reach their max hold; WithMinHold on exclusive
//     locks, beside every mode (owner locks must refuse both); and, on
//     fenced holds, ValidateFence while
//     holding and once Unlock returned. Two keys of the pool take every
//     exclusive lock fenced (mixFencedKey), so that a fence validated
//     there can be judged against every later holder of the key.
//
// Beside the overlaps, fences and residue that every scenario checks, the
// mix checks the API's contracts as it goes and reports each breach as a
// violation: an error of an unexpected type; a key refused that does not
// contain keyspace.Reserved, or one accepted that does; Done still open
// past Until; Until moving back on Extend, or on after Unlock; a lock that
// outlives WithMaxHold; Do leaving its lock held when fn panicked; a call
// on a closed Client that does not fail with ErrClosed; an Observer or a
// logger called after Close returned; a ValidateFence error that does not
// match ErrStaleFence; a node that said no to an acquisition taken
// WithTopUp(false) and yes to one of its extensions; a key left on the
// nodes with more time to live than any TTL the mix sends.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/keyspace"
)

const (
	// mixDoneGrace is how long Done may stay open once the watcher's own
	// timer at Until has fired: a few milliseconds for the expiry timer's
	// goroutine to run, widened for a 2-core machine under -race with a CPU
	// hog on both cores. The 100,000-acquisition mix soak saw at most 45ms
	// without the hog; the defect this catches (Done waiting for a slow
	// logger or Observer) held it open for the callback's whole duration.
	// Done asked past Until must close at once whatever the load (the
	// watcher's forced check).
	mixDoneGrace = 200 * time.Millisecond
	// mixWatchGiveUp is how long a watcher waits for a Done that did not
	// close even when asked, before it reports it and gives up.
	mixWatchGiveUp = 5 * time.Second
	// mixPReserved is the share of draws that use a key the library must
	// refuse.
	mixPReserved = 0.02
	// mixChurnWorkers is how many workers use each short-lived Client.
	mixChurnWorkers = 2
	// mixMaxViolations is how many violations a run keeps for its report;
	// it counts them all.
	mixMaxViolations = 20
)

// mixMaxTTL is the longest the nodes keep a key the mix sends, for a
// load's TTL: Extend with a longer TTL asks for twice as much, and the
// lock-delay adds to it. A minimum hold keeps keys for less
// (mixMaxMinHold).
func mixMaxTTL(ttl time.Duration) time.Duration { return 2*ttl + mixMaxLockDelay(ttl) }

// mixMaxLockDelay is the longest lock-delay the mix draws, and
// mixMaxMinHold its longest minimum hold: a quarter of those are longer
// than the TTL, so that Unlock must lengthen the keys to the minimum hold
// rather than shorten them (releaselater.lua's two modes).
func mixMaxLockDelay(ttl time.Duration) time.Duration { return ttl * 2 / 3 }
func mixMaxMinHold(ttl time.Duration) time.Duration   { return ttl * 4 / 3 }

// mixPTopUpOff is the share of exclusive holds taken WithTopUp(false);
// mixPLockDelay the share of holds taken WithLockDelay, and
// mixPLockDelayLong that of the holds that overrun, expire or reach their
// max hold, where the delay must run its course; mixPMinHold the share of
// exclusive holds taken WithMinHold; mixPValidate the share of fenced holds
// that validate their fence while holding, and again once Unlock returned.
const (
	mixPTopUpOff      = 0.2
	mixPLockDelay     = 0.1
	mixPLockDelayLong = 0.5
	mixPMinHold       = 0.12
	mixPValidate      = 0.5
)

// mixRestartDelay is how long a node restarted empty must stay down in the
// mix: more than the longest TTL it sends.
func mixRestartDelay(ttl time.Duration) time.Duration { return mixMaxTTL(ttl) + ttl/2 }

// mixLoad fits the default load to the mix: a pool of eight keys, and
// short holds, since the mix's long ones (auto-extension, longer TTLs,
// overruns) already hold keys for a TTL or two.
func mixLoad(l *chaosLoad) {
	l.keys = 8
	l.holdMax = 3 * time.Millisecond
}

// mixOpNames are the operations of the summary line, in its order. A kind
// of hold counts its acquisitions that won (Do: the calls whose fn ran),
// extend-shorter and extend-longer their Extend calls, and autoextend the
// holds taken with auto-extension (WithMaxHold's and the Unlock races'
// among them; Do's count as do).
// topup-off, lock-delay and min-hold count the holds taken with those
// options, and validate the ValidateFence calls.
var mixOpNames = []string{"plain", "fenced", "multi", "owner", "reader", "writer", "permit",
	"extend-shorter", "extend-longer", "autoextend", "do", "topup-off", "lock-delay", "min-hold", "validate", "fair", "campaign"}

// mixExtraNames are the other counts of the detail line, in its order.
var mixExtraNames = []string{"nested", "trylock", "maxhold", "maxhold-reached", "unlock-race", "overrun", "expire",
	"do-panic", "do-lost", "refused", "refused-options", "closed-clients", "closed-in-flight", "observer-panics", "logger-panics", "slow-callbacks", "log-records",
	"min-hold-early-unlock", "min-hold-past-ttl", "validate-live", "validate-stale", "validate-after-unlock", "validate-live-after-unlock",
	"whole", "topped-up", "fair-try", "fair-queued", "lead-short", "lead-long", "lead-term-limit", "lead-crash",
	"leader-self", "leader-none", "leader-other", "leader-unavailable"}

// mixOpsLine formats the counts of the operations, as the summary shows them.
func mixOpsLine(counts map[string]int) string {
	var b strings.Builder
	for i, name := range mixOpNames {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", name, counts[name])
	}
	return b.String()
}

// mixKind is what a worker takes.
type mixKind uint8

const (
	kindPlain mixKind = iota
	kindFenced
	kindMulti
	kindOwner
	kindReader
	kindWriter
	kindPermit
	kindDo
	kindFair     // a fair Lock (WithFair) on a fair key (chaos_fair_election_test.go)
	kindCampaign // an Election's Campaign on an election key
)

var mixKindNames = [...]string{"plain", "fenced", "multi", "owner", "reader", "writer", "permit", "do", "fair", "campaign"}

func (k mixKind) String() string { return mixKindNames[k] }

// mixKindWeights are how often each kind is drawn.
var mixKindWeights = [...]int{14, 10, 10, 12, 16, 8, 16, 8, 5, 5}

// mixMode is what a worker does while it holds.
type mixMode uint8

const (
	modeShort         mixMode = iota // hold for up to holdMax, then unlock
	modeExtendShorter                // Extend with half the TTL: Until must not move back
	modeExtendLonger                 // Extend with twice the TTL, and hold past the first
	modeAuto                         // auto-extension, held for one to two TTLs
	modeMaxHold                      // auto-extension capped by WithMaxHold, held past the cap
	modeUnlockRace                   // auto-extension; Unlock races Extend and the renewal
	modeOverrun                      // hold past the TTL without extending, then unlock
	modeExpire                       // never unlock
)

// mixModeWeights are how often each mode is drawn.
var mixModeWeights = [...]int{66, 8, 6, 7, 3, 4, 3, 3}

// mixTopUp is what the mix does with WithTopUp.
type mixTopUp uint8

const (
	topUpDrawn mixTopUp = iota // off for mixPTopUpOff of the exclusive holds
	topUpOn                    // the default, always
	topUpOff                   // WithTopUp(false) on every exclusive hold
)

// mixHold is one hold a worker takes.
type mixHold struct {
	kind    mixKind
	keys    []string
	owner   string // WithOwner, for kindOwner
	fenced  bool   // WithFencing, for kindFenced, some multi-key locks, and exclusive locks of mixFencedKey
	mode    mixMode
	maxHold time.Duration // for modeMaxHold
	// topUpOff takes the hold WithTopUp(false); lockDelay and minHold
	// are its WithLockDelay and WithMinHold, 0 for none.
	topUpOff           bool
	lockDelay, minHold time.Duration
	// validate calls ValidateFence while holding, and validateAfter once
	// Unlock returned: fenced holds only.
	validate, validateAfter bool
}

// exclusive reports whether a kind takes an exclusive lock: readers and
// permits are shared, refuse WithFencing and WithMinHold, and are not
// topped up.
func (k mixKind) exclusive() bool { return k != kindReader && k != kindPermit }

// mixClient is a Client of the mix, with what its checks need to know.
type mixClient struct {
	c     *Client
	index int
	churn bool // a short-lived Client that the churn closes
	// closing is set just before Close is called, closed once it returned.
	closing, closed atomic.Bool
	inFlight        atomic.Int32 // calls in progress, for the churn's count
	// closingAt is when the churn began to close it: a fair call still
	// waiting then stops (see recordWait).
	closingAt atomic.Pointer[time.Time]
	// waitsBegan and waitsEnded count the Observer's WaitBegan and
	// WaitEnded: once Close returned they must be equal.
	waitsBegan, waitsEnded atomic.Int64
}

// mixFigures is what the mix reports on top of chaosFigures.
type mixFigures struct {
	counts      map[string]int
	violations  []string // the first mixMaxViolations
	nViolations int
	doneLag     time.Duration // longest wait from the watcher's timer at Until to Done
	closeTook   time.Duration // longest Close of a churned Client
}

// detail formats the counts that the summary leaves out.
func (f *mixFigures) detail() string {
	var b strings.Builder
	for _, name := range mixExtraNames {
		fmt.Fprintf(&b, "%s=%d ", name, f.counts[name])
	}
	fmt.Fprintf(&b, "done-lag-max=%v close-max=%v violations=%d", f.doneLag.Round(time.Millisecond), f.closeTook.Round(time.Millisecond), f.nViolations)
	return b.String()
}

// mixRun is the mix's state in one run of a scenario. It is safe for
// concurrent use.
type mixRun struct {
	r        *chaosRun
	opts     []Option       // every Client's options, from the scenario
	nextLog  slog.Handler   // the scenario's own logger, which the mix's loggers feed; nil when none
	keys     []string       // the pool the workers draw from
	permits  map[string]int // each pool key's semaphore permits
	reserved []string       // keys the library must refuse
	clients  []*mixClient   // the scenario's Clients
	maxTTL   time.Duration
	giveUp   time.Duration // mixWatchGiveUp, shorter in the watcher's own test
	// fenced are the pool keys whose exclusive locks are all fenced
	// (mixFencedKey).
	fenced map[string]bool
	// What the workers draw; a scenario's mixTune may change them before
	// the workload starts.
	kindWeights, modeWeights []int
	topUp                    mixTopUp
	// strictTopUp makes a node topped up under WithTopUp(false) a breach
	// of the contract: for scenarios where no copy of an acquire can
	// reach a node after it said no (see checkTopUp).
	strictTopUp bool

	watchers  sync.WaitGroup
	stopWatch chan struct{} // closed to end the watchers that outlive their bound

	// The fair lock and the election (chaos_fair_election_test.go):
	// fairKeys are the pool keys that fair calls take, elections the keys
	// of the campaigns, observeOpts the options of the Elections that
	// Observe them, and checks what the run asserts of their rules.
	fairKeys, elections []string
	leadWeights         []int // what leaders do: mixLeadWeights unless tuned
	observeOpts         []LockOption
	checks              mixChecks
	values              atomic.Int64              // numbers each Campaign's value
	stopAt              atomic.Pointer[time.Time] // when the workload was told to stop
	sends               mixSends                  // the fair calls' refreshes
	streams             []*mixStream              // set before the workload, then read once it ended

	mu          sync.Mutex
	counts      map[string]int // guarded by mu
	waits       []history.Wait // guarded by mu; the fair calls that waited
	violations  []string       // guarded by mu
	nViolations int            // guarded by mu
	doneLag     time.Duration  // guarded by mu
	closeTook   time.Duration  // guarded by mu
}

// newMixRun prepares the mix of a run whose Clients were built with opts:
// it draws the key pool, and gives Client 0 a slow Observer and a slow
// logger, Client 1 a panicking Observer and a slow logger, and the others
// an Observer that neither sleeps nor panics: through it (a LockTracer)
// the mix learns each fair call's id (see mixSends). Every Client
// is told the mix's longest TTL up front, so that with the node guard on
// they all keep a restarted node out as long (see WithNodeGuard).
func newMixRun(r *chaosRun, opts []Option) *mixRun {
	r.t.Helper()
	m := &mixRun{r: r, opts: opts, counts: map[string]int{}, stopWatch: make(chan struct{}), maxTTL: mixMaxTTL(r.load.ttl), giveUp: mixWatchGiveUp,
		kindWeights: slices.Clone(mixKindWeights[:]), modeWeights: slices.Clone(mixModeWeights[:]), leadWeights: slices.Clone(mixLeadWeights)}
	if cfg, err := defaultConfig().applyClient(opts); err == nil && cfg.logger != nil {
		m.nextLog = cfg.logger.Handler()
	}
	m.keys, m.reserved = mixKeys(r.rng)
	if r.load.keys > 0 && r.load.keys < len(m.keys) {
		m.keys = m.keys[:r.load.keys]
	}
	if r.cl.opts.backend == clusterBackend {
		m.keys, m.reserved = mixTagKeys(r, m.keys), mixTagKeys(r, m.reserved)
	}
	m.permits = map[string]int{}
	m.fenced = map[string]bool{}
	for i, k := range m.keys {
		m.permits[k] = 1 + i%3
		if mixFencedKey(i) {
			m.fenced[k] = true
			m.fairKeys = append(m.fairKeys, k)
		}
	}
	m.elections = mixElectionKeys
	if r.cl.opts.backend == clusterBackend {
		m.elections = mixTagKeys(r, m.elections)
	}
	// Every Client of the run, the churned ones too, times its fair
	// calls' queued attempts (see mixSends).
	r.cl.opts.hooks.fairSent = m.sends.sent
	for i, cc := range r.cl.clients {
		mc := &mixClient{index: cc.index}
		switch i {
		case 0:
			m.rebuild(cc, m.callbacks(mc, 0.03, 0, 0.03, 0))
		case 1:
			m.rebuild(cc, m.callbacks(mc, 0, 0.2, 0.01, 0.2))
		default:
			m.rebuild(cc, []Option{WithObserver(&mixObserver{m: m, mc: mc})})
		}
		mc.c = cc.c
		mc.c.hooks.fairSent = m.sends.sent
		mc.c.raiseMaxTTL(m.maxTTL)
		m.clients = append(m.clients, mc)
	}
	quoted := make([]string, len(m.keys))
	for i, k := range m.keys {
		quoted[i] = fmt.Sprintf("%s(k=%d)", shortKey(k), m.permits[k])
		if m.fenced[k] {
			quoted[i] += "(fenced)"
		}
	}
	r.t.Logf("chaos-detail: scenario=%s mix keys %s reserved %d elections %s", r.name, strings.Join(quoted, " "), len(m.reserved), shortKeys(m.elections))
	return m
}

// mixFencedKey reports whether the pool key at index i takes every
// exclusive lock fenced: two keys of eight, jobs:{q1}:waiting (whose
// look-alike jobs:{q1} is not fenced-only) and a drawn one. ValidateFence's
// answer can be judged only where every lock is fenced: a lock taken
// without WithFencing leaves the counter at the last fenced holder's
// fence, which then passes while the unfenced one holds (see
// Client.ValidateFence). Readers and permits take no fence and keep
// their places on these keys.
func mixFencedKey(i int) bool { return i%4 == 1 }

// mustFence reports whether a hold of kind on keys must be fenced: an
// exclusive lock on a key of mixFencedKey.
func (m *mixRun) mustFence(kind mixKind, keys []string) bool {
	return kind.exclusive() && slices.ContainsFunc(keys, func(k string) bool { return m.fenced[k] })
}

// mixTagKeys puts chaosClusterTag in front of each key, for cluster
// nodes: every multi-key call is then legal there, and the cluster faults,
// which aim at the tag's slot, hit every key. The look-alikes stay alike,
// and a reserved key stays reserved.
func mixTagKeys(r *chaosRun, keys []string) []string {
	r.t.Helper()
	slot := keyspace.Slot(chaosClusterTag)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = chaosClusterTag + k
		if got := keyspace.Slot(r.prefix + out[i]); got != slot {
			r.t.Fatalf("key %s under prefix %q is in slot %d, want the tag's %d", shortKey(out[i]), r.prefix, got, slot)
		}
	}
	return out
}

// rebuild replaces a Client of the cluster by one over the same go-redis
// clients, with the scenario's options and extra ones: the cluster builds
// every Client alike, and the callbacks are a Client setting.
func (m *mixRun) rebuild(cc *chaosClient, extra []Option) {
	t := m.r.t
	t.Helper()
	rcs := make([]redis.UniversalClient, len(cc.c.nodes))
	for i, n := range cc.c.nodes {
		rcs[i] = n.client
	}
	_ = cc.c.Close()
	c, err := New(rcs, append(slices.Clip(m.opts), extra...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	setHooks(c, m.r.cl.opts.hooks)
	// Registered after the go-redis clients' cleanups, so it runs first.
	t.Cleanup(func() { _ = c.Close() })
	cc.c = c
}

// callbacks are the options that give a Client an Observer that sleeps
// 50-200ms with probability pSlow and panics with probability pPanic, and a
// logger at Debug that sleeps as long with probability pLogSlow and panics
// with probability pLogPanic. The library recovers both kinds of panic (see
// TestChaosMixPanickingLogger).
func (m *mixRun) callbacks(mc *mixClient, pSlow, pPanic, pLogSlow, pLogPanic float64) []Option {
	rng := &mixRand{rng: rand.New(rand.NewPCG(m.r.rng.Uint64(), m.r.rng.Uint64()))}
	return []Option{
		WithObserver(&mixObserver{m: m, mc: mc, pSlow: pSlow, pPanic: pPanic, rng: rng}),
		WithLogger(slog.New(&mixLogHandler{m: m, mc: mc, pSlow: pLogSlow, pPanic: pLogPanic, rng: rng, next: m.nextLog})),
	}
}

// count adds one to a count of the report.
func (m *mixRun) count(name string) { m.add(name, 1) }

func (m *mixRun) add(name string, n int) {
	m.mu.Lock()
	m.counts[name] += n
	m.mu.Unlock()
}

// violate records a breach of the API's contract. It does not fail the
// test at once: it may run after the test's goroutine moved on, and the
// report lists the violations with the seed.
func (m *mixRun) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nViolations++
	if len(m.violations) < mixMaxViolations {
		m.violations = append(m.violations, fmt.Sprintf("t=%v ", time.Since(m.r.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

// work starts the workers of every Client, and the churn of short-lived
// Clients, until stop is cancelled.
func (m *mixRun) work(stop context.Context) (wait func()) {
	// The Observe streams run across the whole workload: they stop once
	// every worker has.
	endObserving := m.observeAll()
	context.AfterFunc(stop, func() {
		now := time.Now()
		m.stopAt.Store(&now)
	})
	var wg sync.WaitGroup
	for _, mc := range m.clients {
		for w := range m.r.load.workers {
			rng := rand.New(rand.NewPCG(m.r.rng.Uint64(), m.r.rng.Uint64()))
			wg.Go(func() { m.worker(stop, mc, w, rng) })
		}
	}
	rng := rand.New(rand.NewPCG(m.r.rng.Uint64(), m.r.rng.Uint64()))
	wg.Go(func() { m.churn(stop, rng) })
	return func() {
		wg.Wait()
		endObserving()
	}
}

// worker takes holds until stop is cancelled, or, on a Client that has
// been closed, until it has made one draw after Close returned, whose calls
// must fail with ErrClosed.
func (m *mixRun) worker(stop context.Context, mc *mixClient, w int, rng *rand.Rand) {
	for stop.Err() == nil {
		closed := mc.closed.Load()
		m.step(stop, mc, w, rng)
		if closed {
			return
		}
		if mc.closing.Load() {
			// Calls fail at once while Close waits for the requests in
			// flight: do not spin.
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// step draws one hold, takes it, and does what its mode says.
func (m *mixRun) step(stop context.Context, mc *mixClient, w int, rng *rand.Rand) {
	kind := mixKind(mixPick(rng, m.kindWeights))
	switch kind {
	case kindDo:
		m.do(stop, mc, w, rng)
		return
	case kindCampaign:
		m.campaign(stop, mc, w, rng)
		return
	}
	h := mixHold{kind: kind, keys: m.drawKeys(rng, kind), mode: mixMode(mixPick(rng, m.modeWeights))}
	switch kind {
	case kindOwner:
		// Most owners are shared by a Client's workers, whose holds then
		// overlap by right; the others are a worker's own.
		h.owner = fmt.Sprintf("c%d", mc.index)
		if rng.Float64() < 0.3 {
			h.owner = fmt.Sprintf("c%d-w%d", mc.index, w)
		}
	case kindFenced:
		h.fenced = true
	case kindMulti:
		h.fenced = rng.Float64() < 0.3
	}
	if h.mode == modeMaxHold {
		h.maxHold = mixBetween(rng, m.r.load.ttl, m.r.load.ttl*3/2)
	}
	m.drawOptions(rng, &h)
	try := (kind == kindPlain || kind == kindWriter || kind == kindFair) && rng.Float64() < 0.2
	ctx, cancel := context.WithTimeout(stop, m.r.load.lockWait)
	l, rec, _ := m.acquire(ctx, stop, mc, w, h, try)
	cancel()
	if l == nil {
		return
	}
	if try {
		m.count("trylock")
		if kind == kindFair {
			m.count("fair-try")
		}
	}
	m.hold(stop, mc, w, rng, h, l, rec)
}

// drawOptions draws what h takes of issue 28's options: WithTopUp(false),
// WithLockDelay and WithMinHold; and, for a fenced hold, whether it
// validates its fence. A minimum hold stays within the max hold, which
// refuses a longer one.
func (m *mixRun) drawOptions(rng *rand.Rand, h *mixHold) {
	ttl := m.r.load.ttl
	h.fenced = h.fenced || m.mustFence(h.kind, h.keys)
	if h.kind.exclusive() {
		switch m.topUp {
		case topUpOff:
			h.topUpOff = true
		case topUpDrawn:
			h.topUpOff = rng.Float64() < mixPTopUpOff
		}
	}
	p := mixPLockDelay
	switch h.mode {
	case modeOverrun, modeExpire, modeMaxHold:
		p = mixPLockDelayLong
	}
	if rng.Float64() < p {
		h.lockDelay = mixBetween(rng, ttl/6, mixMaxLockDelay(ttl))
	}
	if h.kind.exclusive() && rng.Float64() < mixPMinHold {
		h.minHold = mixBetween(rng, ttl/6, ttl)
		if rng.IntN(4) == 0 {
			h.minHold = mixBetween(rng, ttl, mixMaxMinHold(ttl))
		}
		if h.maxHold > 0 {
			h.minHold = min(h.minHold, h.maxHold)
		}
	}
	if h.owner != "" && (h.lockDelay > 0 || h.minHold > 0) && rng.IntN(4) > 0 {
		// Owner locks refuse both (mixOwnerRefusal): a quarter of the
		// draws checks that they do.
		h.lockDelay, h.minHold = 0, 0
	}
	if h.fenced && slices.ContainsFunc(h.keys, func(k string) bool { return m.fenced[k] }) {
		h.validate = rng.Float64() < mixPValidate
		h.validateAfter = rng.Float64() < mixPValidate
	}
}

// mixOwnerRefusal says why a hold must be refused for its options, or ""
// when it must not be: an owner lock refuses WithLockDelay and WithMinHold,
// since the owner's other holds release the key by their own count (the
// mix found a minimum hold broken so: see chaos_findings_test.go).
func mixOwnerRefusal(h mixHold) string {
	if h.owner == "" || h.lockDelay == 0 && h.minHold == 0 {
		return ""
	}
	return fmt.Sprintf("an owner lock with WithLockDelay(%v) and WithMinHold(%v)", h.lockDelay, h.minHold)
}

// drawKeys draws the keys of a hold: two or three distinct ones for a
// multi-key lock, else one. Now and then one of them is reserved.
func (m *mixRun) drawKeys(rng *rand.Rand, kind mixKind) []string {
	if kind == kindFair {
		return []string{m.drawFairKey(rng)}
	}
	if kind != kindMulti || len(m.keys) < 2 {
		return []string{m.drawKey(rng)}
	}
	n := min(2+rng.IntN(2), len(m.keys))
	keys := make([]string, 0, n)
	for _, i := range rng.Perm(len(m.keys))[:n] {
		keys = append(keys, m.keys[i])
	}
	if rng.Float64() < mixPReserved {
		keys[rng.IntN(n)] = m.reserved[rng.IntN(len(m.reserved))]
	}
	return keys
}

func (m *mixRun) drawKey(rng *rand.Rand) string {
	if rng.Float64() < mixPReserved {
		return m.reserved[rng.IntN(len(m.reserved))]
	}
	return m.keys[rng.IntN(len(m.keys))]
}

// permitsOf is a key's number of permits: fixed per pool key, and 1 for a
// reserved key, which must be refused for the key and not the permits.
func (m *mixRun) permitsOf(key string) int {
	if k := m.permits[key]; k > 0 {
		return k
	}
	return 1
}

// acquire makes the call that takes h within ctx (one attempt, with try),
// checks its outcome, and returns the lock and its record, or nil and the
// error. stop is the run's context: a call that fails once it is
// cancelled does not count against the success rate.
func (m *mixRun) acquire(ctx, stop context.Context, mc *mixClient, w int, h mixHold, try bool) (*Lock, chaosHold, error) {
	var opts []LockOption
	switch h.mode {
	case modeAuto, modeUnlockRace:
		opts = append(opts, WithAutoExtend(true))
	case modeMaxHold:
		opts = append(opts, WithAutoExtend(true), WithMaxHold(h.maxHold))
	}
	if h.owner != "" {
		opts = append(opts, WithOwner(h.owner))
	}
	if h.fenced {
		opts = append(opts, WithFencing(true))
	}
	if h.topUpOff {
		opts = append(opts, WithTopUp(false))
	}
	if h.lockDelay > 0 {
		opts = append(opts, WithLockDelay(h.lockDelay))
	}
	if h.minHold > 0 {
		opts = append(opts, WithMinHold(h.minHold))
	}
	var fw *mixFairWait
	if h.kind == kindFair {
		opts = append(opts, WithFair(true))
		if !try {
			fw = &mixFairWait{}
			ctx = context.WithValue(ctx, mixFairWaitKey{}, fw)
			opts = append(opts, WithQueuePlace(fw.place))
		}
	}
	closedBefore := mc.closed.Load()
	mc.inFlight.Add(1)
	called := time.Now()
	var l *Lock
	var err error
	switch key := h.keys[0]; h.kind {
	case kindMulti:
		l, err = mc.c.LockMulti(ctx, h.keys, opts...)
	case kindReader:
		l, err = mc.c.RLock(ctx, key, opts...)
	case kindPermit:
		var s *Semaphore
		if s, err = mc.c.Semaphore(key, m.permitsOf(key)); err == nil {
			l, err = s.Acquire(ctx, opts...)
		}
	default:
		if try {
			l, err = mc.c.TryLock(ctx, key, opts...)
		} else {
			l, err = mc.c.Lock(ctx, key, opts...)
		}
	}
	returned := time.Now()
	mc.inFlight.Add(-1)
	// A call that Close refused before it queued matters to no other:
	// the churn's workers make many while their Client closes.
	if fw != nil && !errors.Is(err, ErrInvalidOption) && (!errors.Is(err, ErrClosed) || !fw.queued.IsZero()) {
		m.recordWait(ctx, mc, w, h.keys[0], fw, called, returned, l)
	}
	if !m.settleAcquire(stop, mc, h.keys, h.kind.String(), mixOwnerRefusal(h), l, err, closedBefore, !try, returned.Sub(called)) {
		return nil, chaosHold{}, err
	}
	rec := chaosHold{key: h.keys[0], client: mc.index, worker: w, token: l.Token(), acquired: returned, until: l.Until(),
		nodes: yesNodes(l), fence: l.Fence(), shared: h.kind == kindReader, owner: h.owner, op: h.kind.String(),
		start: l.acquired, minHold: h.minHold, lockDelay: h.lockDelay}
	if h.kind == kindPermit {
		rec.permits = m.permitsOf(h.keys[0])
	}
	m.countOptions(h)
	return l, rec, nil
}

// countOptions counts the options of issue 28 that a hold won with.
func (m *mixRun) countOptions(h mixHold) {
	if h.topUpOff {
		m.count("topup-off")
	}
	if h.lockDelay > 0 {
		m.count("lock-delay")
	}
	if h.minHold > 0 {
		m.count("min-hold")
		if h.minHold > m.r.load.ttl {
			m.count("min-hold-past-ttl")
		}
	}
}

// settleAcquire checks the outcome of an acquisition call on keys, counts
// it (as name, when it won), and reports whether it returned a lock. A
// waiting call that was not cut short by the end of the run goes into the
// success rate; the churned Clients' do not, since they are closed on
// purpose. refuse says why the call must be refused for its options, ""
// when it must not be (see mixRefusal).
func (m *mixRun) settleAcquire(stop context.Context, mc *mixClient, keys []string, name, refuse string, l *Lock, err error, closedBefore, waiting bool, took time.Duration) bool {
	if why := mixRefusal(m.r.prefix, keys, refuse, err); why != "" {
		m.violate("client %d %s: %s", mc.index, name, why)
	}
	if errors.Is(err, ErrInvalidOption) {
		m.count("refused")
		if refuse != "" {
			m.count("refused-options")
		}
		return false
	}
	if closedBefore && !errors.Is(err, ErrClosed) {
		m.violate("client %d %s on %s after Close returned: got %v, want ErrClosed", mc.index, name, shortKeys(keys), err)
	}
	stats := waiting && !mc.churn
	if err == nil {
		if stats {
			m.r.rec.lockCall(true, took)
		}
		m.count(name)
		return true
	}
	switch {
	case errors.Is(err, ErrPermitsMismatch):
		m.violate("client %d %s on %s: %v: every permit of a key is taken with the same permits", mc.index, name, shortKeys(keys), err)
	case errors.Is(err, ErrNotAcquired):
	case mc.closing.Load() && errors.Is(err, ErrClosed):
	default:
		m.violate("client %d %s on %s: got %v, want ErrNotAcquired", mc.index, name, shortKeys(keys), err)
	}
	if stats && stop.Err() == nil {
		m.r.rec.lockCall(false, took)
	}
	return false
}

// mixRefusal says what is wrong, as far as refusals go, with the outcome
// err of a call on keys under prefix, whose options must be refused for
// the reason refuse ("" when they need not be): "" when nothing is. The
// library refuses exactly the keys whose prefixed name contains
// keyspace.Reserved, and the options it must, with an error that wraps
// ErrInvalidOption.
func mixRefusal(prefix string, keys []string, refuse string, err error) string {
	reserved := false
	for _, k := range keys {
		reserved = reserved || strings.Contains(prefix+k, keyspace.Reserved)
	}
	refused := errors.Is(err, ErrInvalidOption)
	switch {
	case reserved && !refused:
		return fmt.Sprintf("keys %s contain the reserved %q: got %v, want ErrInvalidOption", shortKeys(keys), keyspace.Reserved, err)
	case refuse != "" && !refused:
		return fmt.Sprintf("keys %s taken as %s: got %v, want ErrInvalidOption", shortKeys(keys), refuse, err)
	case !reserved && refuse == "" && refused:
		return fmt.Sprintf("keys %s were refused, but none contains the reserved %q and the options are valid: %v", shortKeys(keys), keyspace.Reserved, err)
	}
	return ""
}

// hold does what h's mode says with l, then hands its record to the
// watcher, which records it once Done has closed.
func (m *mixRun) hold(stop context.Context, mc *mixClient, w int, rng *rand.Rand, h mixHold, l *Lock, rec chaosHold) {
	hand := m.watch(l, h.keys)
	ttl, holdMax := m.r.load.ttl, m.r.load.holdMax
	// The nodes' verdicts on Unlock are checked where the nodes that said
	// yes are known: not after renewals, which report counts only.
	verdicts := !mc.churn
	// The key whose fence the holder validates: one whose exclusive locks
	// are all fenced (mixFencedKey).
	vkey := ""
	if h.validate || h.validateAfter {
		vkeys := slices.DeleteFunc(slices.Clone(h.keys), func(k string) bool { return !m.fenced[k] })
		vkey = vkeys[rng.IntN(len(vkeys))]
	}
	if h.validate && h.mode != modeAuto && h.mode != modeUnlockRace {
		m.validate(mc, w, l, vkey, false)
	}
	refused := noNodes(l)
	switch h.mode {
	case modeShort:
		if h.kind == kindOwner && rng.Float64() < 0.5 {
			m.nest(stop, mc, w, rng, h)
		}
		time.Sleep(randDuration(rng, holdMax))
	case modeExtendShorter:
		time.Sleep(ttl / 3)
		if m.extend(mc, l, ttl/2, "extend-shorter") {
			rec.nodes = yesNodes(l)
			m.checkTopUp(mc, l, h, refused, l.Stats())
		}
		time.Sleep(randDuration(rng, holdMax))
	case modeExtendLonger:
		time.Sleep(ttl / 2)
		if m.extend(mc, l, 2*ttl, "extend-longer") {
			rec.nodes = yesNodes(l)
			m.checkTopUp(mc, l, h, refused, l.Stats())
			// Past the validity the first TTL gave.
			time.Sleep(ttl * 3 / 4)
		}
	case modeAuto:
		m.count("autoextend")
		verdicts = false
		var validate string
		if h.validate {
			validate = vkey
		}
		rec.wholeAt = m.holdAuto(mc, w, l, h, refused, mixBetween(rng, ttl, 2*ttl), validate)
	case modeMaxHold:
		m.count("autoextend")
		m.count("maxhold")
		verdicts = false
		m.holdPastMax(mc, l, rec, h.maxHold)
	case modeUnlockRace:
		m.count("autoextend")
		m.count("unlock-race")
		rec = m.unlockRace(mc, rng, l, rec)
		hand <- rec
		if h.validateAfter {
			m.validate(mc, w, l, vkey, true)
		}
		return
	case modeOverrun:
		m.count("overrun")
		time.Sleep(ttl + ttl/5)
		m.checkEndedPastUntil(mc, l, "an overrun hold")
		if h.validate {
			// A holder that does not know its lock ended, and checks its
			// fence before it writes: the next holder may have the key.
			m.validate(mc, w, l, vkey, false)
		}
	case modeExpire:
		m.count("expire")
		time.Sleep(randDuration(rng, holdMax))
		hand <- rec // released stays zero: the hold lasts until Until
		return
	}
	rec = m.release(mc, l, rec, verdicts)
	hand <- rec
	if h.validateAfter {
		// Now and then once the next holder has had time to take the key.
		time.Sleep(randDuration(rng, ttl/3))
		m.validate(mc, w, l, vkey, true)
	}
}

// noNodes lists the nodes that said no in the lock's last round: right
// after the acquisition, the nodes another holder had.
func noNodes(l *Lock) []bool {
	st := l.Stats()
	out := make([]bool, len(st.Nodes))
	for _, v := range st.Nodes {
		if v.Vote == VoteNo {
			out[v.Index] = true
		}
	}
	return out
}

// checkTopUp looks at an extension round st of l, whose acquisition the
// nodes in refused had refused: such a node that said yes to the
// extension was topped up. With WithTopUp(false) none may be, where no
// copy of the acquisition can reach a node after it said no (strictTopUp);
// elsewhere a resent acquire may take the node late, and extend.lua then
// extends it. It reports whether a node was topped up.
func (m *mixRun) checkTopUp(mc *mixClient, l *Lock, h mixHold, refused []bool, st Stats) bool {
	for _, v := range st.Nodes {
		if v.Vote != VoteYes || v.Index >= len(refused) || !refused[v.Index] {
			continue
		}
		if h.topUpOff && m.strictTopUp {
			m.violate("client %d %s %s taken WithTopUp(false): node %d said no to the acquisition and yes to an extension",
				mc.index, h.kind, shortKeys(l.Keys()), v.Index)
		}
		return true
	}
	return false
}

// validate calls ValidateFence for l's fence on key, one of l's keys, and
// records the call and its verdict, which the checker judges
// (chaosStaleValidations); after says that Unlock has returned. Every
// error must match ErrStaleFence, and ErrClosed once the Client was
// closed.
func (m *mixRun) validate(mc *mixClient, w int, l *Lock, key string, after bool) {
	m.count("validate")
	closedBefore := mc.closed.Load()
	mc.inFlight.Add(1)
	called := time.Now()
	err := mc.c.ValidateFence(context.Background(), key, l.Fence())
	returned := time.Now()
	mc.inFlight.Add(-1)
	switch {
	case closedBefore && !errors.Is(err, ErrClosed):
		m.violate("client %d ValidateFence of %s after Close returned: got %v, want ErrClosed", mc.index, shortKey(key), err)
	case err != nil && !errors.Is(err, ErrStaleFence):
		m.violate("client %d ValidateFence of %s fence %d: got %v, want nil or ErrStaleFence", mc.index, shortKey(key), l.Fence(), err)
	}
	if errors.Is(err, ErrClosed) {
		return // the nodes were not asked
	}
	m.r.rec.validation(chaosValidation{key: key, fence: l.Fence(), token: l.Token(), client: mc.index, worker: w,
		called: called, returned: returned, valid: err == nil, afterUnlock: after})
	switch {
	case after && err == nil:
		m.count("validate-after-unlock")
		m.count("validate-live-after-unlock")
	case after:
		m.count("validate-after-unlock")
	case err == nil:
		m.count("validate-live")
	default:
		m.count("validate-stale")
	}
}

// nest takes the owner's lock on the same key again, inside the outer
// hold, with options of its own, holds it briefly and unlocks it: the
// reentrant path.
func (m *mixRun) nest(stop context.Context, mc *mixClient, w int, rng *rand.Rand, outer mixHold) {
	h := mixHold{kind: kindOwner, keys: outer.keys, owner: outer.owner, fenced: outer.fenced, mode: modeShort}
	// Its own options: a nested hold's minimum hold or lock-delay would
	// have to outlast the outer hold's Unlock, which comes after. Owner
	// locks refuse both (mixOwnerRefusal).
	m.drawOptions(rng, &h)
	ctx, cancel := context.WithTimeout(stop, m.r.load.lockWait)
	l, rec, _ := m.acquire(ctx, stop, mc, w, h, false)
	cancel()
	if l == nil {
		return
	}
	m.count("nested")
	hand := m.watch(l, h.keys)
	time.Sleep(randDuration(rng, m.r.load.holdMax))
	hand <- m.release(mc, l, rec, !mc.churn)
}

// release unlocks l and checks the outcome, and with verdicts the nodes'
// votes (see chaosRecorder.wrongVotes). It returns the hold's record.
func (m *mixRun) release(mc *mixClient, l *Lock, rec chaosHold, verdicts bool) chaosHold {
	rec.until = l.Until()
	rec.released = time.Now()
	closedBefore := mc.closed.Load()
	mc.inFlight.Add(1)
	err := l.Unlock(context.Background())
	mc.inFlight.Add(-1)
	rec = m.unlocked(rec, err)
	if verdicts && !errors.Is(err, ErrClosed) && time.Now().Before(rec.until) {
		if st := l.Stats(); m.r.rec.unlockReturned(rec, st) > 0 {
			m.r.t.Logf("wrong verdict: client %d %s %s token %s yes-nodes %v, unlock %+v, err %v",
				mc.index, rec.op, shortKey(rec.key), rec.token, rec.nodes, st.Nodes, err)
		}
	}
	m.checkUnlock(mc, closedBefore, rec, err)
	return rec
}

// unlocked records, on rec, the end of an Unlock that returned err: when it
// was called while the hold was valid and returned nil, a quorum released
// it, or, before the end of its minimum hold, left the keys to expire
// then (see history.Hold.Unlocked).
func (m *mixRun) unlocked(rec chaosHold, err error) chaosHold {
	if err == nil && rec.released.Before(rec.until) {
		rec.unlocked = time.Now()
		if rec.minHold > 0 && rec.released.Before(rec.start.Add(rec.minHold)) {
			m.count("min-hold-early-unlock")
		}
	}
	return rec
}

// checkUnlock checks an Unlock's error: nil, ErrNotHeld or ErrUnconfirmed,
// and ErrClosed on a Client being closed; only ErrClosed once it was.
func (m *mixRun) checkUnlock(mc *mixClient, closedBefore bool, rec chaosHold, err error) {
	switch {
	case closedBefore && !errors.Is(err, ErrClosed):
		m.violate("client %d Unlock of %s %s after Close returned: got %v, want ErrClosed", mc.index, rec.op, shortKey(rec.key), err)
	case err == nil, errors.Is(err, ErrUnconfirmed):
	case errors.Is(err, ErrNotHeld):
		m.r.rec.mu.Lock()
		m.r.rec.notHeld++
		m.r.rec.mu.Unlock()
	case mc.closing.Load() && errors.Is(err, ErrClosed):
	default:
		m.violate("client %d Unlock of %s %s: got %v, want nil, ErrNotHeld or ErrUnconfirmed", mc.index, rec.op, shortKey(rec.key), err)
	}
}

// extend extends l with WithTTL(ttl), checks that Until did not move back
// whatever the outcome, and reports whether it succeeded.
func (m *mixRun) extend(mc *mixClient, l *Lock, ttl time.Duration, name string) bool {
	m.count(name)
	before := l.Until()
	closedBefore := mc.closed.Load()
	mc.inFlight.Add(1)
	err := l.Extend(context.Background(), WithTTL(ttl))
	mc.inFlight.Add(-1)
	if after := l.Until(); after.Before(before) {
		m.violate("client %d %s of %s moved Until back by %v", mc.index, name, shortKeys(l.Keys()), before.Sub(after))
	}
	switch {
	case err == nil:
		m.r.rec.mu.Lock()
		m.r.rec.extended++
		m.r.rec.mu.Unlock()
		return true
	case closedBefore && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotHeld):
		m.violate("client %d %s after Close returned: got %v, want ErrClosed or ErrNotHeld", mc.index, name, err)
	case errors.Is(err, ErrNotHeld):
	case mc.closing.Load() && errors.Is(err, ErrClosed):
	default:
		m.violate("client %d %s of %s: got %v, want nil or ErrNotHeld", mc.index, name, shortKeys(l.Keys()), err)
	}
	return false
}

// holdAuto holds an auto-extended lock for d, or until Done closes: a
// holder that is told its lock was lost stops, and Done closed without
// Unlock must say why. Meanwhile it looks at the renewals every tenth of
// the TTL: it returns when it first saw one acknowledged by every node
// (zero if never), and counts the holds that a renewal topped up (see
// checkTopUp). With validate set, it validates the fence on that key
// halfway through, after the first renewals, which top-ups may have spread
// to new nodes.
func (m *mixRun) holdAuto(mc *mixClient, w int, l *Lock, h mixHold, refused []bool, d time.Duration, validate string) (wholeAt time.Time) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	tick := time.NewTicker(m.r.load.ttl / 10)
	defer tick.Stop()
	var half <-chan time.Time
	if validate != "" {
		vt := time.NewTimer(d / 2)
		defer vt.Stop()
		half = vt.C
	}
	toppedUp := false
	for {
		select {
		case <-tm.C:
			return wholeAt
		case <-l.Done():
			if err := l.Err(); !errors.Is(err, ErrLockLost) {
				m.violate("client %d %s: Done closed during the hold with Err %v, want ErrLockLost", mc.index, shortKeys(l.Keys()), err)
			}
			return wholeAt
		case <-half:
			m.validate(mc, w, l, validate, false)
		case <-tick.C:
			st := l.Stats()
			if st.Op != OpExtend {
				continue
			}
			if wholeAt.IsZero() && st.Yes == len(m.r.cl.nodes) {
				wholeAt = time.Now()
				m.count("whole")
			}
			if !toppedUp && m.checkTopUp(mc, l, h, refused, st) {
				toppedUp = true
				m.count("topped-up")
			}
		}
	}
}

// holdPastMax holds an auto-extended lock capped by WithMaxHold(d) until
// half a TTL past the cap: its Until must never pass the cap, counted from
// when Lock returned (the lock's own start is earlier), and the lock must
// have ended by then.
func (m *mixRun) holdPastMax(mc *mixClient, l *Lock, rec chaosHold, d time.Duration) {
	bound := rec.acquired.Add(d)
	tm := time.NewTimer(time.Until(bound.Add(m.r.load.ttl / 2)))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-l.Done():
	}
	if u := l.Until(); u.After(bound) {
		m.violate("client %d %s: Until is %v past WithMaxHold(%v)", mc.index, shortKeys(l.Keys()), u.Sub(bound), d)
	}
	if time.Now().After(bound) {
		m.checkEndedPastUntil(mc, l, "a lock past its max hold")
	}
	switch err := l.Err(); {
	case errors.Is(err, ErrMaxHold):
		m.count("maxhold-reached")
	case err != nil && !errors.Is(err, ErrLockLost):
		m.violate("client %d %s: Err %v, want ErrLockLost", mc.index, shortKeys(l.Keys()), err)
	}
}

// checkEndedPastUntil checks a lock whose Until has passed: Done checks
// Until itself, so asking for it must find it closed, however late the
// expiry timer is, and Err must then say the lock was lost.
func (m *mixRun) checkEndedPastUntil(mc *mixClient, l *Lock, what string) {
	u := l.Until()
	if time.Now().Before(u) {
		return
	}
	select {
	case <-l.Done():
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			m.violate("client %d %s %s: Err %v past Until, want ErrLockLost", mc.index, what, shortKeys(l.Keys()), err)
		}
	default:
		m.violate("client %d %s %s: Done open %v past Until", mc.index, what, shortKeys(l.Keys()), time.Since(u))
	}
}

// unlockRace unlocks an auto-extended lock just as its first renewal is
// due, while an Extend runs on another goroutine. Once Unlock has returned
// the lock is over: Err says so, Until never moves again, and Extend fails
// with ErrNotHeld. It returns the hold's record.
func (m *mixRun) unlockRace(mc *mixClient, rng *rand.Rand, l *Lock, rec chaosHold) chaosHold {
	ttl := m.r.load.ttl
	// The renewal is due a third of the TTL after the round that won the
	// lock began, a little before Lock returned.
	time.Sleep(time.Until(rec.acquired.Add(ttl/3 - randDuration(rng, 10*time.Millisecond))))
	rec.until = l.Until()
	rec.released = time.Now()
	closedBefore := mc.closed.Load()
	var extErr error
	var wg sync.WaitGroup
	mc.inFlight.Add(2)
	wg.Go(func() { extErr = l.Extend(context.Background()) })
	err := l.Unlock(context.Background())
	rec = m.unlocked(rec, err)
	wg.Wait()
	mc.inFlight.Add(-2)
	m.checkUnlock(mc, closedBefore, rec, err)
	switch {
	case extErr == nil, errors.Is(extErr, ErrNotHeld), mc.closing.Load() && errors.Is(extErr, ErrClosed):
	default:
		m.violate("client %d Extend racing Unlock of %s: got %v, want nil or ErrNotHeld", mc.index, shortKeys(l.Keys()), extErr)
	}
	if errors.Is(err, ErrClosed) {
		return rec // the lock runs on until it expires
	}
	if lerr := l.Err(); !errors.Is(lerr, ErrUnlocked) && !errors.Is(lerr, ErrLockLost) {
		m.violate("client %d %s: Err after Unlock is %v, want ErrUnlocked or ErrLockLost", mc.index, shortKeys(l.Keys()), lerr)
	}
	u := l.Until()
	time.Sleep(ttl/3 + ttl/10) // past the next renewal
	if u2 := l.Until(); !u2.Equal(u) {
		m.violate("client %d %s: Until moved by %v after Unlock returned", mc.index, shortKeys(l.Keys()), u2.Sub(u))
	}
	if err := l.Extend(context.Background()); !errors.Is(err, ErrNotHeld) {
		m.violate("client %d %s: Extend after Unlock: got %v, want ErrNotHeld", mc.index, shortKeys(l.Keys()), err)
	}
	return rec
}

// mixPanic is what the mix's fn panics with.
type mixPanic struct{ client, worker int }

// errMixFn is what the mix's fn returns when it fails.
var errMixFn = errors.New("mix: fn failed on purpose")

// do runs Do, or RDo, on a drawn key. It calls c.do, Do's and RDo's body,
// with an acquire that is Lock or RLock and also hands the lock to the
// recorder, which needs its Until: Do does not show the lock. fn holds
// briefly, or for one to two TTLs on auto-extension, and panics or fails
// now and then.
func (m *mixRun) do(stop context.Context, mc *mixClient, w int, rng *rand.Rand) {
	ld := m.r.load
	key := m.drawKey(rng)
	shared := rng.Float64() < 0.3
	d := randDuration(rng, ld.holdMax)
	if rng.Float64() < 0.15 {
		d = mixBetween(rng, ld.ttl, 2*ld.ttl)
	}
	panics := rng.Float64() < 0.15
	fails := !panics && rng.Float64() < 0.1
	acquire := mc.c.Lock
	if shared {
		acquire = mc.c.RLock
	}
	// Do takes no minimum hold here: it does not say whether its Unlock
	// was confirmed, which the rule needs (history.Hold.Unlocked).
	h := mixHold{kind: kindPlain, keys: []string{key}, mode: modeAuto}
	if shared {
		h.kind = kindReader
	}
	if d > ld.ttl {
		// A fn that outlasts the TTL rests on renewals: a lock lost
		// there is the lock-delay's case.
		h.mode = modeExpire
	}
	m.drawOptions(rng, &h)
	h.minHold = 0
	var opts []LockOption
	if h.fenced {
		opts = append(opts, WithFencing(true))
	}
	if h.topUpOff {
		opts = append(opts, WithTopUp(false))
	}
	if h.lockDelay > 0 {
		opts = append(opts, WithLockDelay(h.lockDelay))
	}
	var (
		l    *Lock
		rec  chaosHold
		hand chan<- chaosHold
		lost bool
	)
	closedBefore := mc.closed.Load()
	capture := func(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
		called := time.Now()
		lk, err := acquire(ctx, key, opts...)
		returned := time.Now()
		if m.settleAcquire(stop, mc, []string{key}, "do", "", lk, err, closedBefore, true, returned.Sub(called)) {
			l = lk
			rec = chaosHold{key: key, client: mc.index, worker: w, token: lk.Token(), acquired: returned, until: lk.Until(),
				nodes: yesNodes(lk), shared: shared, op: "do", fence: lk.Fence(), start: lk.acquired, lockDelay: h.lockDelay}
			hand = m.watch(lk, []string{key})
			m.countOptions(h)
		}
		return lk, err
	}
	fn := func(ctx context.Context) error {
		if h.validate {
			m.validate(mc, w, l, key, false)
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			lost = errors.Is(context.Cause(ctx), ErrLockLost)
		}
		rec.released = time.Now()
		hand <- rec
		if panics {
			panic(mixPanic{mc.index, w})
		}
		if fails {
			return errMixFn
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(stop, ld.lockWait+3*ld.ttl)
	defer cancel()
	mc.inFlight.Add(1)
	p, err := mixCatch(func() error { return mc.c.do(ctx, key, fn, opts, capture) })
	mc.inFlight.Add(-1)
	if p != nil {
		if _, ours := p.(mixPanic); !ours {
			panic(p)
		}
		m.count("do-panic")
		// Do unlocks before the panic goes on; only a Close can stop it.
		if !mc.closing.Load() && l.Err() == nil {
			m.violate("client %d Do on %s: the lock is still held after fn panicked", mc.index, shortKey(key))
		}
		return
	}
	if l == nil {
		return // settleAcquire checked the error
	}
	if lost {
		m.count("do-lost")
	}
	switch {
	case fails && !errors.Is(err, errMixFn):
		m.violate("client %d Do on %s: got %v, want fn's error", mc.index, shortKey(key), err)
	case lost && !errors.Is(err, ErrLockLost):
		m.violate("client %d Do on %s: fn saw the lock lost, got %v, want ErrLockLost", mc.index, shortKey(key), err)
	case err == nil, errors.Is(err, errMixFn), errors.Is(err, ErrLockLost), errors.Is(err, ErrUnconfirmed):
	case mc.closing.Load() && errors.Is(err, ErrClosed):
	default:
		m.violate("client %d Do on %s: got %v, want nil, fn's error, ErrLockLost or ErrUnconfirmed", mc.index, shortKey(key), err)
	}
}

// mixCatch calls f and returns what it panicked with, or its error.
func mixCatch(f func() error) (p any, err error) {
	defer func() { p = recover() }()
	return nil, f()
}

// watch starts a watcher that follows l until it ends and records its hold
// on each of keys. The worker sends the hold's record on the returned
// channel, once, when it is done with the lock; the watcher adds the final
// Until, when Done closed, and, if Done was late, when it first found it
// open past Until (see chaosDoneLate).
func (m *mixRun) watch(l *Lock, keys []string) chan<- chaosHold {
	hand := make(chan chaosHold, 1)
	m.watchers.Go(func() { m.follow(l, keys, hand) })
	return hand
}

func (m *mixRun) follow(l *Lock, keys []string, hand <-chan chaosHold) {
	done := l.Done()
	tm := time.NewTimer(time.Until(l.Until()))
	defer tm.Stop()
	var (
		rec            chaosHold
		doneAt, fired  time.Time
		handed, forced bool
	)
	for !handed || (doneAt.IsZero() && done != nil) {
		select {
		case rec = <-hand:
			handed, hand = true, nil
		case <-done:
			doneAt, done = time.Now(), nil
			tm.Stop()
		case <-tm.C:
			now := time.Now()
			if u := l.Until(); now.Before(u) {
				// Extended: wait for the new Until.
				fired, forced = time.Time{}, false
				tm.Reset(u.Sub(now))
				continue
			}
			switch {
			case fired.IsZero():
				fired = now
				tm.Reset(mixDoneGrace)
			case !forced:
				// Done checks Until itself: asking must close it.
				forced = true
				select {
				case <-l.Done():
				default:
					if u := l.Until(); !time.Now().Before(u) {
						m.violate("%s: Done still open when asked, %v past Until", shortKeys(keys), time.Since(u))
					}
				}
				tm.Reset(m.giveUp)
			default:
				m.violate("%s: Done never closed, %v past Until", shortKeys(keys), time.Since(l.Until()))
				done = nil
			}
		case <-m.stopWatch:
			m.violate("%s: the hold never ended (handed %t, done %t)", shortKeys(keys), handed, !doneAt.IsZero())
			return
		}
	}
	rec.until = l.Until()
	rec.doneAt, rec.doneFired = doneAt, fired
	for _, k := range keys {
		rk := rec
		rk.key = k
		m.r.rec.hold(rk)
	}
	if !fired.IsZero() && !doneAt.IsZero() {
		m.mu.Lock()
		m.doneLag = max(m.doneLag, doneAt.Sub(fired))
		m.mu.Unlock()
	}
}

// churn builds short-lived Clients over their own go-redis clients, the
// way Client 0 reaches the nodes (through its proxies, when the cluster has
// them), runs workers on each, and closes it after 200-700ms, with calls in
// flight, until stop is cancelled.
func (m *mixRun) churn(stop context.Context, rng *rand.Rand) {
	for gen := 0; stop.Err() == nil; gen++ {
		mc, closeRedis := m.newChurnClient(gen)
		if mc == nil {
			return
		}
		var wg sync.WaitGroup
		for w := range mixChurnWorkers {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			wg.Go(func() { m.worker(stop, mc, w, wrng) })
		}
		tm := time.NewTimer(mixBetween(rng, 200*time.Millisecond, 700*time.Millisecond))
		select {
		case <-tm.C:
		case <-stop.Done():
			tm.Stop()
		}
		began := time.Now()
		mc.closingAt.Store(&began)
		mc.closing.Store(true)
		inFlight := mc.inFlight.Load()
		_ = mc.c.Close()
		took := time.Since(began)
		mc.closed.Store(true)
		m.checkWaitEvents(mc)
		m.mu.Lock()
		m.counts["closed-clients"]++
		m.counts["closed-in-flight"] += int(inFlight)
		m.closeTook = max(m.closeTook, took)
		m.mu.Unlock()
		wg.Wait()
		closeRedis()
	}
}

// newChurnClient builds the gen-th short-lived Client, with a slow and
// panicking Observer and a slow logger, and a function that closes its
// go-redis clients.
func (m *mixRun) newChurnClient(gen int) (*mixClient, func()) {
	cl := m.r.cl
	rcs := make([]redis.UniversalClient, len(cl.nodes))
	for i, n := range cl.nodes {
		var addr string // unused by a cluster's client
		switch {
		case cl.opts.proxied:
			addr = cl.clients[0].proxies[i].Addr()
		case n.cluster == nil:
			addr = n.addr()
		}
		ro := chaosRedisOptions(addr)
		switch {
		case cl.opts.defaultClients:
			ro = &redis.Options{Addr: addr}
		case cl.opts.fastFailClients:
			ro = &redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 75 * time.Millisecond}
		}
		rcs[i] = n.dial(ro)
	}
	closeRedis := func() {
		for _, rc := range rcs {
			_ = rc.Close()
		}
	}
	mc := &mixClient{index: 100 + gen, churn: true}
	c, err := New(rcs, append(slices.Clip(m.opts), m.churnCallbacks(mc)...)...)
	if err != nil {
		m.violate("churn: New: %v", err)
		closeRedis()
		return nil, nil
	}
	setHooks(c, cl.opts.hooks)
	c.raiseMaxTTL(m.maxTTL)
	mc.c = c
	return mc, closeRedis
}

// churnCallbacks are the callbacks of a short-lived Client. They draw from
// a generator of their own, seeded from the Client's number: the churn's
// goroutine may not use the run's.
func (m *mixRun) churnCallbacks(mc *mixClient) []Option {
	rng := &mixRand{rng: rand.New(rand.NewPCG(uint64(m.r.seed), uint64(mc.index)))}
	return []Option{
		WithObserver(&mixObserver{m: m, mc: mc, pSlow: 0.03, pPanic: 0.2, rng: rng}),
		WithLogger(slog.New(&mixLogHandler{m: m, mc: mc, pSlow: 0.03, rng: rng, next: m.nextLog})),
	}
}

// probe holds every key of the pool at once from Client 0, before the
// workload starts, each by another kind in turn (fenced, owner, reader,
// permit): names that look alike, such as jobs:{q1} and jobs:{q1}:waiting
// or acct and {acct}:fence, are independent locks, so none may wait for
// another. It also tries every reserved key with each kind of call, which
// must refuse it before any I/O.
func (m *mixRun) probe() {
	mc := m.clients[0]
	bg := context.Background()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	type held struct {
		l    *Lock
		rec  chaosHold
		hand chan<- chaosHold
	}
	var hs []held
	for i, key := range m.keys {
		h := mixHold{kind: []mixKind{kindFenced, kindOwner, kindReader, kindPermit}[i%4], keys: []string{key}}
		h.fenced = h.kind == kindFenced || m.mustFence(h.kind, h.keys)
		if h.kind == kindOwner {
			h.owner = "probe"
		}
		l, rec, err := m.acquire(ctx, bg, mc, -1, h, false)
		if l == nil {
			m.violate("probe: %s %s not held beside the keys held before it (%d of them): %v", h.kind, shortKey(key), len(hs), err)
			continue
		}
		hs = append(hs, held{l, rec, m.watch(l, h.keys)})
	}
	for _, key := range m.reserved {
		for _, kind := range []mixKind{kindPlain, kindReader, kindPermit, kindMulti} {
			keys := []string{key}
			if kind == kindMulti {
				keys = []string{m.keys[0], key}
			}
			if l, rec, _ := m.acquire(ctx, bg, mc, -1, mixHold{kind: kind, keys: keys}, true); l != nil {
				m.watch(l, keys) <- m.release(mc, l, rec, false)
			}
		}
	}
	for _, h := range hs {
		h.hand <- m.release(mc, h.l, h.rec, true)
	}
	m.probeLeaders(ctx, mc)
}

// clientsClosed runs once the scenario's Clients have closed: from then on
// their callbacks must stay silent. It waits for the watchers, which record
// the holds, up to well past the longest validity.
func (m *mixRun) clientsClosed() {
	for _, mc := range m.clients {
		mc.closing.Store(true)
		mc.closed.Store(true)
		m.checkWaitEvents(mc)
	}
	done := make(chan struct{})
	go func() {
		m.watchers.Wait()
		close(done)
	}()
	tm := time.NewTimer(2*m.maxTTL + 2*m.giveUp)
	defer tm.Stop()
	select {
	case <-done:
	case <-tm.C:
		close(m.stopWatch)
		<-done
	}
}

// figures returns what the mix did and what it found.
func (m *mixRun) figures() *mixFigures {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &mixFigures{counts: maps.Clone(m.counts), violations: slices.Clone(m.violations), nViolations: m.nViolations,
		doneLag: m.doneLag, closeTook: m.closeTook}
}

// report fails the test for every breach of the API's contracts the run
// found, and for every Done that closed late.
func (m *mixRun) report(f chaosFigures, replay string) {
	t := m.r.t
	t.Helper()
	for _, v := range f.mix.violations {
		t.Errorf("scenario %s: %s", m.r.name, v)
	}
	if f.mix.nViolations > 0 {
		t.Errorf("scenario %s (seed %d): got %d breaches of the API's contracts (the first %d above), want 0; %s",
			m.r.name, m.r.seed, f.mix.nViolations, len(f.mix.violations), replay)
	}
	for i, h := range f.doneLate {
		if i == 5 {
			break
		}
		late := "never"
		if !h.doneAt.IsZero() {
			late = h.doneAt.Sub(h.doneFired).String()
		}
		t.Logf("done late: client %d %s %s token %s: Until passed, Done closed %s after the watcher's timer at Until",
			h.client, h.op, shortKey(h.key), h.token, late)
	}
	if n := len(f.doneLate); n > 0 {
		t.Errorf("scenario %s (seed %d): got %d holds whose Done closed more than %v after Until, want 0; %s",
			m.r.name, m.r.seed, n, mixDoneGrace, replay)
	}
	m.reportOrder(f, replay)
}

// mixKey is a key found under a run's prefix.
type mixKey struct {
	node      int
	key, kind string
	pttl      time.Duration // negative: no expiry
}

// mixOutliveSlack is how much longer than the longest TTL the mix sends a
// key may have left when the Clients close: the minimum hold left is
// rounded up to the millisecond.
const mixOutliveSlack = 20 * time.Millisecond

// residue waits until every TTL has run out, then counts the keys left
// under the run's prefix on the live nodes, whatever they are: lock
// strings, owner and reader hashes, semaphores' sorted sets, waiting
// markers. Fence and ticket counters and term records never expire, by
// design, and are left out (mixNeverExpires). It
// logs what was there when the Clients had closed, by kind. A key found
// then with more time to live than the longest the mix ever asks the nodes
// to keep one (mixMaxTTL: twice the TTL and the longest lock-delay; the
// minimum holds are shorter) is a breach of the contract: the lock-delay
// counted twice, or a minimum hold set from the wrong start.
func (m *mixRun) residue() int {
	r := m.r
	r.t.Helper()
	var wait time.Duration
	atClose := map[string]int{}
	for _, n := range r.cl.liveNodes() {
		for _, k := range mixScan(n, r.prefix) {
			atClose[k.kind]++
			wait = max(wait, k.pttl)
			if k.pttl > m.maxTTL+mixOutliveSlack {
				m.violate("node %d %s %s has %v to live when the Clients closed, more than any TTL the mix sends (%v)",
					k.node, k.kind, shortKey(k.key), k.pttl, m.maxTTL)
			}
		}
	}
	r.t.Logf("chaos-detail: scenario=%s left-at-close %v max-pttl=%v", r.name, atClose, wait)
	// A request that TCP held back (a kernel partition) or that a loaded
	// machine delayed may still land after the Clients closed, with a
	// fresh TTL: scan again until nothing is left, for a few rounds. A key
	// that outlives them keeps coming back or never expires.
	var keys []mixKey
	for round := 0; round < 5; round++ {
		r.sleep(wait + 20*time.Millisecond)
		keys, wait = keys[:0], 0
		for _, n := range r.cl.liveNodes() {
			for _, k := range mixScan(n, r.prefix) {
				keys = append(keys, k)
				wait = max(wait, k.pttl)
			}
		}
		if len(keys) == 0 {
			return 0
		}
		r.t.Logf("chaos-detail: scenario=%s still there after %d waits: %d keys, max-pttl=%v", r.name, round+1, len(keys), wait)
		if wait < 0 {
			break // a key without a TTL: it will not go
		}
	}
	for _, k := range keys {
		r.t.Logf("residue: node %d %s %s pttl %v", k.node, k.kind, shortKey(k.key), k.pttl)
	}
	return len(keys)
}

// mixScan lists the keys under prefix on node n (on every master of a
// cluster), but the names that never expire (mixNeverExpires), with their
// kind and TTL. Reading them expires those whose time has come.
func mixScan(n *chaosNode, prefix string) []mixKey {
	n.t.Helper()
	ctx := n.t.Context()
	var out []mixKey
	for _, admin := range n.admins() {
		iter := admin.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if !strings.HasPrefix(k, prefix) || mixNeverExpires(k) {
				continue
			}
			typ, err := admin.Type(ctx, k).Result()
			if err != nil {
				n.t.Fatalf("%v: TYPE: %v", n, err)
			}
			pttl, err := admin.PTTL(ctx, k).Result()
			if err != nil {
				n.t.Fatalf("%v: PTTL: %v", n, err)
			}
			if typ == "none" || pttl == -2*time.Nanosecond || pttl == -2*time.Millisecond {
				continue // expired between SCAN and TYPE
			}
			kind := typ
			if i := strings.Index(k, keyspace.Reserved); i >= 0 {
				kind = "derived"
				if keyspace.Waiting(k[:i]) == k {
					kind = "marker"
				}
			}
			out = append(out, mixKey{node: n.index, key: k, kind: kind, pttl: pttl})
		}
		if err := iter.Err(); err != nil {
			n.t.Fatalf("%v: SCAN: %v", n, err)
		}
	}
	return out
}

// globEscape escapes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// mixKeys draws a run's key pool, and the reserved keys the library must
// refuse. The pool starts with names that look like each other's derived
// names (jobs:{q1} beside jobs:{q1}:waiting, acct beside {acct}:fence),
// then a long key, then names drawn from bases and suffixes: hash tags,
// braces that make no tag, binary bytes, the library's own suffixes and
// pieces of the reserved sequence. A drawn name that holds the whole
// sequence goes to the reserved keys.
func mixKeys(rng *rand.Rand) (pool, reserved []string) {
	add := func(k string) {
		switch {
		case strings.Contains(k, keyspace.Reserved):
			if !slices.Contains(reserved, k) {
				reserved = append(reserved, k)
			}
		case k != "" && !slices.Contains(pool, k):
			pool = append(pool, k)
		}
	}
	for _, k := range []string{"jobs:{q1}", "jobs:{q1}:waiting", "acct", "{acct}:fence"} {
		add(k)
	}
	add(strings.Repeat("x", 1000+rng.IntN(3000)) + pool[rng.IntN(len(pool))])
	bases := []string{"lk", "{lk}", "a{b", "{}x", "x}{y", "\xff\xfe\x01", "é{ü}", "k\x00redlock", "redlock:fence", "\x00", "q:{}"}
	suffixes := []string{":waiting", ":fence", ":released", "\x00redlock", "\x00redlock;fence", "\x00redlock:", "\x00redlock:waiting{x}",
		"\x00", "{", "}", ":{t}"}
	for len(pool) < 12 {
		b := bases[rng.IntN(len(bases))]
		add(b)
		add(b + suffixes[rng.IntN(len(suffixes))])
		add("{" + b + "}" + suffixes[rng.IntN(len(suffixes))])
	}
	for _, k := range []string{"acct" + keyspace.Reserved + "fence", "jobs:{q1}" + keyspace.Reserved + "waiting", keyspace.Reserved} {
		add(k)
	}
	return pool, reserved
}

// shortKey quotes a key for a message, cut when it is long.
func shortKey(k string) string {
	if len(k) > 40 {
		return fmt.Sprintf("%q...(%d bytes)", k[:16], len(k))
	}
	return fmt.Sprintf("%q", k)
}

func shortKeys(keys []string) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = shortKey(k)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// mixPick draws an index with the given weights.
func mixPick(rng *rand.Rand, weights []int) int {
	sum := 0
	for _, w := range weights {
		sum += w
	}
	n := rng.IntN(sum)
	for i, w := range weights {
		if n < w {
			return i
		}
		n -= w
	}
	return len(weights) - 1
}

// mixBetween draws a duration in [lo, hi].
func mixBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + randDuration(rng, hi-lo)
}

// mixRand is a generator that callbacks on many goroutines share.
type mixRand struct {
	mu  sync.Mutex
	rng *rand.Rand // guarded by mu
}

func (r *mixRand) draw(p float64) bool {
	if p == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64() < p
}

func (r *mixRand) between(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return mixBetween(r.rng, lo, hi)
}

// mixObserver is an Observer that sleeps or panics now and then, and
// reports a call that comes after its Client's Close returned.
type mixObserver struct {
	m             *mixRun
	mc            *mixClient
	pSlow, pPanic float64
	rng           *mixRand
}

func (o *mixObserver) Attempted(Stats, error) { o.call("Attempted") }
func (o *mixObserver) Extended(Stats, error)  { o.call("Extended") }
func (o *mixObserver) Lost(string, error)     { o.call("Lost") }
func (o *mixObserver) Released(Stats, error)  { o.call("Released") }
func (o *mixObserver) Queued(QueuePlace)      { o.call("Queued") }
func (o *mixObserver) HoldEnded(HoldResult)   { o.call("HoldEnded") }

// TraceLock tells the mix the id of a fair call it times (see mixSends),
// before the call, which may panic.
func (o *mixObserver) TraceLock(ctx context.Context, w WaitInfo) func(WaitResult) {
	if fw, ok := ctx.Value(mixFairWaitKey{}).(*mixFairWait); ok {
		fw.id = w.ID
	}
	o.call("TraceLock")
	return nil
}

// WaitBegan and WaitEnded are counted before the call, which may panic:
// the library pairs them even then (see checkWaitEvents).
func (o *mixObserver) WaitBegan(WaitInfo) {
	o.mc.waitsBegan.Add(1)
	o.call("WaitBegan")
}

func (o *mixObserver) WaitEnded(WaitResult) {
	o.mc.waitsEnded.Add(1)
	o.call("WaitEnded")
}

func (o *mixObserver) call(name string) {
	if o.mc.closed.Load() {
		o.m.violate("client %d: Observer.%s called after Close returned", o.mc.index, name)
	}
	if o.rng.draw(o.pSlow) {
		o.m.count("slow-callbacks")
		time.Sleep(o.rng.between(50*time.Millisecond, 200*time.Millisecond))
	}
	if o.rng.draw(o.pPanic) {
		o.m.count("observer-panics")
		panic("mix: Observer." + name + " panics on purpose")
	}
}

// mixLogHandler is a slog.Handler at every level that sleeps now and then,
// reports a record that comes after its Client's Close returned, and passes
// the records on to the scenario's own logger, if any.
type mixLogHandler struct {
	m             *mixRun
	mc            *mixClient
	pSlow, pPanic float64
	rng           *mixRand
	next          slog.Handler
}

func (h *mixLogHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *mixLogHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *mixLogHandler) WithGroup(string) slog.Handler            { return h }

func (h *mixLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if h.mc.closed.Load() {
		h.m.violate("client %d: logger called after Close returned: %s", h.mc.index, rec.Message)
	}
	h.m.count("log-records")
	if h.rng.draw(h.pSlow) {
		h.m.count("slow-callbacks")
		time.Sleep(h.rng.between(50*time.Millisecond, 200*time.Millisecond))
	}
	if h.rng.draw(h.pPanic) {
		h.m.count("logger-panics")
		panic("mix: the logger panics on purpose")
	}
	if h.next != nil && h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

// chaosMixScenarios drive the mix under each family of faults: none, kills
// and pauses, restarts (empty after the longest TTL, or with their data;
// with the node guard, empty within it), clock steps with the guard, late
// delivery, lost replies with go-redis's retries, the random mix, and
// kernel partitions. The
// floors are low: on a loaded 2-core machine under -race the mix's long
// holds and slow callbacks leave few acquisitions, and the point is that
// some happen and none overlap. The last of them is a negative control;
// the scenarios of the fair lock and the election, and their controls,
// follow (mixOrderScenarios).
func chaosMixScenarios() []chaosScenario {
	ttl := defaultChaosLoad().ttl
	delay := mixRestartDelay(ttl)
	scs := []chaosScenario{
		{name: "mix-baseline-mini", mix: true, minSuccess: 10, minAcquisitions: 10,
			cluster: chaosClusterOpts{backend: miniBackend, clients: 3},
			load:    both(miniLoad, mixLoad)},
		// One node killed for good, then another paused beyond the TTL.
		{name: "mix-kill-pause", mix: true, minSuccess: 5, minAcquisitions: 5, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, defaultClients: true},
			load:    mixLoad,
			faults: func(r *chaosRun) {
				nodes := r.pick(2)
				r.at(0.15)
				r.inject(&killFault{nodes: nodes[:1]})
				r.at(0.4)
				r.during(&pauseFault{node: nodes[1]}, r.between(2*ttl, 3*ttl))
			}},
		// Three nodes in turn killed, and back with their data or empty
		// once the longest TTL has passed.
		{name: "mix-restarts", mix: true, minSuccess: 5, minAcquisitions: 5,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, persistence: true},
			load:    mixLoad,
			faults: func(r *chaosRun) {
				for i, n := range r.pick(3) {
					r.at(0.1 + 0.25*float64(i))
					mode := restartDelayed
					if r.rng.IntN(2) == 0 {
						mode = restartWithData
					}
					f := &restartFault{node: n, mode: mode, delay: delay}
					r.inject(f)
					r.heal(f)
				}
			}},
		// With the node guard, two nodes restarted empty at once, within
		// the TTL; later two others.
		{name: "mix-guard-empty-restart", mix: true, guard: true, settle: guardSettle(mixMaxTTL(ttl)),
			minSuccess: 5, minAcquisitions: 5,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3},
			load:    mixLoad,
			faults: func(r *chaosRun) {
				nodes := r.pick(4)
				for i, at := range []float64{0.15, 0.55} {
					r.at(at)
					r.restartEmpty(nodes[2*i : 2*i+2])
				}
			}},
		// With the node guard, one node's clock stepped forward for real
		// at a time, by 60% of the TTL.
		{name: "mix-clock-steps-guard-mini", mix: true, guard: true, minSuccess: 5, minAcquisitions: 5,
			cluster: chaosClusterOpts{backend: miniBackend, clients: 3},
			load:    both(miniLoad, mixLoad),
			faults:  clockSteps},
		{name: "mix-late-delivery", mix: true, minSuccess: 2, minAcquisitions: 5, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, proxied: true, fastFailClients: true},
			load:    both(lateLoad, mixLoad), faults: lateOnAll},
		{name: "mix-lost-replies", mix: true, minSuccess: 5, minAcquisitions: 5, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, proxied: true, defaultClients: true},
			load:    mixLoad, faults: loseRepliesAndResend},
		{name: "mix-random-faults", mix: true, minSuccess: 5, minAcquisitions: 5,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, proxied: true, persistence: true},
			load:    mixLoad,
			faults:  func(r *chaosRun) { r.randomFaults(r.start.Add(r.load.duration*9/10), delay) }},
		// Kernel partitions (chaos_partition_test.go): one node at a time
		// cut in the kernel, both ways, requests only or replies only, for
		// 300ms to 1.5s; TCP delivers what was dropped once the rules go.
		// It skips where iptables cannot be used, unless CI is set.
		{name: "mix-partition", mix: true, minSuccess: 5, minAcquisitions: 5, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3},
			load:    mixLoad,
			faults: func(r *chaosRun) {
				p := newChaosPartitioner(r)
				end := r.start.Add(r.load.duration * 9 / 10)
				for {
					r.sleep(r.between(0, r.load.ttl))
					f := p.random()
					if f.hold = min(f.hold, 1500*time.Millisecond, time.Until(end)); f.hold < partitionMinHold {
						return
					}
					f.once(r)
				}
			}},
		// Issue 28's top-up, out of the model: one node at a time restarted
		// empty without the guard, once with the top-up on every exclusive
		// hold and once off on every one (chaos-detail reports both).
		mixTopUpScenario(true),
		mixTopUpScenario(false),
		// WithFsyncAck on Valkey 8, one node without its append-only
		// file; and its negative control, the same without the option.
		mixFsyncScenario(true),
		mixFsyncScenario(false),

		// The negative control: a majority of the nodes restarted empty at
		// once, four times, without the guard. Holds of up to half a TTL
		// (1s) on three keys are still valid when the nodes come back, and
		// the waiting workers take the keys again: the checker must report
		// an overlap, whatever kinds of holds meet, or a wrong verdict (a
		// node that lost a key its holder counts on: the overlap about to
		// happen). Idle, one run shows both.
		{name: "control-mix-empty-restart-majority", mix: true, control: true, tries: 5, expect: findBroken,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3},
			load: func(l *chaosLoad) {
				mixLoad(l)
				l.ttl = time.Second
				l.keys = 3
				l.holdMax = l.ttl / 2
			},
			faults: func(r *chaosRun) {
				for _, at := range []float64{0.2, 0.4, 0.6, 0.8} {
					r.at(at)
					r.restartEmpty(r.pick(3))
				}
			}},
	}
	// The fair lock's order and the election's Observe are asserted
	// where every waiter and every read keeps a quorum
	// (chaos_fair_election_test.go).
	return setMixChecks(slices.Concat(scs, mixOrderScenarios()), "mix-baseline-mini", "mix-fair-election")
}

// mixTopUpScenario is the exact-quorum window under the mix: out of the
// model, Kleppmann's case. Every cycle, another token briefly takes every
// key of the pool on two nodes, as a rival in a split vote would, so that
// the holds acquired meanwhile win exactly the other three; once that
// token has expired and two renewals have had time to pass, one of the three
// restarts empty, without the guard. With on, every exclusive hold tops up
// (WithTopUp, the default): an auto-extended hold is then on every node by
// the restart, and only the holds that never extend (overrun, left to
// expire) stay in the window. Without, none does, and a node that refused
// a hold never joins it (strictTopUp). Both are measured (chaos-detail's
// "out of the model" line). Asserted in both: no hold overlaps another once
// every node acknowledged one of its renewals (chaosWholeOverlaps), which
// holds because the restarts are further apart than the longest hold of
// the mix (two TTLs and a round), so that a hold loses the key on one node
// at most.
func mixTopUpScenario(on bool) chaosScenario {
	name, mode := "mix-topup-empty-restart-one", topUpOn
	if !on {
		name, mode = "mix-topup-off-empty-restart-one", topUpOff
	}
	return chaosScenario{
		name: name, mix: true, outOfModel: true, assertWhole: true, minSuccess: 5, minAcquisitions: 5,
		cluster: chaosClusterOpts{backend: realBackend, clients: 3},
		load: func(l *chaosLoad) {
			mixLoad(l)
			l.keys, l.workers = 3, 4
		},
		mixTune: func(m *mixRun) {
			m.topUp, m.strictTopUp = mode, true
			// plain, fenced, multi, owner, reader, writer, permit, Do:
			// exclusive locks only, which top up (readers and permits
			// do not).
			m.kindWeights = []int{20, 14, 8, 14, 0, 10, 0, 6}
			// short, extend-shorter, extend-longer, auto, max-hold,
			// unlock-race, overrun, expire: short or auto-extended, so
			// that a hold still there at the restart has renewed since
			// the rival's token went.
			m.modeWeights = []int{45, 0, 0, 45, 5, 5, 0, 0}
		},
		faults: func(r *chaosRun) {
			ttl := r.load.ttl
			for {
				next := time.Now().Add(r.between(5*ttl/2, 3*ttl))
				if time.Since(r.start) > r.load.duration*8/10 {
					return
				}
				order := r.pick(len(r.cl.nodes))
				end := r.splitVote(order[:2], ttl)
				// Past the token's end by two renewal periods (a third of
				// the TTL each) and a margin: every auto-extended hold
				// acquired meanwhile has renewed since, even one whose
				// renewal came just before the end and another that a
				// busy machine delayed.
				r.sleep(time.Until(end.Add(2*ttl/3 + ttl/10)))
				r.restartEmpty(order[2:3])
				r.sleep(time.Until(next))
			}
		},
	}
}

// splitVote takes every key of the mix's pool on the given nodes for
// another token, until d has passed: at once where the key is free, and
// where a holder has it, as soon as it lets it go (the token polls every
// millisecond), as a rival splitting the votes would. The holds acquired
// meanwhile win at most the other nodes. Every token it set expires when d
// has passed, which it returns.
func (r *chaosRun) splitVote(nodes []int, d time.Duration) (end time.Time) {
	r.t.Helper()
	end = time.Now().Add(d)
	taken := map[string]bool{}
	for left := time.Until(end); left > time.Millisecond && len(taken) < len(nodes)*len(r.mix.keys); left = time.Until(end) {
		for _, i := range nodes {
			for _, k := range r.mix.keys {
				id := fmt.Sprint(i, k)
				if taken[id] {
					continue
				}
				ok, err := r.cl.nodes[i].admin.SetNX(r.t.Context(), r.prefix+k, "split-vote", left).Result()
				if err != nil {
					r.t.Fatalf("node %d: %v", i, err)
				}
				if ok {
					taken[id] = true
				}
			}
		}
		r.sleep(time.Millisecond)
	}
	r.logFault("split vote: another token took %d of %d keys on nodes %v until %v", len(taken), len(nodes)*len(r.mix.keys), nodes,
		end.Sub(r.start).Round(time.Millisecond))
	return end
}

// mixFsyncNoAOF is the node of mixFsyncScenario that runs without its
// append-only file.
const mixFsyncNoAOF = 4

// mixFsyncScenario runs the mix on Valkey 8 nodes with the append-only file
// (appendfsync always), but for node 4, whose appendonly was left off, as a
// misconfigured node's would be. The nodes are SIGKILLed and restarted at
// once from their files, without the delay and without the guard: in turn
// one node with a file, node 4 (which comes back empty), and a majority at
// once, node 4 among it. With ack, every Client takes WithFsyncAck: node
// 4's yes never counts (WAITAOF refuses a node without the file), and
// every yes that counted survives its node's restart, so the scenario is
// in the model. Without it, the negative control: node 4's yes counts, and
// a hold that won exactly a quorum with it loses the key there when node 4
// restarts. A SIGKILL cannot tell WithFsyncAck from appendfsync alone on a
// node that has the file: the kernel keeps what redis-server wrote, fsynced
// or not (docs/SAFETY.md).
func mixFsyncScenario(ack bool) chaosScenario {
	sc := chaosScenario{
		name: "mix-fsync-ack-valkey", mix: true, minSuccess: 5, minAcquisitions: 5, verdicts: true,
		cluster: chaosClusterOpts{backend: realBackend, clients: 3, persistence: true, noAOF: []int{mixFsyncNoAOF}, valkey: true},
		load: func(l *chaosLoad) {
			mixLoad(l)
			// Room for the WAITAOF of each batch on a busy machine.
			l.nodeTimeout = 100 * time.Millisecond
		},
		opts: []Option{WithFsyncAck(true)},
		faults: func(r *chaosRun) {
			ttl := r.load.ttl
			for i := 0; ; i++ {
				r.sleep(r.between(ttl/2, ttl))
				if time.Since(r.start) > r.load.duration*9/10 {
					return
				}
				var nodes []int
				switch i % 3 {
				case 0:
					nodes = []int{r.rng.IntN(mixFsyncNoAOF)}
				case 1:
					nodes = []int{mixFsyncNoAOF}
				case 2:
					nodes = append(r.rng.Perm(mixFsyncNoAOF)[:2], mixFsyncNoAOF)
				}
				fs := make([]chaosFault, len(nodes))
				for j, n := range nodes {
					fs[j] = &restartFault{node: n, mode: restartWithData}
					r.inject(fs[j])
				}
				for _, f := range fs {
					r.heal(f)
				}
			}
		},
	}
	if !ack {
		sc.name, sc.opts = "control-mix-fsync-off-valkey", nil
		sc.control, sc.verdicts, sc.tries, sc.expect = true, false, 5, findBroken
	}
	return sc
}

// TestChaosMixRefusal shows that the refusal check can fail: a reserved key
// that is accepted, a key refused that holds no reserved sequence (a
// look-alike, a name like a derived one), or options that must be refused
// and are not, is reported.
func TestChaosMixRefusal(t *testing.T) {
	refused := fmt.Errorf("%w: key contains the reserved sequence", ErrInvalidOption)
	const owner = "an owner lock with WithMinHold"
	cases := []struct {
		name   string
		prefix string
		keys   []string
		refuse string
		err    error
		bad    bool
	}{
		{"reserved, refused", "p:", []string{"a" + keyspace.Reserved}, "", refused, false},
		{"split across the prefix, refused", "p\x00", []string{"redlock:x"}, "", refused, false},
		{"plain, accepted", "p:", []string{"a"}, "", nil, false},
		{"plain, not acquired", "p:", []string{"a"}, "", ErrNotAcquired, false},
		{"reserved, accepted", "p:", []string{"a" + keyspace.Reserved}, "", nil, true},
		{"reserved in a multi-key call, not refused", "p:", []string{"a", keyspace.Reserved}, "", ErrNotAcquired, true},
		{"a look-alike, refused", "p:", []string{"a\x00redlock;fence"}, "", refused, true},
		{"a derived-looking name, refused", "p:", []string{"{acct}:fence"}, "", refused, true},
		{"options refused", "p:", []string{"a"}, owner, refused, false},
		{"options accepted", "p:", []string{"a"}, owner, nil, true},
		{"options not acquired", "p:", []string{"a"}, owner, ErrNotAcquired, true},
		{"options and a reserved key, refused", "p:", []string{"a" + keyspace.Reserved}, owner, refused, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			why := mixRefusal(tc.prefix, tc.keys, tc.refuse, tc.err)
			if (why != "") != tc.bad {
				t.Fatalf("got %q, want a complaint: %t", why, tc.bad)
			}
		})
	}
}

// TestChaosMixKeys checks the key generator: the look-alikes and a long
// key are in every pool, no pool key holds the reserved sequence, and every
// reserved key does.
func TestChaosMixKeys(t *testing.T) {
	for seed := range uint64(50) {
		pool, reserved := mixKeys(rand.New(rand.NewPCG(seed, 1)))
		for _, k := range []string{"jobs:{q1}", "jobs:{q1}:waiting", "acct", "{acct}:fence"} {
			require.Contains(t, pool, k, "seed %d", seed)
		}
		require.True(t, slices.ContainsFunc(pool, func(k string) bool { return len(k) > 1000 }), "seed %d: no long key", seed)
		require.GreaterOrEqual(t, len(pool), 8, "seed %d", seed)
		for _, k := range pool {
			require.NotContains(t, k, keyspace.Reserved, "seed %d", seed)
		}
		require.NotEmpty(t, reserved)
		for _, k := range reserved {
			require.Contains(t, k, keyspace.Reserved, "seed %d", seed)
		}
	}
}

// TestChaosMixResidue shows that the mix's residue check finds what is
// left under the prefix, whatever its type: an owner lock's hash (which
// the lock scenarios' scan does not list), a reader's hash, a semaphore's
// sorted set and a waiting marker, all without a TTL; that it leaves a
// fence counter, an expired key and other prefixes alone; and that a key
// with more time to live than the longest TTL the mix sends is a breach,
// even once it has expired.
func TestChaosMixResidue(t *testing.T) {
	cl := newChaosCluster(t, chaosClusterOpts{backend: miniBackend, nodes: 1}, rand.New(rand.NewPCG(1, 2)))
	n := cl.nodes[0]
	ctx := t.Context()
	const prefix = "res:"
	admin := n.admin
	require.NoError(t, admin.Set(ctx, prefix+"lock", "v", 50*time.Millisecond).Err())
	require.NoError(t, admin.HSet(ctx, prefix+"owner", "owner", "o", "t:v", "1").Err())
	require.NoError(t, admin.HSet(ctx, prefix+"reader", "mode", "read", "r:v", "1").Err())
	require.NoError(t, admin.ZAdd(ctx, prefix+"sem", redis.Z{Score: -2, Member: permitsMember}, redis.Z{Score: 1, Member: "v"}).Err())
	require.NoError(t, admin.Set(ctx, keyspace.Waiting(prefix+"lock"), "1", 0).Err())
	require.NoError(t, admin.Set(ctx, keyspace.Fence(prefix+"lock"), "7", 0).Err())
	require.NoError(t, admin.Set(ctx, "other:lock", "v", 0).Err())
	require.NoError(t, admin.Set(ctx, prefix+"outlives", "v", 300*time.Millisecond).Err())

	// The lock scenarios' own scan sees owner hashes too (holderValues).
	found := false
	for _, k := range n.lockKeys(prefix) {
		found = found || k.key == prefix+"owner"
	}
	require.True(t, found, "the lock scenarios' scan misses a leftover owner lock")
	r := &chaosRun{t: t, name: "residue", prefix: prefix, cl: cl, start: time.Now()}
	m := &mixRun{r: r, maxTTL: 100 * time.Millisecond}
	require.Equal(t, 4, m.residue(), "want the owner and reader hashes, the sorted set and the marker")
	require.Equal(t, 1, m.nViolations, "violations: %q", m.violations)
	require.Contains(t, m.violations[0], `"res:outlives" has`)
	kinds := map[string]int{}
	for _, k := range mixScan(n, prefix) {
		kinds[k.kind]++
	}
	require.Equal(t, map[string]int{"hash": 2, "zset": 1, "marker": 1}, kinds)
}

// mixEnvPanicChild is "1" in the child process of
// TestChaosMixPanickingLogger.
const mixEnvPanicChild = "REDLOCK_MIX_PANIC_CHILD"

// panickingHandler is a slog.Handler that panics on every record at Warn
// or above: a user's bug, which the mix would like to run on some Clients.
type panickingHandler struct{}

func (panickingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (panickingHandler) Handle(context.Context, slog.Record) error {
	panic("mix: the logger panics on purpose")
}
func (h panickingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panickingHandler) WithGroup(string) slog.Handler      { return h }

// TestChaosMixPanickingLogger shows that a process survives a slog handler
// that panics: a lock expires, and the Client logs the loss at Warn on its
// notifier's goroutine. Before the Client's handler recovered (quietHandler),
// the panic killed the process there, as it would on the guard's or a
// sender's goroutine. The lock runs in a child process (this test binary
// again), so that a crash fails this test, not the run.
func TestChaosMixPanickingLogger(t *testing.T) {
	if os.Getenv(mixEnvPanicChild) == "1" {
		_, cs := minis(t, 3)
		c := newClient(t, cs, WithTTL(100*time.Millisecond), WithLogger(slog.New(panickingHandler{})))
		l, err := c.Lock(t.Context(), "k")
		require.NoError(t, err)
		<-l.Done()
		time.Sleep(200 * time.Millisecond) // the notifier logs the loss
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosMixPanickingLogger$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mixEnvPanicChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Fatalf("the process did not survive a logger that panics: %v\n%s", err, strings.Join(lines[:min(len(lines), 20)], "\n"))
	}
}

// TestChaosMixWatcherFindsLateDone is the live negative control of the
// check of Done: a lock whose expiry timer was stopped, and whose Done does
// not check Until itself (withTimerOnlyExpiry), keeps Done open past Until,
// as a library that forgot to arm the timer would. The watcher must report
// it, and chaosDoneLate must find its hold. The twin, with the timer left
// alone, must find nothing.
func TestChaosMixWatcherFindsLateDone(t *testing.T) {
	for _, broken := range []bool{true, false} {
		t.Run(fmt.Sprintf("broken=%t", broken), func(t *testing.T) {
			_, cs := minis(t, 3)
			c := setHooks(newClient(t, cs, WithTTL(200*time.Millisecond)), testHooks{timerOnlyExpiry: true})
			r := &chaosRun{t: t, name: "watcher", rec: newChaosRecorder(), start: time.Now()}
			m := &mixRun{r: r, counts: map[string]int{}, stopWatch: make(chan struct{}), maxTTL: time.Second, giveUp: 200 * time.Millisecond}
			l, err := c.TryLock(t.Context(), "k")
			require.NoError(t, err)
			if broken {
				l.mu.Lock()
				l.expiry.Stop()
				l.mu.Unlock()
			}
			m.watch(l, []string{"k"}) <- chaosHold{key: "k", token: l.Token(), acquired: time.Now()}
			m.clientsClosed()
			f := m.figures()
			late := chaosDoneLate(r.rec.holds, mixDoneGrace)
			if !broken {
				require.Zero(t, f.nViolations, "violations: %q", f.violations)
				require.Empty(t, late)
				return
			}
			require.Len(t, late, 1, "chaosDoneLate missed the hold whose Done stayed open")
			require.True(t, late[0].doneAt.IsZero(), "Done closed at %v", late[0].doneAt)
			require.Len(t, f.violations, 2, "violations: %q", f.violations)
			require.Contains(t, f.violations[0], "Done still open when asked")
			require.Contains(t, f.violations[1], "Done never closed")
			_ = l.Unlock(context.Background()) // closes Done, which the watcher stopped waiting for
		})
	}
}

// TestChaosMixSoak runs the mix for rounds of a minute, every fault family
// drawn at random (randomFaults: restarts, pauses, latency, blackholes,
// dropped replies, resets, client cuts, READONLY, NOSCRIPT, late delivery,
// lost replies), with a kernel partition of one node between draws, until
// 100,000 mixed acquisitions. It runs only in the long mode:
//
//	REDLOCK_CHAOS_LONG=1 go test -race -count=1 -run 'ChaosMixSoak' -v -timeout 90m .
func TestChaosMixSoak(t *testing.T) {
	if !chaosLong() {
		t.Skip("the mix soak runs only with -chaos.long or REDLOCK_CHAOS_LONG=1")
	}
	const want = 100_000
	giveUp := time.Now().Add(80 * time.Minute)
	sum := &chaosSummary{}
	for round := 0; sum.acquisitions < want; round++ {
		if time.Now().After(giveUp) {
			t.Fatalf("got %d mixed acquisitions in 80 minutes, want %d", sum.acquisitions, want)
		}
		sc := chaosScenario{
			name: fmt.Sprintf("mix-soak-%d", round), mix: true, minSuccess: 5, minAcquisitions: 100, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 4, proxied: true, persistence: true, fastFailClients: true},
			load: func(l *chaosLoad) {
				mixLoad(l)
				l.duration = time.Minute
			},
			faults: func(r *chaosRun) {
				p := newChaosPartitioner(r)
				end := r.start.Add(r.load.duration * 9 / 10)
				for time.Now().Before(end) {
					r.randomFaults(minTime(end, time.Now().Add(r.between(time.Second, 4*time.Second))), mixRestartDelay(r.load.ttl))
					f := p.random()
					if f.hold = min(f.hold, 1500*time.Millisecond, time.Until(end)); f.hold >= partitionMinHold {
						f.once(r)
					}
				}
			},
		}
		if !t.Run(sc.name, func(t *testing.T) { runChaosScenario(t, sc, sum) }) {
			break
		}
		t.Logf("chaos-soak: after %s: %d mixed acquisitions", sc.name, sum.acquisitions)
	}
	chaosPrint(t, sum.line())
	chaosPrint(t, sum.mixLine())
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
