//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A killed redlock run (SIGKILL, as the OOM killer sends it) stops the whole
// tree it started: the command, a grandchild in its process group, and one
// that left the group and the session with setsid. Without the supervisor,
// the kernel's parent-death signal kills only the direct child, and both
// grandchildren go on without the lock.
func TestKilledRunStopsItsTree(t *testing.T) {
	requireProc(t)
	_, nodes := startNodes(t, 3)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run"}},
		{"run -foreground", []string{"run", "-foreground"}},
		{"lock with a command", []string{"lock"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			inGroup, outside, ready := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "ready")
			script := `sleep 300 & echo $! > "$IN"
setsid sleep 300 & echo $! > "$OUT"
echo ready > "$READY"
wait`
			args := append(append([]string{}, tt.args...), "--nodes", nodes, "--key", "killed-"+strings.ReplaceAll(tt.name, " ", "-"), "--", "sh", "-c", script)
			p := startRedlock(t, []string{"IN=" + inGroup, "OUT=" + outside, "READY=" + ready}, args...)
			eventually(t, 10*time.Second, "command ready", func() bool { return fileHas(ready, "ready") })
			a, b := readPID(t, inGroup), readPID(t, outside)
			require.False(t, processGone(a) || processGone(b), "the grandchildren must run before the kill")

			require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
			<-p.done
			eventually(t, 10*time.Second, "grandchild in the command's group gone", func() bool { return processGone(a) })
			eventually(t, 10*time.Second, "grandchild that left with setsid gone", func() bool { return processGone(b) })
			eventually(t, 10*time.Second, "no process left under redlock", func() bool { return len(childrenOf(p.cmd.Process.Pid)) == 0 })
		})
	}
}

// A command that exits normally leaves its background jobs running, as it
// would without redlock, and the supervisor does not outlive run.
func TestRunLeavesBackgroundJobsOfACleanExit(t *testing.T) {
	requireProc(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	bg := filepath.Join(dir, "bg")
	code, _, stderr := runRedlock(t, []string{"BG=" + bg}, "run", "--nodes", nodes, "--key", "clean-exit", "--",
		"sh", "-c", `sleep 300 > /dev/null 2>&1 & echo $! > "$BG"; exit 4`)
	require.Equal(t, 4, code, "stderr:\n%s", stderr)
	pid := readPID(t, bg)
	require.False(t, processGone(pid), "a background job of a command that exited normally was killed")
}

// When renewals fail, the command gets SIGTERM -grace before the lock's
// validity ends, so that it is gone by then: past Until another client may
// hold the lock. The nodes of a quorum are paused as soon as the command
// starts, before the first renewal (a third of the TTL in), so that Until
// stays where the acquisition put it: before the command started, plus the
// TTL. The command notes when it started and when SIGTERM came.
func TestRenewalsFailingStopTheCommandBeforeUntil(t *testing.T) {
	requireProc(t)
	for _, tt := range []struct {
		name      string
		trap      string // the command's response to SIGTERM
		wantTrap  bool
		wantInErr string
	}{
		{"command exits on SIGTERM", `trap 'date +%s%N > "$TERMED"; exit 3' TERM`, true, "sending SIGTERM to the command, and SIGKILL when the lock ends"},
		{"command ignores SIGTERM", `trap '' TERM`, false, "the command did not exit by the end of the lock's validity; sending SIGKILL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers, nodes := startNodes(t, 5)
			const ttl, grace = 4 * time.Second, 1500 * time.Millisecond
			dir := t.TempDir()
			termed, started, pidFile := filepath.Join(dir, "termed"), filepath.Join(dir, "started"), filepath.Join(dir, "pid")
			script := tt.trap + `
echo $$ > "$PIDFILE"
date +%s%N > "$STARTED"
while :; do sleep 0.02; done`
			p := startRedlock(t, []string{"TERMED=" + termed, "STARTED=" + started, "PIDFILE=" + pidFile},
				"run", "--nodes", nodes, "--key", "renewals-fail", "--ttl", ttl.String(), "--grace", grace.String(), "--", "sh", "-c", script)
			var start time.Time
			eventually(t, 10*time.Second, "command started", func() bool {
				ns, err := strconv.ParseInt(strings.TrimSpace(readFile(started)), 10, 64)
				start = time.Unix(0, ns)
				return err == nil
			})
			for _, s := range servers[:3] {
				s.Pause()
			}
			t.Cleanup(func() {
				for _, s := range servers[:3] {
					s.Resume()
				}
			})
			if since := time.Since(start); since > ttl/3-200*time.Millisecond {
				t.Fatalf("the nodes were paused %v after the command started: too late to fail the first renewal", since)
			}
			pid := readPID(t, pidFile)
			// The acquisition ended before the command started, so the
			// validity ends by start+ttl; SIGTERM is due -grace before.
			until := start.Add(ttl)
			var gone time.Time
			eventually(t, ttl+10*time.Second, "command gone", func() bool {
				if processGone(pid) {
					gone = time.Now()
					return true
				}
				return false
			})
			code := p.wait(t, 15*time.Second)
			stderr := p.errText()
			require.Equal(t, exitLockLost, code, "exit status; stderr:\n%s", stderr)
			if tt.wantTrap {
				ns, err := strconv.ParseInt(strings.TrimSpace(readFile(termed)), 10, 64)
				require.NoError(t, err, "the command's SIGTERM trap did not run; stderr:\n%s", stderr)
				at := time.Unix(0, ns)
				require.True(t, at.Before(until.Add(-grace/2)), "SIGTERM came %v after the command started; the validity ended by %v, and -grace is %v; stderr:\n%s",
					at.Sub(start), ttl, grace, stderr)
				require.True(t, gone.Before(until), "the command was gone %v after it started, past the validity's end (%v); stderr:\n%s",
					gone.Sub(start), ttl, stderr)
			} else {
				// SIGKILL comes at the end of the validity, not -grace later.
				require.Less(t, gone.Sub(until), grace/2, "the command was gone %v after the validity ended; stderr:\n%s", gone.Sub(until), stderr)
			}
			require.Contains(t, stderr, tt.wantInErr)
		})
	}
}

// childrenOf is tested with the supervisor's own helper; this makes sure it
// finds a child at all, so that the check above can fail.
func TestChildrenOfFindsAChild(t *testing.T) {
	requireProc(t)
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
	require.NoError(t, err)
	defer func() { _ = p.Kill(); _, _ = p.Wait() }()
	require.Contains(t, childrenOf(os.Getpid()), p.Pid, fmt.Sprintf("children of %d", os.Getpid()))
}
