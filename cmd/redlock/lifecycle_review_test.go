//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/faultproxy"
)

// startRedlockGroup is startRedlock with redlock leading a process group of
// its own, as a job of an interactive shell, timeout(1) or a service
// manager has it, so that the test can kill the whole group at once.
func startRedlockGroup(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	outF, err := os.Create(p.stdout)
	require.NoError(t, err)
	errF, err := os.Create(p.stderr)
	require.NoError(t, err)
	p.cmd = exec.Command(redlockBinary(t), args...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = outF, errF
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.started = time.Now()
	err = p.cmd.Start()
	_ = outF.Close()
	_ = errF.Close()
	require.NoError(t, err)
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// Whatever kills redlock run's side, the supervisor alone or run's whole
// process group, no process of the command's tree goes on: not the command,
// not a grandchild in its process group, not one that left with setsid.
// The supervisor shares run's process group, so one kill(-pgid) takes both,
// as timeout -s KILL (or timeout -k), `kill -9 %1` of a shell job and
// `kill -9 -- -PGID` do.
func TestKilledSupervisorOrGroupStopsTheTree(t *testing.T) {
	requireProc(t)
	_, nodes := startNodes(t, 3)
	for _, tt := range []struct {
		name string
		kill func(t *testing.T, p *proc)
	}{
		{"supervisor killed", func(t *testing.T, p *proc) {
			kids := childrenOf(p.cmd.Process.Pid)
			require.Len(t, kids, 1, "run's children: want the supervisor only")
			require.NoError(t, syscall.Kill(kids[0], syscall.SIGKILL))
		}},
		{"run's process group killed", func(t *testing.T, p *proc) {
			require.NoError(t, syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			inGroup, outside, ready := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "ready")
			script := `sleep 300 & echo $! > "$IN"
setsid sleep 300 & echo $! > "$OUT"
echo ready > "$READY"
wait`
			key := "killed-" + strings.ReplaceAll(tt.name, " ", "-")
			p := startRedlockGroup(t, []string{"IN=" + inGroup, "OUT=" + outside, "READY=" + ready},
				"run", "--nodes", nodes, "--key", key, "--", "sh", "-c", script)
			eventually(t, 10*time.Second, "command ready", func() bool { return fileHas(ready, "ready") })
			a, b := readPID(t, inGroup), readPID(t, outside)
			require.False(t, processGone(a) || processGone(b), "the grandchildren must run before the kill")

			tt.kill(t, p)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
			eventually(t, 10*time.Second, "grandchild in the command's group gone", func() bool { return processGone(a) })
			eventually(t, 10*time.Second, "grandchild that left with setsid gone", func() bool { return processGone(b) })
		})
	}
}

// When renewals fail, a job of the command's process group that ignores
// SIGTERM must be gone by Until too, like the command. run is cut off from
// the nodes (a partition: its renewals go nowhere) while a second client,
// which reaches the nodes, takes the key as soon as it expires there. The
// command exits at once on SIGTERM; its background job ignores it. When the
// second client holds the key, the job must be gone.
func TestGroupJobIgnoringTermIsGoneBeforeAnotherHolder(t *testing.T) {
	requireProc(t)
	servers, _ := startNodes(t, 3)
	proxies, urls, direct := behindProxies(t, servers)
	// -grace is 410ms: the command exits a few ms after SIGTERM, and
	// what is left of its group is looked at every 50ms from then on.
	const ttl, grace = time.Second, 410 * time.Millisecond
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	p := startRedlock(t, []string{"PIDFILE=" + pidFile},
		"run", "--nodes", strings.Join(urls, ","), "--key", "late-kill", "--ttl", ttl.String(), "--grace", grace.String(), "--",
		"sh", "-c", `(trap '' TERM; exec sleep 60) & echo $! > "$PIDFILE"; exec sleep 300`)
	bg := readPID(t, pidFile)
	for _, px := range proxies {
		px.SetMode(faultproxy.Blackhole)
	}

	other, err := redlock.New(direct, redlock.WithNodeTimeout(50*time.Millisecond))
	require.NoError(t, err)
	defer other.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "the second client never got the key; run's stderr:\n%s", p.errText())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		l, err := other.TryLock(ctx, "late-kill", redlock.WithTTL(10*time.Second))
		cancel()
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		alive := !processGone(bg)
		_ = l.Unlock(context.Background())
		require.False(t, alive, "the command's background job still ran when another client held the lock; run's stderr:\n%s", p.errText())
		break
	}
	code := p.wait(t, 15*time.Second)
	require.Equal(t, exitLockLost, code, "stderr:\n%s", p.errText())
}

// A command that ends well within the lock's time is not stopped, with the
// default -grace: not with a short -ttl, and not with a -max-hold shorter
// than -ttl. -max-hold promises to stop the command once it has held the
// lock that long, not as soon as it starts.
func TestHealthyRunIsNotStoppedEarly(t *testing.T) {
	_, nodes := startNodes(t, 3)
	for _, tt := range []struct {
		name  string
		flags []string
	}{
		{"-ttl 3s", []string{"--ttl", "3s"}},
		{"-ttl 30s -max-hold 4s", []string{"--ttl", "30s", "--max-hold", "4s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--nodes", nodes, "--key", "healthy-" + strings.ReplaceAll(tt.name, " ", "")}, tt.flags...)
			args = append(args, "--", "sh", "-c", "sleep 1; exit 7")
			code, _, stderr := runRedlock(t, nil, args...)
			require.Equal(t, 7, code, "the command's own status; stderr:\n%s", stderr)
			require.Empty(t, stderr)
		})
	}
}

// Renewals that recover just after SIGTERM: the command, which ignores
// SIGTERM, is still killed at the deadline, but run must not say that the
// lock's validity ended, nor that the lock was lost: it was extended, and
// nobody else can hold it.
func TestRenewalsRecoverAfterSIGTERM(t *testing.T) {
	requireProc(t)
	servers, nodes := startNodes(t, 5)
	const ttl, grace = 3 * time.Second, time.Second
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	p := startRedlock(t, []string{"STARTED=" + started},
		"run", "--nodes", nodes, "--key", "recover", "--ttl", ttl.String(), "--grace", grace.String(), "--",
		"sh", "-c", `trap '' TERM; echo > "$STARTED"; while :; do sleep 0.02; done`)
	eventually(t, 10*time.Second, "command started", func() bool { return fileHas(started, "\n") })
	for _, s := range servers[:3] {
		s.Pause()
	}
	t.Cleanup(func() {
		for _, s := range servers[:3] {
			s.Resume()
		}
	})
	eventually(t, 10*time.Second, "SIGTERM sent", func() bool { return strings.Contains(p.errText(), "sending SIGTERM") })
	for _, s := range servers[:3] {
		s.Resume()
	}
	code := p.wait(t, 15*time.Second)
	stderr := p.errText()
	require.NotContains(t, stderr, "lock \"recover\" lost", "the renewals recovered: the lock was never lost")
	require.NotContains(t, stderr, "end of the lock's validity", "the lock's validity had not ended: renewals extended it after SIGTERM; exit %d, stderr:\n%s", code, stderr)
}

// A kill by name (pkill -9 -f redlock) takes run, but not its supervisor,
// whose name and arguments do not hold the binary's name: the supervisor
// then stops the tree.
func TestKillByNameStopsTheTree(t *testing.T) {
	requireProc(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	inGroup, outside, ready := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "ready")
	script := `sleep 300 & echo $! > "$IN"
setsid sleep 300 & echo $! > "$OUT"
echo ready > "$READY"
wait`
	p := startRedlock(t, []string{"IN=" + inGroup, "OUT=" + outside, "READY=" + ready},
		"run", "--nodes", nodes, "--key", "killed-by-name", "--", "sh", "-c", script)
	eventually(t, 10*time.Second, "command ready", func() bool { return fileHas(ready, "ready") })
	a, b := readPID(t, inGroup), readPID(t, outside)
	// As pkill -f does: every process whose command line holds the name.
	name := redlockBinary(t)
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), name) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, pid)
		}
	}
	require.Contains(t, killed, p.cmd.Process.Pid, "the kill by name missed run")
	<-p.done
	eventually(t, 10*time.Second, "grandchild in the command's group gone", func() bool { return processGone(a) })
	eventually(t, 10*time.Second, "grandchild that left with setsid gone", func() bool { return processGone(b) })
}

// Without /proc (a chroot, a minimal sandbox) run cannot re-execute
// /proc/self/exe. That is not "the command was not found" (127): the
// command exists, and run either runs it or says that it cannot
// supervise it (126).
func TestRunWithoutProc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount over /proc in a mount namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	if err := exec.Command(unshare, "--mount", "true").Run(); err != nil {
		t.Skipf("unshare --mount: %v", err)
	}
	_, nodes := startNodes(t, 3)
	cmd := exec.Command(unshare, "--mount", "sh", "-c",
		`mount -t tmpfs none /proc && exec "$BIN" run --nodes "$NODES" --key no-proc -- true`)
	cmd.Env = append(cleanEnv(), "BIN="+redlockBinary(t), "NODES="+nodes)
	out, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	require.NotEqual(t, exitNotFound, code, "true exists; output:\n%s", out)
}

// One node of three hangs (paused) for the whole run: the other two renew
// the lock every third of -ttl, but each renewal waits -node-timeout for
// the hung node before it settles. The longest -grace that validation
// allows must not stop the command: the lock never stops being extended.
// Renewals need a third of -ttl plus -node-timeout to land, so SIGTERM at
// Until - grace must come after that; half of -ttl is refused.
func TestHungMinorityDoesNotStopAHealthyRun(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)
	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "hung-minority",
		"--ttl", "2s", "--grace", "1s", "--node-timeout", "400ms", "--", "sh", "-c", "sleep 3; exit 7")
	require.Equal(t, exitUsage, code, "stderr:\n%s", stderr)
	require.Contains(t, stderr, "-grace 1s is too long for -ttl 2s")
	code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "hung-minority",
		"--ttl", "2s", "--grace", "0.53", "--node-timeout", "400ms", "--", "sh", "-c", "sleep 3; exit 7")
	require.Equal(t, 7, code, "stderr:\n%s", stderr)
}
