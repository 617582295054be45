package redlock

// The kernel partition: iptables DROP rules on one node's loopback TCP port.
// The proxies' faults (chaos_fault_test.go) act on the bytes between a
// Client and a node; this one acts on the packets, for every connection to
// the port, and TCP sends again what was dropped once the rules go: the
// requests of a partition reach the node late, after their senders gave
// up, because the kernel delivers them, not a proxy. It cuts the chaos
// nodes' admin connections too, so a fault that needs them (READONLY,
// SCRIPT FLUSH, a clock jump) fails on a node while it is partitioned.

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// partitionChainPrefix begins the name of every iptables chain of a
// partitioner; the test process's pid and a count follow, so that
// partitionSweep can tell a running process's chains from those of a run
// that was killed before its cleanups ran.
const partitionChainPrefix = "REDLOCK-CHAOS-"

// partitionChains counts this process's chains, for their names.
var partitionChains atomic.Int64

// A partition is healed after a random hold in [partitionMinHold,
// partitionMaxHold]: from about one of TCP's minimum retransmission
// timeouts on loopback (200ms) to several, so that the late requests come
// after backoffs of different lengths.
const (
	partitionMinHold = 300 * time.Millisecond
	partitionMaxHold = 3 * time.Second
)

// partitionMode says which direction of a node's traffic a partition drops.
type partitionMode uint8

const (
	// partitionBoth drops every packet to or from the node's port: new
	// connections hang in their handshake, and requests and replies wait.
	partitionBoth partitionMode = iota
	// partitionRequests drops the packets to the port: the node runs
	// nothing sent meanwhile until the heal, when TCP delivers it.
	partitionRequests
	// partitionReplies drops the packets from the port: the node runs what
	// it is sent at once, and its replies arrive only after the heal. The
	// requests' senders get no ACK either, and send again; TCP hands the
	// node each byte once.
	partitionReplies
)

func (m partitionMode) String() string {
	switch m {
	case partitionBoth:
		return "both directions"
	case partitionRequests:
		return "requests only"
	}
	return "replies only"
}

// partitioner owns the iptables chain through which partitionFaults cut
// some nodes' loopback TCP ports in the kernel: the OUTPUT chain jumps to
// it for loopback TCP only, and each active partition adds its DROP rules
// to it. OUTPUT is enough: every packet between two loopback sockets passes
// it once, with -o lo, before it passes INPUT with -i lo, so a rule in
// INPUT would see only what OUTPUT already let through. A packet dropped in
// OUTPUT fails its transmit locally, which TCP treats as a lost packet: its
// sender sees no error, connect keeps resending its SYN, and data is sent
// again on TCP's backed-off timer. IPv4 rules suffice: redistest and
// miniredis listen on 127.0.0.1.
//
// The t.Cleanup of the test that made it removes the rules, the jump and
// the chain (stop), even when that test fails; partitionSweep removes those
// of runs killed before their cleanups. It is not safe for concurrent use:
// as the chaos faults, it is used from the test goroutine.
type partitioner struct {
	t     testing.TB // the test that made it; its cleanup stops it
	chain string
	ports []int // the nodes' loopback TCP ports
	rng   *rand.Rand
	cut   []*partitionFault // the active partitions
	made  bool              // the chain exists
	// linked is set while OUTPUT jumps to the chain.
	linked bool
}

// partitionFault is one kernel partition of one node (see partitioner): in
// a mode, for a hold after which a scenario heals it (once). Make one with
// partitioner.random or partitioner.fault. Partitions of different nodes
// may be active at once.
type partitionFault struct {
	p    *partitioner
	node int
	mode partitionMode
	hold time.Duration
}

// newPartitioner makes the chain, and OUTPUT's jump to it, for partitions
// of the nodes listening on ports, drawn from rng. It skips t when iptables
// cannot be used (not root, no binary, or the kernel refuses the chain, the
// jump or a rule of the shape a partition adds), or fails it with the
// reason when the CI environment variable is set.
func newPartitioner(t testing.TB, ports []int, rng *rand.Rand) *partitioner {
	t.Helper()
	if len(ports) == 0 {
		t.Fatalf("newPartitioner: no ports")
	}
	if why := partitionUnavailable(); why != "" {
		skipPartition(t, why)
		return nil
	}
	p := &partitioner{
		t:     t,
		chain: fmt.Sprintf("%s%d-%d", partitionChainPrefix, os.Getpid(), partitionChains.Add(1)),
		ports: ports,
		rng:   rng,
	}
	// Registered first, so that what was made before a refusal goes too.
	t.Cleanup(p.stop)
	if _, err := iptables("-N", p.chain); err != nil {
		skipPartition(t, "the kernel refused a chain: "+err.Error())
		return nil
	}
	p.made = true
	// First in OUTPUT, ahead of any rule that would accept the packets.
	if _, err := iptables(append([]string{"-I", "OUTPUT", "1"}, p.jump()...)...); err != nil {
		skipPartition(t, "the kernel refused the jump to the chain: "+err.Error())
		return nil
	}
	p.linked = true
	// A rule of the shape a partition adds, with RETURN, which changes
	// nothing.
	probe := append([]string{"-A", p.chain}, partitionRule(ports[0], "--dport", "RETURN")...)
	if _, err := iptables(probe...); err != nil {
		skipPartition(t, "the kernel refused a rule: "+err.Error())
		return nil
	}
	if _, err := iptables("-F", p.chain); err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// chaosPorts returns the loopback TCP ports of a chaos cluster's nodes, for
// newPartitioner. miniredis nodes listen on loopback TCP too.
func chaosPorts(t testing.TB, cl *chaosCluster) []int {
	t.Helper()
	ports := make([]int, len(cl.nodes))
	for i, n := range cl.nodes {
		ports[i] = addrPort(t, n.addr())
	}
	return ports
}

// newChaosPartitioner makes a partitioner of the run's nodes, with a
// generator drawn from the run's, so that it replays with the run's seed.
// A scenario's faults call it first: it may skip the test (see
// newPartitioner).
func newChaosPartitioner(r *chaosRun) *partitioner {
	r.t.Helper()
	return newPartitioner(r.t, chaosPorts(r.t, r.cl), rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64())))
}

// addrPort returns the port of a host:port address.
func addrPort(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

// random draws a partition: a node, a mode, and a hold in
// [partitionMinHold, partitionMaxHold].
func (p *partitioner) random() *partitionFault {
	node := p.rng.IntN(len(p.ports))
	mode := partitionMode(p.rng.IntN(3))
	hold := partitionMinHold + time.Duration(p.rng.Int64N(int64(partitionMaxHold-partitionMinHold)+1))
	return &partitionFault{p: p, node: node, mode: mode, hold: hold}
}

// fault is the partition of node in mode, with no hold.
func (p *partitioner) fault(node int, mode partitionMode) *partitionFault {
	return &partitionFault{p: p, node: node, mode: mode}
}

// start adds f's rules. It fails tb when f is active already, when another
// active partition cuts the same node, or when iptables refuses a rule.
func (p *partitioner) start(tb testing.TB, f *partitionFault) {
	tb.Helper()
	for _, a := range p.cut {
		if a == f || a.node == f.node {
			tb.Fatalf("%v: node %d is partitioned already (%v)", f, f.node, a)
		}
	}
	rules := f.rules()
	for i, rule := range rules {
		if _, err := iptables(append([]string{"-A", p.chain}, rule...)...); err != nil {
			for _, added := range rules[:i] {
				_, _ = iptables(append([]string{"-D", p.chain}, added...)...) // else stop flushes it
			}
			tb.Fatalf("%v: %v", f, err)
		}
	}
	p.cut = append(p.cut, f)
}

// heal deletes f's rules, if f is active. A failure is reported on tb, and
// left to stop and the sweep.
func (p *partitioner) heal(tb testing.TB, f *partitionFault) {
	tb.Helper()
	i := slices.Index(p.cut, f)
	if i < 0 {
		return
	}
	p.cut = slices.Delete(p.cut, i, i+1)
	for _, rule := range f.rules() {
		if _, err := iptables(append([]string{"-D", p.chain}, rule...)...); err != nil {
			tb.Errorf("%v: heal: %v", f, err)
		}
	}
}

// stop heals every partition, then removes OUTPUT's jump and the chain. It
// runs as a t.Cleanup of the test that made p, and may be called earlier.
func (p *partitioner) stop() {
	p.cut = nil
	if !p.made {
		return
	}
	// Flushed, not healed one by one: whatever a failed heal left goes.
	if _, err := iptables("-F", p.chain); err != nil {
		p.t.Errorf("flush %s: %v", p.chain, err)
	}
	if p.linked {
		if _, err := iptables(append([]string{"-D", "OUTPUT"}, p.jump()...)...); err != nil {
			p.t.Errorf("remove the jump to %s: %v", p.chain, err)
			return
		}
		p.linked = false
	}
	if _, err := iptables("-X", p.chain); err != nil {
		p.t.Errorf("remove %s: %v", p.chain, err)
		return
	}
	p.made = false
}

// jump is the rule in OUTPUT that sends loopback TCP to the chain.
func (p *partitioner) jump() []string {
	return []string{"-o", "lo", "-p", "tcp", "-j", p.chain}
}

func (f *partitionFault) String() string {
	s := fmt.Sprintf("kernel partition of node %d (port %d), %v", f.node, f.p.ports[f.node], f.mode)
	if f.hold > 0 {
		s += fmt.Sprintf(", for %v", f.hold.Round(time.Millisecond))
	}
	return s
}

func (f *partitionFault) inject(r *chaosRun) { f.p.start(r.t, f) }
func (f *partitionFault) heal(r *chaosRun)   { f.p.heal(r.t, f) }

// once injects f, waits its hold, and heals it.
func (f *partitionFault) once(r *chaosRun) { r.during(f, f.hold) }

// rules are f's rules in the chain: what its mode drops of its node's port.
func (f *partitionFault) rules() [][]string {
	port := f.p.ports[f.node]
	var rules [][]string
	if f.mode != partitionReplies {
		rules = append(rules, partitionRule(port, "--dport", "DROP"))
	}
	if f.mode != partitionRequests {
		rules = append(rules, partitionRule(port, "--sport", "DROP"))
	}
	return rules
}

// partitionRule is a rule of the chain: loopback TCP whose port dir
// ("--dport" or "--sport") is port goes to target.
func partitionRule(port int, dir, target string) []string {
	return []string{"-o", "lo", "-p", "tcp", dir, strconv.Itoa(port), "-j", target}
}

// iptablesPath finds the iptables binary: in PATH, or where Debian puts it,
// which a user's PATH may lack.
var iptablesPath = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("iptables")
	if err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/iptables", "/sbin/iptables"} {
		if fi, statErr := os.Stat(p); statErr == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", err
})

// iptables runs iptables with args, waiting up to 5s for the xtables lock,
// which another process may hold. Its error carries iptables' output.
func iptables(args ...string) (string, error) {
	bin, err := iptablesPath()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// partitionUnavailable says why this process cannot use iptables, or
// returns "". The kernel may still refuse; newPartitioner finds out.
func partitionUnavailable() string {
	if _, err := iptablesPath(); err != nil {
		return "iptables not found (apt-get install -y iptables): " + err.Error()
	}
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Sprintf("iptables needs root, and the tests run as uid %d", uid)
	}
	return ""
}

// skipPartition skips tb for the reason why, or fails it when the CI
// environment variable is set: a CI job must not pass with its kernel
// partitions skipped.
func skipPartition(tb testing.TB, why string) {
	tb.Helper()
	const msg = "kernel partition (iptables) unavailable: "
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s%s; CI is set, so partition tests must not be skipped", msg, why)
		return
	}
	tb.Skip(msg + why + "; skipping")
}

// partitionSwept runs the tests between two partitionSweeps. TestMain hands
// it to goleak.VerifyTestMain, which calls os.Exit once Run returns: a
// sweep deferred in TestMain would never run.
type partitionSwept struct{ m *testing.M }

func (s partitionSwept) Run() int {
	partitionSweep(false)
	defer partitionSweep(true)
	return s.m.Run()
}

// partitionSweep removes the chains of partitioners, with every rule
// that jumps to them, whose process is gone: a run killed by its timeout or
// by a panic skips its cleanups. With own, it removes this process's too,
// which its cleanups should have removed already. A chain whose pid is
// alive belongs to a test binary running beside this one, and is left
// alone. It does nothing where iptables cannot be used, and reports what it
// could not remove on stderr: it runs outside any test.
func partitionSweep(own bool) {
	if partitionUnavailable() != "" {
		return
	}
	out, err := iptables("-S")
	if err != nil {
		return // the kernel refuses iptables here, so no run made chains
	}
	lines := strings.Split(out, "\n")
	stale := map[string]bool{}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && partitionStale(f[1], own) {
			stale[f[1]] = true
		}
	}
	// The jumps first: a chain that is still jumped to cannot be deleted.
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == "-A" && f[len(f)-2] == "-j" && stale[f[len(f)-1]] {
			f[0] = "-D"
			if _, err := iptables(f...); err != nil {
				fmt.Fprintf(os.Stderr, "partitionSweep: %v\n", err)
			}
		}
	}
	for chain := range stale {
		_, err := iptables("-F", chain)
		if err == nil {
			_, err = iptables("-X", chain)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "partitionSweep: %v\n", err)
		}
	}
}

// partitionStale reports whether chain is a partitioner's whose process
// is gone, or, with own, this process's.
func partitionStale(chain string, own bool) bool {
	rest, ok := strings.CutPrefix(chain, partitionChainPrefix)
	if !ok {
		return false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return false // not named by us
	}
	if pid == os.Getpid() {
		return own
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestPartitionFault shows on a real redis-server that each mode cuts what
// it says, and only that: the server stays reachable over a unix socket,
// which no rule touches, and that is how the test sees what the server ran
// while its TCP port was cut. It also checks the draws, the sweep of a
// dead process's chain, and that no rule is left afterwards.
func TestPartitionFault(t *testing.T) {
	redistest.Require(t)
	if why := partitionUnavailable(); why != "" {
		skipPartition(t, why)
	}
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := redistest.Start(t, redistest.Options{Args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}})
	bystander := redistest.Start(t, redistest.Options{})
	ports := []int{addrPort(t, srv.Addr()), addrPort(t, bystander.Addr())}
	// Registered before the fault, so that it runs after the fault's own
	// cleanup, whether or not the test failed.
	var chain string // set once the partitioner is made
	t.Cleanup(func() {
		if chain != "" {
			requireNoPartitionRules(t, chain, ports)
		}
	})

	seed := chaosSeedOnce()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	p := newPartitioner(t, ports, rand.New(rand.NewPCG(uint64(seed), h.Sum64())))
	chain = p.chain
	t.Logf("seed %d (replay with -chaos.seed=%d), chain %s", seed, seed, chain)

	obs := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = obs.Close() })
	require.NoError(t, obs.Ping(t.Context()).Err(), "the observer's unix socket")

	t.Run("both directions", func(t *testing.T) {
		f := p.fault(0, partitionBoth)
		t.Cleanup(func() { p.heal(t, f) })
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		other := redis.NewClient(&redis.Options{Addr: bystander.Addr(), MaxRetries: -1,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = other.Close() })
		pings := func(c *redis.Client) func() bool {
			return func() bool { return c.Ping(t.Context()).Err() == nil }
		}
		// Eventually: on a starved machine a PING may miss 200ms.
		require.Eventually(t, pings(c), 10*time.Second, 10*time.Millisecond, "PING before the partition")

		p.start(t, f)
		err := c.Ping(t.Context()).Err()
		requireTimeout(t, err, "PING with a 200ms timeout on a pooled connection, during the partition")
		_, err = net.DialTimeout("tcp", srv.Addr(), 200*time.Millisecond)
		requireTimeout(t, err, "a new connection during the partition")
		require.NoError(t, obs.Ping(t.Context()).Err(), "the server over its unix socket, during the partition: got an error, want PONG")
		require.Eventually(t, pings(other), 10*time.Second, 10*time.Millisecond, "PING to the other node's port, during the partition")

		p.heal(t, f)
		require.Eventually(t, pings(c), 10*time.Second, 10*time.Millisecond, "PING after the heal")
	})

	t.Run("requests only", func(t *testing.T) {
		f := p.fault(0, partitionRequests)
		t.Cleanup(func() { p.heal(t, f) })
		const key = "partition:requests"
		conn, rd := rawConn(t, srv.Addr())
		p.start(t, f)
		// Write returns once the request is in the kernel's send buffer:
		// from there only TCP can deliver it, and the test never sends it
		// again.
		_, err := conn.Write([]byte("INCR " + key + "\r\n"))
		require.NoError(t, err)
		// For a second of partition the server never sees it.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			err := obs.Get(t.Context(), key).Err()
			require.ErrorIs(t, err, redis.Nil, "%s during a partition of the requests: got %v, want no key (the INCR held back)", key, err)
		}
		p.heal(t, f)
		healed := time.Now()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		line, err := rd.ReadString('\n')
		require.NoError(t, err, "the INCR's reply after the heal")
		require.Equal(t, ":1\r\n", line, "the INCR's reply after the heal")
		got, err := obs.Get(t.Context(), key).Result()
		require.NoError(t, err)
		require.Equal(t, "1", got, "%s after the heal: got %q, want 1 (the INCR sent during the partition, run once)", key, got)
		t.Logf("the INCR written during the partition was answered %v after the heal", time.Since(healed).Round(time.Millisecond))
	})

	t.Run("replies only", func(t *testing.T) {
		f := p.fault(0, partitionReplies)
		t.Cleanup(func() { p.heal(t, f) })
		const key = "partition:replies"
		conn, rd := rawConn(t, srv.Addr())
		p.start(t, f)
		_, err := conn.Write([]byte("INCR " + key + "\r\n"))
		require.NoError(t, err)
		// The server runs it while the partition lasts: the rules stay
		// until the observer has seen it, however long that takes.
		require.Eventually(t, func() bool {
			v, err := obs.Get(t.Context(), key).Result()
			return err == nil && v == "1"
		}, 10*time.Second, 5*time.Millisecond, "%s during a partition of the replies: want 1, the INCR run at once", key)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		_, err = rd.ReadString('\n')
		requireTimeout(t, err, "the INCR's reply during a partition of the replies")
		p.heal(t, f)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		line, err := rd.ReadString('\n')
		require.NoError(t, err, "the INCR's reply after the heal")
		require.Equal(t, ":1\r\n", line, "the INCR's reply after the heal")
		// TCP resent the request, which was never ACKed; the server ran
		// its bytes once.
		got, err := obs.Get(t.Context(), key).Result()
		require.NoError(t, err)
		require.Equal(t, "1", got, "%s after the heal: got %q, want 1", key, got)
	})

	t.Run("drawn, as chaos faults", func(t *testing.T) {
		// Two at a time, one on each node, as randomFaults hits two nodes.
		r := &chaosRun{t: t, start: time.Now()}
		rule := func(f *partitionFault, dir string) string {
			return fmt.Sprintf("-A %s -o lo -p tcp -m tcp %s %d -j DROP", p.chain, dir, ports[f.node])
		}
		for range 8 {
			a, b := p.random(), p.random()
			for b.node == a.node {
				b = p.random()
			}
			var want []string
			for _, f := range []*partitionFault{a, b} {
				require.GreaterOrEqual(t, f.hold, partitionMinHold)
				require.LessOrEqual(t, f.hold, partitionMaxHold)
				r.inject(f)
				if f.mode != partitionReplies {
					want = append(want, rule(f, "--dport"))
				}
				if f.mode != partitionRequests {
					want = append(want, rule(f, "--sport"))
				}
			}
			require.Equal(t, want, chainRules(t, p.chain), "rules of %v and %v", a, b)
			r.heal(a)
			require.Equal(t, want[len(a.rules()):], chainRules(t, p.chain), "rules of %v after healing %v", b, a)
			r.heal(b)
			require.Empty(t, chainRules(t, p.chain), "rules after both heals")
		}
	})

	t.Run("sweep", func(t *testing.T) {
		// A chain of a process that is gone, jumped to from OUTPUT, with a
		// rule that changes nothing.
		cmd := exec.Command("true")
		require.NoError(t, cmd.Run())
		stale := fmt.Sprintf("%s%d-1", partitionChainPrefix, cmd.Process.Pid)
		_, err := iptables("-N", stale)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = iptables(append([]string{"-D", "OUTPUT"}, "-o", "lo", "-p", "tcp", "-j", stale)...)
			_, _ = iptables("-F", stale)
			_, _ = iptables("-X", stale)
		})
		_, err = iptables("-I", "OUTPUT", "1", "-o", "lo", "-p", "tcp", "-j", stale)
		require.NoError(t, err)
		_, err = iptables(append([]string{"-A", stale}, partitionRule(ports[0], "--dport", "RETURN")...)...)
		require.NoError(t, err)

		partitionSweep(false)
		out, err := iptables("-S")
		require.NoError(t, err)
		require.NotContains(t, out, stale, "a dead process's chain after the sweep")
		require.Contains(t, out, "-N "+p.chain+"\n", "this process's chain after a sweep of the dead ones'")
		require.Contains(t, out, "-j "+p.chain+"\n", "the jump to this process's chain after a sweep of the dead ones'")
	})

	p.stop()
	requireNoPartitionRules(t, p.chain, ports)
}

// rawConn dials addr and checks that the connection works with a PING, on
// the raw protocol, so that nothing but what the test writes goes out.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	rd := bufio.NewReader(conn)
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)
	require.NoError(t, conn.SetDeadline(time.Time{}))
	return conn, rd
}

// requireTimeout fails unless err is a timeout.
func requireTimeout(t *testing.T, err error, what string) {
	t.Helper()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "%s: got %v, want a timeout", what, err)
}

// chainRules lists the rules of chain, as iptables -S prints them.
func chainRules(t *testing.T, chain string) []string {
	t.Helper()
	out, err := iptables("-S", chain)
	require.NoError(t, err)
	var rules []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "-A ") {
			rules = append(rules, line)
		}
	}
	return rules
}

// requireNoPartitionRules fails unless iptables -S shows neither chain nor
// any rule on one of ports.
func requireNoPartitionRules(t *testing.T, chain string, ports []int) {
	t.Helper()
	out, err := iptables("-S")
	require.NoError(t, err)
	require.NotContains(t, out, chain, "iptables -S after the test")
	for _, p := range ports {
		for _, dir := range []string{"--dport", "--sport"} {
			require.NotContains(t, out, fmt.Sprintf("%s %d ", dir, p), "iptables -S after the test")
		}
	}
}
