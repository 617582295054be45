package redlock

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlockgo/redlock/internal/history"
)

// chaosHold is one holder's claim on a key, on the test process's monotonic
// clock (every time.Time here comes from time.Now or Lock.Until, which carry
// a monotonic reading).
type chaosHold struct {
	key            string
	client, worker int
	token          string
	acquired       time.Time // read once Lock returned
	until          time.Time // Lock.Until after the last Extend
	released       time.Time // read before Unlock; zero when left to expire
	nodes          []int     // nodes that said yes by the decision, for diagnostics
	fence          uint64    // Lock.Fence; 0 without fencing
	// shared marks a reader of a read-write lock (RLock): readers may
	// overlap each other, never a writer.
	shared bool
	// permits is the semaphore's number of permits for a permit, and 0
	// for a lock: at most that many permits of the key may overlap, and
	// none may overlap a lock or a reader.
	permits int
	// owner is the WithOwner id of an owner (reentrant) lock: holds of one
	// owner may nest and overlap each other, never anyone else's.
	owner string
	// op names what took the hold, for the logs: "plain", "reader", ...
	op string
	// value is what a leader campaigned with (op "campaign"): Observe
	// reports it beside the Term, which is the fence.
	value string
	// doneAt is when the lock's Done was seen closed, and doneFired when
	// a timer the watcher armed at Until fired while Done was still open
	// (zero when Done closed first). Both are zero for holds nobody
	// watched. See chaosDoneLate.
	doneAt, doneFired time.Time
	// start is the lock's own start, the round that acquired it, which
	// its minimum hold counts from; minHold and lockDelay are its
	// WithMinHold and WithLockDelay; unlocked is when an Unlock called
	// while the hold was valid returned nil. See history.Hold.Kept.
	start              time.Time
	minHold, lockDelay time.Duration
	unlocked           time.Time
	// wholeAt is when the holder first saw an extension of its lock
	// acknowledged by every node (zero when it never looked, or never saw
	// one): from then on one node that forgets the key cannot let anyone
	// in. See chaosWholeOverlaps.
	wholeAt time.Time
}

// history is the hold in the model of internal/history, which checks it.
func (h chaosHold) history() history.Hold {
	kind := history.Exclusive
	switch {
	case h.permits > 0:
		kind = history.Permit
	case h.shared:
		kind = history.Reader
	}
	return history.Hold{Key: h.key, Kind: kind, Permits: h.permits, Owner: h.owner,
		Holder:   fmt.Sprintf("client %d worker %d token %s", h.client, h.worker, h.token),
		Acquired: h.acquired, Until: h.until, Released: h.released, Fence: h.fence,
		DoneAt: h.doneAt, UntilFired: h.doneFired,
		Start: h.start, MinHold: h.minHold, LockDelay: h.lockDelay, Unlocked: h.unlocked}
}

// chaosKeepSlack is how much earlier than its rule says a key kept by a
// minimum hold or a lock-delay may be taken, for the clocks (see
// history.Delays): Redis expires a key to the millisecond, from when the
// script that set it ran, which is after the holder read the time the rule
// counts from; the library rounds the minimum hold left up to the
// millisecond, and the drift term keeps a key past Until by at least 2ms.
const chaosKeepSlack = 10 * time.Millisecond

// chaosValidation is one ValidateFence call of a holder on its own fence.
type chaosValidation struct {
	key            string
	fence          uint64
	token          string // of the hold whose fence it checked
	client, worker int
	called         time.Time
	returned       time.Time
	valid          bool // it returned nil
	afterUnlock    bool // called once Unlock had returned
}

// chaosStaleValidations returns the validations that said a fence was live
// when it could not have been, as history.StaleValidations finds them.
// Each validation is matched to its hold by key and token. linger is how
// long a holder's key may outlive its Until on the nodes: a renewal that
// lands late sets the TTL from its arrival.
func chaosStaleValidations(holds []chaosHold, vs []chaosValidation, linger time.Duration) []history.StaleValidation {
	if len(vs) == 0 {
		return nil
	}
	type ref struct{ key, token string }
	index := make(map[ref]int, len(holds))
	for i, h := range holds {
		index[ref{h.key, h.token}] = i
	}
	hvs := make([]history.Validation, len(vs))
	for i, v := range vs {
		j, ok := index[ref{v.key, v.token}]
		if !ok {
			j = -1
		}
		hvs[i] = history.Validation{Key: v.key, Fence: v.fence, Hold: j, Called: v.called, Returned: v.returned, Valid: v.valid,
			Holder: fmt.Sprintf("client %d worker %d token %s", v.client, v.worker, v.token)}
	}
	return history.StaleValidations(chaosHistory(holds), hvs, chaosKeepSlack, linger)
}

// chaosDelays returns the holds that began while another kept the key
// under its minimum hold or its lock-delay, as history.Delays finds them.
func chaosDelays(holds []chaosHold) []history.Delay {
	return history.Delays(chaosHistory(holds), chaosKeepSlack)
}

// chaosWholeOverlaps counts the overlaps whose earlier hold was exclusive
// and had been acknowledged by every node in an extension (wholeAt) before
// the later one began. With at most one node losing keys while a hold
// lasts, none can happen: the hold keeps all but one node.
func chaosWholeOverlaps(overlaps []chaosOverlap) int {
	n := 0
	for _, o := range overlaps {
		if o.a.permits == 0 && !o.a.shared && !o.a.wholeAt.IsZero() && o.a.wholeAt.Before(o.b.acquired) {
			n++
		}
	}
	return n
}

// chaosHistory is holds in the model of internal/history, in their order.
func chaosHistory(holds []chaosHold) []history.Hold {
	out := make([]history.Hold, len(holds))
	for i, h := range holds {
		out[i] = h.history()
	}
	return out
}

// end is when the holder stopped claiming the key: see history.Hold.End.
func (h chaosHold) end() time.Time { return h.history().End() }

// chaosOverlap is two holders of one key whose windows intersect where
// they may not, or, for a semaphore, the permit b that made one more
// holder than its permits (a is the earliest of the others): a
// history.Overlap with the chaos suite's records of its holds.
type chaosOverlap struct {
	a, b chaosHold
	by   time.Duration // length of the intersection
	// holders is how many held the key at once, b included.
	holders int
}

// chaosOverlaps returns the violations of mutual exclusion among holds, as
// history.Overlaps finds them: any two holds of one key whose windows
// intersect but two readers or two locks of one owner (WithOwner with the
// same id), which nest; a permit beside anything but permits; and each
// permit that starts while its permits or more other permits of the key
// hold. A lock (plain, fenced, multi-key on each of its keys, a writer)
// excludes every other hold. A hold whose window is empty (Lock returned
// after Until had already passed) claims nothing.
func chaosOverlaps(holds []chaosHold) []chaosOverlap {
	var out []chaosOverlap
	for _, o := range history.Overlaps(chaosHistory(holds)) {
		out = append(out, chaosOverlap{a: holds[o.A.Index], b: holds[o.B.Index], by: o.By, holders: o.Holders})
	}
	return out
}

// chaosFenceInversions counts the fences out of order, as
// history.FenceInversions finds them: for each key, the holds whose fence
// is not larger than that of the hold acquired just before them. Holders
// that never overlap must see their fences rise in the order they acquired.
// Holds without a fence (0: fencing off), and holds with a recorded Until
// whose window is empty, are left out.
func chaosFenceInversions(holds []chaosHold) int {
	return len(history.FenceInversions(chaosHistory(holds)))
}

// chaosDoneLate returns the watched holds whose Done did not close by
// Until, as history.LateDone finds them: the watcher's timer at the final
// Until fired with Done still open (doneFired is set), and Done then closed
// more than grace later, or never. Holds nobody watched (both times zero)
// are left out.
func chaosDoneLate(holds []chaosHold, grace time.Duration) []chaosHold {
	var out []chaosHold
	for _, e := range history.LateDone(chaosHistory(holds), grace) {
		out = append(out, holds[e.Index])
	}
	return out
}

// chaosRecorder collects a scenario's history from every worker. It is safe
// for concurrent use.
type chaosRecorder struct {
	mu        sync.Mutex
	holds     []chaosHold     // guarded by mu
	latencies []time.Duration // guarded by mu; of the Lock calls that won
	calls     int             // guarded by mu; Lock calls, won or not
	unlocked  map[string]bool // guarded by mu; tokens Unlock was called on
	expired   map[string]bool // guarded by mu; tokens left to expire
	notHeld   int             // guarded by mu; Unlock calls that got ErrNotHeld
	extended  int             // guarded by mu; Extend calls that succeeded
	// validations are the ValidateFence calls of holders on their own
	// fences; guarded by mu.
	validations []chaosValidation
	// linger is how long a holder's key may outlive its Until on the
	// nodes, for chaosStaleValidations; set before the run.
	linger time.Duration
	// wrongVotes counts the wrong verdicts of nodes on Unlock: a node that
	// said yes to the acquisition, and said it no longer held the lock in
	// an Unlock that ended before Until. Inside the model a node keeps an
	// acknowledged key for its TTL, so only a fault the library mishandles
	// (a release that go-redis sent twice, counted as a no) makes one.
	// Guarded by mu.
	wrongVotes int
}

func newChaosRecorder() *chaosRecorder {
	return &chaosRecorder{unlocked: map[string]bool{}, expired: map[string]bool{}}
}

// lockCall records one Lock call that was not cut short by the end of the
// scenario.
func (r *chaosRecorder) lockCall(won bool, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if won {
		r.latencies = append(r.latencies, took)
	}
}

// hold records a finished hold and what became of its token.
func (r *chaosRecorder) hold(h chaosHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
	if h.released.IsZero() {
		r.expired[h.token] = true
	} else {
		r.unlocked[h.token] = true
	}
}

// validation records a ValidateFence call.
func (r *chaosRecorder) validation(v chaosValidation) {
	r.mu.Lock()
	r.validations = append(r.validations, v)
	r.mu.Unlock()
}

// unlockReturned records an Unlock that returned before the hold's Until, with
// the nodes' votes, and counts the wrong ones (see wrongVotes).
func (r *chaosRecorder) unlockReturned(h chaosHold, st Stats) int {
	n := 0
	for _, v := range st.Nodes {
		if v.Vote == VoteNo && slices.Contains(h.nodes, v.Index) {
			n++
		}
	}
	r.mu.Lock()
	r.wrongVotes += n
	r.mu.Unlock()
	return n
}

// chaosFigures is what a scenario reports.
type chaosFigures struct {
	acquisitions int
	overlaps     []chaosOverlap
	wrongVotes   int     // see chaosRecorder.wrongVotes
	orphans      int     // keys of no recorded hold, left when the Clients closed
	residue      int     // lock keys on a live node once every TTL passed
	inversions   int     // fences out of order; see chaosFenceInversions
	success      float64 // percent of Lock calls that acquired
	p50, p99     time.Duration
	// doneLate are the watched holds whose Done closed late; see
	// chaosDoneLate.
	doneLate []chaosHold
	// delays are the holds that began while another kept the key under
	// its minimum hold or its lock-delay; see chaosDelays.
	delays []history.Delay
	// stale are the fence validations that said a stale fence was live;
	// see chaosStaleValidations.
	stale []history.StaleValidation
	// wholeOverlaps counts the overlaps of a hold that every node had
	// acknowledged; see chaosWholeOverlaps.
	wholeOverlaps int
	// mix is what the mixed workload did, for its scenarios; nil otherwise.
	mix *mixFigures
}

// figures computes the report from the history.
func (r *chaosRecorder) figures() chaosFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := chaosFigures{acquisitions: len(r.holds), overlaps: chaosOverlaps(r.holds), inversions: chaosFenceInversions(r.holds), wrongVotes: r.wrongVotes,
		doneLate: chaosDoneLate(r.holds, mixDoneGrace), delays: chaosDelays(r.holds), stale: chaosStaleValidations(r.holds, r.validations, r.linger)}
	f.wholeOverlaps = chaosWholeOverlaps(f.overlaps)
	if r.calls > 0 {
		f.success = 100 * float64(len(r.latencies)) / float64(r.calls)
	}
	f.p50, f.p99 = chaosPercentile(r.latencies, 50), chaosPercentile(r.latencies, 99)
	return f
}

// chaosPercentile returns the nearest-rank p-th percentile, or 0 with no data.
func chaosPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100 // ceil(n·p/100), 1-based
	return s[max(i, 1)-1]
}

// TestChaosCheckerFindsOverlaps shows that the chaos suite's records reach
// internal/history whole, so that its checker can fail on them: each field
// the model reads (key, release, reader, permits, owner) has a case that
// wants an overlap and one that wants none, and an overlap comes back with
// the suite's own records of its holds. internal/history tests the rules.
func TestChaosCheckerFindsOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := func(key string, acq, until, rel int) chaosHold {
		hd := chaosHold{key: key, token: fmt.Sprintf("%s@%d", key, acq), acquired: at(acq), until: at(until)}
		if rel >= 0 {
			hd.released = at(rel)
		}
		return hd
	}
	r := func(hd chaosHold) chaosHold { hd.shared = true; return hd }
	p := func(k int, hd chaosHold) chaosHold { hd.permits = k; return hd }
	o := func(owner string, hd chaosHold) chaosHold { hd.owner = owner; return hd }
	cases := []struct {
		name  string
		holds []chaosHold
		want  [][2]string // tokens of a and b of each overlap
	}{
		{"back to back", []chaosHold{h("k", 0, 100, 10), h("k", 10, 110, 20)}, nil},
		{"second starts before release", []chaosHold{h("k", 0, 100, 50), h("k", 40, 140, 60)}, [][2]string{{"k@0", "k@40"}}},
		{"expired holder stops at until", []chaosHold{h("k", 0, 100, -1), h("k", 100, 200, 150)}, nil},
		{"second starts before until", []chaosHold{h("k", 0, 100, -1), h("k", 99, 200, 150)}, [][2]string{{"k@0", "k@99"}}},
		{"other keys never overlap", []chaosHold{h("a", 0, 100, 50), h("b", 10, 100, 50)}, nil},
		{"readers share", []chaosHold{r(h("k", 0, 100, 90)), r(h("k", 10, 100, 90))}, nil},
		{"reader during a writer", []chaosHold{h("k", 0, 100, 90), r(h("k", 10, 100, 20))}, [][2]string{{"k@0", "k@10"}}},
		{"two permits of two", []chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 90))}, nil},
		{"three permits of two", []chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 90)), p(2, h("k", 20, 100, 90))}, [][2]string{{"k@0", "k@20"}}},
		{"a reader during a permit", []chaosHold{p(3, h("k", 0, 100, 90)), r(h("k", 10, 100, 20))}, [][2]string{{"k@0", "k@10"}}},
		{"one owner nests", []chaosHold{o("a", h("k", 0, 100, 90)), o("a", h("k", 10, 100, 20))}, nil},
		{"two owners", []chaosHold{o("a", h("k", 0, 100, 90)), o("b", h("k", 10, 100, 20))}, [][2]string{{"k@0", "k@10"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]string
			for _, ov := range chaosOverlaps(tc.holds) {
				got = append(got, [2]string{ov.a.token, ov.b.token})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got overlaps %v, want %v", got, tc.want)
			}
		})
	}

	got := chaosOverlaps([]chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 35)), p(2, h("k", 20, 100, 90))})
	if len(got) != 1 || got[0].by != 15*time.Millisecond || got[0].holders != 3 {
		t.Fatalf("got %+v, want one overlap of 3 holders by 15ms", got)
	}
}

// TestChaosFenceInversions shows that the chaos suite's fences and windows
// reach internal/history, which tests the rule.
func TestChaosFenceInversions(t *testing.T) {
	t0 := time.Now()
	h := func(key string, ms int, fence uint64) chaosHold {
		return chaosHold{key: key, acquired: t0.Add(time.Duration(ms) * time.Millisecond), fence: fence}
	}
	if got := chaosFenceInversions([]chaosHold{h("a", 0, 1), h("b", 1, 1), h("a", 2, 2), h("b", 3, 5)}); got != 0 {
		t.Errorf("rising fences: got %d inversions, want 0", got)
	}
	if got := chaosFenceInversions([]chaosHold{h("a", 2, 3), h("a", 0, 3), h("a", 5, 2)}); got != 2 {
		t.Errorf("got %d inversions, want 2 (a repeat and a step back)", got)
	}
	// A Lock that returned after its Until claimed nothing.
	empty := h("a", 5, 3)
	empty.until = empty.acquired.Add(-time.Millisecond)
	valid := h("a", 4, 7)
	valid.until = valid.acquired.Add(time.Second)
	if got := chaosFenceInversions([]chaosHold{valid, empty}); got != 0 {
		t.Errorf("a hold that claimed nothing: got %d inversions, want 0", got)
	}
	empty.until = empty.acquired.Add(time.Second)
	if got := chaosFenceInversions([]chaosHold{valid, empty}); got != 1 {
		t.Errorf("the same hold, valid: got %d inversions, want 1", got)
	}
}

// TestChaosDoneLate shows that the times the chaos suite's watcher records
// reach internal/history, which tests the rule, and that a late hold comes
// back as the suite's record.
func TestChaosDoneLate(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const grace = 50 * time.Millisecond
	holds := []chaosHold{
		{key: "k", token: "closed", acquired: at(0), until: at(100), doneAt: at(130), doneFired: at(100)},
		{key: "k", token: "late", acquired: at(0), until: at(100), doneAt: at(151), doneFired: at(100)},
		{key: "k", token: "unwatched", acquired: at(0), until: at(100)},
		{key: "k", token: "never", acquired: at(0), until: at(100), doneFired: at(100)},
	}
	var got []string
	for _, h := range chaosDoneLate(holds, grace) {
		got = append(got, h.token)
	}
	if want := []string{"late", "never"}; !slices.Equal(got, want) {
		t.Fatalf("got late %v, want %v", got, want)
	}
}

func TestChaosPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for p, want := range map[int]time.Duration{50: 50, 99: 99, 100: 100, 1: 1} {
		if got := chaosPercentile(ds, p); got != want {
			t.Errorf("p%d: got %v, want %v", p, got, want)
		}
	}
	if got := chaosPercentile(nil, 50); got != 0 {
		t.Errorf("empty: got %v, want 0", got)
	}
}

// TestChaosCheckerFindsDelays shows that the fields of the minimum hold and
// the lock-delay reach internal/history, which tests the rules, so that the
// checker can fail on them: a hold that begins before the end of another's
// minimum hold (counted from the lock's own start, after an Unlock that
// returned nil while valid), or before the end of an expired hold's
// lock-delay, is reported; without the field that binds the rule it is not.
func TestChaosCheckerFindsDelays(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := func(key string, acq, until, rel int) chaosHold {
		hd := chaosHold{key: key, token: fmt.Sprintf("%s@%d", key, acq), acquired: at(acq), until: at(until)}
		if rel >= 0 {
			hd.released = at(rel)
		}
		return hd
	}
	minHold := func(hd chaosHold) chaosHold {
		hd.start, hd.minHold, hd.unlocked = hd.acquired.Add(-2*time.Millisecond), 200*time.Millisecond, hd.released.Add(time.Millisecond)
		return hd
	}
	delay := func(hd chaosHold) chaosHold { hd.lockDelay = 100 * time.Millisecond; return hd }
	noUnlock := minHold(h("k", 2, 300, 10))
	noUnlock.unlocked = time.Time{}
	cases := []struct {
		name  string
		holds []chaosHold
		want  []string // rule, token of a, token of b
	}{
		{"min-hold", []chaosHold{minHold(h("k", 2, 300, 10)), h("k", 150, 400, 160)}, []string{"min-hold k@2 k@150"}},
		{"min-hold kept", []chaosHold{minHold(h("k", 2, 300, 10)), h("k", 195, 400, 210)}, nil},
		{"min-hold, Unlock not confirmed", []chaosHold{noUnlock, h("k", 150, 400, 160)}, nil},
		{"lock-delay", []chaosHold{delay(h("k", 0, 100, -1)), h("k", 150, 400, 160)}, []string{"lock-delay k@0 k@150"}},
		{"lock-delay kept", []chaosHold{delay(h("k", 0, 100, -1)), h("k", 195, 400, 210)}, nil},
		{"lock-delay, unlocked while valid", []chaosHold{delay(h("k", 0, 100, 50)), h("k", 60, 400, 70)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range chaosDelays(tc.holds) {
				got = append(got, fmt.Sprintf("%s %s %s", d.Rule, tc.holds[d.A.Index].token, tc.holds[d.B.Index].token))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestChaosCheckerFindsStaleValidations shows that the suite's records of
// ValidateFence calls reach internal/history matched to their holds by key
// and token, so that the checker can fail on them: a validation that said
// nil after its hold's Unlock returned nil, or after a newer fence was
// handed out, is reported; one matched to no hold is judged only against
// newer fences.
func TestChaosCheckerFindsStaleValidations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := chaosHold{key: "k", token: "a", acquired: at(0), until: at(300), released: at(100), unlocked: at(102), fence: 7}
	multi := chaosHold{key: "j", token: "a", acquired: at(0), until: at(300), released: at(100), fence: 7}
	newer := chaosHold{key: "k", token: "b", acquired: at(150), until: at(400), released: at(200), fence: 9}
	v := func(key, token string, called int, valid bool) chaosValidation {
		return chaosValidation{key: key, fence: 7, token: token, called: at(called), returned: at(called + 2), valid: valid}
	}
	cases := []struct {
		name string
		vs   []chaosValidation
		want []string
	}{
		{"while held", []chaosValidation{v("k", "a", 50, true)}, nil},
		{"after Unlock returned", []chaosValidation{v("k", "a", 110, true)}, []string{"released"}},
		{"after Unlock returned, said stale", []chaosValidation{v("k", "a", 110, false)}, nil},
		{"on the other key of the hold, not unlocked there", []chaosValidation{v("j", "a", 110, true)}, nil},
		{"after a newer fence", []chaosValidation{v("j", "a", 50, true), v("k", "x", 160, true)}, []string{"newer fence"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range chaosStaleValidations([]chaosHold{held, multi, newer}, tc.vs, 50*time.Millisecond) {
				got = append(got, s.Reason)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestChaosWholeOverlaps shows which overlaps count against a hold that
// every node had acknowledged: only those of an exclusive hold whose
// wholeAt came before the other began.
func TestChaosWholeOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := chaosHold{key: "k", acquired: at(0), until: at(300)}
	b := chaosHold{key: "k", acquired: at(150), until: at(400)}
	whole := func(ms int, h chaosHold) chaosHold { h.wholeAt = at(ms); return h }
	cases := []struct {
		name string
		o    chaosOverlap
		want int
	}{
		{"never whole", chaosOverlap{a: a, b: b}, 0},
		{"whole before", chaosOverlap{a: whole(100, a), b: b}, 1},
		{"whole after", chaosOverlap{a: whole(200, a), b: b}, 0},
		{"a whole reader", chaosOverlap{a: func() chaosHold { h := whole(100, a); h.shared = true; return h }(), b: b}, 0},
	}
	for _, tc := range cases {
		if got := chaosWholeOverlaps([]chaosOverlap{tc.o}); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}
