package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// clock builds holds on a shared origin, in milliseconds.
type clock struct{ t0 time.Time }

func newClock() clock { return clock{time.Now()} }

func (c clock) at(ms int) time.Time { return c.t0.Add(time.Duration(ms) * time.Millisecond) }

// hold is an exclusive hold of key acquired at acq, valid until until and
// released at rel, or left to expire when rel is negative.
func (c clock) hold(key string, acq, until, rel int) Hold {
	h := Hold{Key: key, Holder: fmt.Sprintf("%s@%d", key, acq), Acquired: c.at(acq), Until: c.at(until)}
	if rel >= 0 {
		h.Released = c.at(rel)
	}
	return h
}

func reader(h Hold) Hold               { h.Kind = Reader; return h }
func permit(k int, h Hold) Hold        { h.Kind, h.Permits = Permit, k; return h }
func owned(owner string, h Hold) Hold  { h.Owner = owner; return h }
func fenced(fence uint64, h Hold) Hold { h.Fence = fence; return h }
func pairs(os []Overlap) (out [][2]int) {
	for _, o := range os {
		out = append(out, [2]int{o.A.Index, o.B.Index})
	}
	return out
}

func TestEnd(t *testing.T) {
	c := newClock()
	cases := []struct {
		name string
		h    Hold
		want time.Time
	}{
		{"released before until", c.hold("k", 0, 100, 40), c.at(40)},
		{"left to expire", c.hold("k", 0, 100, -1), c.at(100)},
		{"released past until", c.hold("k", 0, 100, 150), c.at(100)},
	}
	for _, tc := range cases {
		if got := tc.h.End(); !got.Equal(tc.want) {
			t.Errorf("%s: got end %v, want %v", tc.name, got.Sub(c.t0), tc.want.Sub(c.t0))
		}
	}
	if !c.hold("k", 0, 100, 150).Overran() || c.hold("k", 0, 100, 100).Overran() || c.hold("k", 0, 100, -1).Overran() {
		t.Error("Overran: want true only for a release after Until")
	}
	if c.hold("k", 30, 20, 40).Claims() || c.hold("k", 20, 20, -1).Claims() || !c.hold("k", 20, 21, -1).Claims() {
		t.Error("Claims: want false for an empty window, true otherwise")
	}
}

// TestOverlaps shows that the checker can fail: it must report windows that
// intersect where they may not, and only those: any two exclusive holds
// but those of one owner, a writer and anyone, a permit and anything but a
// permit, more permits than the semaphore has. Each case that wants
// overlaps is the negative control of one rule; each that wants none shows
// that the rule does not overreach.
func TestOverlaps(t *testing.T) {
	c := newClock()
	h := c.hold
	cases := []struct {
		name  string
		holds []Hold
		want  [][2]int // indexes of A and B of each overlap, in order
	}{
		{"none", nil, nil},
		{"disjoint", []Hold{h("k", 0, 100, 10), h("k", 20, 120, 30)}, nil},
		{"touching", []Hold{h("k", 0, 100, 10), h("k", 10, 110, 20)}, nil},
		{"touching at until", []Hold{h("k", 0, 100, -1), h("k", 100, 200, 150)}, nil},
		{"out of order", []Hold{h("k", 21, 500, 30), h("k", 0, 500, 10), h("k", 11, 500, 20)}, nil},
		{"second starts before release", []Hold{h("k", 0, 100, 50), h("k", 40, 140, 60)}, [][2]int{{0, 1}}},
		{"holder past until claims nothing more", []Hold{h("k", 0, 100, 300), h("k", 150, 250, 200)}, nil},
		{"second starts before until", []Hold{h("k", 0, 100, -1), h("k", 99, 200, 150)}, [][2]int{{0, 1}}},
		{"overran validity, overlap", []Hold{h("k", 0, 500, 900), h("k", 400, 1100, 700)}, [][2]int{{0, 1}}},
		{"other keys never overlap", []Hold{h("a", 0, 100, 50), h("b", 10, 100, 50)}, nil},
		{"empty window claims nothing", []Hold{h("k", 0, 100, 50), h("k", 30, 20, 40)}, nil},
		{"three at once", []Hold{h("k", 0, 100, 90), h("k", 10, 100, 90), h("k", 20, 100, 90)}, [][2]int{{0, 1}, {0, 2}, {1, 2}}},
		{"nested in a long hold", []Hold{h("k", 0, 500, 100), h("k", 20, 500, 30), h("k", 40, 500, 50)}, [][2]int{{0, 1}, {0, 2}}},
		{"readers share", []Hold{reader(h("k", 0, 100, 90)), reader(h("k", 10, 100, 90)), reader(h("k", 20, 100, 90))}, nil},
		{"writer during a reader", []Hold{reader(h("k", 0, 100, 90)), h("k", 10, 100, 20)}, [][2]int{{0, 1}}},
		{"reader during a writer", []Hold{h("k", 0, 100, 90), reader(h("k", 10, 100, 20)), reader(h("k", 30, 100, 40))}, [][2]int{{0, 1}, {0, 2}}},
		{"reader after the writer", []Hold{h("k", 0, 100, 10), reader(h("k", 10, 100, 20)), reader(h("k", 15, 100, 30))}, nil},
		{"two permits of two", []Hold{permit(2, h("k", 0, 100, 90)), permit(2, h("k", 10, 100, 90))}, nil},
		{"three permits of three", []Hold{permit(3, h("k", 0, 100, 90)), permit(3, h("k", 10, 100, 90)), permit(3, h("k", 20, 100, 90))}, nil},
		{"three permits of two", []Hold{permit(2, h("k", 0, 100, 90)), permit(2, h("k", 10, 100, 90)), permit(2, h("k", 20, 100, 90))}, [][2]int{{0, 2}}},
		{"three permits of two, one gone", []Hold{permit(2, h("k", 0, 100, 15)), permit(2, h("k", 10, 100, 90)), permit(2, h("k", 20, 100, 90))}, nil},
		{"four permits of two", []Hold{permit(2, h("k", 0, 100, 90)), permit(2, h("k", 10, 100, 90)), permit(2, h("k", 20, 100, 90)), permit(2, h("k", 30, 100, 90))}, [][2]int{{0, 2}, {0, 3}}},
		{"one permit is a lock", []Hold{permit(1, h("k", 0, 100, 50)), permit(1, h("k", 40, 100, 60))}, [][2]int{{0, 1}}},
		{"no permits count as one", []Hold{permit(0, h("k", 0, 100, 50)), permit(0, h("k", 40, 100, 60))}, [][2]int{{0, 1}}},
		{"one owner nests", []Hold{owned("a", h("k", 0, 100, 90)), owned("a", h("k", 10, 100, 20)), owned("a", h("k", 15, 100, 95))}, nil},
		{"two owners", []Hold{owned("a", h("k", 0, 100, 90)), owned("b", h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"an owner and a plain lock", []Hold{owned("a", h("k", 0, 100, 90)), h("k", 10, 100, 20)}, [][2]int{{0, 1}}},
		{"a plain lock and an owner", []Hold{h("k", 0, 100, 90), owned("a", h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"an owner and a reader", []Hold{owned("a", h("k", 0, 100, 90)), reader(h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"a reader of an owner", []Hold{owned("a", reader(h("k", 0, 100, 90))), owned("a", h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"a lock during a permit of three", []Hold{permit(3, h("k", 0, 100, 90)), h("k", 10, 100, 20)}, [][2]int{{0, 1}}},
		{"a permit of three during a lock", []Hold{h("k", 0, 100, 90), permit(3, h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"a permit of three during a reader", []Hold{reader(h("k", 0, 100, 90)), permit(3, h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"a reader during a permit of three", []Hold{permit(3, h("k", 0, 100, 90)), reader(h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"an owner during a permit", []Hold{permit(2, h("k", 0, 100, 90)), owned("a", h("k", 10, 100, 20))}, [][2]int{{0, 1}}},
		{"a permit of three after a lock", []Hold{h("k", 0, 100, 10), permit(3, h("k", 10, 100, 20)), permit(3, h("k", 11, 100, 20))}, nil},
		{"three permits of three, and a fourth", []Hold{permit(3, h("k", 0, 100, 90)), permit(3, h("k", 10, 100, 90)), permit(3, h("k", 20, 100, 90)), permit(3, h("k", 30, 100, 90))}, [][2]int{{0, 3}}},
		{"a multi-key lock on each of its keys", []Hold{h("a", 0, 100, 50), h("b", 0, 100, 50), h("b", 20, 100, 30)}, [][2]int{{1, 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Overlaps(tc.holds)
			if fmt.Sprint(pairs(got)) != fmt.Sprint(tc.want) {
				t.Fatalf("got overlaps %v, want %v", pairs(got), tc.want)
			}
			for _, o := range got {
				if o.A.Hold != tc.holds[o.A.Index] || o.B.Hold != tc.holds[o.B.Index] {
					t.Errorf("overlap %v: its holds are not those at its indexes", pairs([]Overlap{o}))
				}
			}
		})
	}
}

// TestOverlapDetail checks the length and the number of holders an overlap
// reports, and its message.
func TestOverlapDetail(t *testing.T) {
	c := newClock()
	got := Overlaps([]Hold{c.hold("k", 0, 100, 50), c.hold("k", 40, 140, 60)})
	if len(got) != 1 || got[0].By != 10*time.Millisecond || got[0].Holders != 2 {
		t.Fatalf("got %+v, want one overlap of 2 holders by 10ms", got)
	}
	const want = `key "k": overlap by 10ms, 2 holders: k@0 (exclusive) held [0s, 50ms) and k@40 (exclusive) held [40ms, 60ms)`
	if s := got[0].Format(c.t0); s != want {
		t.Errorf("got message %q, want %q", s, want)
	}

	// Three permits of two: the intersection of all three windows.
	got = Overlaps([]Hold{permit(2, c.hold("k", 0, 100, 90)), permit(2, c.hold("k", 10, 100, 35)), permit(2, c.hold("k", 20, 100, 90))})
	if len(got) != 1 || got[0].By != 15*time.Millisecond || got[0].Holders != 3 {
		t.Fatalf("got %+v, want one overlap of 3 holders by 15ms", got)
	}
	if s := got[0].Format(c.t0); !strings.Contains(s, "3 holders") || !strings.Contains(s, "(permit of 2)") {
		t.Errorf("got message %q, want it to name 3 holders and the permits of 2", s)
	}
	if s := Overlaps([]Hold{owned("o", c.hold("k", 0, 100, 90)), reader(c.hold("k", 10, 100, 20))})[0].Format(c.t0); !strings.Contains(s, `(exclusive, owner "o")`) || !strings.Contains(s, "(reader)") {
		t.Errorf("got message %q, want it to name the owner and the reader", s)
	}
}

func TestFenceInversions(t *testing.T) {
	c := newClock()
	h := func(key string, ms int, fence uint64) Hold {
		return fenced(fence, Hold{Key: key, Holder: fmt.Sprint(ms), Acquired: c.at(ms)})
	}
	// hold is a hold of key a with a window, released at rel.
	hold := func(ms int, fence uint64, rel int) Hold {
		return fenced(fence, c.hold("a", ms, 1000, rel))
	}
	cases := []struct {
		name  string
		holds []Hold
		want  [][2]int // indexes of Prev and Next
	}{
		{"rising fences", []Hold{h("a", 0, 1), h("b", 1, 1), h("a", 2, 2), h("b", 3, 5)}, nil},
		{"a repeat and a step back", []Hold{h("a", 2, 3), h("a", 0, 3), h("a", 5, 2)}, [][2]int{{1, 0}, {0, 2}}},
		{"unfenced holds", []Hold{h("a", 0, 0), h("a", 1, 0)}, nil},
		{"keys are apart", []Hold{h("a", 0, 5), h("b", 1, 1)}, nil},
		{"below an earlier fence but the last", []Hold{h("a", 0, 5), h("a", 1, 3), h("a", 2, 4)}, [][2]int{{0, 1}, {0, 2}}},
		{"one owner, nested", []Hold{owned("o", hold(0, 5, 100)), owned("o", hold(10, 4, 20))}, nil},
		{"one owner, not nested", []Hold{owned("o", hold(0, 5, 10)), owned("o", hold(10, 4, 20))}, [][2]int{{0, 1}}},
		{"another owner, nested", []Hold{owned("o", hold(0, 5, 100)), owned("p", hold(10, 4, 20))}, [][2]int{{0, 1}}},
		{"one owner, nested, then another", []Hold{owned("o", hold(0, 5, 100)), owned("o", hold(10, 4, 20)), hold(100, 5, 120)}, [][2]int{{0, 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]int
			for _, v := range FenceInversions(tc.holds) {
				got = append(got, [2]int{v.Prev.Index, v.Next.Index})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got inversions %v, want %v", got, tc.want)
			}
		})
	}

	// A lock call that returned after its Until claimed nothing: a rival
	// that acquired meanwhile, with a larger fence, returned first.
	empty := h("a", 5, 3)
	empty.Until = empty.Acquired.Add(-time.Millisecond)
	valid := h("a", 4, 7)
	valid.Until = valid.Acquired.Add(time.Second)
	if got := FenceInversions([]Hold{valid, empty}); len(got) != 0 {
		t.Errorf("a hold that claimed nothing: got inversions %v, want none", got)
	}
	empty.Until = empty.Acquired.Add(time.Second)
	got := FenceInversions([]Hold{valid, empty})
	if len(got) != 1 {
		t.Fatalf("the same hold, valid: got %d inversions, want 1", len(got))
	}
	if want := `key "a": 5 (exclusive) got fence 3 after 4 (exclusive) got 7`; got[0].String() != want {
		t.Errorf("got message %q, want %q", got[0].String(), want)
	}
}

// TestLateDone shows that the check of the lost signal can fail: a hold
// whose Done closed more than the grace after the watcher's timer at Until
// fired, or never, is reported; one whose Done closed first, or within the
// grace, or that nobody watched, is not.
func TestLateDone(t *testing.T) {
	c := newClock()
	const grace = 50 * time.Millisecond
	cases := []struct {
		name          string
		doneAt, fired time.Time
		late          bool
	}{
		{"closed before Until", c.at(90), time.Time{}, false},
		{"not watched", time.Time{}, time.Time{}, false},
		{"closed within the grace", c.at(130), c.at(100), false},
		{"closed at the grace", c.at(150), c.at(100), false},
		{"closed after the grace", c.at(151), c.at(100), true},
		{"never closed", time.Time{}, c.at(100), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			other := c.hold("other", 0, 100, -1)
			h := Hold{Key: "k", Acquired: c.at(0), Until: c.at(100), DoneAt: tc.doneAt, UntilFired: tc.fired}
			got := LateDone([]Hold{other, h}, grace)
			if late := len(got) == 1; late != tc.late || len(got) > 1 {
				t.Fatalf("got late holds %v, want late %t", got, tc.late)
			}
			if tc.late && got[0].Index != 1 {
				t.Errorf("got index %d, want 1", got[0].Index)
			}
		})
	}
}

// minHold gives a hold a minimum hold of d counted from start, with a
// confirmed release at its Released time (see Hold.Unlocked).
func (c clock) minHold(d, start int, h Hold) Hold {
	h.MinHold, h.Start = time.Duration(d)*time.Millisecond, c.at(start)
	if !h.Released.IsZero() {
		h.Unlocked = h.Released.Add(time.Millisecond)
	}
	return h
}

func lockDelay(d int, h Hold) Hold { h.LockDelay = time.Duration(d) * time.Millisecond; return h }

// TestKept shows which rule keeps a key past a hold's window, and until
// when: a minimum hold only after a confirmed release made while valid, a
// lock-delay only after a hold that was not released while valid.
func TestKept(t *testing.T) {
	c := newClock()
	const slack = 5 * time.Millisecond
	unconfirmed := c.minHold(300, 0, c.hold("k", 2, 100, 10))
	unconfirmed.Unlocked = time.Time{}
	cases := []struct {
		name string
		h    Hold
		want time.Time
		rule string
	}{
		{"no rule", c.hold("k", 0, 100, 10), c.at(10), ""},
		{"min-hold after a release", c.minHold(300, 0, c.hold("k", 2, 100, 10)), c.at(295), "min-hold"},
		{"min-hold shorter than the window", c.minHold(8, 0, c.hold("k", 2, 100, 10)), c.at(10), ""},
		{"min-hold, release not confirmed", unconfirmed, c.at(10), ""},
		{"min-hold, left to expire", c.minHold(300, 0, c.hold("k", 2, 100, -1)), c.at(100), ""},
		{"lock-delay, expired", lockDelay(50, c.hold("k", 0, 100, -1)), c.at(145), "lock-delay"},
		{"lock-delay, released past Until", lockDelay(50, c.hold("k", 0, 100, 120)), c.at(145), "lock-delay"},
		{"lock-delay, released at Until", lockDelay(50, c.hold("k", 0, 100, 100)), c.at(145), "lock-delay"},
		{"lock-delay, released while valid", lockDelay(50, c.hold("k", 0, 100, 99)), c.at(99), ""},
		{"both, the later wins", lockDelay(50, c.minHold(300, 0, c.hold("k", 2, 100, -1))), c.at(145), "lock-delay"},
	}
	for _, tc := range cases {
		got, rule := tc.h.Kept(slack)
		if !got.Equal(tc.want) || rule != tc.rule {
			t.Errorf("%s: got kept until %v by %q, want %v by %q", tc.name, got.Sub(c.t0), rule, tc.want.Sub(c.t0), tc.rule)
		}
	}
}

// TestDelays shows that the check of the minimum hold and the lock-delay
// can fail: a hold that begins while another keeps the key under either
// rule, where the two may not share it, is reported, and only then. Each
// case that wants a violation is the negative control of a rule; each that
// wants none shows that it does not overreach.
func TestDelays(t *testing.T) {
	c := newClock()
	h := c.hold
	const slack = 5 * time.Millisecond
	cases := []struct {
		name  string
		holds []Hold
		want  [][2]int // indexes of A and B of each violation
		rules []string
	}{
		{"none", nil, nil, nil},
		{"min-hold kept", []Hold{c.minHold(200, 0, h("k", 1, 300, 10)), h("k", 195, 400, 210)}, nil, nil},
		{"min-hold broken", []Hold{c.minHold(200, 0, h("k", 1, 300, 10)), h("k", 150, 400, 160)}, [][2]int{{0, 1}}, []string{"min-hold"}},
		{"min-hold broken within the slack", []Hold{c.minHold(200, 0, h("k", 1, 300, 10)), h("k", 196, 400, 210)}, nil, nil},
		{"min-hold, other key", []Hold{c.minHold(200, 0, h("k", 1, 300, 10)), h("j", 150, 400, 160)}, nil, nil},
		{"min-hold, the same owner", []Hold{owned("o", c.minHold(200, 0, h("k", 1, 300, 10))), owned("o", h("k", 150, 400, 160))}, nil, nil},
		{"min-hold, another owner", []Hold{owned("o", c.minHold(200, 0, h("k", 1, 300, 10))), owned("p", h("k", 150, 400, 160))}, [][2]int{{0, 1}}, []string{"min-hold"}},
		{"min-hold, a reader after", []Hold{c.minHold(200, 0, h("k", 1, 300, 10)), reader(h("k", 150, 400, 160))}, [][2]int{{0, 1}}, []string{"min-hold"}},
		{"min-hold, an overlap is not a delay", []Hold{c.minHold(200, 0, h("k", 1, 300, 100)), h("k", 50, 400, 60)}, nil, nil},
		{"lock-delay kept", []Hold{lockDelay(100, h("k", 0, 100, -1)), h("k", 196, 400, 210)}, nil, nil},
		{"lock-delay broken after expiry", []Hold{lockDelay(100, h("k", 0, 100, -1)), h("k", 150, 400, 160)}, [][2]int{{0, 1}}, []string{"lock-delay"}},
		{"lock-delay broken after an overrun", []Hold{lockDelay(100, h("k", 0, 100, 130)), h("k", 150, 400, 160)}, [][2]int{{0, 1}}, []string{"lock-delay"}},
		{"lock-delay, released while valid", []Hold{lockDelay(100, h("k", 0, 100, 50)), h("k", 60, 400, 70)}, nil, nil},
		{"lock-delay, readers share", []Hold{reader(lockDelay(100, h("k", 0, 100, -1))), reader(h("k", 150, 400, 160))}, nil, nil},
		{"lock-delay of a reader, a writer after", []Hold{reader(lockDelay(100, h("k", 0, 100, -1))), h("k", 150, 400, 160)}, [][2]int{{0, 1}}, []string{"lock-delay"}},
		{"lock-delay of an empty window", []Hold{lockDelay(100, h("k", 0, -10, -1)), h("k", 50, 400, 60)}, [][2]int{{0, 1}}, []string{"lock-delay"}},
		{"lock-delay, a permit after a lock", []Hold{lockDelay(100, h("k", 0, 100, -1)), permit(2, h("k", 150, 400, 160))}, [][2]int{{0, 1}}, []string{"lock-delay"}},
		{"permits of two, one kept", []Hold{permit(2, lockDelay(100, h("k", 0, 100, -1))), permit(2, h("k", 120, 400, 300)), permit(2, h("k", 150, 400, 160))}, [][2]int{{0, 2}}, []string{"lock-delay"}},
		{"permits of three, one kept", []Hold{permit(3, lockDelay(100, h("k", 0, 100, -1))), permit(3, h("k", 120, 400, 300)), permit(3, h("k", 150, 400, 160))}, nil, nil},
		{"permits of two, both open", []Hold{permit(2, h("k", 0, 400, 300)), permit(2, h("k", 120, 400, 300)), permit(2, h("k", 150, 400, 160))}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Delays(tc.holds, slack)
			var ps [][2]int
			var rules []string
			for _, d := range got {
				ps = append(ps, [2]int{d.A.Index, d.B.Index})
				rules = append(rules, d.Rule)
				if d.A.Hold != tc.holds[d.A.Index] || d.B.Hold != tc.holds[d.B.Index] {
					t.Errorf("violation %v: its holds are not those at its indexes", d)
				}
			}
			if fmt.Sprint(ps) != fmt.Sprint(tc.want) || fmt.Sprint(rules) != fmt.Sprint(tc.rules) {
				t.Fatalf("got violations %v by %v, want %v by %v", ps, rules, tc.want, tc.rules)
			}
		})
	}
	got := Delays([]Hold{c.minHold(200, 0, h("k", 1, 300, 10)), h("k", 150, 400, 160)}, slack)
	if got[0].Early != 45*time.Millisecond || got[0].Holders != 2 {
		t.Errorf("got %+v, want a violation by 45ms with 2 holders", got[0])
	}
	if s := got[0].Format(c.t0); !strings.Contains(s, "min-hold broken by 45ms") {
		t.Errorf("got message %q", s)
	}
}

// TestStaleValidations shows that the check of fence validations can fail:
// a validation that said a fence was live after a newer fence had been
// handed out, or after its hold was released, is reported; one that said so
// within the minimum hold, while another hold of the same owner held the
// key, or before the newer fence came, is not, and a stale verdict never is.
func TestStaleValidations(t *testing.T) {
	c := newClock()
	const slack, linger = 5 * time.Millisecond, 50 * time.Millisecond
	released := fenced(7, c.hold("k", 0, 300, 100))
	released.Unlocked = c.at(102)
	v := func(hold, called int, fence uint64, valid bool) Validation {
		return Validation{Key: "k", Fence: fence, Hold: hold, Holder: fmt.Sprint(hold), Called: c.at(called), Returned: c.at(called + 3), Valid: valid}
	}
	cases := []struct {
		name  string
		holds []Hold
		vs    []Validation
		want  []string // reasons, in order
	}{
		{"while held", []Hold{released}, []Validation{v(0, 50, 7, true)}, nil},
		{"during the release", []Hold{released}, []Validation{v(0, 101, 7, true)}, nil},
		{"after the release", []Hold{released}, []Validation{v(0, 103, 7, true)}, []string{"released"}},
		{"after the release, said stale", []Hold{released}, []Validation{v(0, 103, 7, false)}, nil},
		{"after the release, hold unknown", []Hold{released}, []Validation{v(-1, 103, 7, true)}, nil},
		{"a release not confirmed", []Hold{fenced(7, c.hold("k", 0, 300, 100))}, []Validation{v(0, 103, 7, true)}, nil},
		{"within the min-hold", []Hold{c.minHold(200, 0, released)}, []Validation{v(0, 150, 7, true)}, nil},
		{"after the min-hold", []Hold{c.minHold(200, 0, released)}, []Validation{v(0, 206, 7, true)}, []string{"released"}},
		{"a newer fence, after", []Hold{released, fenced(9, c.hold("k", 110, 400, 200))}, []Validation{v(0, 50, 7, true)}, nil},
		{"a newer fence, before", []Hold{fenced(7, c.hold("k", 0, 300, -1)), fenced(9, c.hold("k", 40, 400, 200))}, []Validation{v(0, 50, 7, true)}, []string{"newer fence"}},
		{"a newer fence of a reader", []Hold{fenced(7, c.hold("k", 0, 300, -1)), reader(fenced(9, c.hold("k", 40, 400, 200)))}, []Validation{v(0, 50, 7, true)}, nil},
		{"a newer fence on another key", []Hold{fenced(7, c.hold("k", 0, 300, -1)), fenced(9, c.hold("j", 40, 400, 200))}, []Validation{v(0, 50, 7, true)}, nil},
		{"an older fence", []Hold{fenced(7, c.hold("k", 0, 300, -1)), fenced(5, c.hold("k", 40, 400, 200))}, []Validation{v(0, 50, 7, true)}, nil},
		{"an owner still at the key", []Hold{owned("o", released), owned("o", fenced(6, c.hold("k", 0, 300, -1)))}, []Validation{v(0, 150, 7, true)}, nil},
		{"an owner gone from the key", []Hold{owned("o", released), owned("o", fenced(6, c.hold("k", 0, 90, -1)))}, []Validation{v(0, 150, 7, true)}, []string{"released"}},
		{"another owner at the key", []Hold{owned("o", released), owned("p", c.hold("k", 0, 300, -1))}, []Validation{v(0, 150, 7, true)}, []string{"released"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range StaleValidations(tc.holds, tc.vs, slack, linger) {
				got = append(got, s.Reason)
				if s.By.Hold != tc.holds[s.By.Index] || s.Validation != tc.vs[s.Index] {
					t.Errorf("%+v: its hold or validation is not the one at its index", s)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got stale validations %v, want %v", got, tc.want)
			}
		})
	}
	got := StaleValidations([]Hold{released}, []Validation{v(0, 103, 7, true)}, slack, linger)
	if s := got[0].Format(c.t0); !strings.Contains(s, "validated fence 7 in [103ms, 106ms), but released") {
		t.Errorf("got message %q", s)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Exclusive: "exclusive", Reader: "reader", Permit: "permit", 7: "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
