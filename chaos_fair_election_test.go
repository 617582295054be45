package redlock

// The fair lock and the election under the mixed workload
// (chaos_mix_test.go), and the checks of their rules (internal/history):
//
//   - fair calls (kindFair): Lock or TryLock WithFair(true) on the pool's
//     fair keys (the fenced ones, mixFencedKey), in every hold mode. Each
//     waiting call records when it began, when WithQueuePlace first told
//     it its place (a quorum had queued it), when it stopped waiting and
//     when it acquired, and, through the fairSent hook, when each of its
//     queued attempts was sent: each one refreshes its queue entry. The
//     checker finds the calls that took the lock while one queued before
//     they began still waited (history.FIFOInversions), excused when that
//     one went half a TTL without a refresh (mixFIFOTolerance);
//   - campaigns (kindCampaign): an Election's Campaign on a small pool of
//     election keys, with a value of its own; the leader resigns after a
//     short or a long lead, leads past a term limit (WithMaxHold), or, on
//     a churned Client, crashes: the churn closes the Client without a
//     resign. Leaderships are exclusive, fenced holds of the key, so the
//     overlap check finds two leaders, and the fence check Terms that do
//     not rise; a leader asks Leader who leads now, now and then;
//   - an Observe of every election key by every Client of the scenario,
//     for the whole workload: each stream's non-zero Terms must rise
//     (history.ObserveRegressions), and it must deliver every leadership
//     that lasted a TTL, within a TTL and a slack of its Campaign's return
//     (history.MissedLeaders).
//
// Run them, with their negative controls:
//
//	go test -race -count=1 -run '^TestChaos$/^(mix-fair-election|mix-election|control-mix-(fair|election|observe))' -v .
//
// What each asserts, and what the mix's other scenarios measure, is in
// mixChecks and setMixChecks; the figures are in docs/SAFETY.md.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/keyspace"
)

// mixElectionKeys are the election keys of the mix: a key with a hash tag,
// and a look-alike of one of its derived names. Only campaigns take them.
var mixElectionKeys = []string{"lead{er}", "lead{er}:elected"}

// The fair lock and the election's draws.
const (
	// mixPCampaignFair is the share of campaigns taken WithFair(true):
	// campaigners then win in the order they began to wait.
	mixPCampaignFair = 0.3
	// mixPCampaignRefused is the share of campaigns given WithMinHold,
	// which Election must refuse.
	mixPCampaignRefused = 0.03
	// mixPLeaderProbe is the share of leaders that ask Leader who leads.
	mixPLeaderProbe = 0.3
)

// mixLead is what a leader does while it leads.
type mixLead uint8

const (
	leadShort     mixLead = iota // resign after up to holdMax
	leadLong                     // lead one to two TTLs, then resign
	leadTermLimit                // WithMaxHold of one to one and a half TTLs, led past it
	leadCrash                    // on a churned Client: never resign; the churn closes the Client
)

var mixLeadNames = [...]string{"lead-short", "lead-long", "lead-term-limit", "lead-crash"}

// mixLeadWeights are how often each is drawn; a crash on a Client that is
// not churned leads long instead.
var mixLeadWeights = []int{40, 35, 10, 15}

// mixChecks is what a mix scenario asserts of the fair and election
// rules. The zero value measures them and asserts nothing.
type mixChecks struct {
	// terms asserts that no Observe stream's Terms went back
	// (history.ObserveRegressions): every in-model scenario.
	terms bool
	// order asserts, beside terms, no FIFO inversion that is not excused,
	// no leadership missed by an Observe stream, and that Leader named
	// neither another leader nor nobody while a leader led: the in-model
	// scenarios whose faults leave every waiter and every read a quorum.
	order bool
	// expect makes the run a negative control of one rule, which must
	// fire: "fifo", "terms" or "missed".
	expect string
}

// drawFairKey draws the key of a fair call: one of the fair keys, now and
// then a reserved one, which must be refused.
func (m *mixRun) drawFairKey(rng *rand.Rand) string {
	if rng.Float64() < mixPReserved || len(m.fairKeys) == 0 {
		return m.reserved[rng.IntN(len(m.reserved))]
	}
	return m.fairKeys[rng.IntN(len(m.fairKeys))]
}

// mixFairWait is what the mix learns of one waiting fair call on its own
// goroutine, where WithQueuePlace's fn and the LockTracer run.
type mixFairWait struct {
	id     string    // the call's acquisition id (TraceLock)
	queued time.Time // the first place it was told
}

// place is the call's WithQueuePlace fn.
func (fw *mixFairWait) place(int) {
	if fw.queued.IsZero() {
		fw.queued = time.Now()
	}
}

// mixFairWaitKey is the ctx key of a fair call's mixFairWait.
type mixFairWaitKey struct{}

// mixSends are the send times of the fair calls' queued attempts, by
// call, which every mix Client's fairSent hook records. It is safe for
// concurrent use.
type mixSends struct {
	mu sync.Mutex
	at map[string][]time.Time // guarded by mu; by the call's id
	n  map[string]int         // guarded by mu; the last attempt recorded
}

// sent is the fairSent hook: attempt n of call id is being sent to a
// node. The first node it is sent to times it.
func (s *mixSends) sent(id string, n int) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at, s.n = map[string][]time.Time{}, map[string]int{}
	}
	if last, ok := s.n[id]; ok && n <= last {
		return
	}
	s.n[id] = n
	s.at[id] = append(s.at[id], now)
}

// take returns the send times of call id, and forgets them.
func (s *mixSends) take(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.at[id]
	delete(s.at, id)
	delete(s.n, id)
	return at
}

// recordWait records a waiting fair call on key, made at called within
// ctx, that returned at returned with l (nil when it did not acquire).
// Each bound is taken on the side that makes an inversion found certain
// (see history.Wait): a call that won stopped waiting no earlier than the
// start of its winning round; one that did not, no earlier than its
// deadline, its Client's close or the end of the workload, whichever came
// first, when it leaves the queue, or than its return.
func (m *mixRun) recordWait(ctx context.Context, mc *mixClient, w int, key string, fw *mixFairWait, called, returned time.Time, l *Lock) {
	hw := history.Wait{Key: key, Holder: fmt.Sprintf("client %d worker %d", mc.index, w), Began: called, Queued: fw.queued}
	if fw.id != "" {
		hw.Refreshes = m.sends.take(fw.id)
	}
	if l != nil {
		hw.Acquired, hw.Ended = returned, l.acquired
		hw.Holder += " token " + l.Token()
	} else {
		end := returned
		if d, ok := ctx.Deadline(); ok && d.Before(end) {
			end = d
		}
		for _, t := range []*time.Time{mc.closingAt.Load(), m.stopAt.Load()} {
			if t != nil && t.Before(end) {
				end = *t
			}
		}
		hw.Ended = end
	}
	if !hw.Queued.IsZero() {
		m.count("fair-queued")
	}
	m.mu.Lock()
	m.waits = append(m.waits, hw)
	m.mu.Unlock()
}

// mixNeverExpires reports whether k is one of the names that the library
// keeps without an expiry, by design: a fence counter, a fair lock's
// ticket counter, an election's term record.
func mixNeverExpires(k string) bool {
	i := strings.Index(k, keyspace.Reserved)
	if i < 0 {
		return false
	}
	base := k[:i]
	return k == keyspace.Fence(base) || k == keyspace.Ticket(base) || k == keyspace.Term(base)
}

// checkWaitEvents checks, once mc's Close returned, that its Observer
// heard a WaitEnded for every WaitBegan: Close waits for the waiting calls.
func (m *mixRun) checkWaitEvents(mc *mixClient) {
	if b, e := mc.waitsBegan.Load(), mc.waitsEnded.Load(); b != e {
		m.violate("client %d: %d WaitBegan and %d WaitEnded once Close returned, want as many", mc.index, b, e)
	}
}

// campaign draws an election key and a way to lead, campaigns with a value
// of its own within the lock deadline, and leads as drawn.
func (m *mixRun) campaign(stop context.Context, mc *mixClient, w int, rng *rand.Rand) {
	ttl := m.r.load.ttl
	key := m.elections[rng.IntN(len(m.elections))]
	if rng.Float64() < mixPReserved {
		key = m.reserved[rng.IntN(len(m.reserved))]
	}
	lead := mixLead(mixPick(rng, m.leadWeights))
	if lead == leadCrash && !mc.churn {
		lead = leadLong
	}
	var opts []LockOption
	var maxHold, lockDelay time.Duration
	if lead == leadTermLimit {
		maxHold = mixBetween(rng, ttl, ttl*3/2)
		opts = append(opts, WithMaxHold(maxHold))
	}
	if rng.Float64() < mixPLockDelay {
		lockDelay = mixBetween(rng, ttl/6, mixMaxLockDelay(ttl))
		opts = append(opts, WithLockDelay(lockDelay))
	}
	if rng.Float64() < mixPCampaignFair {
		opts = append(opts, WithFair(true))
	}
	refuse := ""
	if rng.Float64() < mixPCampaignRefused {
		opts = append(opts, WithMinHold(ttl/2))
		refuse = "an election WithMinHold"
	}
	e, err := mc.c.Election(key, opts...)
	if why := mixRefusal(m.r.prefix, []string{key}, refuse, err); why != "" {
		m.violate("client %d Election: %s", mc.index, why)
	}
	switch {
	case errors.Is(err, ErrInvalidOption):
		m.count("refused")
		if refuse != "" {
			m.count("refused-options")
		}
		return
	case err != nil:
		m.violate("client %d Election %s: got %v, want nil or ErrInvalidOption", mc.index, shortKey(key), err)
		return
	}
	value := fmt.Sprintf("c%d-w%d-%d", mc.index, w, m.values.Add(1))
	closedBefore := mc.closed.Load()
	ctx, cancel := context.WithTimeout(stop, m.r.load.lockWait)
	mc.inFlight.Add(1)
	called := time.Now()
	l, err := e.Campaign(ctx, value)
	returned := time.Now()
	mc.inFlight.Add(-1)
	cancel()
	if !m.settleAcquire(stop, mc, []string{key}, "campaign", "", l, err, closedBefore, true, returned.Sub(called)) {
		return
	}
	m.count(mixLeadNames[lead])
	if l.Fence() == 0 {
		m.violate("client %d Campaign on %s returned a leadership without a Term", mc.index, shortKey(key))
	}
	rec := chaosHold{key: key, client: mc.index, worker: w, token: l.Token(), acquired: returned, until: l.Until(),
		nodes: yesNodes(l), fence: l.Fence(), op: "campaign", value: value, start: l.acquired, lockDelay: lockDelay}
	hand := m.watch(l, []string{key})
	if rng.Float64() < mixPLeaderProbe {
		m.askLeader(mc, e, l, value)
	}
	switch lead {
	case leadShort:
		time.Sleep(randDuration(rng, m.r.load.holdMax))
	case leadLong:
		m.lead(mc, l, mixBetween(rng, ttl, 2*ttl))
	case leadTermLimit:
		m.holdPastMax(mc, l, rec, maxHold)
	case leadCrash:
		hand <- rec // never resigned: the leadership lasts until its Until
		return
	}
	hand <- m.release(mc, l, rec, false)
}

// lead holds a leadership for d, or until it is lost: Done closed without
// a resign must say why.
func (m *mixRun) lead(mc *mixClient, l *Lock, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-l.Done():
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			m.violate("client %d leader on %s: Done closed with Err %v, want ErrLockLost", mc.index, shortKeys(l.Keys()), err)
		}
	}
}

// askLeader asks Leader who leads while l, the leadership of value, is
// held, and counts the answer. Once Campaign returned, the term record is
// on a quorum of the nodes that hold the leader's token, so a Leader call
// that the leadership spans names it, or fails for want of answers
// (ErrUnavailable): it names nobody else, and not nobody, within the model
// (the scenarios that assert the order checks assert both counts).
func (m *mixRun) askLeader(mc *mixClient, e *Election, l *Lock, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	closedBefore := mc.closed.Load()
	mc.inFlight.Add(1)
	ld, err := e.Leader(ctx)
	mc.inFlight.Add(-1)
	spanned := l.Err() == nil && time.Now().Before(l.Until())
	switch {
	case closedBefore && !errors.Is(err, ErrClosed):
		m.violate("client %d Leader after Close returned: got %v, want ErrClosed", mc.index, err)
	case err == nil && ld == (Leader{Value: value, Term: l.Fence()}):
		m.count("leader-self")
	case err == nil:
		if spanned {
			m.count("leader-other")
			m.r.t.Logf("leader-other: client %d led %s as %q term %d, and Leader named %q term %d",
				mc.index, shortKeys(l.Keys()), value, l.Fence(), ld.Value, ld.Term)
		}
	case errors.Is(err, ErrUnavailable):
		m.count("leader-unavailable")
	case errors.Is(err, ErrNoLeader):
		if spanned {
			m.count("leader-none")
			m.r.t.Logf("leader-none: client %d led %s as %q term %d, and Leader said nobody leads: %v",
				mc.index, shortKeys(l.Keys()), value, l.Fence(), err)
		}
	case mc.closing.Load() && errors.Is(err, ErrClosed):
	default:
		m.violate("client %d Leader on %s: got %v, want a leader, ErrNoLeader or ErrUnavailable", mc.index, shortKeys(l.Keys()), err)
	}
}

// probeLeaders checks, before the workload, that Leader says nobody leads
// each election, and that an election on a reserved key is refused.
func (m *mixRun) probeLeaders(ctx context.Context, mc *mixClient) {
	for _, key := range m.elections {
		e, err := mc.c.Election(key)
		if err != nil {
			m.violate("probe: Election %s: %v", shortKey(key), err)
			continue
		}
		if _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrUnavailable) {
			m.violate("probe: Leader of %s before any campaign: got %v, want ErrNoLeader", shortKey(key), err)
		}
	}
	if _, err := mc.c.Election(m.reserved[0]); !errors.Is(err, ErrInvalidOption) {
		m.violate("probe: Election on the reserved %s: got %v, want ErrInvalidOption", shortKey(m.reserved[0]), err)
	}
}

// mixStream is one Observe call of the mix and what it delivered.
type mixStream struct {
	s history.Stream // Seen is written by its reader until observeAll's end returns
}

// observeAll starts an Observe of every election key on every Client of
// the scenario, each read by a goroutine of its own that records what it
// receives at once. It returns the function that ends them: it cancels
// their ctx, notes when, and waits for their channels to close. It may be
// called more than once.
func (m *mixRun) observeAll() (end func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, mc := range m.clients {
		for _, key := range m.elections {
			e, err := mc.c.Election(key, m.observeOpts...)
			if err != nil {
				m.violate("client %d Election %s to observe: %v", mc.index, shortKey(key), err)
				continue
			}
			st := &mixStream{s: history.Stream{Key: key, Holder: fmt.Sprintf("client %d observer", mc.index), From: time.Now()}}
			ch := e.Observe(ctx)
			m.streams = append(m.streams, st)
			wg.Go(func() {
				for ld := range ch {
					st.s.Seen = append(st.s.Seen, history.Observed{At: time.Now(), Term: ld.Term, Value: ld.Value})
				}
			})
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			to := time.Now()
			cancel()
			wg.Wait()
			for _, st := range m.streams {
				st.s.To = to
			}
		})
	}
}

// mixOrderFigures is what the fair and election rules found in a run.
type mixOrderFigures struct {
	// waits are the fair calls that waited, queued those that were in a
	// quorum's queue, and pairs the pairs of them whose order was at stake
	// (see fifoPairs).
	waits, queued, pairs int
	fifo                 []history.FIFOInversion
	// hard counts the inversions that nothing excuses.
	hard int
	// leaders counts the leaderships, long those that lasted a TTL (the
	// ones the streams must deliver), overlaps the overlaps between two of
	// them, and terms the Terms that did not rise.
	leaders, long, overlaps int
	terms                   []history.Inversion
	// streams counts the Observe streams and seen the values they
	// delivered.
	streams, seen int
	regressions   []history.Regression
	missed        []history.Miss
}

// mixMissedSlack is how late an Observe stream may deliver a leadership
// past a TTL from its Campaign's return (history.MissedLeaders): a TTL
// more, for the reads and the consumer's goroutine on a busy machine.
func mixMissedSlack(ttl time.Duration) time.Duration { return ttl }

// mixFIFOTolerance is how long a fair waiter may go between refreshes
// before its entry may expire on a node (history.FIFOInversions): the TTL,
// less a tenth for the clocks and the requests' way to the nodes. Every
// queued attempt refreshes the call's entry to a TTL (queue.lua's
// enqueue).
func mixFIFOTolerance(ttl time.Duration) time.Duration { return ttl - ttl/10 }

// orderFigures runs the fair and election rules on the run's records.
func (m *mixRun) orderFigures(f chaosFigures) mixOrderFigures {
	ttl := m.r.load.ttl
	m.mu.Lock()
	waits := slices.Clone(m.waits)
	m.mu.Unlock()
	m.r.rec.mu.Lock()
	var leaders []history.Leadership
	for _, h := range m.r.rec.holds {
		if h.op == "campaign" {
			leaders = append(leaders, history.Leadership{Key: h.key, Value: h.value, Term: h.fence, Acquired: h.acquired, End: h.end(),
				Holder: fmt.Sprintf("client %d worker %d token %s", h.client, h.worker, h.token)})
		}
	}
	m.r.rec.mu.Unlock()
	var streams []history.Stream
	for _, st := range m.streams {
		streams = append(streams, st.s)
	}
	o := mixOrderFigures{waits: len(waits), pairs: fifoPairs(waits), fifo: history.FIFOInversions(waits, mixFIFOTolerance(ttl)),
		leaders: len(leaders), streams: len(streams), regressions: history.ObserveRegressions(streams),
		missed: history.MissedLeaders(leaders, streams, ttl, mixMissedSlack(ttl))}
	for _, w := range waits {
		if !w.Queued.IsZero() {
			o.queued++
		}
	}
	for _, v := range o.fifo {
		if !v.Excused {
			o.hard++
		}
	}
	holds := make([]history.Hold, len(leaders))
	for i, l := range leaders {
		holds[i] = l.Hold()
		if l.End.Sub(l.Acquired) >= ttl {
			o.long++
		}
	}
	o.terms = history.FenceInversions(holds)
	for _, ov := range f.overlaps {
		if ov.a.op == "campaign" && ov.b.op == "campaign" {
			o.overlaps++
		}
	}
	for _, s := range streams {
		o.seen += len(s.Seen)
	}
	return o
}

// fifoPairs counts the pairs of waits of one key whose order was at stake:
// the second began to wait after the first was queued and while it still
// waited, and acquired. history.FIFOInversions finds those where it
// acquired before the first stopped waiting.
func fifoPairs(waits []history.Wait) int {
	n := 0
	for i, a := range waits {
		if a.Queued.IsZero() {
			continue
		}
		for j, b := range waits {
			if i != j && a.Key == b.Key && !b.Acquired.IsZero() && a.Queued.Before(b.Began) && (a.Ended.IsZero() || b.Began.Before(a.Ended)) {
				n++
			}
		}
	}
	return n
}

// line formats the figures for the report.
func (o mixOrderFigures) line() string {
	return fmt.Sprintf("fair-waits=%d queued=%d fifo-pairs=%d fifo-inversions=%d fifo-excused=%d leaderships=%d long=%d leader-overlaps=%d term-inversions=%d streams=%d observed=%d regressions=%d missed=%d",
		o.waits, o.queued, o.pairs, o.hard, len(o.fifo)-o.hard, o.leaders, o.long, o.overlaps, len(o.terms), o.streams, o.seen, len(o.regressions), len(o.missed))
}

// reportOrder prints what the fair and election rules found, and fails the
// test where the scenario's checks say (see mixChecks).
func (m *mixRun) reportOrder(f chaosFigures, replay string) {
	t, name := m.r.t, m.r.name
	t.Helper()
	o := m.orderFigures(f)
	chaosPrint(t, fmt.Sprintf("chaos-order: scenario=%s seed=%d %s", name, m.r.seed, o.line()))
	for i, v := range o.fifo {
		if i == 5 {
			t.Logf("... and %d more FIFO inversions", len(o.fifo)-i)
			break
		}
		t.Logf("fifo inversion: %s", v.Format(m.r.start))
	}
	for i, v := range o.terms {
		if i == 5 {
			break
		}
		t.Logf("term inversion: %s", v)
	}
	for i, r := range o.regressions {
		if i == 5 {
			break
		}
		t.Logf("observe regression: %s", r.Format(m.r.start))
	}
	for i, ms := range o.missed {
		if i == 5 {
			t.Logf("... and %d more leaderships missed", len(o.missed)-i)
			break
		}
		t.Logf("missed leader: %s", ms.Format(m.r.start))
	}
	c := m.checks
	if (c.terms || c.order) && len(o.regressions) > 0 {
		t.Errorf("scenario %s (seed %d): got %d Observe values whose Term went back, want 0; %s", name, m.r.seed, len(o.regressions), replay)
	}
	if c.order {
		if o.hard > 0 {
			t.Errorf("scenario %s (seed %d): got %d FIFO inversions of fair calls (and %d excused), want 0; %s", name, m.r.seed, o.hard, len(o.fifo)-o.hard, replay)
		}
		if len(o.missed) > 0 {
			t.Errorf("scenario %s (seed %d): got %d leaderships an Observe stream missed, want 0; %s", name, m.r.seed, len(o.missed), replay)
		}
		m.mu.Lock()
		other, none := m.counts["leader-other"], m.counts["leader-none"]
		m.mu.Unlock()
		if other+none > 0 {
			t.Errorf("scenario %s (seed %d): Leader named another leader %d times and nobody %d times while a leader led, want 0; %s",
				name, m.r.seed, other, none, replay)
		}
	}
	fired := map[string]int{"fifo": o.hard, "terms": len(o.terms), "missed": len(o.missed)}
	if c.expect != "" && fired[c.expect] == 0 {
		t.Errorf("the control %s did not make its rule (%s) fire: %s; %s", name, c.expect, o.line(), replay)
	}
}

// setMixChecks wraps the scenarios' mixTune so that each run asserts what
// its place in the model allows (mixChecks): the Terms of every in-model
// scenario, and the order in those of order.
func setMixChecks(scs []chaosScenario, order ...string) []chaosScenario {
	for i := range scs {
		sc := &scs[i]
		if sc.control || sc.outOfModel {
			continue
		}
		tune, strict := sc.mixTune, slices.Contains(order, sc.name)
		sc.mixTune = func(m *mixRun) {
			m.checks.terms, m.checks.order = true, m.checks.order || strict
			if tune != nil {
				tune(m)
			}
		}
	}
	return scs
}

// mixOrderWeights are the mix's kinds for the scenarios of the fair lock
// and the election: plain, fenced, multi, owner, reader, writer, permit,
// Do, fair, campaign. The other kinds stay, fewer, so that fair calls
// wait behind plain and fenced holders too.
var mixOrderWeights = []int{3, 3, 2, 3, 2, 2, 2, 2, 55, 26}

// mixOrderModes are what the holders of those scenarios do: short, extend
// shorter, extend longer, auto-extend, max hold, unlock race, overrun,
// expire. Mostly short holds, so that fair calls queue and get through
// many times per run; the long ones hold keys for a TTL or two.
var mixOrderModes = []int{85, 3, 2, 4, 2, 2, 1, 1}

// mixOrderScenarios are the scenarios of the fair lock and the election
// under the mix, and the negative controls of their rules. The controls
// run as out-of-model scenarios (their overlaps and fences are measured,
// not asserted) whose mixChecks.expect names the rule that must fire.
func mixOrderScenarios() []chaosScenario {
	tune := func(extra func(m *mixRun)) func(m *mixRun) {
		return func(m *mixRun) {
			m.kindWeights = slices.Clone(mixOrderWeights)
			m.modeWeights = slices.Clone(mixOrderModes)
			// One fair key, so that fair calls queue behind each other.
			m.fairKeys = m.fairKeys[:1]
			if extra != nil {
				extra(m)
			}
		}
	}
	controlLoad := func(l *chaosLoad) {
		mixLoad(l)
		l.duration = 3 * time.Second
	}
	return []chaosScenario{
		// In the model: a node killed for good at 10%, then, one at a
		// time, another paused for a quarter to half of the TTL, again
		// and again. Every waiter keeps a live entry on a quorum, and
		// every read has one to answer it. The TTL is a second: a fair
		// waiter must attempt every half TTL to keep its entry (see
		// mixFIFOTolerance), and one with two or more ahead of it attempts
		// every quarter TTL; under -race on a loaded machine the mix's
		// slow callbacks add up to 200ms.
		{name: "mix-fair-election", mix: true, minSuccess: 5, minAcquisitions: 20, verdicts: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3},
			load:    secondLoad(4 * time.Second), mixTune: tune(nil),
			faults: func(r *chaosRun) {
				ttl := r.load.ttl
				nodes := r.pick(len(r.cl.nodes))
				r.at(0.1)
				r.inject(&killFault{nodes: nodes[:1]})
				for time.Since(r.start) < r.load.duration*8/10 {
					r.sleep(r.between(ttl/2, ttl))
					r.during(&pauseFault{node: nodes[1+r.rng.IntN(len(nodes)-1)]}, r.between(ttl/4, ttl/2))
				}
			}},
		// Each fair call draws a ticket below every one drawn before
		// (the ticketOf hook): a call that began to wait later goes ahead
		// of those queued, and the FIFO check must fire.
		{name: "control-mix-fair-tickets-down", mix: true, outOfModel: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, hooks: testHooks{ticketOf: ticketsDown()}},
			load:    controlLoad, mixTune: tune(func(m *mixRun) {
				m.checks.expect = "fifo"
				m.kindWeights = mixFairWeights
			})},
		// Without the fence write-back, from counters at one level on
		// every node (as TestElectionTermsAcrossRestarts sets them), each
		// Client cut off from two nodes, so that each leader's quorum is
		// its Client's three: a Term is one more than the largest counter
		// of them, and the next leader's quorum meets the last one's at
		// one node or two, which may not have it. The term records are
		// deleted every twentieth of a TTL, as an empty restart would lose
		// them: term.lua refuses a record of a lower Term where a node
		// holds a higher one, and a Campaign needs its record on a
		// quorum, which meets the last leader's, so with the records kept
		// only a Term equal to the last one gets through, which this
		// control did not meet in its first runs. The term check must
		// fire.
		{name: "control-mix-election-no-writeback", mix: true, outOfModel: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, proxied: true, hooks: testHooks{noFenceWriteBack: true}},
			load:    mixLoad, faults: electionCutsAndLostRecords, mixTune: tune(func(m *mixRun) {
				m.checks.expect = "terms"
				m.kindWeights = mixCampaignWeights
				// Short leads: many successions.
				m.leadWeights = []int{80, 10, 0, 10}
				levelTermCounters(m)
			})},
		// Its twin, in the model for the Terms: the same cuts, counters,
		// lost records and short leads, with the write-back. Terms must
		// rise.
		{name: "mix-election-partitioned-twin", mix: true, minAcquisitions: 5,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3, proxied: true},
			load:    controlLoad, faults: electionCutsAndLostRecords, mixTune: tune(func(m *mixRun) {
				m.kindWeights = mixCampaignWeights
				m.leadWeights = []int{80, 10, 0, 10}
				levelTermCounters(m)
			})},
		// Observe without pub/sub, on Elections whose TTL is thirty
		// times the campaigns': it reads every ten TTLs while nobody
		// leads, and the leaderships that begin then and last a TTL or
		// two go unseen. The missed-leader check must fire.
		{name: "control-mix-observe-deaf", mix: true, outOfModel: true,
			cluster: chaosClusterOpts{backend: realBackend, clients: 3},
			opts:    []Option{WithPubSub(false)},
			load:    controlLoad, mixTune: tune(func(m *mixRun) {
				m.checks.expect = "missed"
				m.kindWeights = mixCampaignWeights
				m.observeOpts = []LockOption{WithTTL(30 * m.r.load.ttl)}
			})},
	}
}

// mixFairWeights are the mix's kinds for the fair lock's control: fair
// calls, and a few of every other kind but campaigns.
var mixFairWeights = []int{2, 2, 2, 2, 2, 2, 2, 2, 80, 0}

// mixCampaignWeights are the mix's kinds for the election's controls:
// campaigns, and a few of every other kind but fair calls.
var mixCampaignWeights = []int{2, 2, 2, 2, 2, 2, 2, 2, 0, 80}

// electionCutsAndLostRecords cuts each Client off, by resets, from two
// nodes, for the whole run: client 0 (and the churned Clients, which share
// its proxies) reaches nodes 0, 1 and 2, client 1 nodes 2, 3 and 4,
// client 2 nodes 0, 1 and 3. Each leader's quorum is then its Client's
// three nodes. Meanwhile it deletes the term records of the elections on
// every node, every twentieth of a TTL.
func electionCutsAndLostRecords(r *chaosRun) {
	cutTo([]int{0, 1, 2}, []int{2, 3, 4}, []int{0, 1, 3})(r)
	r.logFault("term records deleted on every node every %v", r.load.ttl/20)
	records := make([]string, len(r.mix.elections))
	for i, k := range r.mix.elections {
		records[i] = keyspace.Term(r.prefix + k)
	}
	for time.Since(r.start) < r.load.duration*9/10 {
		for _, n := range r.cl.nodes {
			if err := n.admin.Del(r.t.Context(), records...).Err(); err != nil {
				r.t.Fatalf("node %d: %v", n.index, err)
			}
		}
		r.sleep(r.load.ttl / 20)
	}
}

// secondLoad is the mix's load at a TTL of a second, for d.
func secondLoad(d time.Duration) func(*chaosLoad) {
	return func(l *chaosLoad) {
		mixLoad(l)
		l.ttl, l.duration = time.Second, d
	}
}

// ticketsDown is a ticketOf hook that hands out tickets that go down, one
// per call, from far above any node's counter.
func ticketsDown() func(int64) int64 {
	var mu sync.Mutex
	next := int64(1) << 60
	return func(int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		next--
		return next
	}
}

// levelTermCounters sets the fence counter of every election key, on
// every node, to one level: the latest node clock in microseconds, which
// is what a counter's first value would be.
func levelTermCounters(m *mixRun) {
	r := m.r
	t := r.t
	t.Helper()
	ctx := t.Context()
	var level int64
	for _, n := range r.cl.nodes {
		tm, err := n.admin.Time(ctx).Result()
		if err != nil {
			t.Fatalf("node %d: TIME: %v", n.index, err)
		}
		level = max(level, tm.UnixMicro())
	}
	for _, n := range r.cl.nodes {
		for _, k := range m.elections {
			if err := n.admin.Set(ctx, keyspace.Fence(r.prefix+k), level, 0).Err(); err != nil {
				t.Fatalf("node %d: %v", n.index, err)
			}
		}
	}
}

// TestChaosOrderChecks shows that the mix's records of fair calls,
// leaderships and Observe streams reach internal/history whole, so that
// each rule can fail on them: a run with one record of each violation
// reports each, and with the violations taken out, none. internal/history
// tests the rules.
func TestChaosOrderChecks(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const ttl = 300 * time.Millisecond
	run := func(bad bool) mixOrderFigures {
		r := &chaosRun{t: t, name: "order", rec: newChaosRecorder(), start: t0, load: chaosLoad{ttl: ttl}}
		m := &mixRun{r: r, counts: map[string]int{}}
		refreshes := func(from, to int) (out []time.Time) {
			for ms := from; ms <= to; ms += 5 {
				out = append(out, at(ms))
			}
			return out
		}
		// A queued at 10; B began at 20 and acquired at 40 (bad) or
		// after A won at 100 (good).
		m.waits = []history.Wait{
			{Key: "f", Holder: "a", Began: at(0), Queued: at(10), Ended: at(100), Acquired: at(101), Refreshes: refreshes(5, 95)},
			{Key: "f", Holder: "b", Began: at(20), Queued: at(25), Ended: at(150), Acquired: at(151), Refreshes: refreshes(20, 145)},
		}
		lead := func(token string, fence uint64, acq, until int) chaosHold {
			return chaosHold{key: "e", token: token, op: "campaign", value: token, fence: fence, acquired: at(acq), until: at(until), released: at(until)}
		}
		r.rec.holds = []chaosHold{lead("l1", 10, 0, 400), lead("l2", 11, 400, 800)}
		seen := []history.Observed{{At: at(1), Term: 10, Value: "l1"}, {At: at(401), Term: 11, Value: "l2"}}
		if bad {
			m.waits[1].Ended, m.waits[1].Acquired = at(39), at(40)
			r.rec.holds[1].fence = 10
			seen = []history.Observed{{At: at(1), Term: 10, Value: "l1"}, {At: at(5), Term: 9, Value: "x"}}
		}
		m.streams = []*mixStream{{s: history.Stream{Key: "e", From: at(0), To: at(2000), Seen: seen}}}
		return m.orderFigures(chaosFigures{})
	}
	good := run(false)
	if good.hard+len(good.terms)+len(good.regressions)+len(good.missed) != 0 {
		t.Fatalf("a clean history: got %s, want no violation", good.line())
	}
	if good.pairs != 1 || good.leaders != 2 || good.long != 2 || good.seen != 2 {
		t.Fatalf("a clean history: got %s, want 1 pair, 2 leaderships of a TTL, 2 values seen", good.line())
	}
	bad := run(true)
	if bad.hard != 1 || len(bad.terms) != 1 || len(bad.regressions) != 1 || len(bad.missed) != 1 {
		t.Fatalf("a history with one of each: got %s, want 1 FIFO inversion, 1 term inversion, 1 regression, 1 leadership missed", bad.line())
	}
}
