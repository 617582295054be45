//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Concurrent runs on one key take turns: each command's start and end
// markers are adjacent in the shared file, and the runs together last at
// least the sum of their holds.
func TestRunSerializes(t *testing.T) {
	const (
		runs = 3
		hold = 400 * time.Millisecond
	)
	_, nodes := startNodes(t, 3)
	out := filepath.Join(t.TempDir(), "out")
	// The token holds a space before its label: the fields are split by |.
	script := fmt.Sprintf(`echo "start|$REDLOCK_TOKEN|$REDLOCK_KEY" >> "$OUT"; sleep %.1f; echo "end|$REDLOCK_TOKEN" >> "$OUT"`, hold.Seconds())

	start := time.Now()
	procs := make([]*proc, runs)
	for i := range procs {
		env := []string{"OUT=" + out}
		args := []string{"run", "--key", "serial", "--wait", "30s", "--", "sh", "-c", script}
		if i == 0 {
			env = append(env, envNodes+"="+nodes) // nodes from the environment
		} else {
			args = append([]string{"run", "--nodes", nodes}, args[1:]...)
		}
		procs[i] = startRedlock(t, env, args...)
	}
	for i, p := range procs {
		code := p.wait(t, 30*time.Second)
		require.Equal(t, 0, code, "run %d: exit status: got %d, want 0; stderr:\n%s", i, code, p.errText())
	}
	elapsed := time.Since(start)

	lines := strings.Split(strings.TrimSpace(readFile(out)), "\n")
	require.Len(t, lines, 2*runs, "markers: got %q", lines)
	tokens := map[string]bool{}
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Split(lines[i], "|"), strings.Split(lines[i+1], "|")
		require.Len(t, s, 3, "line %d: got %q, want start TOKEN KEY", i, lines[i])
		require.Len(t, e, 2, "line %d: got %q, want end TOKEN", i+1, lines[i+1])
		require.Equal(t, "start", s[0], "line %d: got %q; the holds interleaved:\n%s", i, lines[i], strings.Join(lines, "\n"))
		require.Equal(t, []string{"end", s[1]}, e, "line %d: got %q, want the end of %s; the holds interleaved:\n%s", i+1, lines[i+1], s[1], strings.Join(lines, "\n"))
		require.Equal(t, "serial", s[2], "REDLOCK_KEY: got %q, want serial", s[2])
		require.NotEmpty(t, s[1], "REDLOCK_TOKEN is empty")
		tokens[s[1]] = true
	}
	require.Len(t, tokens, runs, "tokens: got %v, want %d distinct", tokens, runs)
	require.GreaterOrEqual(t, elapsed, runs*hold, "elapsed: got %v, want at least %v for %d holds in turn", elapsed, runs*hold, runs)
}

func TestRunExitStatus(t *testing.T) {
	_, nodes := startNodes(t, 3)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))

	tests := []struct {
		name    string
		command []string
		want    int
		stdout  string // in the run's stdout
		stderr  string // in the run's stderr
	}{
		{"zero", []string{"sh", "-c", "echo hello"}, 0, "hello\n", ""},
		{"seven", []string{"sh", "-c", "echo to-stderr >&2; exit 7"}, 7, "", "to-stderr"},
		{"255", []string{"sh", "-c", "exit 255"}, 255, "", ""},
		{"killed by SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9, "", ""},
		{"killed by SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, "", ""},
		{"not found", []string{"no-such-command-redlock-test"}, exitNotFound, "", "executable file not found"},
		{"not executable", []string{notExec}, exitCannotRun, "", "permission denied"},
		{"flags end at the command", []string{"sh", "-c", `test "$1" = "--key"`, "sh", "--key"}, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "exit-" + strings.ReplaceAll(tt.name, " ", "-")
			args := append([]string{"run", "--nodes", nodes, "--key", key}, tt.command...)
			code, stdout, stderr := runRedlock(t, nil, args...)
			require.Equal(t, tt.want, code, "exit status: got %d, want %d; stderr:\n%s", code, tt.want, stderr)
			require.Contains(t, stdout, tt.stdout, "stdout: got %q, want %q in it", stdout, tt.stdout)
			require.Contains(t, stderr, tt.stderr, "stderr: got %q, want %q in it", stderr, tt.stderr)

			// The lock was released, whatever the command did.
			code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", key, "--no-wait", "--", "true")
			require.Equal(t, 0, code, "run after: exit status: got %d, want 0 (released); stderr:\n%s", code, stderr)
		})
	}
}

// Signals that redlock gets go to the command's whole process group, and
// the command's status passes through.
func TestRunForwardsSignals(t *testing.T) {
	requireProc(t)
	_, nodes := startNodes(t, 3)
	for _, tt := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 5}, {syscall.SIGTERM, 6}, {syscall.SIGHUP, 7}} {
		t.Run(signalName(tt.sig), func(t *testing.T) {
			dir := t.TempDir()
			out, pidFile := filepath.Join(dir, "out"), filepath.Join(dir, "pid")
			// A background job of a non-interactive sh ignores SIGINT, so
			// only SIGTERM and SIGHUP are expected to reach it.
			script := fmt.Sprintf(`trap 'echo got signal >> "$OUT"; exit %d' %s
sleep 60 & echo $! > "$PIDFILE"
echo ready >> "$OUT"
while :; do sleep 0.02; done`, tt.want, strings.TrimPrefix(signalName(tt.sig), "SIG"))
			p := startRedlock(t, []string{"OUT=" + out, "PIDFILE=" + pidFile},
				"run", "--nodes", nodes, "--key", "signals-"+signalName(tt.sig), "-v", "--", "sh", "-c", script)
			eventually(t, 10*time.Second, "command ready", func() bool { return fileHas(out, "ready") })
			bg := readPID(t, pidFile)

			p.signal(t, tt.sig)
			code := p.wait(t, 10*time.Second)
			require.Equal(t, tt.want, code, "exit status: got %d, want %d; stderr:\n%s", code, tt.want, p.errText())
			require.True(t, fileHas(out, "got signal"), "the command did not get %v; out:\n%s", tt.sig, readFile(out))
			require.Contains(t, p.errText(), "passing "+signalName(tt.sig)+" on to the command")
			if tt.sig != syscall.SIGINT {
				eventually(t, 5*time.Second, "background job of the command gone", func() bool { return processGone(bg) })
			} else {
				_ = syscall.Kill(bg, syscall.SIGKILL)
			}
		})
	}
}

// A majority of nodes dies, or forgets the key, while the command runs. When
// they die, renewals fail, and the command (and its process group) gets
// SIGTERM -grace before the validity ends, and SIGKILL at its end. When they
// forget the key, the next renewal finds the lock lost: SIGTERM at once,
// SIGKILL -grace later. Either way run exits 76.
func TestRunLockLost(t *testing.T) {
	requireProc(t)
	const (
		exitOnTerm = `trap 'echo got TERM >> "$OUT"; exit 3' TERM`
		bgJob      = `sleep 60`
	)
	for _, tt := range []struct {
		name     string
		forget   bool   // FLUSHALL on the majority rather than killing it
		trap     string // the command's response to SIGTERM
		bg       string // a job the command starts in the background
		grace    time.Duration
		wantTerm bool   // the command saw SIGTERM and exited
		stderr   string // in run's stderr
	}{
		{"command exits on SIGTERM", false, exitOnTerm, bgJob, 600 * time.Millisecond, true, "sending SIGTERM to the command, and SIGKILL when the lock ends"},
		{"command ignores SIGTERM", false, `trap '' TERM`, bgJob, 300 * time.Millisecond, false, "the command did not exit by the end of the lock's validity; sending SIGKILL"},
		{"background job ignores SIGTERM", false, exitOnTerm, `(trap '' TERM; exec sleep 60)`, 300 * time.Millisecond, true, "sending SIGKILL to what is left of the command's process group"},
		{"key forgotten", true, exitOnTerm, bgJob, 600 * time.Millisecond, true, "a quorum of nodes no longer holds the token; sending SIGTERM to the command, and SIGKILL in 600ms"},
		{"key forgotten, command ignores SIGTERM", true, `trap '' TERM`, bgJob, 300 * time.Millisecond, false, "the command did not exit by the end of -grace 300ms after SIGTERM; sending SIGKILL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers, nodes := startNodes(t, 5)
			dir := t.TempDir()
			out, pidFile := filepath.Join(dir, "out"), filepath.Join(dir, "pid")
			script := tt.trap + "\n" + tt.bg + ` & echo $! > "$PIDFILE"
echo started >> "$OUT"
while :; do sleep 0.02; done`
			p := startRedlock(t, []string{"OUT=" + out, "PIDFILE=" + pidFile},
				"run", "--nodes", nodes, "--key", "lost", "--ttl", "2s", "--grace", tt.grace.String(), "--", "sh", "-c", script)
			eventually(t, 10*time.Second, "command started", func() bool { return fileHas(out, "started") })
			bg := readPID(t, pidFile)

			killed := time.Now()
			for _, s := range servers[:3] {
				if tt.forget {
					require.NoError(t, s.NewClient(t).FlushAll(context.Background()).Err())
				} else {
					s.Kill()
				}
			}
			code := p.wait(t, 15*time.Second)
			took := time.Since(killed)
			stderr := p.errText()
			require.Equal(t, exitLockLost, code, "exit status: got %d, want %d; stderr:\n%s", code, exitLockLost, stderr)
			require.Contains(t, stderr, tt.stderr)
			require.Equal(t, tt.wantTerm, fileHas(out, "got TERM"), "the command's SIGTERM trap ran: got %v, want %v", !tt.wantTerm, tt.wantTerm)
			// The loss comes within a TTL of the fault; then the grace.
			require.Less(t, took, 2*time.Second+tt.grace+3*time.Second, "exit %v after the fault", took)
			eventually(t, 5*time.Second, "background job of the command gone", func() bool { return processGone(bg) })
		})
	}
}

// A run that finds the key held exits 75: at once with --no-wait, after
// --wait otherwise. A signal ends a wait with 128+N. Once the holder is done
// the key is free.
func TestRunHeldKey(t *testing.T) {
	_, nodes := startNodes(t, 3)
	h := holdKey(t, nodes, "held")

	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "--no-wait", "--", "true")
	require.Equal(t, exitNotAcquired, code, "--no-wait: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Contains(t, stderr, "-no-wait: not acquired")

	const wait = 300 * time.Millisecond
	start := time.Now()
	code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "--wait", wait.String(), "--", "true")
	require.Equal(t, exitNotAcquired, code, "--wait: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Contains(t, stderr, "-wait 300ms ran out")
	require.GreaterOrEqual(t, time.Since(start), wait)

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "-v", "--", "true")
		eventually(t, 10*time.Second, "waiter waiting", func() bool { return strings.Contains(p.errText(), "waiting as long as it takes") })
		p.signal(t, sig)
		code = p.wait(t, 10*time.Second)
		want := exitSignalBase + int(sig)
		require.Equal(t, want, code, "%v while waiting: exit status: got %d, want %d; stderr:\n%s", sig, code, want, p.errText())
		require.Contains(t, p.errText(), signalName(sig)+` while waiting for "held"`)
	}

	require.Equal(t, 0, h.release(t), "holder: stderr:\n%s", h.p.errText())
	code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "--no-wait", "--", "true")
	require.Equal(t, 0, code, "--no-wait after release: exit status: got %d, want 0; stderr:\n%s", code, stderr)
}

// A waiting run gets the lock as soon as the holder releases it.
func TestRunWaits(t *testing.T) {
	_, nodes := startNodes(t, 3)
	h := holdKey(t, nodes, "wait")
	p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "wait", "--wait", "20s", "--", "sh", "-c", "echo got it")
	time.Sleep(200 * time.Millisecond)
	select {
	case <-p.done:
		t.Fatalf("waiter exited while the key was held; stderr:\n%s", p.errText())
	default:
	}
	released := time.Now()
	require.Equal(t, 0, h.release(t))
	code := p.wait(t, 10*time.Second)
	require.Equal(t, 0, code, "waiter: exit status: got %d, want 0; stderr:\n%s", code, p.errText())
	require.Equal(t, "got it\n", p.outText())
	require.Less(t, time.Since(released), 5*time.Second)
}

func TestRunBadURL(t *testing.T) {
	code, stdout, stderr := runRedlock(t, nil, "run", "--nodes", "redis://127.0.0.1:1,http://u:hunter2@example.com:6379", "--key", "k", "--", "true")
	require.Equal(t, exitUsage, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	require.Contains(t, stderr, `bad node URL "http://u:xxxxx@example.com:6379": redis: invalid URL scheme: http`)
	require.NotContains(t, stderr, "hunter2")
	require.Empty(t, stdout)

	code, _, stderr = runRedlock(t, []string{envNodes + "=redis://127.0.0.1:1,localhost:port"}, "run", "--key", "k", "--", "true")
	require.Equal(t, exitUsage, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	require.Contains(t, stderr, `REDLOCK_NODES: bad node URL "localhost:port"`)
}

func TestVersionCommand(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		code, stdout, stderr := runRedlock(t, nil, arg)
		require.Equal(t, 0, code, "%s: stderr: %s", arg, stderr)
		want := "redlock " + testVersion + " ("
		require.True(t, strings.HasPrefix(stdout, want), "%s: got %q, want it to start with %q", arg, stdout, want)
		require.Contains(t, stdout, runtime.Version())
	}
}

// requireProc skips tests that look into /proc to see that a process is
// gone.
func requireProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 5*time.Second, "pid file", func() bool {
		var err error
		pid, err = strconv.Atoi(strings.TrimSpace(readFile(path)))
		return err == nil
	})
	t.Cleanup(func() {
		if !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// processGone reports whether pid has exited: it is gone from /proc, or a
// zombie that nobody has reaped yet.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) state ..."; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// Too few reachable nodes is an outage, 69, not a lock held elsewhere, 75,
// whether the nodes refuse connections or hang, and whether run waits or
// not. -conflict-exit-code does not change it.
func TestRunUnavailable(t *testing.T) {
	t.Run("killed", func(t *testing.T) {
		servers, nodes := startNodes(t, 3)
		servers[1].Kill()
		servers[2].Kill()
		for _, flags := range [][]string{{"-n"}, {"-w", "1"}, {"-n", "-E", "3"}} {
			args := append([]string{"run", "--nodes", nodes, "--key", "down"}, flags...)
			code, _, stderr := runRedlock(t, nil, append(args, "true")...)
			require.Equal(t, exitUnavailable, code, "%v: exit status: got %d, want %d; stderr:\n%s", flags, code, exitUnavailable, stderr)
			// 2 of 3, or 3 of 3 when the live node was still busy with
			// an earlier attempt on a loaded machine.
			require.Regexp(t, `[23] of 3 nodes unavailable \(quorum 2\)`, stderr)
			require.Contains(t, stderr, "connection refused")
			require.Contains(t, stderr, "exiting 69")
		}
	})
	t.Run("hung", func(t *testing.T) {
		servers, nodes := startNodes(t, 3)
		servers[1].Pause()
		servers[2].Pause()
		// The nodes fail by the node timeout.
		code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "hung", "-n", "--node-timeout", "300ms", "true")
		require.Equal(t, exitUnavailable, code, "-n: exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
		require.Contains(t, stderr, "2 of 3 nodes unavailable (quorum 2)")
		require.Contains(t, stderr, "no answer within the node timeout of 300ms")
		// The wait ends before the node timeout: the nodes had not
		// answered at all.
		code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "hung", "-w", "0.2", "--node-timeout", "1s", "true")
		require.Equal(t, exitUnavailable, code, "-w 0.2: exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
		require.Contains(t, stderr, "-wait 200ms ran out: only 1 of 3 nodes answered (quorum 2)")
	})
	t.Run("held, a node down", func(t *testing.T) {
		servers, nodes := startNodes(t, 3)
		h := holdKey(t, nodes, "held-down")
		servers[2].Kill()
		code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held-down", "-n", "true")
		require.Equal(t, exitNotAcquired, code, "exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
		code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held-down", "-n", "-E", "9", "true")
		require.Equal(t, 9, code, "-E 9: exit status: got %d, want 9; stderr:\n%s", code, stderr)
		require.Contains(t, stderr, "; exiting 9")
		require.Equal(t, 0, h.release(t), "holder: stderr:\n%s", h.p.errText())
	})
}

// flock(1)'s flags: -w/--timeout in seconds, 0 tries once; -n, --nonblock
// and --nb; -E; -c; -x.
func TestRunFlockFlags(t *testing.T) {
	_, nodes := startNodes(t, 3)
	h := holdKey(t, nodes, "flock")
	base := []string{"run", "--nodes", nodes, "--key", "flock"}
	for _, tt := range []struct {
		flags  []string
		want   int
		stderr string
	}{
		{[]string{"-w", "0"}, exitNotAcquired, "-wait 0: not acquired"},
		{[]string{"--timeout", "0"}, exitNotAcquired, "-wait 0: not acquired"},
		{[]string{"--wait", "0s"}, exitNotAcquired, "-wait 0: not acquired"},
		{[]string{"-n"}, exitNotAcquired, "-no-wait: not acquired"},
		{[]string{"--nonblock"}, exitNotAcquired, "-no-wait: not acquired"},
		{[]string{"--nb"}, exitNotAcquired, "-no-wait: not acquired"},
		{[]string{"-n", "-E", "0"}, 0, "; exiting 0"},
		{[]string{"--conflict-exit-code", "42", "-w", "0"}, 42, "; exiting 42"},
		{[]string{"-x", "-n"}, exitNotAcquired, ""},
	} {
		code, _, stderr := runRedlock(t, nil, append(append(slices.Clone(base), tt.flags...), "true")...)
		require.Equal(t, tt.want, code, "%v: exit status: got %d, want %d; stderr:\n%s", tt.flags, code, tt.want, stderr)
		require.Contains(t, stderr, tt.stderr, "%v", tt.flags)
	}

	// Seconds, with a fraction, as flock(1) has them.
	start := time.Now()
	code, _, stderr := runRedlock(t, nil, append(slices.Clone(base), "-w", "0.3", "true")...)
	require.Equal(t, exitNotAcquired, code, "-w 0.3: stderr:\n%s", stderr)
	require.Contains(t, stderr, "-wait 300ms ran out")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	require.Equal(t, 0, h.release(t))
	code, stdout, stderr := runRedlock(t, []string{"SHELL=/bin/sh"}, append(slices.Clone(base), "-x", "-n", "-c", `echo "key $REDLOCK_KEY"; exit 4`)...)
	require.Equal(t, 4, code, "-c: exit status: got %d, want 4; stderr:\n%s", code, stderr)
	require.Equal(t, "key flock\n", stdout)
}

// Nodes may be bare host:port; fewer than 3 of them draw a warning, which
// -quiet silences.
func TestRunNodes(t *testing.T) {
	servers, _ := startNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	const warning = "the lock survives no node failure"
	for _, tt := range []struct {
		name  string
		nodes []string
		flags []string
		warn  string
	}{
		{"three bare", addrs, nil, ""},
		{"one", addrs[:1], nil, "redlock run: warning: 1 node: " + warning},
		{"two, one a URL", []string{addrs[0], "redis://" + addrs[1]}, nil, "redlock run: warning: 2 nodes: " + warning},
		{"one, quiet", addrs[:1], []string{"-q"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--key", "nodes-" + strings.ReplaceAll(tt.name, " ", "-")}, tt.flags...)
			env := []string{envNodes + "=" + strings.Join(tt.nodes, ",")}
			code, stdout, stderr := runRedlock(t, env, append(args, "-n", "--", "echo", "ran")...)
			require.Equal(t, 0, code, "exit status: got %d, want 0; stderr:\n%s", code, stderr)
			require.Equal(t, "ran\n", stdout)
			if tt.warn == "" {
				require.NotContains(t, stderr, "warning", "stderr: got %q, want no warning", stderr)
			} else {
				require.Contains(t, stderr, tt.warn)
			}
		})
	}
}

// lock and status warn of fewer than 3 nodes as run does, on stderr.
func TestFewNodesWarnInLockAndStatus(t *testing.T) {
	servers, _ := startNodes(t, 3)
	const warning = "warning: 2 nodes: the lock survives no node failure"
	two := servers[0].Addr() + "," + servers[1].Addr()
	three := two + "," + servers[2].Addr()

	code, stdout, stderr := runRedlock(t, nil, "lock", "--nodes", two, "--key", "few", "--", "echo", "ran")
	require.Equal(t, 0, code, "lock: stderr:\n%s", stderr)
	require.Equal(t, "ran\n", stdout)
	require.Contains(t, stderr, "redlock lock: "+warning)

	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", two, "--key", "few", "--json")
	require.Equal(t, 0, code, "status: stderr:\n%s", stderr)
	require.Contains(t, stderr, "redlock status: "+warning)
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "status --json: stdout must stay one JSON object, got\n%s", stdout)

	code, _, stderr = runRedlock(t, nil, "status", "--nodes", three, "--key", "few")
	require.Equal(t, 0, code, "status: stderr:\n%s", stderr)
	require.NotContains(t, stderr, "warning", "status with 3 nodes: got %q, want no warning", stderr)
}

// --fencing passes REDLOCK_FENCE, which grows from holder to holder; the
// token carries the label, host:pid by default; --owner makes the lock
// reentrant.
func TestRunFencingLabelOwner(t *testing.T) {
	_, nodes := startNodes(t, 3)
	show := `echo "${REDLOCK_FENCE-unset}|$REDLOCK_TOKEN"`
	runShow := func(t *testing.T, flags ...string) (fence, token string, pid int) {
		t.Helper()
		args := append([]string{"run", "--nodes", nodes, "--key", "fence", "-n", "-c", show}, flags...)
		p := startRedlock(t, []string{"SHELL=/bin/sh"}, args...)
		code := p.wait(t, 30*time.Second)
		require.Equal(t, 0, code, "%v: stderr:\n%s", flags, p.errText())
		fence, token, ok := strings.Cut(strings.TrimSpace(p.outText()), "|")
		require.True(t, ok, "%v: got %q", flags, p.outText())
		return fence, token, p.cmd.Process.Pid
	}

	f1, tok1, pid := runShow(t, "--fencing")
	f2, _, _ := runShow(t, "--fencing")
	n1, err := strconv.ParseUint(f1, 10, 64)
	require.NoError(t, err, "REDLOCK_FENCE: got %q", f1)
	n2, err := strconv.ParseUint(f2, 10, 64)
	require.NoError(t, err, "REDLOCK_FENCE: got %q", f2)
	require.Positive(t, n1)
	require.Greater(t, n2, n1, "the second holder's fence: got %d, want more than %d", n2, n1)
	require.True(t, strings.HasSuffix(tok1, " "+label(t, pid)), "REDLOCK_TOKEN: got %q, want it to end with host:pid", tok1)

	fence, tok, _ := runShow(t, "--label", "nightly job")
	require.Equal(t, "unset", fence, "REDLOCK_FENCE without --fencing")
	require.True(t, strings.HasSuffix(tok, " nightly job"), "REDLOCK_TOKEN: got %q, want the label", tok)
	_, tok, _ = runShow(t, "--label", "")
	require.NotContains(t, tok, " ", "--label \"\": REDLOCK_TOKEN: got %q, want no label", tok)

	// The same owner takes the lock again while it is held; others do not.
	h := holdKey(t, nodes, "owned", "--owner", "deploy")
	code, stdout, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "owned", "--owner", "deploy", "-n", "--", "echo", "again")
	require.Equal(t, 0, code, "same owner: stderr:\n%s", stderr)
	require.Equal(t, "again\n", stdout)
	for _, extra := range [][]string{nil, {"--owner", "other"}} {
		args := append([]string{"run", "--nodes", nodes, "--key", "owned", "-n"}, extra...)
		code, _, stderr = runRedlock(t, nil, append(args, "true")...)
		require.Equal(t, exitNotAcquired, code, "%v: exit status: got %d, want %d; stderr:\n%s", extra, code, exitNotAcquired, stderr)
	}
	require.Equal(t, 0, h.release(t), "holder: stderr:\n%s", h.p.errText())
}

// --shared (-s) takes a read lock: shared runs hold the key together, and
// exclude an exclusive run, as flock(1) -s does. --permits k lets k runs
// hold at once. Both exit as run does.
func TestRunSharedAndPermits(t *testing.T) {
	_, nodes := startNodes(t, 3)
	base := func(key string, flags ...string) []string {
		return append([]string{"run", "--nodes", nodes, "--key", key}, flags...)
	}
	t.Run("shared", func(t *testing.T) {
		r1 := holdKey(t, nodes, "rw", "--shared")
		r2 := holdKey(t, nodes, "rw", "-s")
		code, stdout, stderr := runRedlock(t, nil, append(base("rw", "-s", "-n"), "echo", "third reader")...)
		require.Equal(t, 0, code, "a third reader: stderr:\n%s", stderr)
		require.Equal(t, "third reader\n", stdout)
		for _, flags := range [][]string{{"-n"}, {"-x", "-n"}, {"-w", "0.2"}} {
			code, _, stderr = runRedlock(t, nil, append(base("rw", flags...), "true")...)
			require.Equal(t, exitNotAcquired, code, "%v beside readers: exit status: got %d, want %d; stderr:\n%s", flags, code, exitNotAcquired, stderr)
		}
		require.Equal(t, 0, r1.release(t), "reader: stderr:\n%s", r1.p.errText())
		require.Equal(t, 0, r2.release(t), "reader: stderr:\n%s", r2.p.errText())
		// An exclusive holder keeps readers out, and -E applies to them.
		w := holdKey(t, nodes, "rw")
		code, _, stderr = runRedlock(t, nil, append(base("rw", "-s", "-n", "-E", "3"), "true")...)
		require.Equal(t, 3, code, "reader beside a writer: stderr:\n%s", stderr)
		require.Contains(t, stderr, "-no-wait: not acquired")
		require.Equal(t, 0, w.release(t), "writer: stderr:\n%s", w.p.errText())
	})
	t.Run("permits", func(t *testing.T) {
		h1 := holdKey(t, nodes, "pool", "--permits", "2")
		h2 := holdKey(t, nodes, "pool", "--permits", "2")
		code, _, stderr := runRedlock(t, nil, append(base("pool", "--permits", "2", "-n"), "true")...)
		require.Equal(t, exitNotAcquired, code, "a third permit of 2: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
		// Disagreeing permits are a usage error: waiting would not help.
		code, _, stderr = runRedlock(t, nil, append(base("pool", "--permits", "3", "-w", "5"), "true")...)
		require.Equal(t, exitUsage, code, "--permits 3 on a key of 2: stderr:\n%s", stderr)
		require.Contains(t, stderr, "permits disagree")
		require.Equal(t, 0, h1.release(t), "holder: stderr:\n%s", h1.p.errText())
		code, stdout, stderr := runRedlock(t, nil, append(base("pool", "--permits", "2", "-n"), "echo", "a permit")...)
		require.Equal(t, 0, code, "a permit once one was released: stderr:\n%s", stderr)
		require.Equal(t, "a permit\n", stdout)
		// A waiting run gets the permit when a holder ends.
		h3 := holdKey(t, nodes, "pool", "--permits", "2")
		p := startRedlock(t, nil, append(base("pool", "--permits", "2", "-w", "20", "-v"), "echo", "waited")...)
		eventually(t, 10*time.Second, "waiter waiting", func() bool { return strings.Contains(p.errText(), "waiting up to") })
		time.Sleep(100 * time.Millisecond)
		require.False(t, fileHas(p.stdout, "waited"), "the waiter ran while both permits were held")
		require.Equal(t, 0, h2.release(t), "holder: stderr:\n%s", h2.p.errText())
		code = p.wait(t, 20*time.Second)
		require.Equal(t, 0, code, "waiter: stderr:\n%s", p.errText())
		require.Equal(t, "waited\n", p.outText())
		require.Equal(t, 0, h3.release(t), "holder: stderr:\n%s", h3.p.errText())
	})
	t.Run("bad flags", func(t *testing.T) {
		for _, tt := range []struct {
			flags []string
			want  string
		}{
			{[]string{"-s", "-x"}, "-shared and -exclusive exclude each other"},
			{[]string{"--permits", "2", "-s"}, "-shared and -permits exclude each other"},
			{[]string{"--permits", "2", "-x"}, "-exclusive and -permits exclude each other"},
			{[]string{"--permits", "-1"}, "-permits must be at least 1, got -1"},
			{[]string{"-s", "--fencing"}, "-fencing works only with an exclusive lock, not with -shared"},
			{[]string{"--permits", "2", "--owner", "me"}, "-owner works only with an exclusive lock, not with -permits 2"},
		} {
			code, _, stderr := runRedlock(t, nil, append(base("bad", tt.flags...), "true")...)
			require.Equal(t, exitUsage, code, "%v: stderr:\n%s", tt.flags, stderr)
			require.Contains(t, stderr, tt.want, "%v", tt.flags)
		}
	})
}
