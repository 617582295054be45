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

// Name is the name redistest reads to tell smoke tests apart.
func (*harnessTB) Name() string { return "bench" }

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

// sentCounter is a go-redis hook that counts the commands a client sends,
// pipelined ones included, once enabled. It is the client's side of the
// servers' count: a server's total_commands_processed also counts every
// command a script runs (redis.call), so an EVALSHA that reads and deletes
// a key counts 3 there and 1 here. Pub/sub commands bypass the hooks.
type sentCounter struct {
	on   atomic.Bool
	cmds atomic.Int64
}

// add counts n commands sent, while counting is on: for a client that has
// no go-redis hooks (the rueidis floor).
func (c *sentCounter) add(n int64) {
	if c.on.Load() {
		c.cmds.Add(n)
	}
}

func (c *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(1)
		return next(ctx, cmd)
	}
}

func (c *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// clientSet is one go-redis client per node, as a user would build them:
// go-redis defaults apart from the address. Each contender gets its own set,
// so that no contender warms another's connection pools.
type clientSet struct {
	clients []*redis.Client
	sent    sentCounter // shared by the clients
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
		c.AddHook(&s.sent)
		s.clients = append(s.clients, c)
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

// countSent turns the count of sent commands on or off.
func (s *clientSet) countSent(on bool) { s.sent.on.Store(on) }

// sentSoFar is the number of commands sent while counting was on.
func (s *clientSet) sentSoFar() int64 { return s.sent.cmds.Load() }

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

// serverCounts is what one redis-server has processed, from INFO stats and
// INFO commandstats. The servers count every command whatever the client's
// transport, so the harness counts there rather than in go-redis hooks.
type serverCounts struct {
	cmds   int64            // total_commands_processed
	reads  int64            // total_reads_processed: read events, one per batch a client wrote
	byName map[string]int64 // calls per command, from cmdstat_<name>
}

// counts reads the counters of the first n servers, with one INFO each.
func (cl *cluster) counts(ctx context.Context, n int) []serverCounts {
	out := make([]serverCounts, n)
	for i, c := range cl.admin[:n] {
		out[i].byName = map[string]int64{}
		info, err := c.Info(ctx, "stats", "commandstats").Result()
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				out[i].cmds, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
				out[i].reads, _ = strconv.ParseInt(v, 10, 64)
			} else if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
				// cmdstat_evalsha:calls=3,usec=...
				name, stats, _ := strings.Cut(rest, ":")
				if v, ok := strings.CutPrefix(stats, "calls="); ok {
					v, _, _ = strings.Cut(v, ",")
					out[i].byName[name], _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	return out
}

// since returns what the server processed between the snapshots b and a,
// less the harness's own INFO: a server counts a command after running it,
// so the earlier INFO is in the difference, and counts a read before
// running what it read, so the later INFO's read is.
func (a serverCounts) since(b serverCounts) serverCounts {
	d := serverCounts{byName: map[string]int64{}}
	for k, v := range a.byName {
		if v -= b.byName[k]; v != 0 && k != "info" {
			d.byName[k] = v
		}
	}
	d.cmds = a.cmds - b.cmds - (a.byName["info"] - b.byName["info"])
	d.reads = a.reads - b.reads - 1
	return d
}

// countsSince is since for each server.
func countsSince(after, before []serverCounts) []serverCounts {
	out := make([]serverCounts, len(after))
	for i := range after {
		out[i] = after[i].since(before[i])
	}
	return out
}

// total adds up the counts of several servers.
func total(cs []serverCounts) serverCounts {
	t := serverCounts{byName: map[string]int64{}}
	for _, c := range cs {
		t.cmds += c.cmds
		t.reads += c.reads
		for k, v := range c.byName {
			t.byName[k] += v
		}
	}
	return t
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

// sumDur adds up durations.
func sumDur(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
