package main

import (
	"math"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := pct(ds, c.p); got != c.want {
			t.Errorf("pct(1..10, %v): got %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct(nil, 50); got != 0 {
		t.Errorf("pct(nil, 50): got %v, want 0", got)
	}
}

func TestMedianAndRatios(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2): got %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2): got %v, want 2.5", got)
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil): got %v, want NaN", got)
	}
	r := ratioOf([]float64{2, 3, 4}, []float64{1, 0, 2})
	if len(r) != 2 || r[0] != 2 || r[1] != 2 {
		t.Errorf("ratioOf skips a zero denominator: got %v, want [2 2]", r)
	}
	if got, want := r.String(), "2.00× (2.00–2.00)"; got != want {
		t.Errorf("ratios.String: got %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		x, limit      float64
		below, strict bool
		met           bool
		note          string
	}{
		{1.0, 1.05, true, false, true, ""},
		{1.05, 1.05, true, false, true, ""},
		{1.05, 1.05, true, true, false, "over by 0%"},
		{1.26, 1.05, true, false, false, "over by 20%"},
		{0.76, 0.95, false, false, false, "short by 20%"},
	} {
		met, note := check(c.x, c.limit, c.below, c.strict)
		if met == nil || *met != c.met || note != c.note {
			t.Errorf("check(%v, %v, below=%v, strict=%v): got %v %q, want %v %q", c.x, c.limit, c.below, c.strict, met, note, c.met, c.note)
		}
	}
	if met, _ := check(math.NaN(), 1, true, false); met != nil {
		t.Errorf("check(NaN): got %v, want nil (not measured)", *met)
	}
}

func TestSplice(t *testing.T) {
	doc := "# Title\n\nHand-written.\n\n" + beginMark + "\nold figures\n" + endMark + "\n\n## Analysis\n"
	got, ok := splice(doc, "new figures\n")
	want := "# Title\n\nHand-written.\n\n" + beginMark + "\nnew figures\n" + endMark + "\n\n## Analysis\n"
	if !ok || got != want {
		t.Errorf("splice: got %q, %v; want %q, true", got, ok, want)
	}
	if _, ok := splice("no markers", "x"); ok {
		t.Error("splice without markers: got ok, want not ok")
	}
}
