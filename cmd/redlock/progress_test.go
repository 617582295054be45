//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// reportWithin bounds the first report of an outage in these tests: run
// makes it within 5s of the wait's start; a loaded machine gets 3s more,
// but not the 30s of the next report.
const reportWithin = 8 * time.Second

// waitForReport waits until p's stderr has a line that contains want, and
// returns that line. It fails if p exits first, or the line does not come
// within reportWithin of p's start.
func waitForReport(t *testing.T, p *proc, want string) string {
	t.Helper()
	for {
		for line := range strings.Lines(p.errText()) {
			if strings.Contains(line, want) {
				return strings.TrimSuffix(line, "\n")
			}
		}
		select {
		case <-p.done:
			t.Fatalf("redlock exited %d before reporting %q; stderr:\n%s", p.cmd.ProcessState.ExitCode(), want, p.errText())
		default:
		}
		if time.Since(p.started) > reportWithin {
			t.Fatalf("no %q within %v; stderr:\n%s", want, reportWithin, p.errText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requirePass makes every server refuse clients without the password.
// redistest's readiness probe sends no password, so it is set once the
// servers are up.
func requirePass(t *testing.T, servers []*redistest.Server, password string) {
	t.Helper()
	for _, s := range servers {
		require.NoError(t, s.NewClient(t).ConfigSet(t.Context(), "requirepass", password).Err())
	}
}

// nodeURLs is the node list of servers, with user and password when given,
// and a path (a database: "/99") when given.
func nodeURLs(servers []*redistest.Server, userinfo, path string) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + userinfo + s.Addr() + path
	}
	return strings.Join(urls, ",")
}

// Every node down, refusing connections: run says so within 5s, naming
// each node and what happened to it, while it goes on waiting; a signal
// names them too; with -wait, it exits 69 and says why.
func TestRunReportsNodesDown(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, s := range servers {
		s.Kill()
	}

	p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "down", "--", "true")
	line := waitForReport(t, p, `waiting for "down"`)
	require.Contains(t, line, "nodes unavailable (quorum 2)", "report: got %q", line)
	require.Contains(t, line, "connection refused", "report: got %q", line)
	require.Regexp(t, `^redlock run: waiting for "down" \(\d+s so far\): [23] of 3 nodes unavailable`, line)
	p.signal(t, syscall.SIGTERM)
	code := p.wait(t, 10*time.Second)
	require.Equal(t, 128+int(syscall.SIGTERM), code, "SIGTERM: exit status: got %d; stderr:\n%s", code, p.errText())
	require.Contains(t, p.errText(), `SIGTERM while waiting for "down" (`, "SIGTERM names the nodes")
	require.Equal(t, 1, strings.Count(p.errText(), `: waiting for "down" (`), "one report before the next 30s; stderr:\n%s", p.errText())

	// -wait 3 ends it with 69, and names the nodes.
	start := time.Now()
	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "down", "-w", "3", "--", "true")
	require.Equal(t, exitUnavailable, code, "-w 3: exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
	require.Less(t, time.Since(start), 20*time.Second)
	require.Regexp(t, `redlock run: -wait 3s ran out: [23] of 3 nodes unavailable \(quorum 2\): node \d 127\.0\.0\.1:\d+.*: connection refused; exiting 69\n$`, stderr)
	requireOnePrefix(t, stderr)
}

// Nodes that hang under a long -node-timeout end no attempt within 5s:
// run says so all the same.
func TestRunReportsHungNodes(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	servers[1].Pause()
	servers[2].Pause()
	p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "hung", "--ttl", "2m", "--node-timeout", "20s", "--", "true")
	line := waitForReport(t, p, `waiting for "hung"`)
	require.Contains(t, line, "no attempt has ended yet", "report: got %q", line)
	p.signal(t, syscall.SIGTERM)
	code := p.wait(t, 30*time.Second)
	require.Equal(t, 128+int(syscall.SIGTERM), code, "SIGTERM: exit status: got %d; stderr:\n%s", code, p.errText())
}

// Every node rejects the password: run says so at once, once for each
// node, as waiting will not mend it; then it reports the wait as for
// nodes down, and exits 69 when -wait runs out.
func TestRunReportsWrongPassword(t *testing.T) {
	servers, _ := startNodes(t, 3)
	requirePass(t, servers, "right")
	nodes := nodeURLs(servers, ":wrong@", "")

	p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "auth", "-w", "6", "--", "true")
	first := waitForReport(t, p, "authentication failed")
	require.Contains(t, first, "WRONGPASS")
	require.Contains(t, first, "waiting will not mend this")
	report := waitForReport(t, p, `waiting for "auth"`)
	require.Contains(t, report, "nodes unavailable (quorum 2)", "report: got %q", report)
	require.Contains(t, report, "authentication failed: WRONGPASS", "report: got %q", report)
	code := p.wait(t, 20*time.Second)
	stderr := p.errText()
	require.Equal(t, exitUnavailable, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
	require.Contains(t, stderr, "-wait 6s ran out: ")
	requireOnePrefix(t, stderr)
	// Many attempts met the wrong password; each node was reported once.
	for _, s := range servers {
		n := 0
		for line := range strings.Lines(stderr) {
			if strings.Contains(line, "waiting will not mend") && strings.Contains(line, s.Addr()+":") ||
				strings.Contains(line, "waiting will not mend") && strings.Contains(line, s.Addr()+",") {
				n++
			}
		}
		require.LessOrEqual(t, n, 1, "node %s: reported %d times; stderr:\n%s", s.Addr(), n, stderr)
	}
}

// Other misconfigurations on every node are reported at once too, by
// what they are, and are an outage: 69.
func TestRunReportsMisconfiguredNodes(t *testing.T) {
	servers, _ := startNodes(t, 3)
	for _, s := range servers {
		c := s.NewClient(t)
		// A user that may only connect.
		require.NoError(t, c.Do(t.Context(), "ACL", "SETUSER", "connectonly", "on", ">pw", "~*", "&*", "-@all", "+@connection").Err())
	}
	for _, tt := range []struct {
		name, userinfo, path, want string
	}{
		{"database out of range", "", "/99", "no such database: ERR DB index is out of range"},
		{"ACL", "connectonly:pw@", "", "denied by the ACL: NOPERM"},
		{"no password", "", "", "a password is required: NOAUTH"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "no password" {
				requirePass(t, servers, "right")
			}
			nodes := nodeURLs(servers, tt.userinfo, tt.path)
			code, _, stderr := runRedlock(t, nil, "lock", "--nodes", nodes, "--key", "misconfigured", "-w", "1")
			require.Equal(t, exitUnavailable, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
			require.Regexp(t, `(?m)^redlock lock: node \d 127\.0\.0\.1:\d+.*: `+regexp.QuoteMeta(tt.want)+`.* \(waiting will not mend this\)$`, stderr)
			require.Regexp(t, `(?m)^redlock lock: -wait 1s ran out: [23] of 3 nodes unavailable \(quorum 2\): .*`+regexp.QuoteMeta(tt.want), stderr)
			requireOnePrefix(t, stderr)
		})
	}
}

// A minority of nodes down: run acquires and runs the command, without a
// word unless -v, which names the down node.
func TestRunMinorityDown(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	servers[2].Kill()

	code, stdout, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "minority", "--", "echo", "ran")
	require.Equal(t, 0, code, "exit status: got %d, want 0; stderr:\n%s", code, stderr)
	require.Equal(t, "ran\n", stdout)
	require.Empty(t, stderr)

	code, stdout, stderr = runRedlock(t, nil, "run", "-v", "--nodes", nodes, "--key", "minority", "--", "echo", "ran")
	require.Equal(t, 0, code, "-v: exit status: got %d, want 0; stderr:\n%s", code, stderr)
	require.Equal(t, "ran\n", stdout)
	// The down node's refusal comes before the others' yes: nothing but a
	// round trip to a live node could make it late.
	require.Regexp(t, `(?m)^redlock run: acquired "minority" after .*: 2 of 3 nodes \(quorum 2\), .*; node 2 `+regexp.QuoteMeta(servers[2].Addr())+`: connection refused$`, stderr)
	require.NotContains(t, stderr, "waiting for")
	requireOnePrefix(t, stderr)
}

// A key held by another run is no outage: the wait stays quiet, longer
// than the first report of an outage would take, and exits 75; -v says
// that it waits for a holder.
func TestRunConflictQuiet(t *testing.T) {
	_, nodes := startNodes(t, 3)
	h := holdKey(t, nodes, "held")

	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "-w", "1", "--", "true")
	require.Equal(t, exitNotAcquired, code, "-w 1: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Regexp(t, `^redlock run: -wait 1s ran out: not acquired: lock "held": .*; exiting 75\n$`, stderr)

	code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "held", "-w", "5", "--", "true")
	require.Equal(t, exitNotAcquired, code, "-w 5: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "-w 5: only the final message; stderr:\n%s", stderr)
	require.NotContains(t, stderr, "unavailable")

	code, _, stderr = runRedlock(t, nil, "run", "-v", "--nodes", nodes, "--key", "held", "-w", "5", "--", "true")
	require.Equal(t, exitNotAcquired, code, "-v -w 5: exit status: got %d, want %d; stderr:\n%s", code, exitNotAcquired, stderr)
	require.Regexp(t, `(?m)^redlock run: waiting for "held" \(\d+s so far\): it is held elsewhere: not acquired: `, stderr)
	require.NotContains(t, stderr, "unavailable")
	requireOnePrefix(t, stderr)

	require.Equal(t, 0, h.release(t), "holder: stderr:\n%s", h.p.errText())
}

// Nodes that come back end the outage: run says so, in one line, and
// runs the command.
func TestRunNodesRecover(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, s := range servers {
		s.Kill()
	}
	p := startRedlock(t, nil, "run", "--nodes", nodes, "--key", "recover", "--", "echo", "ran")
	waitForReport(t, p, `waiting for "recover"`)
	for _, s := range servers {
		s.Restart()
	}
	code := p.wait(t, 20*time.Second)
	require.Equal(t, 0, code, "exit status: got %d, want 0; stderr:\n%s", code, p.errText())
	require.Equal(t, "ran\n", p.outText())
	require.Regexp(t, `(?m)^redlock run: acquired "recover" after .*, once the nodes answered again$`, p.errText())
}

// The report repeats, every reportEvery, for as long as the outage lasts,
// and not more often. The intervals are shortened in this process, so lock
// runs here rather than as the built binary.
func TestRunReportRepeats(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, s := range servers {
		s.Kill()
	}
	defer func(f, e, p time.Duration) { firstReport, reportEvery, reportPoll = f, e, p }(firstReport, reportEvery, reportPoll)
	firstReport, reportEvery, reportPoll = 100*time.Millisecond, 500*time.Millisecond, 10*time.Millisecond

	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := lockCommand(t.Context(), []string{"--nodes", nodes, "--key", "repeat", "-w", "2.2"}, &stdout, &stderr)
	elapsed := time.Since(start)
	require.Equal(t, exitUnavailable, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr.String())
	reports := strings.Count(stderr.String(), `: waiting for "repeat" (`)
	// At 0.1s, 0.6s, 1.1s, 1.6s and 2.1s on an idle machine; fewer on a
	// loaded one, never more than the intervals allow.
	most := 1 + int((elapsed-firstReport)/reportEvery)
	require.GreaterOrEqual(t, reports, 2, "reports: got %d, want at least 2; stderr:\n%s", reports, stderr.String())
	require.LessOrEqual(t, reports, most, "reports: got %d in %v, want at most %d; stderr:\n%s", reports, elapsed, most, stderr.String())
}

// requireOnePrefix checks that no message repeats the prefix: "redlock
// run: redlock: ..." embeds a library error as it is.
func requireOnePrefix(t *testing.T, stderr string) {
	t.Helper()
	require.NotRegexp(t, `redlock: `, stderr, "a library error embedded with its prefix")
}

// redisErr is a Redis error reply, as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// The classifier names each failure by what it is, and tells the lasting
// ones, which waiting will not mend, from the passing ones.
func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tt := range []struct {
		err     error
		kind    faultKind
		text    string
		lasting bool
	}{
		{redisErr("WRONGPASS invalid username-password pair or user is disabled."), faultAuth, "authentication failed: WRONGPASS invalid username-password pair or user is disabled", true},
		{fmt.Errorf("hello: %w", redisErr("NOAUTH Authentication required.")), faultAuth, "a password is required: NOAUTH Authentication required", true},
		{redisErr("ERR invalid password"), faultAuth, "authentication failed: ERR invalid password", true},
		{redisErr("NOPERM User u has no permissions to run the 'evalsha' command"), faultACL, "denied by the ACL: NOPERM User u has no permissions to run the 'evalsha' command", true},
		{redisErr("ERR DB index is out of range"), faultDB, "no such database: ERR DB index is out of range", true},
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nosuch.invalid", IsNotFound: true}}, faultHost, "no such host nosuch.invalid", true},
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "server misbehaving", Name: "flaky.example", IsTemporary: true}}, faultOther, "dial: lookup flaky.example: server misbehaving", false},
		{refused, faultRefused, "connection refused", false},
		{&redlock.NodeError{Index: 1, Addr: "a:1", Err: refused}, faultRefused, "connection refused", false},
		{fmt.Errorf("%w (read tcp: i/o timeout)", redlock.ErrNodeTimeout), faultTimeout, "no answer within the node timeout (read tcp: i/o timeout)", false},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, faultOther, "connection reset by peer", false},
		{io.EOF, faultOther, "connection closed by the server", false},
		{redlock.ErrQuarantined, faultOther, "node quarantined by the guard", false},
		{errors.New("something else"), faultOther, "something else", false},
	} {
		f := classify(tt.err)
		require.Equal(t, tt.kind, f.kind, "%v: kind: got %d, want %d", tt.err, f.kind, tt.kind)
		require.Equal(t, tt.text, f.text, "%v: text", tt.err)
		require.Equal(t, tt.lasting, f.lasting(), "%v: lasting", tt.err)
	}
}

// Nodes that failed alike are named together, in the order of the first.
func TestDescribeNodes(t *testing.T) {
	got := describeNodes([]nodeNote{{0, "a:1", "connection refused"}, {1, "b:2", "timed out"}, {2, "c:3", "connection refused"}})
	want := "node 0 a:1, node 2 c:3: connection refused; node 1 b:2: timed out"
	require.Equal(t, want, got)
	require.Empty(t, describeNodes(nil))
}

// A loss is said once: "lock "k" lost: validity ended...", not "lost:
// redlock: lock lost: validity ended...".
func TestLossReason(t *testing.T) {
	err := fmt.Errorf("%w: validity ended before a renewal succeeded", redlock.ErrLockLost)
	require.Equal(t, "validity ended before a renewal succeeded", lossReason(err))
	require.Equal(t, "not held", lossReason(redlock.ErrNotHeld))
}

// A minority of nodes with a wrong password leaves the lock working, and run
// exits with the command's status; but it says which node refuses the
// password, and why, at once and once: the node may answer only after the
// round was decided, which the library's logger still reports.
func TestRunReportsMisconfiguredMinority(t *testing.T) {
	servers, _ := startNodes(t, 5)
	requirePass(t, servers[:1], "right")
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
	}
	// Slow, so that the round is decided before its refusal comes: only
	// the library's logger hears of it then.
	px, err := faultproxy.New(servers[0].Addr(), 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	px.SetLatency(300*time.Millisecond, 0)
	urls[0] = "redis://:wrong@" + px.Addr()
	nodes := strings.Join(urls, ",")
	code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "minority-misconfigured", "--", "sh", "-c", "sleep 0.5; exit 3")
	require.Equal(t, 3, code, "stderr:\n%s", stderr)
	require.Contains(t, stderr, "node 0 "+px.Addr()+": authentication failed: WRONGPASS")
	require.Equal(t, 1, strings.Count(stderr, "WRONGPASS"), "once per node and kind; stderr:\n%s", stderr)
}
