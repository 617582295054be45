package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// leader is a leadership of key with term, value v, over [acq, end).
func (c clock) leader(key string, term uint64, v string, acq, end int) Leadership {
	return Leadership{Key: key, Holder: fmt.Sprintf("%s@%d", v, acq), Value: v, Term: term, Acquired: c.at(acq), End: c.at(end)}
}

// seen is a value an Observe stream delivered at ms.
func (c clock) seen(ms int, term uint64, v string) Observed {
	return Observed{At: c.at(ms), Term: term, Value: v}
}

// TestLeadershipHolds shows that leaderships reach the checks of holds
// whole: two that overlap are an overlap, and a Term that does not rise
// from one leadership to the next, lower or equal, is a fence inversion.
func TestLeadershipHolds(t *testing.T) {
	c := newClock()
	holds := func(ls ...Leadership) []Hold {
		var out []Hold
		for _, l := range ls {
			out = append(out, l.Hold())
		}
		return out
	}
	cases := []struct {
		name               string
		leaders            []Leadership
		overlaps, inverted int
	}{
		{"one after another", []Leadership{c.leader("e", 5, "a", 0, 100), c.leader("e", 9, "b", 100, 200)}, 0, 0},
		{"two at once", []Leadership{c.leader("e", 5, "a", 0, 100), c.leader("e", 9, "b", 99, 200)}, 1, 0},
		{"a lower term", []Leadership{c.leader("e", 5, "a", 0, 100), c.leader("e", 4, "b", 100, 200)}, 0, 1},
		{"the same term", []Leadership{c.leader("e", 5, "a", 0, 100), c.leader("e", 5, "b", 100, 200)}, 0, 1},
		{"other elections", []Leadership{c.leader("e", 5, "a", 0, 100), c.leader("f", 4, "b", 50, 200)}, 0, 0},
	}
	for _, tc := range cases {
		hs := holds(tc.leaders...)
		if got := len(Overlaps(hs)); got != tc.overlaps {
			t.Errorf("%s: got %d overlaps, want %d", tc.name, got, tc.overlaps)
		}
		if got := len(FenceInversions(hs)); got != tc.inverted {
			t.Errorf("%s: got %d term inversions, want %d", tc.name, got, tc.inverted)
		}
	}
}

// TestObserveRegressions shows that the check of a stream's Terms can
// fail: a lower Term, two values under one Term, and a leader sent twice
// with no vacancy between are reported; Term 0 and a leader seen again
// after a vacancy are not.
func TestObserveRegressions(t *testing.T) {
	c := newClock()
	s := func(seen ...Observed) Stream { return Stream{Key: "e", Holder: "obs", Seen: seen} }
	o := c.seen
	cases := []struct {
		name    string
		streams []Stream
		want    []string // reasons, in order
	}{
		{"none", nil, nil},
		{"rising", []Stream{s(o(0, 0, ""), o(1, 5, "a"), o(2, 0, ""), o(3, 9, "b"), o(4, 12, "c"))}, nil},
		{"again after a vacancy", []Stream{s(o(1, 5, "a"), o(2, 0, ""), o(3, 5, "a"), o(4, 9, "b"))}, nil},
		{"lower", []Stream{s(o(1, 5, "a"), o(2, 4, "b"))}, []string{"lower term"}},
		{"lower after a vacancy", []Stream{s(o(1, 5, "a"), o(2, 0, ""), o(3, 4, "b"))}, []string{"lower term"}},
		{"lower than the highest", []Stream{s(o(1, 9, "a"), o(2, 4, "b"), o(3, 7, "c"), o(4, 10, "d"))}, []string{"lower term", "lower term"}},
		{"two values, one term", []Stream{s(o(1, 5, "a"), o(2, 0, ""), o(3, 5, "b"))}, []string{"same term, another value"}},
		{"sent twice", []Stream{s(o(1, 5, "a"), o(2, 5, "a"))}, []string{"repeated without a vacancy"}},
		{"each stream on its own", []Stream{s(o(1, 9, "a")), s(o(2, 5, "b"))}, nil},
	}
	for _, tc := range cases {
		var got []string
		for _, r := range ObserveRegressions(tc.streams) {
			got = append(got, r.Reason)
			if f := r.Format(c.t0); !strings.Contains(f, r.Reason) {
				t.Errorf("%s: Format %q lacks the reason", tc.name, f)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestMissedLeaders shows that the check of Observe's completeness can
// fail: a leadership of a TTL or more that a stream running across it
// delivered late, never, or under another value is reported; one delivered
// in time (even before its Campaign returned), a short one, and streams
// that did not run across it or follow another key are not.
func TestMissedLeaders(t *testing.T) {
	c := newClock()
	const ttl, slack = 300 * time.Millisecond, 100 * time.Millisecond
	st := func(from, to int, seen ...Observed) Stream {
		return Stream{Key: "e", Holder: fmt.Sprintf("obs@%d", from), From: c.at(from), To: c.at(to), Seen: seen}
	}
	o := c.seen
	l := c.leader("e", 7, "a", 1000, 1400) // lasts 400ms > ttl; seen by 1400
	cases := []struct {
		name    string
		leaders []Leadership
		streams []Stream
		want    []string // "stream:never" or "stream:late"
	}{
		{"seen at once", []Leadership{l}, []Stream{st(0, 5000, o(1001, 7, "a"))}, nil},
		{"seen before Campaign returned", []Leadership{l}, []Stream{st(0, 5000, o(999, 7, "a"))}, nil},
		{"seen at the bound", []Leadership{l}, []Stream{st(0, 5000, o(1400, 7, "a"))}, nil},
		{"seen late", []Leadership{l}, []Stream{st(0, 5000, o(1401, 7, "a"))}, []string{"0:late"}},
		{"never seen", []Leadership{l}, []Stream{st(0, 5000, o(500, 6, "z"), o(1500, 8, "b"))}, []string{"0:never"}},
		{"another value", []Leadership{l}, []Stream{st(0, 5000, o(1001, 7, "b"))}, []string{"0:never"}},
		{"two streams, one misses", []Leadership{l}, []Stream{st(0, 5000, o(1001, 7, "a")), st(0, 5000)}, []string{"1:never"}},
		{"too short to count", []Leadership{c.leader("e", 7, "a", 1000, 1299)}, []Stream{st(0, 5000)}, nil},
		{"stream began later", []Leadership{l}, []Stream{st(1001, 5000)}, nil},
		{"stream ended first", []Leadership{l}, []Stream{st(0, 1399)}, nil},
		{"another key", []Leadership{c.leader("f", 7, "a", 1000, 1400)}, []Stream{st(0, 5000)}, nil},
	}
	for _, tc := range cases {
		var got []string
		for _, m := range MissedLeaders(tc.leaders, tc.streams, ttl, slack) {
			what := "never"
			if !m.Seen.IsZero() {
				what = "late"
			}
			got = append(got, fmt.Sprintf("%d:%s", m.Stream, what))
			if f := m.Format(c.t0); !strings.Contains(f, "led term 7") {
				t.Errorf("%s: Format %q", tc.name, f)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
