package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock/internal/redistest"
)

// harnessTB lets the harness use internal/redistest, which is written for
// tests, from a plain program. It implements the few testing.TB methods that
// redistest calls; the embedded nil TB makes any other call panic, which
// would show at once. Fatalf and Skip panic with a fatal value that main
// turns into an error after the cleanups ran.
type harnessTB struct {
	testing.TB

	mu       sync.Mutex
	cleanups []func() // guarded by mu; run last first
}

type fatal struct{ msg string }

func (f fatal) Error() string { return f.msg }

func (*harnessTB) Helper() {}

func (h *harnessTB) Cleanup(f func()) {
	h.mu.Lock()
	h.cleanups = append(h.cleanups, f)
	h.mu.Unlock()
}

func (h *harnessTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		panic(fatal{fmt.Sprintf("bench: temp dir: %v", err)})
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (*harnessTB) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (*harnessTB) Skip(args ...any)                  { panic(fatal{fmt.Sprint(args...)}) }

// close runs the cleanups: it kills every server, resuming paused ones first.
func (h *harnessTB) close() {
	h.mu.Lock()
	fs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// cmdCounter is a go-redis hook that counts what one client sends. Counting
// is off until enabled, so that the hook costs one atomic load otherwise.
type cmdCounter struct {
	on        atomic.Bool
	cmds      atomic.Int64 // commands, pipelined ones included
	roundTrip atomic.Int64 // single commands plus pipelines

	mu     sync.Mutex
	byName map[string]int64 // guarded by mu
}

func newCmdCounter() *cmdCounter { return &cmdCounter{byName: make(map[string]int64)} }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.on.Load() {
			c.cmds.Add(1)
			c.roundTrip.Add(1)
			c.mu.Lock()
			c.byName[cmd.Name()]++
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.on.Load() {
			c.cmds.Add(int64(len(cmds)))
			c.roundTrip.Add(1)
			c.mu.Lock()
			for _, cmd := range cmds {
				c.byName[cmd.Name()]++
			}
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// counts is a snapshot of counters.
type counts struct {
	cmds, roundTrips int64
	byName           map[string]int64
}

func (c *cmdCounter) snapshot() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.byName))
	for k, v := range c.byName {
		m[k] = v
	}
	return counts{cmds: c.cmds.Load(), roundTrips: c.roundTrip.Load(), byName: m}
}

func (a counts) sub(b counts) counts {
	d := counts{cmds: a.cmds - b.cmds, roundTrips: a.roundTrips - b.roundTrips, byName: make(map[string]int64)}
	for k, v := range a.byName {
		if v -= b.byName[k]; v != 0 {
			d.byName[k] = v
		}
	}
	return d
}

func (a counts) add(b counts) counts {
	d := counts{cmds: a.cmds + b.cmds, roundTrips: a.roundTrips + b.roundTrips, byName: make(map[string]int64)}
	for k, v := range a.byName {
		d.byName[k] += v
	}
	for k, v := range b.byName {
		d.byName[k] += v
	}
	return d
}

// clientSet is one go-redis client per node, as a user would build them:
// go-redis defaults apart from the address. Each contender gets its own set,
// so that no contender warms another's connection pools.
type clientSet struct {
	clients  []*redis.Client
	counters []*cmdCounter
}

func newClientSet(addrs []string) *clientSet { return newClientSetWith(addrs, nil) }

// newClientSetWith is newClientSet with go-redis options changed by opt.
func newClientSetWith(addrs []string, opt func(*redis.Options)) *clientSet {
	s := &clientSet{}
	for _, a := range addrs {
		o := &redis.Options{Addr: a}
		if opt != nil {
			opt(o)
		}
		c := redis.NewClient(o)
		ctr := newCmdCounter()
		c.AddHook(ctr)
		s.clients = append(s.clients, c)
		s.counters = append(s.counters, ctr)
	}
	return s
}

func (s *clientSet) universal() []redis.UniversalClient {
	u := make([]redis.UniversalClient, len(s.clients))
	for i, c := range s.clients {
		u[i] = c
	}
	return u
}

func (s *clientSet) count(on bool) {
	for _, c := range s.counters {
		c.on.Store(on)
	}
}

func (s *clientSet) snapshot() counts {
	total := counts{byName: map[string]int64{}}
	for _, c := range s.counters {
		total = total.add(c.snapshot())
	}
	return total
}

func (s *clientSet) close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
}

// cluster is the set of redis-servers the harness started.
type cluster struct {
	servers []*redistest.Server
	admin   []*redis.Client // one per server, for INFO and FLUSHALL
}

func startCluster(tb *harnessTB, n int) *cluster {
	cl := &cluster{servers: redistest.StartN(tb, n, redistest.Options{})}
	for _, s := range cl.servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		tb.Cleanup(func() { _ = c.Close() })
		cl.admin = append(cl.admin, c)
	}
	return cl
}

func (cl *cluster) addrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = cl.servers[i].Addr()
	}
	return a
}

// flush empties every server between measures, so that no measure pays for
// the keys of another.
func (cl *cluster) flush(ctx context.Context) {
	for _, c := range cl.admin {
		_ = c.FlushAll(ctx).Err()
	}
}

// redisVersion reads redis_version from the first server.
func (cl *cluster) redisVersion(ctx context.Context) string {
	info, err := cl.admin[0].Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	return infoField(info, "redis_version")
}

// commandCalls sums, over the first n servers, the calls of the named
// commands from INFO commandstats.
func (cl *cluster) commandCalls(ctx context.Context, n int, names ...string) int64 {
	var total int64
	for _, c := range cl.admin[:n] {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			continue
		}
		for _, name := range names {
			// cmdstat_subscribe:calls=3,usec=...
			line := infoField(info, "cmdstat_"+name)
			if rest, ok := strings.CutPrefix(line, "calls="); ok {
				if i := strings.IndexByte(rest, ','); i >= 0 {
					rest = rest[:i]
				}
				v, _ := strconv.ParseInt(rest, 10, 64)
				total += v
			}
		}
	}
	return total
}

// serverCPU returns the CPU time (user + system) the first n servers have
// used, from INFO cpu.
func (cl *cluster) serverCPU(ctx context.Context, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i, c := range cl.admin[:n] {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			continue
		}
		u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
		s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
		out[i] = time.Duration((u + s) * float64(time.Second))
	}
	return out
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
