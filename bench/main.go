// Command bench measures redlock against go-redsync/redsync v4 and three floor
// clients (a plain one and one on go-redis's AutoPipeline, and one that sends
// the library's own commands on rueidis), on real redis-servers it starts
// itself, and writes the figures, the targets of issues 12, 26 and 29 and
// charts into docs/PERFORMANCE.md.
//
// Run it from this directory:
//
//	go run . -out ../docs/PERFORMANCE.md          # full run, about 14 minutes on 2 cores
//	go run . -quick -out /tmp/perf.md             # smoke test, under 2 minutes
//	go run . -quick -only bh                      # some measures only, report on stdout
//
// It is a module of its own, so that users of the library never download
// redsync, rueidis or the plotting library. Contenders run in turn, A, B, C,
// A, B, C, each with its own go-redis clients (the rueidis floor with rueidis
// clients); every figure is a median over rounds,
// and every comparison is a median of per-round ratios with its range.
//
// It needs redis-server in PATH (or REDIS_SERVER), and uses only 127.0.0.1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// settings sizes a run.
type settings struct {
	rounds         int // (a), (b), (e), (f)
	contRounds     int // (c) and (i): each round holds the lock for seconds
	degradedRounds int // (d): redsync spends about 10 s per cycle with a paused node
	wanRounds      int // (h): redsync spends about 160 ms per cycle
	warmOps        int
	seqOps         int           // (a) lock+unlock cycles per contender per round
	parDur         time.Duration // (b) per contender per round
	contDur        time.Duration // (c) and (i) window per contender per round
	degradedOps    int           // (d) cycles per contender per round, at most
	degradedBudget time.Duration // (d) and at most this long
	allocOps       int           // (e)
	scaleOps       int           // (f) per N per contender per round
	renewLocks     int           // (g)
	renewTTL       time.Duration // (g)
	renewWindow    time.Duration // (g)
	wanOps         int           // (h) lock+unlock cycles per contender per round
}

var (
	full = settings{
		rounds: 11, contRounds: 5, degradedRounds: 5, wanRounds: 5, warmOps: 300, seqOps: 1300, parDur: time.Second, contDur: 4 * time.Second,
		degradedOps: 1000, degradedBudget: 3 * time.Second, allocOps: 1000, scaleOps: 600,
		renewLocks: 10000, renewTTL: 3 * time.Second, renewWindow: 10 * time.Second, wanOps: 40,
	}
	quick = settings{
		rounds: 2, contRounds: 2, degradedRounds: 1, wanRounds: 2, warmOps: 100, seqOps: 300, parDur: 500 * time.Millisecond, contDur: time.Second,
		degradedOps: 200, degradedBudget: time.Second, allocOps: 300, scaleOps: 200,
		renewLocks: 10000, renewTTL: 3 * time.Second, renewWindow: 2 * time.Second, wanOps: 12,
	}
)

func main() {
	var (
		out     = flag.String("out", "", "write the report to this Markdown file (charts go beside it); stdout when empty")
		isQuick = flag.Bool("quick", false, "smoke-test sizes: under 2 minutes, figures only indicative")
		only    = flag.String("only", "abcdefghi", "measures to run, by letter: a sequential, b parallel, c contended, d degraded, e allocations, f scaling, g renewals, h WAN, i fair handoff (-only x -profile DIR: profiles only)")
		rounds  = flag.Int("rounds", 0, "rounds per measure (0: 11, and 5 for (c), (d), (h) and (i); 2, and 1 for (d), with -quick)")
		profile = flag.String("profile", "", "also write CPU and allocation profiles of redlock and the plain, pipelined and rueidis floors into this directory")
	)
	// redistest reads testing.Short, which panics unless the testing
	// flags are registered.
	testing.Init()
	flag.Parse()
	if bad := strings.Trim(*only, "abcdefghix"); bad != "" || *only == "" {
		fmt.Fprintf(os.Stderr, "bench: -only takes letters among abcdefghi (and x with -profile), got %q\n", *only)
		os.Exit(2)
	}
	s := full
	if *isQuick {
		s = quick
	}
	if *rounds > 0 {
		s.rounds, s.contRounds, s.degradedRounds, s.wanRounds = *rounds, *rounds, *rounds, *rounds
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, s, *isQuick, *only, *out, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(ctx context.Context, s settings, isQuick bool, only, out, profileDir string) (err error) {
	tb := &harnessTB{}
	defer tb.close()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = f
		}
	}()
	began := time.Now()
	logf("starting 9 redis-servers on 127.0.0.1")
	cl := startCluster(tb, 9)
	res := &results{settings: s, quick: isQuick, only: only, machine: machineNotes(ctx, cl)}
	res.command = commandLine(out)

	steps := []struct {
		letter string
		run    func(context.Context, *cluster, *results) error
	}{
		{"a", measureSequential},
		{"e", measureAllocations},
		{"b", measureParallel},
		{"c", measureContended},
		{"i", measureFair},
		{"d", measureDegraded},
		{"f", measureScaling},
		{"g", measureRenewals},
		{"h", measureWAN},
	}
	for _, st := range steps {
		if !strings.Contains(only, st.letter) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		cl.flush(ctx)
		t0 := time.Now()
		if err := st.run(ctx, cl, res); err != nil {
			return fmt.Errorf("measure (%s): %w", st.letter, err)
		}
		logf("(%s) done in %v", st.letter, time.Since(t0).Round(time.Second))
	}
	if profileDir != "" {
		cl.flush(ctx)
		if err := profiles(ctx, cl, s, profileDir); err != nil {
			return err
		}
	}
	res.took = time.Since(began)
	logf("all done in %v", res.took.Round(time.Second))

	if out == "" {
		return writeReport(os.Stdout, res, "")
	}
	return writeReportFile(out, res)
}

// commandLine is the command that reproduces the run, as the report shows it.
func commandLine(out string) string {
	args := append([]string{"go", "run", "."}, os.Args[1:]...)
	if out == "" {
		return strings.Join(args, " ")
	}
	return "cd bench && " + strings.Join(args, " ")
}

// writeReportFile writes the report into path, and the charts beside it.
// When path exists and has the generated-section markers, only the text
// between them is replaced, so the hand-written analysis around it stays.
func writeReportFile(path string, res *results) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeCharts(dir, res); err != nil {
		return err
	}
	var b strings.Builder
	if err := writeReport(&b, res, dir); err != nil {
		return err
	}
	generated := b.String()
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.WriteFile(path, []byte(skeleton(generated)), 0o644)
	case err != nil:
		return err
	}
	doc, ok := splice(string(old), generated)
	if !ok {
		return fmt.Errorf("%s exists but lacks the markers %q and %q: move it away or add them", path, beginMark, endMark)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

const (
	beginMark = "<!-- BEGIN GENERATED by bench: do not edit by hand -->"
	endMark   = "<!-- END GENERATED -->"
)

func splice(doc, generated string) (string, bool) {
	i := strings.Index(doc, beginMark)
	j := strings.Index(doc, endMark)
	if i < 0 || j < i {
		return "", false
	}
	return doc[:i+len(beginMark)] + "\n" + generated + doc[j:], true
}

func skeleton(generated string) string {
	return "# Performance\n\n" + beginMark + "\n" + generated + endMark + "\n"
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
