// Package redistest runs real redis-server processes for tests and injects
// faults into them: kill, pause, resume, restart with or without the data.
//
// Every server listens on its own free port on 127.0.0.1, keeps its files in a
// directory from tb.TempDir, and is killed and reaped by a tb.Cleanup, so no
// process or goroutine outlives the test. The binary comes from the
// REDIS_SERVER environment variable, or else from PATH. When it is missing the
// tests are skipped, unless the CI environment variable is set, in which case
// they fail.
//
// The package needs a Unix system: faults are POSIX signals.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a started server may take to answer PING.
	readyTimeout = 5 * time.Second
	// startAttempts is how many fresh ports Start tries when redis-server
	// exits at once, which is what it does when another process took the
	// port between our probe and its bind.
	startAttempts = 5
	// restartAttempts is how many times Restart tries the same port.
	restartAttempts = 10
	// restartBackoff is the pause between two Restart attempts.
	restartBackoff = 50 * time.Millisecond
	// logTailLines is how much of the server's log a failure message shows.
	logTailLines = 20
)

// errExited reports that redis-server exited before it answered PING.
var errExited = errors.New("redistest: redis-server exited before it was ready")

// Options configures the servers that Start and StartN run. The zero value
// runs a server without persistence.
type Options struct {
	// Persistence turns on the append-only file with appendfsync always,
	// so every acknowledged write survives a kill -9 and Restart.
	Persistence bool
	// Args are extra redis-server arguments, such as "--maxmemory", "1mb".
	// They come after the defaults, so they override them.
	Args []string
	// Config, when set, is written to a config file in the server's
	// directory, which redis-server reads first; the arguments override
	// it. A Sentinel needs one, which it rewrites: Config holds its
	// "sentinel monitor ..." lines, and Args "--sentinel".
	Config string
}

// Server is one redis-server process on a fixed 127.0.0.1 port. Obtain one
// from Start or StartN; the zero value is not usable. A Server is safe for
// concurrent use and must not be copied.
//
// Restart and RestartEmpty call Fatalf on the tb given to Start when the
// server does not come back, so call them from that test's goroutine.
type Server struct {
	tb   testing.TB
	bin  string
	opts Options
	log  string // log file path; it outlives RestartEmpty
	data string // redis-server --dir; RestartEmpty deletes its contents
	conf string // the config file, when Options.Config is set
	port int    // set once by Start, before the Server is shared

	mu     sync.Mutex
	cmd    *exec.Cmd     // guarded by mu; nil until the first launch
	done   chan struct{} // guarded by mu; closed once cmd has been reaped
	paused bool          // guarded by mu; true after Pause until Resume or exit
}

// Available reports whether a redis-server binary can be found. The
// REDIS_SERVER environment variable, when set, names the binary; otherwise
// redis-server is looked up in PATH.
func Available() bool {
	_, err := lookPath()
	return err == nil
}

// Require skips tb when no redis-server binary can be found. When the CI
// environment variable is non-empty it calls tb.Fatalf instead, so that a CI
// job without Redis fails rather than passing with every real-Redis test
// skipped. With go test -short it skips tb, CI or not, unless the test
// called Smoke.
func Require(tb testing.TB) {
	tb.Helper()
	binary(tb)
}

// smoke holds the names of the top-level tests that run real servers
// even with -short (see Smoke).
var smoke sync.Map

// Smoke marks tb's test as a smoke test: one that runs its real servers
// even in the fast tier (go test -short), where every other real-server test
// is skipped. Call it before Require or Start.
func Smoke(tb testing.TB) {
	smoke.Store(topLevel(tb.Name()), true)
}

// topLevel returns the name of the top-level test of a (sub)test name.
func topLevel(name string) string {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return name
}

// binary returns the redis-server path, or skips or fails tb as Require
// documents and returns "". With -short it skips tb unless its test is a
// smoke test: the fast tier runs miniredis and one real-server smoke test,
// and make test runs them all.
func binary(tb testing.TB) string {
	tb.Helper()
	bin, err := lookPath()
	if _, ok := smoke.Load(topLevel(tb.Name())); err == nil && testing.Short() && !ok {
		tb.Skip("-short: real-server tests run in the full suite (make test)")
		return ""
	}
	if err == nil {
		return bin
	}
	const msg = "redis-server not found: install it (apt-get install -y redis-server) or set REDIS_SERVER"
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s; CI is set, so real-Redis tests must not be skipped (%v)", msg, err)
		return ""
	}
	tb.Skip(msg + "; skipping real-Redis test")
	return ""
}

func lookPath() (string, error) {
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return exec.LookPath(bin)
	}
	return exec.LookPath("redis-server")
}

// Start starts one redis-server on a free 127.0.0.1 port, in a directory of
// its own from tb.TempDir, and returns once it answers PING. It calls Require
// first. A tb.Cleanup kills the server, resuming it first if it is paused,
// and reaps the process.
//
// On failure Start calls tb.Fatalf with the tail of the server's log.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	servers := StartN(tb, 1, opts)
	if len(servers) == 0 {
		return nil // Only reached with a tb whose Skip or Fatalf returns.
	}
	return servers[0]
}

// StartN starts n servers as Start does, all at once, and returns when every
// one of them answers PING.
//
// On failure StartN calls tb.Fatalf naming every server that did not start;
// the ones that did are killed by the cleanup.
func StartN(tb testing.TB, n int, opts Options) []*Server {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("redistest: StartN needs at least one server, got %d", n)
		return nil
	}
	bin := binary(tb)
	if bin == "" {
		return nil
	}
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = newServer(tb, bin, opts)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.boot() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("%v", err)
	}
	return servers
}

func newServer(tb testing.TB, bin string, opts Options) *Server {
	tb.Helper()
	dir := tb.TempDir()
	s := &Server{
		tb:   tb,
		bin:  bin,
		opts: Options{Persistence: opts.Persistence, Args: append([]string(nil), opts.Args...), Config: opts.Config},
		log:  filepath.Join(dir, "redis.log"),
		data: filepath.Join(dir, "data"),
	}
	if err := os.Mkdir(s.data, 0o755); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if opts.Config != "" {
		s.conf = filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(s.conf, []byte(opts.Config), 0o644); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
	}
	// Registered after TempDir, so it runs first: the process is gone
	// before its directory is removed.
	tb.Cleanup(s.Kill)
	return s
}

// boot picks a free port and launches the server on it. It retries with a
// new port when the server exits at once, which is how a lost port race looks.
func (s *Server) boot() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range startAttempts {
		s.port, err = freePort()
		if err != nil {
			return err
		}
		if err = s.launch(); !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

// relaunch starts the server again on its port. The port may be briefly
// taken, so it retries; TIME_WAIT is no obstacle, as redis sets SO_REUSEADDR.
// s.mu must be held and the process must not be running.
func (s *Server) relaunch() error {
	var err error
	for i := range restartAttempts {
		if i > 0 {
			time.Sleep(restartBackoff)
		}
		if err = s.launch(); !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	return port, nil
}

func (s *Server) args() []string {
	appendonly := "no"
	if s.opts.Persistence {
		appendonly = "yes"
	}
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", appendonly,
		"--dir", s.data,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
	)
	if s.opts.Persistence {
		args = append(args, "--appendfsync", "always")
	}
	return append(args, s.opts.Args...)
}

// launch starts one redis-server process and waits until it answers PING.
// On failure the process is killed and reaped, and the error carries the tail
// of the log. s.mu must be held.
func (s *Server) launch() error {
	// The log file is the child's stdout and stderr, so it also catches
	// errors redis prints before it has parsed its arguments.
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	// Failure messages show only this launch's part of the log.
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.data
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = logf.Close() // The child holds its own descriptor.
	if err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.paused = cmd, done, false

	if err := waitReady(s.Addr(), cmd.Process.Pid, done); err != nil {
		s.killLocked()
		return fmt.Errorf("%w: %s\nlast lines of %s:\n%s", err, cmd.ProcessState, s.log, s.logTail(logStart))
	}
	return nil
}

// waitReady polls addr until the redis-server with the given pid answers
// PING, the process exits, or readyTimeout passes.
func waitReady(addr string, pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := probe(addr, pid)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %w", addr, readyTimeout, err)
		}
		select {
		case <-done:
			return fmt.Errorf("%w on %s", errExited, addr)
		case <-tick.C:
		}
	}
}

// probe sends PING and INFO server over a raw connection. It succeeds only on
// PONG from the process with the given pid: after a lost port race, another
// test's server may be the one answering on addr.
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("redistest: PING answered %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "$"))
	if err != nil || !strings.HasPrefix(line, "$") {
		return fmt.Errorf("redistest: INFO answered %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !bytes.Contains(info, []byte(want)) {
		return fmt.Errorf("redistest: %s is served by another process, not pid %d", addr, pid)
	}
	return nil
}

// logTail returns the last lines the log gained after offset from.
func (s *Server) logTail(from int64) string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	if from <= int64(len(b)) {
		b = b[from:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across restarts.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Running reports whether the process is alive, paused or not. It is false
// after Kill and after the process exits by itself.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Paused reports whether the process is alive and stopped by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused && s.runningLocked()
}

// Kill sends SIGKILL and returns once the process has been reaped. Writes
// that were acknowledged survive only with Options.Persistence. Kill does
// nothing when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if !s.runningLocked() {
		s.paused = false
		return
	}
	if s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
	// An error means the process is already gone; done closes either way.
	_ = s.cmd.Process.Kill()
	<-s.done
	s.paused = false
}

// Pause stops the process with SIGSTOP and, on Linux, returns once it has
// stopped. The kernel still accepts connections to a paused server, but
// nothing answers them: clients see timeouts, not refusals. Pause does
// nothing when the server is not running.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return // It exited meanwhile; Running reports that.
	}
	s.paused = true
	waitStopped(s.cmd.Process.Pid, s.done)
}

// Resume continues a paused process with SIGCONT. Requests that clients sent
// while it was paused are then answered, perhaps after they gave up. Resume
// does nothing when the server is not running.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	s.paused = false
}

// Restart kills the server if it is running and starts it again on the same
// port and directory. It keeps the data only with Options.Persistence;
// without it the server comes back empty.
//
// On failure Restart calls Fatalf on the tb given to Start, with the tail of
// the server's log, and leaves the server not running.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	if err := s.relaunch(); err != nil {
		s.tb.Fatalf("%v", err)
	}
}

// RestartEmpty kills the server if it is running, deletes its data files and
// starts it again on the same port. It models a crash that lost every write
// not yet fsynced, even with Options.Persistence.
//
// On failure RestartEmpty calls Fatalf on the tb given to Start and leaves
// the server not running.
func (s *Server) RestartEmpty() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	if err := os.RemoveAll(s.data); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	if err := os.Mkdir(s.data, 0o755); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	if err := s.relaunch(); err != nil {
		s.tb.Fatalf("%v", err)
	}
}

// NewClient returns a go-redis client for the server with default options
// apart from Addr, because that is what users hand to the library. A
// tb.Cleanup closes it. The client keeps working across restarts, as the
// address does not change.
func (s *Server) NewClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
