package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

// chaosBackend says what runs the nodes of a chaos scenario.
type chaosBackend uint8

const (
	// miniBackend runs miniredis, with ClockTTL on so that keys expire on
	// the wall clock as on a real server. Clock jumps and injected errors
	// are exact there.
	miniBackend chaosBackend = iota
	// realBackend runs redis-server processes through redistest: SIGKILL,
	// SIGSTOP and restarts are the real thing.
	realBackend
	// clusterBackend makes every node a Redis Cluster of three
	// redis-server masters (redistest.StartCluster), reached through a
	// go-redis ClusterClient. The generic faults do not apply: the cluster
	// faults (cluster_test.go) hit the master that serves the slot of
	// chaosClusterTag, which the mix puts on every key it uses.
	clusterBackend
)

// chaosClusterTag is the hash tag of every key the mix uses on cluster
// nodes: the keys of one script must share a slot there, and the cluster
// faults aim at this one.
const chaosClusterTag = "{chaos}"

func (b chaosBackend) String() string {
	switch b {
	case realBackend:
		return "real"
	case clusterBackend:
		return "cluster"
	}
	return "mini"
}

// chaosClusterOpts describes the nodes and the Clients of a scenario.
type chaosClusterOpts struct {
	backend chaosBackend
	nodes   int // Redis masters; 5 unless set
	clients int // library Clients, each with its own go-redis clients
	// proxied puts a faultproxy.Proxy between every Client and every node,
	// so that latency, blackholes and resets can hit one Client alone.
	proxied bool
	// persistence runs real nodes with appendfsync always, so that a
	// restart with data keeps every acknowledged lock.
	persistence bool
	// noAOF are nodes that run without the append-only file even when
	// persistence is set, as a node whose appendonly was left off does: a
	// restart "with data" brings them back empty.
	noAOF []int
	// valkey runs valkey-server instead of redis-server (see chaosValkey).
	valkey bool
	// defaultClients builds the go-redis clients with go-redis's defaults
	// (3 retries, 3s read timeout), as most users do. Otherwise they are
	// chaosRedisOptions.
	defaultClients bool
	// fastFailClients builds them as a user who wants fast failure does:
	// ContextTimeoutEnabled, a ReadTimeout of 50-100ms, and go-redis's
	// default retries. go-redis then gives up on a request at the node
	// timeout, while the request may still reach the node later.
	fastFailClients bool
	// hooks are the test hooks of every library Client: a control's
	// switch.
	hooks testHooks
}

// chaosRedisOptions are the go-redis settings of most chaos scenarios: no
// retries, so that a fault shows up as a failed vote rather than being
// hidden, and timeouts short enough that the requests a hung node holds end
// soon after the fault heals.
func chaosRedisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:         addr,
		MaxRetries:   -1,
		DialTimeout:  250 * time.Millisecond,
		ReadTimeout:  250 * time.Millisecond,
		WriteTimeout: 250 * time.Millisecond,
		PoolTimeout:  250 * time.Millisecond,
	}
}

// chaosNode is one Redlock node of a scenario: a miniredis, a
// redis-server, or a Redis Cluster, one of the three. Its methods are
// called from the test goroutine only.
type chaosNode struct {
	t       *testing.T
	index   int
	mini    *miniredis.Miniredis
	srv     *redistest.Server
	cluster *redistest.Cluster
	// admin talks to the node directly, never through a proxy: it injects
	// faults and scans for residue. For a cluster it is nil, and masters
	// reach each of its masters.
	admin   *redis.Client
	masters []*redis.Client
	down    bool // killed and not restarted since
	// persistent is set for a real node that runs with the append-only
	// file: a restart with data keeps every acknowledged write.
	persistent bool
	// clock runs a miniredis node's clock once stepClock has moved it.
	clock *offsetClock
}

func (n *chaosNode) String() string { return fmt.Sprintf("node %d", n.index) }

func (n *chaosNode) addr() string {
	switch {
	case n.mini != nil:
		return n.mini.Addr()
	case n.cluster != nil:
		n.t.Fatalf("%v is a cluster: it has no single address", n)
	}
	return n.srv.Addr()
}

// admins are the clients that reach every server of the node directly:
// admin, or a cluster's masters.
func (n *chaosNode) admins() []*redis.Client {
	if n.cluster != nil {
		return n.masters
	}
	return []*redis.Client{n.admin}
}

// dial returns a go-redis client of the node with ro's settings: a plain
// client of ro.Addr, or for a cluster a ClusterClient of its masters
// (ro.Addr is then unused: a proxy between them would hide the addresses
// that MOVED and ASK name).
func (n *chaosNode) dial(ro *redis.Options) redis.UniversalClient {
	if n.cluster == nil {
		return redis.NewClient(ro)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: n.cluster.Addrs(), MaxRetries: ro.MaxRetries, ContextTimeoutEnabled: ro.ContextTimeoutEnabled,
		DialTimeout: ro.DialTimeout, ReadTimeout: ro.ReadTimeout, WriteTimeout: ro.WriteTimeout, PoolTimeout: ro.PoolTimeout,
	})
}

// kill stops the node at once: SIGKILL, or closing the miniredis.
func (n *chaosNode) kill() {
	if n.mini != nil {
		n.mini.Close()
	} else {
		n.srv.Kill()
	}
	n.down = true
}

// start brings a killed node back, with the data it had when keep is true
// (a real node keeps it only with persistence) or empty.
func (n *chaosNode) start(keep bool) {
	n.t.Helper()
	switch {
	case n.mini != nil:
		if !keep {
			n.mini.FlushAll()
		}
		if err := n.mini.Restart(); err != nil {
			n.t.Fatalf("%v: restart: %v", n, err)
		}
	case keep:
		n.srv.Restart()
	default:
		n.srv.RestartEmpty()
	}
	n.down = false
}

// jumpScript shrinks the PTTL of every key matching ARGV[1] by ARGV[2]
// milliseconds, deleting those it would take to zero: what a clock that jumps
// forward does to a real server. It runs atomically, as a jump would.
var jumpScript = redis.NewScript(`
local cursor, jump, n = "0", tonumber(ARGV[2]), 0
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local ttl = redis.call('PTTL', k)
    if ttl > 0 then
      n = n + 1
      if ttl <= jump then redis.call('DEL', k) else redis.call('PEXPIRE', k, ttl - jump) end
    end
  end
until cursor == "0"
return n
`)

// jump moves the node's clock forward by d, as far as keys are concerned.
func (n *chaosNode) jump(d time.Duration) {
	n.t.Helper()
	if n.mini != nil {
		n.mini.FastForward(d)
		return
	}
	if err := jumpScript.Run(n.t.Context(), n.admin, nil, "*", d.Milliseconds()).Err(); err != nil {
		n.t.Fatalf("%v: clock jump: %v", n, err)
	}
}

// stepClock moves a miniredis node's clock forward by d for real: TIME
// says so at once and, with ClockTTL, every TTL shrinks by d. The clock then
// keeps running from there, d ahead of ours.
func (n *chaosNode) stepClock(d time.Duration) {
	n.t.Helper()
	if n.mini == nil {
		n.t.Fatalf("%v: only a miniredis clock can be stepped", n)
	}
	if n.clock == nil {
		n.clock = startOffsetClock(n.t, n.mini)
	}
	n.clock.step(d)
}

// offsetClock runs a miniredis clock at an offset from ours. miniredis has
// no clock of its own to move: SetTime pins it, and a pinned clock stands
// still, which the node guard would rightly take for a jump backwards. So a
// goroutine sets it again every millisecond. Between two ticks it lags by up
// to a tick, well inside the drift allowance; a goroutine starved of CPU
// makes it lag more and then catch up, which the guard may see as a small
// jump (10-20ms under -race on a busy machine): one more quarantine of that
// node, never one less. It is safe for concurrent use.
type offsetClock struct {
	mu     sync.Mutex
	m      *miniredis.Miniredis
	offset time.Duration // guarded by mu
}

// startOffsetClock starts the ticking at offset 0; t.Cleanup stops it.
func startOffsetClock(t *testing.T, m *miniredis.Miniredis) *offsetClock {
	c := &offsetClock{m: m}
	c.step(0)
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				c.step(0)
			}
		}
	}()
	return c
}

// step adds d to the offset and sets the clock. The lock keeps a tick that
// read the old offset from setting the clock back after a step: miniredis
// would count the same step twice against the TTLs.
func (c *offsetClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	c.m.SetTime(time.Now().Add(c.offset))
}

// setError makes the node fail every command with msg. A real node can
// only do READONLY: it becomes a replica of a master that does not exist,
// keeping its data and refusing writes.
func (n *chaosNode) setError(msg string) {
	n.t.Helper()
	if n.mini != nil {
		n.mini.SetError(msg)
		return
	}
	if !strings.HasPrefix(msg, "READONLY") {
		n.t.Fatalf("%v: a real node can only answer READONLY, not %q", n, msg)
	}
	// Port 1 has no listener: the replica never syncs, so it keeps its data.
	if err := n.admin.ReplicaOf(n.t.Context(), "127.0.0.1", "1").Err(); err != nil {
		n.t.Fatalf("%v: REPLICAOF: %v", n, err)
	}
}

func (n *chaosNode) clearError() {
	n.t.Helper()
	if n.mini != nil {
		n.mini.SetError("")
		return
	}
	if err := n.admin.ReplicaOf(n.t.Context(), "NO", "ONE").Err(); err != nil {
		n.t.Fatalf("%v: REPLICAOF NO ONE: %v", n, err)
	}
}

// flushScripts empties the node's script cache, so that the next EVALSHA
// gets NOSCRIPT.
func (n *chaosNode) flushScripts() {
	n.t.Helper()
	if err := n.admin.ScriptFlush(n.t.Context()).Err(); err != nil {
		n.t.Fatalf("%v: SCRIPT FLUSH: %v", n, err)
	}
}

// chaosKey is a lock key found on a node.
type chaosKey struct {
	node  int
	key   string
	value string
	pttl  time.Duration // negative: no expiry
}

// isFenceCounter tells a fence counter (see WithFencing) from a lock key.
// Counters never expire by design, so they are not residue.
func isFenceCounter(key string) bool {
	i := strings.Index(key, keyspace.Reserved)
	return i >= 0 && keyspace.Fence(key[:i]) == key
}

// lockKeys lists the lock keys under prefix, with their values and TTLs:
// one entry for a plain lock's string, one for each reader of a read lock's
// hash, and one for each holder of a semaphore's sorted set. Reading them
// also expires the ones whose time has come, on both backends.
func (n *chaosNode) lockKeys(prefix string) []chaosKey {
	n.t.Helper()
	var out []chaosKey
	if n.mini != nil {
		for _, k := range n.mini.Keys() {
			if !strings.HasPrefix(k, prefix) || isFenceCounter(k) {
				continue
			}
			var values []string
			switch n.mini.Type(k) {
			case "string":
				v, err := n.mini.Get(k)
				if err == nil {
					values = []string{v}
				}
			case "hash":
				fields, _ := n.mini.HKeys(k)
				values = holderValues("hash", fields)
			case "zset":
				members, _ := n.mini.ZMembers(k)
				values = holderValues("zset", members)
			}
			ttl := n.mini.TTL(k)
			if ttl == 0 {
				ttl = -1
			}
			for _, v := range values {
				out = append(out, chaosKey{node: n.index, key: k, value: v, pttl: ttl})
			}
		}
		return out
	}
	ctx := n.t.Context()
	for _, admin := range n.admins() {
		iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if isFenceCounter(k) {
				continue
			}
			typ, err := admin.Type(ctx, k).Result()
			if err != nil {
				n.t.Fatalf("%v: TYPE: %v", n, err)
			}
			var values []string
			switch typ {
			case "string":
				if v, err := admin.Get(ctx, k).Result(); err == nil {
					values = []string{v}
				}
			case "hash":
				fields, _ := admin.HKeys(ctx, k).Result()
				values = holderValues(typ, fields)
			case "zset":
				members, _ := admin.ZRange(ctx, k, 0, -1).Result()
				values = holderValues(typ, members)
			}
			ttl, err := admin.PTTL(ctx, k).Result()
			if err != nil {
				n.t.Fatalf("%v: PTTL: %v", n, err)
			}
			for _, v := range values {
				out = append(out, chaosKey{node: n.index, key: k, value: v, pttl: ttl})
			}
		}
		if err := iter.Err(); err != nil {
			n.t.Fatalf("%v: SCAN: %v", n, err)
		}
	}
	return out
}

// holderValues returns the holders' values among a read lock's hash fields
// ("r:<value>") or a semaphore's members (all but '#permits').
func holderValues(typ string, names []string) []string {
	var out []string
	for _, f := range names {
		switch {
		case typ == "hash" && (strings.HasPrefix(f, "r:") || strings.HasPrefix(f, "t:")):
			// A reader's field, or an owner lock's acquisition.
			out = append(out, f[2:])
		case typ == "zset" && f != permitsMember:
			out = append(out, f)
		}
	}
	return out
}

// chaosClient is one library Client with go-redis clients of its own, as a
// separate process would have.
type chaosClient struct {
	index     int
	c         *Client
	proxies   []*faultproxy.Proxy // one per node; nil when not proxied
	resenders []*resender         // one per node: its go-redis client's hook
}

// chaosCluster is the nodes and Clients of one scenario.
type chaosCluster struct {
	t       *testing.T
	opts    chaosClusterOpts
	nodes   []*chaosNode
	clients []*chaosClient
}

// newChaosCluster starts the nodes and builds the Clients. Every resource
// is released by t.Cleanup. lockOpts are the Clients' options.
func newChaosCluster(t *testing.T, opts chaosClusterOpts, rng *rand.Rand, lockOpts ...Option) *chaosCluster {
	t.Helper()
	if opts.nodes == 0 {
		opts.nodes = 5
	}
	cl := &chaosCluster{t: t, opts: opts}
	switch opts.backend {
	case realBackend:
		if opts.valkey {
			// TestChaos and its scenarios run one at a time: no other
			// test reads the variable meanwhile.
			t.Setenv("REDIS_SERVER", chaosValkey(t))
		}
		redistest.Require(t)
		var plain []*redistest.Server
		if len(opts.noAOF) > 0 {
			plain = redistest.StartN(t, len(opts.noAOF), redistest.Options{})
		}
		durable := redistest.StartN(t, opts.nodes-len(opts.noAOF), redistest.Options{Persistence: opts.persistence})
		for i := range opts.nodes {
			n := &chaosNode{t: t, index: i}
			if slices.Contains(opts.noAOF, i) {
				n.srv, plain = plain[0], plain[1:]
			} else {
				n.srv, durable = durable[0], durable[1:]
				n.persistent = opts.persistence
			}
			cl.nodes = append(cl.nodes, n)
		}
	case clusterBackend:
		// A restarted master must come back empty and still in its
		// cluster: no persistence, and redistest's Restart keeps
		// nodes.conf.
		if opts.proxied || opts.persistence {
			t.Fatalf("cluster nodes take neither proxies nor persistence")
		}
		redistest.Require(t)
		for i, c := range redistest.StartClusters(t, opts.nodes, 3, redistest.Options{}) {
			n := &chaosNode{t: t, index: i, cluster: c}
			for _, s := range c.Masters {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: time.Second})
				t.Cleanup(func() { _ = rc.Close() })
				n.masters = append(n.masters, rc)
			}
			cl.nodes = append(cl.nodes, n)
		}
	default:
		for i := range opts.nodes {
			m := miniredis.NewMiniRedis()
			m.ClockTTL(true)
			if err := m.Start(); err != nil {
				t.Fatalf("miniredis: %v", err)
			}
			t.Cleanup(m.Close)
			cl.nodes = append(cl.nodes, &chaosNode{t: t, index: i, mini: m})
		}
	}
	for _, n := range cl.nodes {
		if n.cluster != nil {
			continue
		}
		n.admin = redis.NewClient(&redis.Options{Addr: n.addr(), ReadTimeout: time.Second})
		t.Cleanup(func() { _ = n.admin.Close() })
	}
	for ci := range opts.clients {
		cc := &chaosClient{index: ci}
		rcs := make([]redis.UniversalClient, len(cl.nodes))
		for i, n := range cl.nodes {
			var addr string
			if n.cluster == nil {
				addr = n.addr()
			}
			if opts.proxied {
				p, err := faultproxy.New(addr, rng.Uint64())
				if err != nil {
					t.Fatalf("proxy: %v", err)
				}
				t.Cleanup(func() { _ = p.Close() })
				cc.proxies = append(cc.proxies, p)
				addr = p.Addr()
			}
			ro := chaosRedisOptions(addr)
			switch {
			case opts.defaultClients:
				ro = &redis.Options{Addr: addr}
			case opts.fastFailClients:
				ro = &redis.Options{Addr: addr, ContextTimeoutEnabled: true,
					ReadTimeout: 50*time.Millisecond + time.Duration(rng.Int64N(int64(50*time.Millisecond)+1))}
			}
			rc := n.dial(ro)
			t.Cleanup(func() { _ = rc.Close() })
			rs := &resender{rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
			rc.AddHook(rs)
			cc.resenders = append(cc.resenders, rs)
			rcs[i] = rc
		}
		c, err := New(rcs, lockOpts...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		setHooks(c, opts.hooks)
		// Registered after the go-redis clients, so it runs before they
		// close: Close waits for the requests still in flight.
		t.Cleanup(func() { _ = c.Close() })
		cc.c = c
		cl.clients = append(cl.clients, cc)
	}
	return cl
}

// chaosValkey returns the path of valkey-server, for the scenarios that
// run Valkey 8, which has WAITAOF (WithFsyncAck). A machine without it
// skips them, unless CI is set: then it fails, so that CI never passes with
// the Valkey scenarios skipped.
func chaosValkey(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("valkey-server")
	if err == nil {
		return bin
	}
	const msg = "valkey-server not found: install it (make valkey-server)"
	if os.Getenv("CI") != "" {
		t.Fatalf("%s; CI is set, so the Valkey scenarios must not be skipped (%v)", msg, err)
	}
	t.Skip(msg + "; skipping the Valkey scenario")
	return ""
}

// closeClients closes every library Client, which waits for the requests
// they still have in flight: after it, nothing more reaches the nodes.
func (cl *chaosCluster) closeClients() {
	for _, cc := range cl.clients {
		_ = cc.c.Close()
	}
}

// closeProxies closes every proxy, dropping the requests they still hold.
func (cl *chaosCluster) closeProxies() {
	for _, cc := range cl.clients {
		for _, p := range cc.proxies {
			_ = p.Close()
		}
	}
}

// proxyStats sums what the proxies and the resenders injected, for the
// detail line.
func (cl *chaosCluster) proxyStats() string {
	var late, after, lost, resent int64
	for _, cc := range cl.clients {
		for _, p := range cc.proxies {
			st := p.Stats()
			late, after, lost = late+st.Late, after+st.AfterClose, lost+st.LostReplies
		}
		for _, rs := range cc.resenders {
			resent += rs.resent.Load()
		}
	}
	if late+after+lost+resent == 0 {
		return ""
	}
	return fmt.Sprintf(" late-chunks=%d delivered-after-close=%d lost-replies=%d resent=%d", late, after, lost, resent)
}

// liveNodes returns the nodes that are not down.
func (cl *chaosCluster) liveNodes() []*chaosNode {
	var out []*chaosNode
	for _, n := range cl.nodes {
		if !n.down {
			out = append(out, n)
		}
	}
	return out
}

// waitHeldOn waits until node n holds token under key: Lock returns at its
// quorum, and the controls need the slower nodes too.
func (cl *chaosCluster) waitHeldOn(n *chaosNode, key, token string) {
	cl.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := n.admin.Get(context.Background(), key).Result()
		if err == nil && v == token {
			return
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("%v never held %q for token %s: %q, %v", n, key, token, v, err)
		}
		time.Sleep(time.Millisecond)
	}
}
