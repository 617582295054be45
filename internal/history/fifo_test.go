package history

import (
	"strings"
	"testing"
	"time"
)

// wait is a fair wait of key that began at began, was queued at queued
// (never when negative), ended at ended (never when negative) and acquired
// at acq (never when negative), with refreshes sent at refreshes.
func (c clock) wait(key string, began, queued, ended, acq int, refreshes ...int) Wait {
	w := Wait{Key: key, Holder: key + "@" + time.Duration(began*int(time.Millisecond)).String(), Began: c.at(began)}
	if queued >= 0 {
		w.Queued = c.at(queued)
	}
	if ended >= 0 {
		w.Ended = c.at(ended)
	}
	if acq >= 0 {
		w.Acquired = c.at(acq)
	}
	for _, r := range refreshes {
		w.Refreshes = append(w.Refreshes, c.at(r))
	}
	return w
}

// every returns the times from lo to hi, step apart: a waiter retrying.
func every(lo, hi, step int) []int {
	var out []int
	for t := lo; t <= hi; t += step {
		out = append(out, t)
	}
	return out
}

// TestFIFOInversions shows that the FIFO check can fail: a call that began
// to wait after another was queued, and acquired while that one still
// waited, is reported; and that it does not overreach: calls that began to
// wait at once, a call that was never queued, one that gave up or won
// first, other keys. Each inversion is excused only when the waiter ahead
// went the tolerance without a refresh.
func TestFIFOInversions(t *testing.T) {
	c := newClock()
	const tolerance = 250 * time.Millisecond
	retries := every(2, 1000, 5) // ahead's refreshes, every 5ms
	w := c.wait
	cases := []struct {
		name    string
		waits   []Wait
		want    [][2]int // indexes of Ahead and Behind, in order
		excused []bool
	}{
		{"none", nil, nil, nil},
		{"in order", []Wait{w("k", 0, 10, 50, 52, retries[:10]...), w("k", 20, 30, 90, 95)}, nil, nil},
		{"behind acquired first", []Wait{w("k", 0, 10, -1, -1, retries...), w("k", 20, 30, 35, 40)}, [][2]int{{0, 1}}, []bool{false}},
		{"behind acquired before ahead ended", []Wait{w("k", 0, 10, 100, 104, retries[:20]...), w("k", 20, -1, 35, 40)}, [][2]int{{0, 1}}, []bool{false}},
		{"began at once", []Wait{w("k", 0, 10, -1, -1, retries...), w("k", 10, 30, 35, 40)}, nil, nil},
		{"began before ahead was queued", []Wait{w("k", 0, 10, -1, -1, retries...), w("k", 5, 30, 35, 40)}, nil, nil},
		{"ahead never queued", []Wait{w("k", 0, -1, 100, -1, retries[:20]...), w("k", 20, 30, 35, 40)}, nil, nil},
		{"ahead gave up first", []Wait{w("k", 0, 10, 40, -1, retries[:8]...), w("k", 20, 30, 45, 50)}, nil, nil},
		{"ahead gave up as behind acquired", []Wait{w("k", 0, 10, 40, -1, retries[:8]...), w("k", 20, 30, 35, 40)}, nil, nil},
		{"other keys", []Wait{w("a", 0, 10, -1, -1, retries...), w("b", 20, 30, 35, 40)}, nil, nil},
		{"three in a row, the last first", []Wait{
			w("k", 0, 10, -1, -1, retries...), w("k", 20, 25, -1, -1, retries...), w("k", 30, 35, 38, 40)},
			[][2]int{{0, 2}, {1, 2}}, []bool{false, false}},
		// Ahead's refreshes stop for 300ms (a paused process): its entry
		// may have expired, and the inversion is excused. A gap of 200ms,
		// below the tolerance, is not enough.
		{"ahead paused a TTL", []Wait{
			w("k", 0, 10, -1, -1, 2, 7, 12, 17, 317, 322), w("k", 20, 30, 315, 320)},
			[][2]int{{0, 1}}, []bool{true}},
		{"ahead paused less than a TTL", []Wait{
			w("k", 0, 10, -1, -1, 2, 7, 12, 17, 217, 222, 227), w("k", 20, 30, 225, 230)},
			[][2]int{{0, 1}}, []bool{false}},
		// Its last refresh before behind acquired was long before.
		{"ahead silent to the end", []Wait{w("k", 0, 10, -1, -1, 2, 7, 12), w("k", 20, 30, 400, 400)}, [][2]int{{0, 1}}, []bool{true}},
		// Refreshes before it was queued do not count: a long first
		// ticket round is not a stall of the entry.
		{"slow before queued", []Wait{w("k", 0, 400, -1, -1, 2, 395, 400, 405, 410, 415), w("k", 401, 420, 425, 430)}, [][2]int{{0, 1}}, []bool{false}},
		{"no refreshes recorded", []Wait{w("k", 0, 10, -1, -1), w("k", 20, 30, 900, 900)}, [][2]int{{0, 1}}, []bool{false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := FIFOInversions(tc.waits, tolerance)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d inversions, want %d: %v", len(got), len(tc.want), got)
			}
			for i, v := range got {
				if p := [2]int{v.Ahead.Index, v.Behind.Index}; p != tc.want[i] {
					t.Errorf("inversion %d: got ahead %d behind %d, want %v", i, p[0], p[1], tc.want[i])
				}
				if v.Excused != tc.excused[i] {
					t.Errorf("inversion %d: got excused %t (stalled %v), want %t", i, v.Excused, v.Stalled, tc.excused[i])
				}
				if s := v.Format(c.t0); !strings.Contains(s, "began to wait at") {
					t.Errorf("Format: %q", s)
				}
			}
		})
	}
}

// TestWaitStalled checks how long a waiter is found to have gone without a
// refresh: the longest gap between its refreshes from the one that queued
// it, the last stretch running to the time asked about.
func TestWaitStalled(t *testing.T) {
	c := newClock()
	cases := []struct {
		name    string
		w       Wait
		at      int
		wantMS  int
		comment string
	}{
		{"steady", c.wait("k", 0, 10, -1, -1, 5, 10, 15, 20, 25), 26, 5, "gaps of 5"},
		{"one long gap", c.wait("k", 0, 10, -1, -1, 5, 10, 15, 115, 120), 121, 100, "15 to 115"},
		{"last stretch", c.wait("k", 0, 10, -1, -1, 5, 10, 15), 200, 185, "from 15 to 200"},
		{"queued late", c.wait("k", 0, 100, -1, -1, 5, 95, 100, 105), 106, 5, "from 100: earlier refreshes do not count"},
		{"queued before any refresh recorded", c.wait("k", 0, 10, -1, -1, 30, 40), 50, 20, "from Queued at 10 to 30"},
		{"one refresh", c.wait("k", 0, 10, -1, -1, 10), 50, 40, "from 10 to 50"},
		{"none", c.wait("k", 0, 10, -1, -1), 50, 0, "unknown"},
	}
	for _, tc := range cases {
		if got := tc.w.stalled(c.at(tc.at)); got != time.Duration(tc.wantMS)*time.Millisecond {
			t.Errorf("%s: got %v, want %dms (%s)", tc.name, got, tc.wantMS, tc.comment)
		}
	}
}
