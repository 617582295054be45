package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one coloured set of values, one per category.
type series struct {
	name string
	vals []float64
}

// grouped draws one group of bars per category, one bar per series. With
// logY it draws points instead, since bars cannot start at zero on a log
// scale; that suits figures that span orders of magnitude.
func grouped(title, ylabel string, categories []string, ss []series, logY bool) (*plot.Plot, error) {
	p := newPlot(title)
	p.Y.Label.Text = ylabel
	width := vg.Points(20)
	top := 0.0
	for _, s := range ss {
		for _, v := range s.vals {
			top = max(top, v)
		}
	}
	for i, s := range ss {
		off := vg.Length(float64(i)-float64(len(ss)-1)/2) * width
		if !logY {
			bars, err := plotter.NewBarChart(plotter.Values(s.vals), width)
			if err != nil {
				return nil, err
			}
			bars.Color = plotutil.Color(i)
			bars.LineStyle.Width = 0
			bars.Offset = off
			p.Add(bars)
			p.Legend.Add(s.name, bars)
			continue
		}
		xys := make(plotter.XYs, 0, len(s.vals))
		for j, v := range s.vals {
			if v > 0 {
				xys = append(xys, plotter.XY{X: float64(j) + float64(i-len(ss)/2)*0.15, Y: v})
			}
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		sc.GlyphStyle.Radius = vg.Points(4)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	// Headroom for the legend, top left.
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Max = top * 30
		p.X.Min, p.X.Max = -0.5, float64(len(categories))-0.5
	} else {
		p.Y.Min, p.Y.Max = 0, top*1.35
		p.Y.Tick.Marker = plainTicks
		p.X.Min, p.X.Max = -0.6, float64(len(categories))-0.4
	}
	p.NominalX(categories...)
	return p, nil
}

// plainTicks are gonum's default ticks, labelled without trailing zeros.
var plainTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
})

// newPlot is a plot with the harness's common style: sans-serif text, a
// grid, and the legend top left.
func newPlot(title string) *plot.Plot {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(8)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(4)
	p.Add(plotter.NewGrid())
	return p
}

// degradedShort labels degradedNames on a chart's axis.
var degradedShort = []string{nameOurs, nameRedsync, "redsync (ctx timeouts)", nameFloor, namePipeFloor, nameRueidisFloor}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeCharts draws the charts the report links to, from this run's data.
func writeCharts(dir string, res *results) error {
	save := func(p *plot.Plot, name string) error {
		return p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name))
	}
	if res.seq != nil {
		var ss []series
		for _, q := range []struct {
			name string
			f    func(latencies) time.Duration
		}{
			{"p50", func(l latencies) time.Duration { return l.p50 }},
			{"p90", func(l latencies) time.Duration { return l.p90 }},
			{"p99", func(l latencies) time.Duration { return l.p99 }},
		} {
			s := series{name: q.name}
			for _, name := range mainNames {
				s.vals = append(s.vals, us(medDur(res.seq[name], q.f)))
			}
			ss = append(ss, s)
		}
		title := fmt.Sprintf("(a) Sequential lock+unlock, %d nodes (median of %d rounds)", mainNodes, res.settings.rounds)
		p, err := grouped(title, "latency (µs)", mainNames, ss, false)
		if err != nil {
			return err
		}
		if err := save(p, "perf-latency.svg"); err != nil {
			return err
		}
	}
	if res.par != nil {
		if err := save(parallelChart(res), "perf-parallel.svg"); err != nil {
			return err
		}
	}
	if res.cont != nil {
		ss := []series{{name: "wait p50"}, {name: "wait p99"}}
		for _, name := range contendedNames {
			rs := res.cont[name]
			ss[0].vals = append(ss[0].vals, ms(time.Duration(median(pick(rs, func(c contResult) time.Duration { return c.waitP50 })))))
			ss[1].vals = append(ss[1].vals, ms(time.Duration(median(pick(rs, func(c contResult) time.Duration { return c.waitP99 })))))
		}
		title := fmt.Sprintf("(c) Wait for the lock, %d goroutines on one key, %v hold", contendG, contendHold)
		p, err := grouped(title, "wait (ms)", contendedNames, ss, false)
		if err != nil {
			return err
		}
		if err := save(p, "perf-contention.svg"); err != nil {
			return err
		}
	}
	if res.paused != nil {
		ss := []series{{name: "healthy"}, {name: "one node SIGSTOPped"}, {name: fmt.Sprintf("one node +%v", addedDelay)}}
		for _, name := range degradedNames {
			for i, m := range []map[string][]latencies{res.degHealthy, res.paused, res.slow} {
				ss[i].vals = append(ss[i].vals, ms(medDur(m[name], func(l latencies) time.Duration { return l.p50 })))
			}
		}
		p, err := grouped("(d) Lock+unlock p50 with one degraded node of 5 (log scale)", "p50 (ms)", degradedShort, ss, true)
		if err != nil {
			return err
		}
		if err := save(p, "perf-degraded.svg"); err != nil {
			return err
		}
	}
	if res.scale != nil {
		p := newPlot("(f) Sequential lock+unlock p50 by number of nodes")
		p.X.Label.Text = "nodes"
		p.Y.Label.Text = "p50 (µs)"
		p.Y.Min = 0
		top := 0.0
		for i, name := range mainNames {
			xys := make(plotter.XYs, 0, len(scaleNodes))
			for _, n := range scaleNodes {
				xys = append(xys, plotter.XY{X: float64(n), Y: us(medDur(res.scale[n][name], func(l latencies) time.Duration { return l.p50 }))})
				top = max(top, xys[len(xys)-1].Y)
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.5)
			pts.Color = plotutil.Color(i)
			pts.Shape = draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(name, l, pts)
		}
		if res.scalePing != nil {
			xys := make(plotter.XYs, 0, len(scaleNodes))
			for _, n := range scaleNodes {
				xys = append(xys, plotter.XY{X: float64(n), Y: us(medDur(res.scalePing[n], func(l latencies) time.Duration { return l.p50 }))})
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color = color.Gray{Y: 110}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			p.Legend.Add("PING fan-out, quorum-th reply", l)
		}
		p.Y.Max = top * 1.3
		p.Y.Tick.Marker = plainTicks
		p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 3, Label: "3"}, {Value: 5, Label: "5"}, {Value: 7, Label: "7"}, {Value: 9, Label: "9"}})
		if err := save(p, "perf-scaling.svg"); err != nil {
			return err
		}
	}
	if res.wan != nil {
		ss := []series{{name: "Lock p50"}, {name: "Unlock p50"}}
		for _, name := range mainNames {
			ws := res.wan[name]
			ss[0].vals = append(ss[0].vals, ms(time.Duration(median(pick(ws, func(w wanRound) time.Duration { return w.lock.p50 })))))
			ss[1].vals = append(ss[1].vals, ms(time.Duration(median(pick(ws, func(w wanRound) time.Duration { return w.unlock.p50 })))))
		}
		var rtts []string
		for _, d := range wanRTTs {
			rtts = append(rtts, strconv.Itoa(int(d/time.Millisecond)))
		}
		title := fmt.Sprintf("(h) WAN: nodes %s ms away (quorum-th %v)", strings.Join(rtts, ", "), wanQuorumRTT())
		p, err := grouped(title, "p50 (ms)", mainNames, ss, false)
		if err != nil {
			return err
		}
		if err := save(p, "perf-wan.svg"); err != nil {
			return err
		}
	}
	return nil
}

// parallelChart draws (b): ops/s by goroutines, one line per contender, the
// goroutine counts spaced evenly on a log scale.
func parallelChart(res *results) *plot.Plot {
	p := newPlot(fmt.Sprintf("(b) Parallel lock+unlock, %d nodes (median of %d rounds)", mainNodes, res.settings.rounds))
	p.X.Label.Text = "goroutines"
	p.Y.Label.Text = "lock+unlock per second"
	top := 0.0
	var ticks []plot.Tick
	for _, g := range parallelLevels {
		ticks = append(ticks, plot.Tick{Value: math.Log2(float64(g)), Label: strconv.Itoa(g)})
	}
	for i, name := range mainNames {
		xys := make(plotter.XYs, 0, len(parallelLevels))
		for _, g := range parallelLevels {
			y := median(pickF(res.par[g][name], func(p parResult) float64 { return p.perSec }))
			if math.IsNaN(y) {
				continue
			}
			xys = append(xys, plotter.XY{X: math.Log2(float64(g)), Y: y})
			top = max(top, y)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue // no data for this contender
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	p.Y.Min, p.Y.Max = 0, top*1.35
	p.Y.Tick.Marker = plainTicks
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = ticks[0].Value-0.3, ticks[len(ticks)-1].Value+0.3
	return p
}
