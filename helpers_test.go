package redlock

// This file holds the helpers that the package's tests share: the nodes
// (miniredis, behind fault proxies, real redis-servers), the Clients on
// them, waits for what the nodes hold, hooks that hold a node's replies, a
// stepped clock, an Observer and a log buffer that record, and TestMain.
// A helper that one file alone uses stays in that file.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis's pool retries a failed dial from a goroutine of its own,
	// which sees the pool closed only after its next second of sleep: a
	// client closed just before the end of the run leaves it for up to a
	// second, past goleak's retries.
	goleak.VerifyTestMain(partitionSwept{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// minis starts n miniredis nodes and a default go-redis client for each.
func minis(t *testing.T, n int, hooks ...redis.Hook) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: ms[i].Addr()})
		for _, h := range hooks {
			rc.AddHook(h)
		}
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return ms, cs
}

// proxiedNodes starts n miniredis nodes, each behind a fault proxy, and a
// go-redis client with go-redis's default retries (3) through each proxy.
func proxiedNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []*faultproxy.Proxy, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	ps := make([]*faultproxy.Proxy, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		p, err := faultproxy.New(ms[i].Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		// One connection, which loadScripts opens: the lost reply is
		// always the test's, never a new connection's handshake.
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
	}
	loadScripts(t, cs)
	for _, rc := range cs {
		// The Client sends through pipelines, which may take their
		// connection from a pool of their own: open it now too.
		_, err := rc.Pipelined(t.Context(), func(p redis.Pipeliner) error { return p.Ping(t.Context()).Err() })
		require.NoError(t, err)
	}
	return ms, ps, cs
}

// drained returns once every client's single connection is free again, so
// that no reply of an earlier request is still on its way through a proxy.
func drained(t *testing.T, cs []redis.UniversalClient) {
	t.Helper()
	for _, rc := range cs {
		require.NoError(t, rc.Ping(t.Context()).Err())
	}
}

// lostReplies waits until p has lost want replies: a round decides at
// quorum, so the reply of a node it did not need may still be on its way.
func lostReplies(t *testing.T, p *faultproxy.Proxy, want int64) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Stats().LostReplies >= want }, 5*time.Second, time.Millisecond)
	require.EqualValues(t, want, p.Stats().LostReplies)
}

// realNodes starts n redis-servers and returns them with one default go-redis
// client each, as users hand them to us.
func realNodes(t *testing.T, n int) ([]*redistest.Server, []redis.UniversalClient) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.StartN(t, n, redistest.Options{})
	cs := make([]redis.UniversalClient, n)
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	return srv, cs
}

// hungServer accepts connections and never answers, like a node stopped
// with SIGSTOP. Its connections close with the test.
func hungServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			_ = cn.Close()
		}
	})
	return ln.Addr().String()
}

// ownClients opens a second set of go-redis clients to the same servers.
func ownClients(t *testing.T, cs []redis.UniversalClient) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(cs))
	for i, rc := range cs {
		c := redis.NewClient(&redis.Options{Addr: rc.(*redis.Client).Options().Addr})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

// lifecycleNodes gives a test of a lock's life (renewals, expiry, Done,
// waiters) five nodes whose TTLs run in real time: miniredis with ClockTTL,
// or real redis-servers.
type lifecycleNodes struct {
	clients []redis.UniversalClient
	kill    func(i int)      // the node stops answering for good
	keyOn   func(i int) bool // the test key is on node i
	drop    func(i int)      // delete the test key on node i, without a message
	key     string
}

// forEachBackend runs fn on five miniredis nodes, then on five
// redis-servers.
func forEachBackend(t *testing.T, key string, fn func(t *testing.T, n *lifecycleNodes)) {
	t.Run("miniredis", func(t *testing.T) {
		ms, cs := minis(t, 5)
		for _, m := range ms {
			m.ClockTTL(true)
		}
		fn(t, &lifecycleNodes{
			clients: cs, key: key,
			kill:  func(i int) { ms[i].Close() },
			keyOn: func(i int) bool { return ms[i].Exists(key) },
			drop:  func(i int) { ms[i].Del(key) },
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		srv, cs := realNodes(t, 5)
		fn(t, &lifecycleNodes{
			clients: cs, key: key,
			kill: func(i int) { srv[i].Kill() },
			keyOn: func(i int) bool {
				n, _ := cs[i].Exists(context.Background(), key).Result()
				return n == 1
			},
			drop: func(i int) { cs[i].Del(context.Background(), key) },
		})
	})
}

// newClient builds a Client on cs and closes it when the test ends. Unless
// the test sets it, or its TTL is too short for it, the node timeout is a
// patient second: the race detector on a loaded machine can make a healthy
// node miss the default, and most tests are not about slow nodes.
func newClient(t testing.TB, cs []redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(cs, append([]Option{WithNodeTimeout(time.Second)}, opts...)...)
	if errors.Is(err, ErrInvalidOption) {
		c, err = New(cs, opts...)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realClients returns k Clients on the servers, each with its own go-redis
// clients, as k separate processes would have.
func realClients(t *testing.T, srv []*redistest.Server, k int, opts ...Option) []*Client {
	t.Helper()
	out := make([]*Client, k)
	for j := range k {
		cs := make([]redis.UniversalClient, len(srv))
		for i, s := range srv {
			cs[i] = s.NewClient(t)
		}
		out[j] = newClient(t, cs, opts...)
	}
	return out
}

// eventually waits until key holds want on every node, or is missing
// everywhere when want is "". A round ends at its quorum, so the slower
// nodes may still be applying the request when the call returns.
func eventually(t *testing.T, ms []*miniredis.Miniredis, key, want string) {
	t.Helper()
	for i, m := range ms {
		require.Eventually(t, func() bool {
			got, err := m.Get(key)
			if want == "" {
				return errors.Is(err, miniredis.ErrKeyNotFound)
			}
			return got == want
		}, 5*time.Second, time.Millisecond, "node %d: key %q never became %q", i, key, want)
	}
}

// eventuallyCount waits until the owner lock at key counts want holds on
// every node (its hash's fields, less the owner's), or is gone when want is
// 0.
func eventuallyCount(t *testing.T, ms []*miniredis.Miniredis, key string, want int) {
	t.Helper()
	for i, m := range ms {
		require.Eventually(t, func() bool {
			got, err := m.HKeys(key)
			if want == 0 {
				return err != nil
			}
			return err == nil && len(got)-1 == want
		}, 5*time.Second, time.Millisecond, "node %d: hold count never became %d", i, want)
	}
}

// realEventually waits until key holds want on every running server, or is
// missing when want is "".
func realEventually(t *testing.T, srv []*redistest.Server, key, want string) {
	t.Helper()
	for i, s := range srv {
		if !s.Running() {
			continue
		}
		rc := s.NewClient(t)
		require.Eventually(t, func() bool {
			got, err := rc.Get(t.Context(), key).Result()
			if want == "" {
				return errors.Is(err, redis.Nil)
			}
			return got == want
		}, 5*time.Second, time.Millisecond, "node %d: key %q never became %q", i, key, want)
	}
}

// settled waits until no acquire request of l's attempt is in flight on
// any node.
func settled(t *testing.T, l *Lock) {
	t.Helper()
	at := l.att
	require.Eventually(t, func() bool {
		at.a.mu.Lock()
		defer at.a.mu.Unlock()
		for _, n := range at.inflight {
			if n > 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "acquire requests still in flight")
}

// subscribed reports whether someone listens for releases of key on every
// node.
func subscribed(t *testing.T, cs []redis.UniversalClient, key string) bool {
	for _, rc := range cs {
		n, err := rc.PubSubNumSub(t.Context(), releaseChannel(key)).Result()
		if err != nil || n[releaseChannel(key)] == 0 {
			return false
		}
	}
	return true
}

// marked reports whether a waiter on key is fully in place on every node:
// subscribed to its release channel, and its waiting marker set, so that
// each node's release is announced to it. A release that lands between the
// two is not announced by that node.
func marked(t *testing.T, cs []redis.UniversalClient, key string) bool {
	if !subscribed(t, cs, key) {
		return false
	}
	for _, rc := range cs {
		if n, err := rc.Exists(t.Context(), keyspace.Waiting(key)).Result(); err != nil || n == 0 {
			return false
		}
	}
	return true
}

// libraryGoroutines returns the stacks of goroutines that run library code,
// other than tests'. The miniredis servers' own goroutines are not counted.
func libraryGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// A library goroutine runs a method of one of its types; tests'
		// goroutines have a frame in a _test.go file.
		if strings.Contains(g, "github.com/redlockgo/redlock.(*") && !strings.Contains(g, "_test.go:") {
			out = append(out, g)
		}
	}
	return out
}

// gate is a go-redis hook that lets the commands it matches through to the
// server but holds their replies until the gate opens: a node that is slow
// to answer one kind of request.
type gate struct {
	match   func(redis.Cmder) bool
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int32 // replies held so far
}

// release opens the gate; it may be called more than once.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if g.match(cmd) {
				g.waiting.Add(1)
				<-g.open
				break
			}
		}
		return err
	}
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if g.match(cmd) {
			g.waiting.Add(1)
			<-g.open
		}
		return err
	}
}

// newGate holds the replies of every command named cmd.
func newGate(cmd string) *gate {
	return &gate{match: func(c redis.Cmder) bool { return c.Name() == cmd }, open: make(chan struct{})}
}

// newScriptGate holds the replies of the script id's commands.
func newScriptGate(id scriptID) *gate {
	return &gate{match: func(c redis.Cmder) bool { return isScript(c, id) }, open: make(chan struct{})}
}

// slowNodes returns five miniredis nodes whose last `slow` ones hold the
// replies of cmd until the gate opens. The caller must open it before
// Client.Close, which waits for the held requests: register g.release with
// t.Cleanup after newClient.
func slowNodes(t *testing.T, slow int, cmd string) ([]*miniredis.Miniredis, []redis.UniversalClient, *gate) {
	t.Helper()
	g := newGate(cmd)
	fast, fcs := minis(t, 5-slow)
	sl, scs := minis(t, slow, g)
	return append(fast, sl...), append(fcs, scs...), g
}

// isScript reports whether cmd runs the script id, by EVALSHA or EVAL.
func isScript(cmd redis.Cmder, id scriptID) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == scripts[id].sha
	case "eval":
		return args[1] == scripts[id].src
	}
	return false
}

// isRelease reports whether cmd is a release: release.lua, or
// releaseplain.lua, which a plain key uses.
func isRelease(cmd redis.Cmder) bool {
	return isScript(cmd, scriptRelease) || isScript(cmd, scriptReleasePlain)
}

// loadScripts loads every lock script on the nodes, so that the first
// EVALSHA of a test does not get NOSCRIPT.
func loadScripts(t *testing.T, cs []redis.UniversalClient) {
	t.Helper()
	for _, rc := range cs {
		for id := range scripts {
			require.NoError(t, rc.ScriptLoad(t.Context(), scripts[id].src).Err())
		}
	}
}

// steppedClock reads the real time until armed; once armed, it returns t0
// on its next reading and t0+step on every later one, so that the next
// round's elapsed time is exactly step.
type steppedClock struct {
	mu    sync.Mutex
	armed bool
	step  time.Duration
	t0    time.Time
}

func (s *steppedClock) arm(step time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.step, s.t0 = true, step, time.Time{}
}

func (s *steppedClock) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.armed:
		return time.Now()
	case s.t0.IsZero():
		s.t0 = time.Now()
		return s.t0
	}
	return s.t0.Add(s.step)
}

// start returns the reading the armed clock gave first.
func (s *steppedClock) start() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t0
}

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu       sync.Mutex
	attempts []error
	extends  []Stats
	lost     []error
	released []error
}

func (r *recorder) Attempted(s Stats, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, err)
}

func (r *recorder) Extended(s Stats, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extends = append(r.extends, s)
}

func (r *recorder) Lost(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, err)
}

func (r *recorder) Released(s Stats, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, err)
}

func (r *recorder) counts() (attempts, extends, lost, released int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts), len(r.extends), len(r.lost), len(r.released)
}

// syncBuffer is a bytes.Buffer that a logger may write from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// overlaps describes the violations of mutual exclusion among holds, as
// internal/history finds them, with times relative to the earliest hold.
func overlaps(holds []history.Hold) []string {
	if len(holds) == 0 {
		return nil
	}
	var bad []string
	t0 := slices.MinFunc(holds, func(a, b history.Hold) int { return a.Acquired.Compare(b.Acquired) }).Acquired
	for _, o := range history.Overlaps(holds) {
		bad = append(bad, o.Format(t0))
	}
	return bad
}
