package redlock

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"
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
	// doneAt is when the lock's Done was seen closed, and doneFired when
	// a timer the watcher armed at Until fired while Done was still open
	// (zero when Done closed first). Both are zero for holds nobody
	// watched. See chaosDoneLate.
	doneAt, doneFired time.Time
}

// end is when the holder stopped claiming the key: at its release, or at
// the end of its validity if that came first. Past Until a holder may not
// rely on the lock, so the claim ends there whatever it did.
func (h chaosHold) end() time.Time {
	if !h.released.IsZero() && h.released.Before(h.until) {
		return h.released
	}
	return h.until
}

// chaosOverlap is two holders of one key whose windows intersect, where
// they may not (see chaosCompatible), or, for a semaphore, the permit b that
// made one more holder than its permits (a is the earliest of the others).
type chaosOverlap struct {
	a, b chaosHold
	by   time.Duration // length of the intersection
	// holders is how many held the key at once, b included.
	holders int
}

// chaosCompatible reports whether two holds of one key may overlap: two
// readers, or two holds of one owner (WithOwner with the same id), which
// nest. A lock (plain, fenced, multi-key on each of its keys, a writer)
// excludes every other hold; a permit excludes everything but permits,
// which chaosOverlaps counts instead.
func chaosCompatible(a, b chaosHold) bool {
	switch {
	case a.permits > 0 || b.permits > 0:
		return false
	case a.shared || b.shared:
		return a.shared && b.shared
	}
	return a.owner != "" && a.owner == b.owner
}

// chaosOverlaps returns every pair of holds of the same key whose windows
// [acquired, end) intersect and that are not compatible (chaosCompatible).
// For a semaphore's permits it also returns one entry for each permit that
// starts while its permits or more other permits of the key hold: the
// number of holders at once peaks when one of them starts, so checking
// there finds every excess. A hold whose window is empty (Lock returned
// after Until had already passed) claims nothing.
func chaosOverlaps(holds []chaosHold) []chaosOverlap {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b chaosHold) int {
		return cmp.Or(cmp.Compare(a.key, b.key), a.acquired.Compare(b.acquired))
	})
	var out []chaosOverlap
	var open []chaosHold // holds of the current key still claiming it
	for i, h := range hs {
		if i > 0 && hs[i-1].key != h.key {
			open = open[:0]
		}
		if !h.acquired.Before(h.end()) {
			continue
		}
		// Windows are half-open: one that ends exactly when the next
		// begins does not overlap it.
		open = slices.DeleteFunc(open, func(o chaosHold) bool { return !o.end().After(h.acquired) })
		var permits []chaosHold // open permits, when h is one
		for _, o := range open {
			if o.permits > 0 && h.permits > 0 {
				permits = append(permits, o)
				continue
			}
			if chaosCompatible(o, h) {
				continue
			}
			end := o.end()
			if h.end().Before(end) {
				end = h.end()
			}
			out = append(out, chaosOverlap{a: o, b: h, by: end.Sub(h.acquired), holders: 2})
		}
		if h.permits > 0 && len(permits) >= h.permits {
			end := h.end()
			for _, o := range permits {
				if o.end().Before(end) {
					end = o.end()
				}
			}
			out = append(out, chaosOverlap{a: permits[0], b: h, by: end.Sub(h.acquired), holders: len(permits) + 1})
		}
		open = append(open, h)
	}
	return out
}

// chaosFenceInversions counts, for each key, the holds whose fence is not
// larger than that of the hold acquired just before them. Holders that never
// overlap must see their fences rise in the order they acquired. Holds
// without a fence (0: fencing off) are left out, and so are holds with a
// recorded Until whose window is empty: Lock returned after Until, so the
// hold claimed nothing, and a rival may have acquired before it returned.
func chaosFenceInversions(holds []chaosHold) int {
	hs := slices.DeleteFunc(slices.Clone(holds), func(h chaosHold) bool {
		return h.fence == 0 || (!h.until.IsZero() && !h.acquired.Before(h.end()))
	})
	slices.SortFunc(hs, func(a, b chaosHold) int {
		return cmp.Or(cmp.Compare(a.key, b.key), a.acquired.Compare(b.acquired))
	})
	n := 0
	for i := 1; i < len(hs); i++ {
		if hs[i].key == hs[i-1].key && hs[i].fence <= hs[i-1].fence {
			n++
		}
	}
	return n
}

// chaosDoneLate returns the watched holds whose Done did not close by
// Until: the watcher's timer at the final Until fired with Done still open
// (doneFired is set), and Done then closed more than grace later, or never.
// Timers fire late on a busy machine, the watcher's as much as the expiry
// timer that closes Done, so the grace is counted from the watcher's timer,
// not from Until: it covers the expiry timer's goroutine getting to run.
// Holds nobody watched (both times zero) are left out.
func chaosDoneLate(holds []chaosHold, grace time.Duration) []chaosHold {
	var out []chaosHold
	for _, h := range holds {
		if h.doneFired.IsZero() {
			continue
		}
		if h.doneAt.IsZero() || h.doneAt.Sub(h.doneFired) > grace {
			out = append(out, h)
		}
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
	// mix is what the mixed workload did, for its scenarios; nil otherwise.
	mix *mixFigures
}

// figures computes the report from the history.
func (r *chaosRecorder) figures() chaosFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := chaosFigures{acquisitions: len(r.holds), overlaps: chaosOverlaps(r.holds), inversions: chaosFenceInversions(r.holds), wrongVotes: r.wrongVotes,
		doneLate: chaosDoneLate(r.holds, mixDoneGrace)}
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

// TestChaosCheckerFindsOverlaps shows that the checker can fail: it must
// report windows that intersect where they may not, and only those: any
// two locks but those of one owner, a writer and anyone, a permit and a
// lock or a reader, more permits than the semaphore has. Each case that
// wants overlaps is the negative control of one rule.
func TestChaosCheckerFindsOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := func(key string, acq, until, rel int) chaosHold {
		hd := chaosHold{key: key, token: key + "@" + time.Duration(acq).String(), acquired: at(acq), until: at(until)}
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
		want  int
	}{
		{"disjoint", []chaosHold{h("k", 0, 100, 10), h("k", 20, 120, 30)}, 0},
		{"back to back", []chaosHold{h("k", 0, 100, 10), h("k", 10, 110, 20)}, 0},
		{"second starts before release", []chaosHold{h("k", 0, 100, 50), h("k", 40, 140, 60)}, 1},
		{"expired holder stops at until", []chaosHold{h("k", 0, 100, -1), h("k", 100, 200, 150)}, 0},
		{"holder past until claims nothing more", []chaosHold{h("k", 0, 100, 300), h("k", 150, 250, 200)}, 0},
		{"second starts before until", []chaosHold{h("k", 0, 100, -1), h("k", 99, 200, 150)}, 1},
		{"other keys never overlap", []chaosHold{h("a", 0, 100, 50), h("b", 10, 100, 50)}, 0},
		{"empty window claims nothing", []chaosHold{h("k", 0, 100, 50), h("k", 30, 20, 40)}, 0},
		{"three at once", []chaosHold{h("k", 0, 100, 90), h("k", 10, 100, 90), h("k", 20, 100, 90)}, 3},
		{"readers share", []chaosHold{r(h("k", 0, 100, 90)), r(h("k", 10, 100, 90)), r(h("k", 20, 100, 90))}, 0},
		{"writer during a reader", []chaosHold{r(h("k", 0, 100, 90)), h("k", 10, 100, 20)}, 1},
		{"reader during a writer", []chaosHold{h("k", 0, 100, 90), r(h("k", 10, 100, 20)), r(h("k", 30, 100, 40))}, 2},
		{"reader after the writer", []chaosHold{h("k", 0, 100, 10), r(h("k", 10, 100, 20)), r(h("k", 15, 100, 30))}, 0},
		{"two permits of two", []chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 90))}, 0},
		{"three permits of two", []chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 90)), p(2, h("k", 20, 100, 90))}, 1},
		{"three permits of two, one gone", []chaosHold{p(2, h("k", 0, 100, 15)), p(2, h("k", 10, 100, 90)), p(2, h("k", 20, 100, 90))}, 0},
		{"four permits of two", []chaosHold{p(2, h("k", 0, 100, 90)), p(2, h("k", 10, 100, 90)), p(2, h("k", 20, 100, 90)), p(2, h("k", 30, 100, 90))}, 2},
		{"one permit is a lock", []chaosHold{p(1, h("k", 0, 100, 50)), p(1, h("k", 40, 100, 60))}, 1},
		{"one owner nests", []chaosHold{o("a", h("k", 0, 100, 90)), o("a", h("k", 10, 100, 20)), o("a", h("k", 15, 100, 95))}, 0},
		{"two owners", []chaosHold{o("a", h("k", 0, 100, 90)), o("b", h("k", 10, 100, 20))}, 1},
		{"an owner and a plain lock", []chaosHold{o("a", h("k", 0, 100, 90)), h("k", 10, 100, 20)}, 1},
		{"a plain lock and an owner", []chaosHold{h("k", 0, 100, 90), o("a", h("k", 10, 100, 20))}, 1},
		{"an owner and a reader", []chaosHold{o("a", h("k", 0, 100, 90)), r(h("k", 10, 100, 20))}, 1},
		{"a lock during a permit of three", []chaosHold{p(3, h("k", 0, 100, 90)), h("k", 10, 100, 20)}, 1},
		{"a permit of three during a lock", []chaosHold{h("k", 0, 100, 90), p(3, h("k", 10, 100, 20))}, 1},
		{"a permit of three during a reader", []chaosHold{r(h("k", 0, 100, 90)), p(3, h("k", 10, 100, 20))}, 1},
		{"a reader during a permit of three", []chaosHold{p(3, h("k", 0, 100, 90)), r(h("k", 10, 100, 20))}, 1},
		{"an owner during a permit", []chaosHold{p(2, h("k", 0, 100, 90)), o("a", h("k", 10, 100, 20))}, 1},
		{"a permit of three after a lock", []chaosHold{h("k", 0, 100, 10), p(3, h("k", 10, 100, 20)), p(3, h("k", 11, 100, 20))}, 0},
		{"three permits of three, and a fourth", []chaosHold{p(3, h("k", 0, 100, 90)), p(3, h("k", 10, 100, 90)), p(3, h("k", 20, 100, 90)), p(3, h("k", 30, 100, 90))}, 1},
		{"a multi-key lock on each of its keys", []chaosHold{h("a", 0, 100, 50), h("b", 0, 100, 50), h("b", 20, 100, 30)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := chaosOverlaps(tc.holds)
			if len(got) != tc.want {
				t.Fatalf("got %d overlaps, want %d: %+v", len(got), tc.want, got)
			}
		})
	}
}

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
	if got := chaosFenceInversions([]chaosHold{h("a", 0, 0), h("a", 1, 0)}); got != 0 {
		t.Errorf("unfenced holds: got %d inversions, want 0", got)
	}
	// A Lock that returned after its Until claimed nothing: a rival that
	// acquired meanwhile, with a larger fence, returned first.
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

// TestChaosDoneLate shows that the check of Done can fail: a hold whose
// Done closed more than the grace after the watcher's timer at Until fired,
// or never, is reported; one whose Done closed first, or within the grace,
// or that nobody watched, is not.
func TestChaosDoneLate(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const grace = 50 * time.Millisecond
	cases := []struct {
		name          string
		doneAt, fired time.Time
		late          bool
	}{
		{"closed before Until", at(90), time.Time{}, false},
		{"not watched", time.Time{}, time.Time{}, false},
		{"closed within the grace", at(130), at(100), false},
		{"closed after the grace", at(151), at(100), true},
		{"never closed", time.Time{}, at(100), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := chaosHold{key: "k", acquired: at(0), until: at(100), doneAt: tc.doneAt, doneFired: tc.fired}
			if got := len(chaosDoneLate([]chaosHold{h}, grace)) == 1; got != tc.late {
				t.Fatalf("got late %t, want %t", got, tc.late)
			}
		})
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
