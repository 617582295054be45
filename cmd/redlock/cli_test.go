package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// testVersion is set in the binary the tests build, through -ldflags -X, as
// a release build would.
const testVersion = "v0.0.0-clitest"

// The binary is built once, on first use, into binDir; TestMain removes it.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// redlockBinary returns the path of the redlock binary, built from this
// package. Under -race the binary is built with -race too, so that the
// tests that run it also check its own goroutines.
func redlockBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "redlock-cli-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "redlock")
		args := []string{"build", "-o", binPath, "-ldflags", "-X main.version=" + testVersion}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command(goTool(), append(args, ".")...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("building redlock: %v", binErr)
	}
	return binPath
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	// The toolchain that runs the tests, when go is not on PATH.
	return filepath.Join(build.Default.GOROOT, "bin", "go")
}

// removeBinary removes what redlockBinary built.
func removeBinary() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// cleanEnv is the test's environment without REDLOCK_ variables, so that
// a developer's REDLOCK_NODES cannot leak into the runs.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLOCK_") {
			env = append(env, kv)
		}
	}
	return env
}

// proc is one run of the redlock binary. Its stdout and stderr go to files,
// not pipes, so that a command it leaves behind cannot hold up Wait.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	stdout  string // file paths
	stderr  string
	done    chan struct{} // closed once the process is reaped
}

// startRedlock starts the binary with args and env added to a clean
// environment. A cleanup kills it if the test did not wait for it.
func startRedlock(t *testing.T, env []string, args ...string) *proc {
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
	p.started = time.Now()
	err = p.cmd.Start()
	_ = outF.Close() // the process has its own copies
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
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to timeout for the process to exit and returns its exit
// status. The binary must not have found a data race.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("redlock %s: still running after %v; stderr:\n%s", strings.Join(p.cmd.Args[1:], " "), timeout, p.errText())
	}
	require.NotContains(t, p.errText(), "DATA RACE", "redlock %v", p.cmd.Args[1:])
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

func (p *proc) outText() string { return readFile(p.stdout) }
func (p *proc) errText() string { return readFile(p.stderr) }

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// runRedlock runs the binary to the end and returns its exit status, stdout
// and stderr.
func runRedlock(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startRedlock(t, env, args...)
	code = p.wait(t, 30*time.Second)
	return code, p.outText(), p.errText()
}

// behindProxies puts a fault proxy in front of each server: it returns the
// proxies, the nodes' URLs through them (for --nodes), and a go-redis
// client to each server directly, as a second client that the proxies do
// not cut off.
func behindProxies(t *testing.T, servers []*redistest.Server) ([]*faultproxy.Proxy, []string, []redis.UniversalClient) {
	t.Helper()
	proxies := make([]*faultproxy.Proxy, len(servers))
	urls := make([]string, len(servers))
	direct := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		p, err := faultproxy.New(s.Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies[i], urls[i] = p, "redis://"+p.Addr()
		direct[i] = s.NewClient(t)
	}
	return proxies, urls, direct
}

// startNodes starts n redis-servers and returns them with their URL list.
func startNodes(t *testing.T, n int) ([]*redistest.Server, string) {
	t.Helper()
	servers := redistest.StartN(t, n, redistest.Options{})
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
	}
	return servers, strings.Join(urls, ",")
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fileHas reports whether the file at path contains s.
func fileHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(s))
}

// holder is a redlock run whose command holds the lock until release.
type holder struct {
	p     *proc
	token string
	stop  string // the command exits once this file exists
}

// holdKey starts redlock run on key with a command that writes its
// REDLOCK_TOKEN and then waits until release is called.
func holdKey(t *testing.T, nodes, key string, extra ...string) *holder {
	t.Helper()
	dir := t.TempDir()
	tokenFile, stop := filepath.Join(dir, "token"), filepath.Join(dir, "stop")
	args := append([]string{"run", "--nodes", nodes, "--key", key}, extra...)
	args = append(args, "--", "sh", "-c",
		`echo "$REDLOCK_TOKEN" > "$TOKEN.tmp" && mv "$TOKEN.tmp" "$TOKEN"; while [ ! -e "$STOP" ]; do sleep 0.02; done`)
	p := startRedlock(t, []string{"TOKEN=" + tokenFile, "STOP=" + stop}, args...)
	h := &holder{p: p, stop: stop}
	eventually(t, 10*time.Second, "holder acquired "+key, func() bool {
		select {
		case <-p.done:
			t.Fatalf("holder exited early with %d; stderr:\n%s", p.cmd.ProcessState.ExitCode(), p.errText())
		default:
		}
		b, err := os.ReadFile(tokenFile)
		h.token = strings.TrimSpace(string(b))
		return err == nil && h.token != ""
	})
	return h
}

// release makes the holder's command exit 0 and returns the holder's exit
// status.
func (h *holder) release(t *testing.T) int {
	t.Helper()
	require.NoError(t, os.WriteFile(h.stop, nil, 0o644))
	return h.p.wait(t, 10*time.Second)
}

// locker is a redlock lock without a command: it holds the lock until it
// gets a signal.
type locker struct {
	p    *proc
	vars map[string]string // what it printed: REDLOCK_KEY, REDLOCK_TOKEN...
}

// startLock starts redlock lock on key without a command and waits until it
// has printed the lock.
func startLock(t *testing.T, nodes, key string, extra ...string) *locker {
	t.Helper()
	args := append([]string{"lock", "--nodes", nodes, "--key", key}, extra...)
	p := startRedlock(t, nil, args...)
	l := &locker{p: p}
	eventually(t, 10*time.Second, "lock acquired "+key, func() bool {
		select {
		case <-p.done:
			t.Fatalf("lock exited early with %d; stderr:\n%s", p.cmd.ProcessState.ExitCode(), p.errText())
		default:
		}
		out := p.outText()
		if !strings.HasSuffix(out, "\n") || !strings.Contains(out, "REDLOCK_TOKEN=") {
			return false
		}
		l.vars = parseShellVars(t, out)
		return true
	})
	return l
}

// token is the token the locker printed.
func (l *locker) token() string { return l.vars["REDLOCK_TOKEN"] }

// stop sends sig and returns the exit status.
func (l *locker) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	l.p.signal(t, sig)
	return l.p.wait(t, 10*time.Second)
}

// parseShellVars parses the NAME=value lines that lock prints, undoing
// shellQuote.
func parseShellVars(t *testing.T, out string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for line := range strings.Lines(out) {
		name, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		require.True(t, ok, "line %q: want NAME=value", line)
		if strings.HasPrefix(v, "'") {
			require.True(t, strings.HasSuffix(v, "'") && len(v) >= 2, "line %q: unterminated quote", line)
			v = strings.ReplaceAll(v[1:len(v)-1], `'\''`, "'")
		}
		vars[name] = v
	}
	return vars
}

// label is the label redlock gives a lock by default: host:pid.
func label(t *testing.T, pid int) string {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	return host + ":" + strconv.Itoa(pid)
}
