package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// pct returns the p-th percentile (0 < p <= 100) of ds by nearest rank. It
// sorts ds in place. It returns 0 for no samples.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

// latencies summarises one round's samples.
type latencies struct {
	n             int
	p50, p90, p99 time.Duration
	max           time.Duration
}

func summarise(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	return latencies{
		n:   len(ds),
		p50: pct(ds, 50),
		p90: pct(ds, 90),
		p99: pct(ds, 99),
		max: pct(ds, 100),
	}
}

// median of float64s; NaN for none. It does not change xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratios holds per-round ratios of two contenders' figures.
type ratios []float64

func ratioOf(num, den []float64) ratios {
	var r ratios
	for i := range min(len(num), len(den)) {
		if den[i] > 0 {
			r = append(r, num[i]/den[i])
		}
	}
	return r
}

func (r ratios) median() float64 { return median(r) }

// String gives the median and, with more than one round, the range:
// "1.03× (0.98–1.10)".
func (r ratios) String() string {
	if len(r) == 0 {
		return "n/a"
	}
	if len(r) == 1 {
		return fmt.Sprintf("%.2f×", r[0])
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", r.median(), slices.Min(r), slices.Max(r))
}

// fmtDur prints a duration at a precision that suits its size.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < 0:
		return "−" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func fmtNum(x float64) string {
	switch {
	case math.IsNaN(x):
		return "n/a"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
