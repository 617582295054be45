package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestRueidisFloorReleaseIsTheLibrarys checks that the rueidis floor's copy
// of releaseplain.lua is the library's, byte for byte, so that both send
// EVALSHA with the same SHA.
func TestRueidisFloorReleaseIsTheLibrarys(t *testing.T) {
	lib, err := os.ReadFile("../scripts/releaseplain.lua")
	if err != nil {
		t.Fatalf("reading the library's script: %v", err)
	}
	if string(lib) != rueidisReleasePlainSrc {
		t.Fatal("bench/releaseplain.lua differs from the library's scripts/releaseplain.lua: copy it again (cp ../scripts/releaseplain.lua .)")
	}
}

// TestRueidisFloorLocksAndUnlocks runs the rueidis floor on five real
// redis-servers, with every pattern of nodes on which another holder already
// has the key, ten times over. Lock succeeds when at least three nodes are free, and then
// holds the key on each of them; a failed Lock leaves nothing behind, and
// neither Lock nor Unlock touches the other holder's keys. Unlock deletes
// the key wherever the floor held it.
func TestRueidisFloorLocksAndUnlocks(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.Options{})
	ctx := t.Context()
	addrs := make([]string, len(servers))
	probes := make([]*redis.Client, len(servers))
	for i, s := range servers {
		addrs[i], probes[i] = s.Addr(), s.NewClient(t)
	}
	var sent sentCounter
	f, err := newRueidisFloor(addrs, &sent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	values := func(key string) []string {
		t.Helper()
		vs := make([]string, len(probes))
		for i, p := range probes {
			v, err := p.Get(ctx, key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("GET %s on node %d: %v", key, i, err)
			}
			vs[i] = v
		}
		return vs
	}
	const other = "another holder"
	// Each pattern runs several times: a release that overtook its node's
	// SET (the floor without its ordering) shows in about one run of the
	// 32 patterns in four.
	const passes = 10
	for k := range passes << len(servers) {
		pattern := k % (1 << len(servers))
		key := fmt.Sprintf("rueidis-floor-%d", k)
		free := 0
		for i, p := range probes {
			if pattern&(1<<i) == 0 {
				free++
				continue
			}
			if err := p.Set(ctx, key, other, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		want := func(ours string) []string {
			vs := make([]string, len(servers))
			for i := range vs {
				vs[i] = ours
				if pattern&(1<<i) != 0 {
					vs[i] = other
				}
			}
			return vs
		}
		l, err := f.Lock(ctx, key)
		f.wg.Wait() // the nodes past the quorum, and a rollback
		if free < f.quorum {
			if !errors.Is(err, errFloorNotAcquired) {
				t.Fatalf("pattern %05b (%d free): Lock got %v, want errFloorNotAcquired", pattern, free, err)
			}
			if got := values(key); !slices.Equal(got, want("")) {
				t.Fatalf("pattern %05b after a failed Lock: got %q, want %q", pattern, got, want(""))
			}
			continue
		}
		if err != nil {
			t.Fatalf("pattern %05b (%d free): Lock: %v", pattern, free, err)
		}
		if got := values(key); !slices.Equal(got, want(l.value)) {
			t.Fatalf("pattern %05b after Lock: got %q, want %q", pattern, got, want(l.value))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("pattern %05b: Unlock: %v", pattern, err)
		}
		f.wg.Wait()
		if got := values(key); !slices.Equal(got, want("")) {
			t.Fatalf("pattern %05b after Unlock: got %q, want %q", pattern, got, want(""))
		}
	}
	if n := sent.cmds.Load(); n != 0 {
		t.Fatalf("sent counter with counting off: got %d, want 0", n)
	}
}

// TestRueidisFloorSendsTheLibrarysCommands watches, with MONITOR, what an
// uncontended lock+unlock of the library and of the rueidis floor make
// each of five real redis-servers run, on the same key, and finds the same
// commands with the same arguments (the lock's value aside, and the case of
// the command names), the scripts' own commands included: SET, EVALSHA,
// and the release's GET and DEL. No EVAL shows: the floor's EVALSHA names
// the script that the library loaded.
func TestRueidisFloorSendsTheLibrarysCommands(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.Options{})
	ctx := t.Context()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	ours, err := newContender(nameOurs, addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ours.close)
	floor, err := newContender(nameRueidisFloor, addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(floor.close)
	cycle := func(c *contender, key string) {
		t.Helper()
		h, err := c.lock(ctx, key)
		if err != nil {
			t.Fatalf("%s Lock: %v", c.name, err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatalf("%s Unlock: %v", c.name, err)
		}
	}
	// The library loads the scripts; the floor dials its connections.
	// Both release on the slower nodes after Unlock returned: the watch
	// starts once every node ran them.
	cycle(ours, "warm-ours")
	cycle(floor, "warm-floor")
	for i, s := range servers {
		p := s.NewClient(t)
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := p.Exists(ctx, "warm-ours", "warm-floor").Result()
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d still holds the warm-up keys: %d, %v", i, n, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	mons := make([]*monitor, len(servers))
	for i, a := range addrs {
		mons[i] = startMonitor(t, a)
	}
	const perNode = 4 // SET, EVALSHA, GET, DEL
	watch := func(c *contender) [][]string {
		t.Helper()
		cycle(c, "same-key")
		got := make([][]string, len(mons))
		for i, m := range mons {
			got[i] = m.take(t, perNode)
		}
		return got
	}
	want := watch(ours)
	got := watch(floor)
	for i := range mons {
		if len(want[i]) != perNode || !slices.EqualFunc(want[i], got[i], strings.EqualFold) {
			t.Fatalf("node %d: the rueidis floor ran\n\t%s\nthe library ran\n\t%s\nwant the same %d commands",
				i, strings.Join(got[i], "\n\t"), strings.Join(want[i], "\n\t"), perNode)
		}
	}
}

// monitor collects the commands one redis-server runs, from MONITOR, with
// the lock's value replaced by <value> and a connection's setup and
// keep-alive commands left out.
type monitor struct {
	mu    sync.Mutex
	lines []string // guarded by mu
}

var (
	// monitorLine is a MONITOR line: +time [db source] "cmd" "arg"...
	monitorLine = regexp.MustCompile(`^\+[0-9.]+ \[[0-9]+ ([^\]]*)\] (.*)$`)
	uuidRE      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	setupCmd    = regexp.MustCompile(`(?i)^"(hello|client|ping|select|info|monitor)"`)
)

// startMonitor opens a MONITOR connection to addr; a t.Cleanup closes it
// and waits for its reader.
func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR on %s: got %q, %v", addr, ok, err)
	}
	m := &monitor{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			sm := monitorLine.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
			if sm == nil || setupCmd.MatchString(sm[2]) {
				continue
			}
			source := "client"
			if sm[1] == "lua" {
				source = "lua"
			}
			m.mu.Lock()
			m.lines = append(m.lines, source+" "+uuidRE.ReplaceAllString(sm[2], "<value>"))
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	return m
}

// take waits until the server ran at least n commands, then a while longer
// for any extra one, and returns and forgets them all.
func (m *monitor) take(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		k := len(m.lines)
		m.mu.Unlock()
		if k >= n {
			break
		}
		if time.Now().After(deadline) {
			break // the caller reports what came
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // an extra command would show by now
	m.mu.Lock()
	defer m.mu.Unlock()
	lines := m.lines
	m.lines = nil
	return lines
}
