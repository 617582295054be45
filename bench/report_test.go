package main

import (
	"strings"
	"testing"
	"time"
)

// fairResults is a run of (i) alone whose fair lock, on one Client, had
// handoff gap p50s of gaps (one per round, with PING p50s of 100 µs) and
// min / max acquisitions per goroutine of mins / 10.
func fairResults(gaps []time.Duration, mins []int) *results {
	res := &results{only: "i", fair: map[string][]contResult{}}
	for i, g := range gaps {
		res.fairPing = append(res.fairPing, latencies{n: 1, p50: 100 * time.Microsecond})
		for _, name := range fairNames {
			res.fair[name] = append(res.fair[name], contResult{gapP50: g, minPer: mins[i], maxPer: 10, total: 10})
		}
	}
	return res
}

// fairVerdicts returns the verdicts of (i)'s two targets: the gap, then
// the min / max.
func fairVerdicts(t *testing.T, res *results) (gap, even *bool) {
	t.Helper()
	var met []*bool
	for _, tg := range res.targets() {
		if tg.measure == "(i)" && tg.limit != "reported" {
			met = append(met, tg.met)
		}
	}
	if len(met) != 2 {
		t.Fatalf("(i) targets: got %d, want 2", len(met))
	}
	return met[0], met[1]
}

func TestFairTargets(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		name           string
		gaps           []time.Duration
		mins           []int
		wantGap, wantE bool
	}{
		{"both met", []time.Duration{150 * us, 200 * us, 250 * us}, []int{9, 10, 8}, true, true},
		{"gap over 2 PINGs", []time.Duration{150 * us, 210 * us, 250 * us}, []int{9, 10, 9}, false, true},
		{"uneven turns", []time.Duration{100 * us, 100 * us, 100 * us}, []int{8, 9, 8}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gap, even := fairVerdicts(t, fairResults(c.gaps, c.mins))
			if gap == nil || *gap != c.wantGap {
				t.Errorf("gap target met: got %v, want %v", deref(gap), c.wantGap)
			}
			if even == nil || *even != c.wantE {
				t.Errorf("min / max target met: got %v, want %v", deref(even), c.wantE)
			}
		})
	}
}

func TestFairReportSection(t *testing.T) {
	res := fairResults([]time.Duration{150 * time.Microsecond}, []int{9})
	var b strings.Builder
	if err := writeReport(&b, res, ""); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"## (i) Fair handoff", "| redlock fair | ", "| redlock fair, 16 Clients | ", "_PING, 5 nodes, quorum-th reply_"} {
		if !strings.Contains(out, want) {
			t.Errorf("report: got no %q, want it in (i)'s section", want)
		}
	}
	if strings.Contains(out, "## (c)") {
		t.Errorf("report of -only i: got a (c) section, want none")
	}
}

func deref(b *bool) any {
	if b == nil {
		return "not measured"
	}
	return *b
}
