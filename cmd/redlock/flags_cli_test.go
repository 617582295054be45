package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// flagSets returns the flag set of every command that has flags, as the
// command builds it.
func flagSets() map[string]*flag.FlagSet {
	runCfg, lockCfg := defaultRunConfig("run"), defaultRunConfig("lock")
	statusCfg, checkCfg, demoCfg := defaultStatusConfig(), defaultCheckConfig(), defaultDemoConfig()
	return map[string]*flag.FlagSet{
		"run":    runFlags(&runCfg, io.Discard),
		"lock":   runFlags(&lockCfg, io.Discard),
		"status": statusFlags(&statusCfg, io.Discard, io.Discard),
		"check":  checkFlags(&checkCfg, io.Discard, io.Discard),
		"demo":   demoFlags(&demoCfg, io.Discard, io.Discard),
	}
}

// Every duration flag of every command takes a bare number of seconds, and
// a duration with a unit. The flags are found by their values, so that a
// duration flag added later with the flag package's own type, which takes
// only the second form, fails here.
func TestDurationFlagsTakeSeconds(t *testing.T) {
	seen := 0
	for cmd, fs := range flagSets() {
		fs.VisitAll(func(f *flag.Flag) {
			get := func() time.Duration {
				switch v := f.Value.(type) {
				case *waitFlag:
					return v.d
				case flag.Getter:
					d, _ := v.Get().(time.Duration)
					return d
				}
				return 0
			}
			if _, isWait := f.Value.(*waitFlag); !isWait {
				if g, ok := f.Value.(flag.Getter); !ok {
					return
				} else if _, ok := g.Get().(time.Duration); !ok {
					return
				}
			}
			seen++
			for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "90s": 90 * time.Second, "2m": 2 * time.Minute} {
				require.NoError(t, fs.Set(f.Name, in), "%s -%s %s", cmd, f.Name, in)
				require.Equal(t, want, get(), "%s -%s %s: got %v, want %v", cmd, f.Name, in, get(), want)
			}
			require.Error(t, fs.Set(f.Name, "soon"), "%s -%s soon", cmd, f.Name)
		})
	}
	// run and lock: ttl, wait, timeout, w, grace, max-hold, node-timeout;
	// status: node-timeout; check: node-timeout, ttl; demo: duration.
	require.Equal(t, 2*7+1+2+1, seen, "duration flags: got %d", seen)

	// Through Parse, as the commands take them.
	cfg := defaultRunConfig("run")
	fs := runFlags(&cfg, io.Discard)
	require.NoError(t, fs.Parse([]string{"-ttl", "5", "-grace", "2.5", "-max-hold", "60", "-node-timeout", "0.2", "--timeout", "3", "--", "true"}))
	got := []time.Duration{cfg.ttl, cfg.grace, cfg.maxHold, cfg.nodeTimeout, cfg.wait.d}
	want := []time.Duration{5 * time.Second, 2500 * time.Millisecond, time.Minute, 200 * time.Millisecond, 3 * time.Second}
	require.Equal(t, want, got, "run: ttl, grace, max-hold, node-timeout, wait")

	// A negative duration is left to the command's own check, which says
	// what the flag needs.
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"status", "--nodes", "h", "--key", "k", "--node-timeout", "-1"}, &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "-node-timeout must be positive, got -1s")
}

// Each help says once, not per flag, how durations are written, and names
// the values of its duration flags "duration".
func TestHelpSaysHowDurationsAreWritten(t *testing.T) {
	durationFlags := map[string][]string{
		"run":    {"ttl", "wait", "timeout", "w", "max-hold", "node-timeout"},
		"lock":   {"ttl", "wait", "timeout", "w", "max-hold", "node-timeout"},
		"status": {"node-timeout"},
		"check":  {"node-timeout", "ttl"},
		"demo":   {"duration"},
	}
	for cmd, names := range durationFlags {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(t.Context(), []string{"help", cmd}, &stdout, &stderr), "help %s", cmd)
		help := stdout.String()
		require.Equal(t, 1, strings.Count(help, strings.TrimSpace(durationsHelp)), "help %s: got\n%s", cmd, help)
		require.Equal(t, 1, strings.Count(help, "(5, 0.5)"), "help %s: the note must be said once, not per flag; got\n%s", cmd, help)
		for _, name := range names {
			require.Regexp(t, `(?m)^  -`+regexp.QuoteMeta(name)+` duration$`, help, "help %s: -%s", cmd, name)
		}
	}
}

// Against real servers, the bare seconds reach the nodes: -ttl 3 is 3s.
func TestDurationSecondsOnTheNodes(t *testing.T) {
	_, nodes := startNodes(t, 3)
	l := startLock(t, nodes, "secs", "--ttl", "3", "--node-timeout", "0.5", "--max-hold", "60", "--grace", "1")
	code, stdout, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "secs", "--json", "--node-timeout", "1.5")
	require.Equal(t, exitOK, code, "status: stderr:\n%s", stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "status --json: got\n%s", stdout)
	require.True(t, rep.Held, "held: got false; stdout:\n%s", stdout)
	for _, n := range rep.Nodes {
		require.NotNil(t, n.PTTL, "node %d: got %+v", n.Index, n)
		require.Positive(t, *n.PTTL, "node %d", n.Index)
		require.LessOrEqual(t, *n.PTTL, int64(3000), "node %d: PTTL %dms: -ttl 3 must be 3s", n.Index, *n.PTTL)
	}
	require.Equal(t, exitOK, l.stop(t, syscall.SIGTERM))

	code, _, stderr = runRedlock(t, nil, "check", "--nodes", nodes, "--node-timeout", "1", "--ttl", "10")
	require.NotContains(t, []int{exitUsage, exitUnavailable}, code, "check: stderr:\n%s", stderr)
}

// -timeout is the wait of run and lock, as in flock(1), and nothing else;
// the per-node timeout is -node-timeout everywhere.
func TestTimeoutIsTheWaitOnly(t *testing.T) {
	cfg := defaultRunConfig("lock")
	require.NoError(t, runFlags(&cfg, io.Discard).Parse([]string{"-timeout", "5"}))
	require.Equal(t, 5*time.Second, cfg.wait.d, "lock -timeout 5: the wait")
	require.Zero(t, cfg.nodeTimeout, "lock -timeout 5: the node timeout must not change")

	for _, cmd := range []string{"run", "lock", "status", "check"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(t.Context(), []string{"help", cmd}, &stdout, &stderr))
		require.Regexp(t, `(?m)^  -node-timeout duration$`, stdout.String(), "help %s", cmd)
		hasTimeout := regexp.MustCompile(`(?m)^  -timeout\b`).MatchString(stdout.String())
		require.Equal(t, cmd == "run" || cmd == "lock", hasTimeout, "help %s: -timeout listed: got %v", cmd, hasTimeout)
	}

	_, nodes := startNodes(t, 3)
	for _, cmd := range []string{"status", "check"} {
		args := []string{cmd, "--nodes", nodes, "--timeout", "2s"}
		if cmd == "status" {
			args = append(args, "--key", "k")
		}
		code, stdout, stderr := runRedlock(t, nil, args...)
		require.Equal(t, exitUsage, code, "%s --timeout: stderr:\n%s", cmd, stderr)
		require.Equal(t, "redlock "+cmd+": flag provided but not defined: -timeout: "+nodeTimeoutHint+" (see 'redlock help "+cmd+"')\n", stderr)
		require.Empty(t, stdout)
	}
	code, _, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "k", "--node-timeout", "1")
	require.Equal(t, exitOK, code, "status --node-timeout 1: stderr:\n%s", stderr)
}

// A flag error is one line that names the command's help; -h and -help
// print the whole help on stdout and exit 0.
func TestFlagErrorIsOneLine(t *testing.T) {
	badValue := map[string]string{"run": "ttl", "lock": "wait", "status": "node-timeout", "check": "ttl", "demo": "duration"}
	for _, cmd := range []string{"run", "lock", "status", "check", "demo"} {
		see := " (see 'redlock help " + cmd + "')\n"
		code, stdout, stderr := runRedlock(t, nil, cmd, "--bogus")
		require.Equal(t, exitUsage, code, "%s --bogus: stderr:\n%s", cmd, stderr)
		require.Equal(t, "redlock "+cmd+": flag provided but not defined: -bogus"+see, stderr, "%s --bogus", cmd)
		require.Empty(t, stdout, "%s --bogus", cmd)

		code, stdout, stderr = runRedlock(t, nil, cmd, "--"+badValue[cmd], "soon")
		require.Equal(t, exitUsage, code, "%s -%s soon: stderr:\n%s", cmd, badValue[cmd], stderr)
		require.Equal(t, `redlock `+cmd+`: invalid value "soon" for flag -`+badValue[cmd]+`: want seconds (5, 0.5) or a duration (90s, 2m)`+see, stderr)
		require.Empty(t, stdout)

		for _, h := range []string{"-h", "--help"} {
			code, stdout, stderr = runRedlock(t, nil, cmd, h)
			require.Equal(t, exitOK, code, "%s %s: stderr:\n%s", cmd, h, stderr)
			require.True(t, strings.HasPrefix(stdout, "usage: redlock "+cmd), "%s %s: got\n%s", cmd, h, stdout)
			require.Contains(t, stdout, "\nFlags:\n", "%s %s", cmd, h)
			require.Empty(t, stderr, "%s %s", cmd, h)
		}
	}
}

// --node-guard turns on the library's node guard. The guard keeps out a
// node that started less than the TTL ago, as every node here did.
func TestNodeGuardFlag(t *testing.T) {
	_, nodes := startNodes(t, 3)
	for _, cmd := range [][]string{{"run", "--key", "guarded", "--", "true"}, {"lock", "--key", "guarded"}} {
		args := append([]string{cmd[0], "--nodes", nodes, "-n", "--ttl", "60", "--node-guard"}, cmd[1:]...)
		code, stdout, stderr := runRedlock(t, nil, args...)
		require.NotContains(t, []int{exitOK, exitUsage}, code, "%s --node-guard: stdout:\n%s\nstderr:\n%s", cmd[0], stdout, stderr)
		require.Contains(t, stderr, "quarantined", "%s --node-guard", cmd[0])
	}
	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "-n", "--ttl", "60", "--key", "guarded", "--", "true")
	require.Equal(t, exitOK, code, "run without --node-guard: stderr:\n%s", stderr)

	// Check advises the flag, and judges as if every run had it with it.
	_, rep, stderr := runCheck(t, nodes)
	persistence := findingsOf(rep, "persistence")
	require.Len(t, persistence, 3, "stderr:\n%s", stderr)
	for _, f := range persistence {
		require.Equal(t, "warning", f.Severity, "%+v", f)
		require.Contains(t, f.Fix, "-node-guard in every redlock run and lock", "%+v", f)
	}
	_, rep, stderr = runCheck(t, nodes, "--node-guard")
	persistence = findingsOf(rep, "persistence")
	require.Len(t, persistence, 3, "stderr:\n%s", stderr)
	for _, f := range persistence {
		require.Equal(t, "info", f.Severity, "check --node-guard: %+v", f)
	}
}

// A malformed address is a usage error at once, in one line that names it,
// for bare addresses and URLs alike. Before, "notaurl::" was the host
// "notaurl:" on port 6379, and run waited for it forever.
func TestMalformedAddressIsAUsageError(t *testing.T) {
	for _, bad := range []string{
		"notaurl::", "redis://notaurl::", "host:", "redis://host:", "host:abc", "redis://u:hunter2@host:abc",
		"127.0.0.1:0", "redis://127.0.0.1:65536", "u:hunter2@h:65536",
	} {
		nodes := "127.0.0.1:1," + bad + ",127.0.0.1:2"
		code, stdout, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "k", "--", "true")
		require.Equal(t, exitUsage, code, "%s: stderr:\n%s", bad, stderr)
		first, _, _ := strings.Cut(stderr, "\n")
		require.Contains(t, first, `bad node URL "`+maskPassword(bad)+`"`, "%s: stderr:\n%s", bad, stderr)
		require.NotContains(t, stderr, "hunter2")
		require.Empty(t, stdout)
	}
	for _, args := range [][]string{
		{"lock", "--nodes", "notaurl::", "--key", "k"},
		{"status", "--nodes", "host:", "--key", "k"},
		{"check", "--nodes", "redis://127.0.0.1:65536"},
	} {
		code, _, stderr := runRedlock(t, nil, args...)
		require.Equal(t, exitUsage, code, "%v: stderr:\n%s", args, stderr)
		require.Contains(t, stderr, `bad node URL "`+args[2]+`"`, "%v", args)
		if args[0] != "lock" { // lock's message is run.go's
			require.Equal(t, 1, strings.Count(stderr, "\n"), "%v: want one line, got\n%s", args, stderr)
		}
	}
}

// version and --version read the build info: a go build from a git
// checkout shows the commit, and -ldflags -X main.version wins over the
// module version, not over the commit.
func TestVersionFromBuildInfo(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout, or no git: %v", err)
	}
	commit := strings.TrimSpace(string(out))[:12]
	dir := t.TempDir()
	for _, tt := range []struct {
		ldflags string
		want    string // how the line starts
	}{
		// -buildvcs=true: the environment may set -buildvcs=false in
		// GOFLAGS, which a plain go build would follow.
		{"", "redlock v"}, // a pseudo-version, or a tag
		{"-X main.version=v9.8.7", "redlock v9.8.7 ("},
	} {
		bin := filepath.Join(dir, "redlock"+strings.ReplaceAll(tt.ldflags, " ", "_"))
		args := []string{"build", "-buildvcs=true", "-o", bin}
		if raceEnabled {
			args = append(args, "-race") // as redlockBinary builds: the packages are built once
		}
		if tt.ldflags != "" {
			args = append(args, "-ldflags", tt.ldflags)
		}
		b, err := exec.Command(goTool(), append(args, ".")...).CombinedOutput()
		require.NoError(t, err, "go build: %s", b)
		for _, arg := range []string{"version", "--version"} {
			b, err := exec.Command(bin, arg).Output()
			require.NoError(t, err, "%s %s", bin, arg)
			got := string(b)
			require.True(t, strings.HasPrefix(got, tt.want), "%s (ldflags %q): got %q, want it to start with %q", arg, tt.ldflags, got, tt.want)
			require.Contains(t, got, "commit "+commit, "%s (ldflags %q): got %q", arg, tt.ldflags, got)
		}
	}
}
