//go:build unix

package main

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Lock without a command prints the lock, holds it until SIGTERM or SIGINT,
// then releases it and exits 0. Other signals do not end the hold.
func TestLockHolds(t *testing.T) {
	_, nodes := startNodes(t, 3)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			key := "hold-" + signalName(sig)
			l := startLock(t, nodes, key, "--fencing", "--label", "it's mine")
			require.Equal(t, key, l.vars["REDLOCK_KEY"])
			require.Equal(t, "it's mine", l.token()[len(l.token())-len("it's mine"):], "REDLOCK_TOKEN: got %q, want the label at its end", l.token())
			fence, err := strconv.ParseUint(l.vars["REDLOCK_FENCE"], 10, 64)
			require.NoError(t, err, "REDLOCK_FENCE: got %q", l.vars["REDLOCK_FENCE"])
			require.Positive(t, fence)
			require.Len(t, l.vars, 3, "printed: got %v, want REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_FENCE", l.vars)

			l.p.signal(t, syscall.SIGUSR1)
			code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", key, "-n", "true")
			require.Equal(t, exitNotAcquired, code, "while held: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
			code, stdout, _ := runRedlock(t, nil, "status", "--nodes", nodes, "--key", key, "--json")
			require.Equal(t, 0, code)
			require.Contains(t, stdout, strconv.Quote(l.token()), "status: got\n%s, want the printed token", stdout)

			code = l.stop(t, sig)
			require.Equal(t, 0, code, "%v: exit status: got %d, want 0; stderr:\n%s", sig, code, l.p.errText())
			code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", key, "-n", "true")
			require.Equal(t, 0, code, "after the hold: exit status: got %d, want 0 (released); stderr:\n%s", code, stderr)
		})
	}
}

// A hold whose lock is lost says so and exits 76.
func TestLockLost(t *testing.T) {
	servers, nodes := startNodes(t, 5)
	l := startLock(t, nodes, "hold-lost", "--ttl", "1s")
	killed := time.Now()
	for _, s := range servers[:3] {
		s.Kill()
	}
	code := l.p.wait(t, 15*time.Second)
	require.Equal(t, exitLockLost, code, "exit status: got %d, want %d; stderr:\n%s", code, exitLockLost, l.p.errText())
	require.Contains(t, l.p.errText(), `lock "hold-lost" lost: validity ended before a renewal succeeded`)
	require.Less(t, time.Since(killed), 10*time.Second)
}

// Lock waits, and fails, as run does; with a command, it is run.
func TestLockAsRun(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	l := startLock(t, nodes, "hold-busy")

	code, stdout, stderr := runRedlock(t, nil, "lock", "--nodes", nodes, "--key", "hold-busy", "-w", "0.2")
	require.Equal(t, exitNotAcquired, code, "held: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Contains(t, stderr, "redlock lock: -wait 200ms ran out")
	require.Empty(t, stdout)

	code, stdout, stderr = runRedlock(t, nil, "lock", "--nodes", nodes, "--key", "hold-cmd", "--", "sh", "-c", `echo "$REDLOCK_KEY"; exit 5`)
	require.Equal(t, 5, code, "with a command: stderr:\n%s", stderr)
	require.Equal(t, "hold-cmd\n", stdout, "with a command, lock prints only what the command does")

	require.Equal(t, 0, l.stop(t, syscall.SIGTERM))
	servers[1].Kill()
	servers[2].Kill()
	code, stdout, stderr = runRedlock(t, nil, "lock", "--nodes", nodes, "--key", "hold-down", "-n")
	require.Equal(t, exitUnavailable, code, "nodes down: exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
	require.Empty(t, stdout)
}
