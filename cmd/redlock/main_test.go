package main

import (
	"bytes"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// raceEnabled is set under -race, by race_test.go.
var raceEnabled bool

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(settled{m})
}

// settled runs the tests, then waits for go-redis's dial probes to end. Once
// a client has failed to dial a killed node often enough, go-redis probes the
// node from a goroutine that sleeps 1s between dials and ends only when it
// finds its client closed. Waiting for them, rather than ignoring them, checks
// that every client was closed: the probe of one left open never ends.
type settled struct{ m *testing.M }

func (s settled) Run() int {
	code := s.m.Run()
	removeBinary()
	deadline := time.Now().Add(3 * time.Second)
	for dialProbing() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return code
}

// dialProbing reports whether a go-redis dial probe is running.
func dialProbing() bool {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte("(*ConnPool).tryDial"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestRunDemo(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.duration = 3 * time.Second
	cfg.seed = 1
	// The race detector on a busy machine can slow the in-process nodes
	// past the default node timeout of 50ms; this test is about the demo,
	// not about slow nodes. Under a CPU hog beside the rest of the suite,
	// 200ms with a 500ms TTL once saw no acquisition in 3s.
	cfg.ttl = 2 * time.Second
	cfg.nodeTimeout = 500 * time.Millisecond
	var out bytes.Buffer
	rep, err := runDemo(t.Context(), &out, cfg)
	require.NoError(t, err)
	text := out.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; demo output:\n%s", cfg.seed, text)
		}
	})

	// The causes first, so that a failure under load says which it was.
	require.Empty(t, rep.overlaps, "overlaps: got %d, want 0", len(rep.overlaps))
	require.Positive(t, rep.acquisitions, "acquisitions: got %d, want > 0", rep.acquisitions)
	require.Equal(t, exitOK, rep.exitCode(), "exit code: got %d, want %d", rep.exitCode(), exitOK)
	require.Zero(t, rep.lockErrs, "lock errors: got %d, want 0", rep.lockErrs)

	// Both kills happened, and the summary has a row per phase.
	require.Len(t, regexp.MustCompile(`(?m)^\s+\d+\.\d{3}s  node \d killed `).FindAllString(text, -1), demoKills)
	require.Len(t, rep.phases, demoKills+2, "phases: got %d, want one per number of live nodes and one for all", len(rep.phases))
	for _, want := range []string{
		"redlock demo: 5 nodes (quorum 3), 4 clients x 4 goroutines",
		"seed 1",
		"\nsummary\n",
		"  acquisitions  ",
		"  overlaps            0\n",
		"5 nodes up",
		"4 nodes up",
		"3 nodes up",
		"lock p50",
		"effect of the kills",
		"PASS: ",
	} {
		require.Contains(t, text, want, "output: got no %q", want)
	}
}

func TestRunDemoCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"demo", "-duration", "1s", "-clients", "2", "-goroutines", "2", "-seed", "7"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "exit code: got %d, want %d; stderr: %s\nstdout: %s", code, exitOK, stderr.String(), stdout.String())
	require.Contains(t, stdout.String(), "2 clients x 2 goroutines")
	require.Contains(t, stdout.String(), "PASS: ")
	require.Empty(t, stderr.String())
}

func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // on stderr
	}{
		{"unknown command", []string{"bogus"}, []string{`redlock: unknown command "bogus"`, "usage: redlock <command>", "demo"}},
		{"no command", nil, []string{"usage: redlock <command>"}},
		{"help for an unknown command", []string{"help", "bogus"}, []string{`unknown command "bogus"`}},
		{"unknown flag", []string{"demo", "-bogus"}, []string{"flag provided but not defined: -bogus", "(see 'redlock help demo')"}},
		{"bad flag value", []string{"demo", "-clients", "0"}, []string{"-clients must be in [1, 64], got 0"}},
		{"bad duration", []string{"demo", "-duration", "-1s"}, []string{"-duration must be positive, got -1s"}},
		{"extra argument", []string{"demo", "now"}, []string{`unexpected argument "now"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			require.Equal(t, exitUsage, code, "exit code: got %d, want %d", code, exitUsage)
			for _, w := range tt.want {
				require.Contains(t, stderr.String(), w, "stderr: got %q, want it to contain %q", stderr.String(), w)
			}
			require.Empty(t, stdout.String())
		})
	}
}

func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, &stdout, &stderr)
		require.Equal(t, exitOK, code, "%v: exit code: got %d, want %d", args, code, exitOK)
		require.Contains(t, stdout.String(), "usage: redlock <command>")
		require.Contains(t, stdout.String(), "  demo  ")
	}

	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"help", "demo"}, &stdout, &stderr)
	require.Equal(t, exitOK, code)
	for _, flag := range []string{"-duration", "-clients", "-goroutines", "-seed", "-v", "-redis-retries"} {
		require.Regexp(t, `(?m)^  `+flag+`\b`, stdout.String(), "help demo: got no %s", flag)
	}

	stdout.Reset()
	code = run(t.Context(), []string{"demo", "-h"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "demo -h: exit code: got %d, want %d", code, exitOK)
	require.Contains(t, stdout.String(), "usage: redlock demo")
}

// The checker must find overlaps when there are some, or a clean demo
// proves nothing.
func TestFindOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := func(client, acquired, released, until int) hold {
		return hold{client: client, acquired: at(acquired), released: at(released), until: at(until)}
	}
	tests := []struct {
		name  string
		holds []hold
		want  [][2]int // clients of each overlap: the earlier, the later
	}{
		{"none", nil, nil},
		{"back to back", []hold{h(0, 0, 10, 500), h(1, 11, 20, 500), h(2, 21, 30, 500)}, nil},
		{"out of order", []hold{h(2, 21, 30, 500), h(0, 0, 10, 500), h(1, 11, 20, 500)}, nil},
		{"touching", []hold{h(0, 0, 10, 500), h(1, 10, 20, 500)}, nil},
		{"overlap", []hold{h(0, 0, 10, 500), h(1, 5, 20, 500)}, [][2]int{{0, 1}}},
		{"nested in a long hold", []hold{h(0, 0, 100, 500), h(1, 20, 30, 500), h(2, 40, 50, 500)}, [][2]int{{0, 1}, {0, 2}}},
		// Every pair counts: three holders at once are three overlaps.
		{"three at once", []hold{h(0, 0, 100, 500), h(1, 10, 100, 500), h(2, 20, 100, 500)}, [][2]int{{0, 1}, {0, 2}, {1, 2}}},
		// A holder that overran its validity held the lock only until Until.
		{"overran validity", []hold{h(0, 0, 900, 500), h(1, 600, 700, 1100)}, nil},
		{"overran validity, overlap", []hold{h(0, 0, 900, 500), h(1, 400, 700, 1100)}, [][2]int{{0, 1}}},
		// A Lock that returned after its Until claimed nothing.
		{"returned past until", []hold{h(0, 0, 100, 500), h(1, 50, 60, 40)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][2]int
			for _, o := range findOverlaps(tt.holds) {
				got = append(got, [2]int{o.a.client, o.b.client})
			}
			require.Equal(t, tt.want, got, "overlaps: got %v, want %v", got, tt.want)
		})
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0, 1}, {1, 10}} {
		got := percentile(ds, tt.p)
		require.Equal(t, tt.want, got, "p%v: got %v, want %v", tt.p*100, got, tt.want)
	}
	require.Zero(t, percentile(nil, 0.5))
}

func TestReportCountsPhases(t *testing.T) {
	var out strings.Builder
	cfg := defaultDemoConfig()
	t0 := time.Now()
	r := newRecorder(&out, t0, cfg)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, ms := range []int{10, 20, 110, 210, 220, 230} {
		r.holds = append(r.holds, hold{start: at(ms - 1), acquired: at(ms), released: at(ms + 1), until: at(ms + 400)})
	}
	r.kills = []kill{{node: 1, at: at(100)}, {node: 3, at: at(200)}}
	rep := r.report(at(300))
	var got []int
	for _, p := range rep.phases {
		got = append(got, len(p.lock))
	}
	require.Equal(t, []int{2, 1, 3, 6}, got, "acquisitions per phase: got %v, want [2 1 3 6]", got)
	require.Equal(t, exitOK, rep.exitCode())
}
