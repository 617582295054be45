//go:build linux

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/faultproxy"
)

// The same node given twice is refused by New in every command. Run says
// so in one prefix; status, check and release embed the library's error
// with its own "redlock: ", as the issue's "redlock run: redlock: invalid
// option" did.
func TestSameNodeTwiceHasOnePrefix(t *testing.T) {
	servers, _ := startNodes(t, 2)
	a, b := "redis://"+servers[0].Addr(), "redis://"+servers[1].Addr()
	nodes := strings.Join([]string{a, a, b}, ",")
	for _, args := range [][]string{
		{"run", "--nodes", nodes, "--key", "twice", "--", "true"},
		{"status", "--nodes", nodes, "--key", "twice"},
		{"check", "--nodes", nodes},
		{"release", "--nodes", nodes, "--key", "twice", "--token", "t"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, _, stderr := runRedlock(t, nil, args...)
			require.Equal(t, exitUsage, code, "stderr:\n%s", stderr)
			require.Contains(t, stderr, "same server")
			requireOnePrefix(t, stderr)
		})
	}
}

// When renewals fail and the command ignores SIGTERM, run sends SIGKILL at
// Until: to the command's group, or to the command alone with -foreground.
// What the command started outside that reach (a child in run's group with
// -foreground; a job that left with setsid) is killed only once the
// supervisor has reaped the command, told run, and heard back from it: after
// Until. A client that reaches the nodes takes the key as soon as it expires
// there, a clock-drift allowance after Until (5ms for a 300ms TTL, 12ms for
// 1s): the job must be gone by then. The job in the command's group, which
// run's own SIGKILL reaches at Until, is the control.
func TestTreeOutsideTheGroupIsGoneByUntil(t *testing.T) {
	requireProc(t)
	for _, tt := range []struct {
		name  string
		flags []string
		job   string // starts the job that ignores SIGTERM, and writes its pid
	}{
		{"group job", nil, `(trap '' TERM; exec sleep 60) & echo $! > "$PIDFILE"`},
		{"-foreground child", []string{"--foreground"}, `(trap '' TERM; exec sleep 60) & echo $! > "$PIDFILE"`},
		{"setsid job", nil, `setsid sh -c 'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 60' &`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers, _ := startNodes(t, 3)
			proxies, urls, direct := behindProxies(t, servers)
			// -grace 200ms puts the SIGKILL 50ms before Until (see
			// supervise.go), the most it gives: a setsid job is killed by
			// the supervisor, which a loaded machine may be slow to run
			// (a lead of 25ms, with -grace 100ms, was missed once in five
			// CI runs).
			const ttl, grace = 600 * time.Millisecond, 200 * time.Millisecond
			pidFile := filepath.Join(t.TempDir(), "pid")
			args := append([]string{"run", "--nodes", strings.Join(urls, ","), "--key", "outside", "--ttl", ttl.String(), "--grace", grace.String()}, tt.flags...)
			args = append(args, "--", "sh", "-c", "trap '' TERM\n"+tt.job+"\nwhile :; do sleep 0.02; done")
			p := startRedlock(t, []string{"PIDFILE=" + pidFile}, args...)
			job := readPID(t, pidFile)
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
				l, err := other.TryLock(ctx, "outside", redlock.WithTTL(10*time.Second))
				cancel()
				if err != nil {
					continue
				}
				alive := !processGone(job)
				_ = l.Unlock(context.Background())
				require.False(t, alive, "the command's job still ran when another client held the lock; run's stderr:\n%s", p.errText())
				break
			}
			code := p.wait(t, 15*time.Second)
			require.Equal(t, exitLockLost, code, "stderr:\n%s", p.errText())
		})
	}
}

// When renewals fail and the command ignores SIGTERM, run sends SIGKILL at
// Until, and the library declares the lock lost at about the same moment.
// Whichever comes second, run must not announce a SIGTERM and a new SIGKILL
// deadline -grace later once it has sent SIGKILL: the command is being
// killed already, and past Until there is no grace to give.
func TestNoSecondStopAfterSIGKILL(t *testing.T) {
	servers, _ := startNodes(t, 3)
	proxies, urls, _ := behindProxies(t, servers)
	started := filepath.Join(t.TempDir(), "started")
	p := startRedlock(t, []string{"STARTED=" + started},
		"run", "--nodes", strings.Join(urls, ","), "--key", "second-stop", "--ttl", "1", "--grace", "0.3", "--",
		"sh", "-c", `trap '' TERM; echo > "$STARTED"; while :; do sleep 0.02; done`)
	eventually(t, 10*time.Second, "command started", func() bool { return fileHas(started, "\n") })
	for _, px := range proxies {
		px.SetMode(faultproxy.Blackhole)
	}
	code := p.wait(t, 15*time.Second)
	stderr := p.errText()
	require.Equal(t, exitLockLost, code, "stderr:\n%s", stderr)
	_, after, found := strings.Cut(stderr, "; sending SIGKILL\n")
	require.True(t, found, "stderr:\n%s", stderr)
	require.NotContains(t, after, "sending SIGTERM", "a SIGTERM and a new deadline announced after SIGKILL; stderr:\n%s", stderr)
}

// Hung nodes (paused, or a partition that swallows packets): run -no-wait
// gives up after one attempt and says "exiting 69", and release gives up
// after -node-timeout; each must then exit, not sit for seconds more.
// go-redis's own dial and read timeouts (5s and 3s), not -node-timeout,
// bound the requests left in flight, and the Client's Close waits for them:
// "run -no-wait" takes 6s, "run -wait 2" 7s, a SIGTERM during the wait 4s,
// "release -node-timeout 0.2" 5s.
func TestExitSoonAfterSayingSoWithHungNodes(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, s := range servers {
		s.Pause()
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Resume()
		}
	})
	for _, args := range [][]string{
		{"run", "--nodes", nodes, "--key", "hung-exit", "-n", "--node-timeout", "0.2", "--", "true"},
		{"release", "--nodes", nodes, "--key", "hung-exit", "--token", "t", "--node-timeout", "0.2"},
	} {
		t.Run(args[0], func(t *testing.T) {
			p := startRedlock(t, nil, args...)
			var said time.Time
			eventually(t, 15*time.Second, "the exit message", func() bool {
				if strings.Contains(p.errText(), "exiting 69") {
					said = time.Now()
					return true
				}
				return false
			})
			code := p.wait(t, 30*time.Second)
			require.Equal(t, exitUnavailable, code, "stderr:\n%s", p.errText())
			require.Less(t, time.Since(said), 3*time.Second, "it said it was exiting, then took this long to exit; stderr:\n%s", p.errText())
		})
	}
}

// A negative database number is malformed, but go-redis takes it, and
// selects no database for it: "redis://A/-1" is DB 0 of A, under another
// name. New's check for the same server given twice compares the DB
// numbers, 0 and -1, and lets it through, so one server counts twice: with
// the third node down, run "acquires" a 2-of-3 quorum on one server.
func TestNegativeDBIsAUsageError(t *testing.T) {
	servers, _ := startNodes(t, 2)
	servers[1].Kill()
	a, c := "redis://"+servers[0].Addr(), "redis://"+servers[1].Addr()
	for _, nodes := range []string{
		strings.Join([]string{a, a + "/-1", c}, ","),
		strings.Join([]string{a, "unix:///tmp/redlock-none.sock?db=-2", c}, ","),
	} {
		code, _, stderr := runRedlock(t, nil, "run", "-v", "-w", "3", "--nodes", nodes, "--key", "negative-db", "--", "true")
		require.Equal(t, exitUsage, code, "--nodes %s: stderr:\n%s", nodes, stderr)
		require.Contains(t, stderr, "bad node URL", "stderr:\n%s", stderr)
	}
}

// A password with a character that ends a URL's authority ('/', '?' or
// '#': common in generated, base64 passwords) makes the URL malformed. The
// message masks the password in the URL it shows, but then quotes the
// parser's error, which holds the password up to that character: "invalid
// port \":hunter2\" after host". Stderr goes to CI logs and mail.
func TestMalformedURLDoesNotLeakThePassword(t *testing.T) {
	for _, bad := range []string{
		"redis://u:hunter2/x@h:6379",
		"u:hunter2/Xy+z=@h:6379",
		"rediss://default:hunter2?w@h:6380",
		"redis://:hunter2#x@h",
		"redis://u:12345/hunter2@h",
	} {
		for _, args := range [][]string{{"run", "--key", "k", "--", "true"}, {"status", "--key", "k"}} {
			cmd := args[0]
			args = append([]string{cmd, "--nodes", "127.0.0.1:1," + bad + ",127.0.0.1:2"}, args[1:]...)
			code, _, stderr := runRedlock(t, nil, args...)
			require.Equal(t, exitUsage, code, "%s %s: stderr:\n%s", cmd, bad, stderr)
			require.Contains(t, stderr, "bad node URL", "%s %s: stderr:\n%s", cmd, bad, stderr)
			require.NotContains(t, stderr, "hunter2", "%s %s: the password leaked", cmd, bad)
			require.NotContains(t, stderr, "12345", "%s %s: the password leaked", cmd, bad)
		}
	}
}

// A semaphore of 2 permits on 3 nodes needs every node: with one down, no
// permit can be had, however many are free. The library's error says so
// ("a semaphore of 2 permits needs 3 of 3 nodes; only 2 answered"); run
// replaces it with its own list of failed nodes, "1 of 3 nodes unavailable
// (quorum 3)", which leaves the user wondering why one node of three stops
// everything. The issue asks: say when a semaphore's quorum needs more nodes
// than are up.
func TestSemaphoreOutageSaysWhyItNeedsMoreNodes(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	servers[2].Kill()
	for _, wait := range []string{"1", "0"} {
		code, _, stderr := runRedlock(t, nil, "run", "--nodes", nodes, "--key", "sem-outage", "--permits", "2", "-w", wait, "--", "true")
		require.Equal(t, exitUnavailable, code, "-w %s: stderr:\n%s", wait, stderr)
		require.Contains(t, stderr, "2 permits needs 3 of 3 nodes", "-w %s: stderr:\n%s", wait, stderr)
	}
}
