package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// Severity ranks a Finding of Check. The zero value is SeverityOK, and a
// higher value is worse.
type Severity uint8

const (
	// SeverityOK is a check that passed.
	SeverityOK Severity = iota
	// SeverityInfo is worth knowing but needs no change: a setting that
	// could not be read, or one that is safe only as long as another stays
	// as it is.
	SeverityInfo
	// SeverityWarning weakens a guarantee under some faults: a restart
	// without persistence, for example, or clocks that disagree.
	SeverityWarning
	// SeverityCritical breaks the algorithm's assumptions now: a replica,
	// two nodes that are one server, an unreachable node, a node that
	// refuses the client's credentials or DB, a policy that evicts lock
	// keys, a node without scripting.
	SeverityCritical
)

// String returns "ok", "info", "warning" or "critical".
func (s Severity) String() string {
	switch s {
	case SeverityOK:
		return "ok"
	case SeverityInfo:
		return "info"
	case SeverityWarning:
		return "warning"
	}
	return "critical"
}

// Finding is one result of Check.
type Finding struct {
	// Severity ranks it.
	Severity Severity
	// Check names what was checked:
	//   - "reachable": the node answered (the finding names what happened
	//     when it did not: a refused connection, a host name that does not
	//     resolve, no answer in time);
	//   - "auth": the server accepted the client's credentials (a refusal,
	//     WRONGPASS or NOAUTH, is quoted);
	//   - "db": the server has the client's DB (SELECT 99 on a server of 16
	//     fails);
	//   - "role": it is a master, not a replica or a Sentinel (READONLY
	//     errors land here too);
	//   - "replicas": a failover cannot lose its acknowledged keys: it
	//     has no replicas to promote, or WithReplicaAck waits for them,
	//     and it has as many as WithReplicaAck asks for;
	//   - "cluster": a Redis Cluster node serves all its slots;
	//   - "distinct": no other node is the same server (run_id);
	//   - "maxmemory-policy": it cannot evict lock keys;
	//   - "persistence": it keeps acknowledged keys across a crash;
	//   - "fsync-ack": with WithFsyncAck only, WAITAOF can confirm in time
	//     that the node fsynced a write: the server has WAITAOF, appendonly is
	//     on, appendfsync fsyncs each write, and the user may run WAITAOF
	//     and set the barrier keys under the key prefix;
	//   - "clock": its clock runs at our rate (per node), and the nodes'
	//     clocks agree (Node -1);
	//   - "version": it is recent enough for the commands the library sends,
	//     and which of the commands it uses when it can the node has (see
	//     NodeInfo.Features);
	//   - "scripting": EVAL and EVALSHA work;
	//   - "acl": commands the user may not run (NOPERM), and the lock keys
	//     and release channels under the key prefix that it may not write;
	//   - "count": there are enough nodes to survive one failure, 3 at
	//     least (Node -1);
	//   - "quorum": every node could be checked; a minority that could not
	//     (any of the failures of "reachable", "auth", "db" and "acl") is a
	//     warning, since locks still work with fewer failures to spare, and
	//     a majority is critical, since no lock can be taken (Node -1).
	Check string
	// Node is the node's index in the slice given to New, or -1 for a
	// finding about the deployment as a whole.
	Node int
	// Addr is the node's address, "" when Node is -1.
	Addr string
	// Message says what was found.
	Message string
	// Fix says what to do about it; "" when nothing needs doing.
	Fix string
}

// NodeInfo is what Check learned about one node. A field that could not be
// read is left at its zero value; the findings say why.
type NodeInfo struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Role is "master", "slave" or "sentinel", from ROLE (or INFO
	// replication when ROLE fails).
	Role string
	// ReplicaOf is the host:port of the node's master when Role is
	// "slave".
	ReplicaOf string
	// RunID identifies the server process, from INFO server.
	RunID string
	// Server is the server's name, from INFO server's server_name: "valkey"
	// for Valkey, and "redis" for Redis, which does not name itself.
	Server string
	// Version is the server's own version, from INFO server: redis_version
	// on Redis, valkey_version on Valkey (whose redis_version is that of the
	// Redis it is compatible with: 7.2.4 for Valkey 8).
	Version string
	// Features lists the commands the library uses when a node has them,
	// among those the node has, judged by Server and Version, in this
	// order: "WAITAOF", which WithFsyncAck needs (Redis 7.2, Valkey 7.2);
	// "SET GET", SET with the GET option, which acquisitions use with NX
	// from Redis 7.0 on (Redis 6.2, Valkey 7.2); "SPUBLISH", shard pub/sub,
	// which releases on Redis Cluster nodes announce with (Redis 7.0,
	// Valkey 7.2). Nil when the version could not be read.
	Features []string
	// MaxmemoryPolicy and Maxmemory (in bytes; 0 means no limit) are the
	// node's settings of those names, from CONFIG GET or else INFO memory.
	MaxmemoryPolicy string
	Maxmemory       int64
	// AppendOnly and AppendFsync are the node's settings of those names,
	// from CONFIG GET; AppendOnly falls back to INFO persistence, and
	// AppendFsync is then "".
	AppendOnly  bool
	AppendFsync string
	// RTT is the round trip of Check's first request to the node, which
	// carried every read but the second clock sample.
	RTT time.Duration
	// ClockOffset is the node's clock (TIME) less our wall clock, at the
	// middle of the round trip: of the two samples, the one with the
	// shorter round trip, to within half of it.
	ClockOffset time.Duration
	// ClockRate is how far the node's clock moved per unit of our
	// monotonic clock between two TIME samples, 1 for a perfect match; 0
	// when it was not measured.
	ClockRate float64
	// Err is why the node could not be checked; the other fields but
	// Index and Addr are then zero.
	Err error
}

// Report is the result of Check. It is a plain value, safe to read from
// many goroutines.
type Report struct {
	// Nodes holds what each node reported, in the order given to New.
	Nodes []NodeInfo
	// Findings holds every finding, passed checks included (SeverityOK),
	// the worst first, then by node (-1 first), then in the order of the
	// checks.
	Findings []Finding
}

// Worst returns the highest severity among the findings; SeverityOK when
// there are none.
func (r *Report) Worst() Severity {
	w := SeverityOK
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// String renders the report for a terminal: a table of the nodes, then every
// finding that is not SeverityOK with its fix, then a summary line. A
// failed node's row ends with why it failed.
func (r *Report) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDR\tROLE\tSERVER\tVERSION\tRUN_ID\tMAXMEMORY-POLICY\tAOF\tRTT\tCLOCK\tFEATURES")
	for _, n := range r.Nodes {
		if n.Err != nil {
			// In the last column, which does not widen the others.
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t-\t-\t-\t-\t-\tfailed: %v\n", n.Index, n.Addr, n.Err)
			continue
		}
		aof := "no"
		if n.AppendOnly {
			aof = "yes"
			if n.AppendFsync != "" {
				aof += "/" + n.AppendFsync
			}
		}
		clock := "-"
		if n.ClockOffset != 0 || n.ClockRate != 0 {
			clock = n.ClockOffset.Round(10 * time.Microsecond).String()
			if n.ClockOffset >= 0 {
				clock = "+" + clock
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", n.Index, n.Addr, dash(n.Role), dash(n.Server),
			dash(n.Version), dash(short(n.RunID)), dash(n.MaxmemoryPolicy), aof, n.RTT.Round(10*time.Microsecond), clock,
			dash(strings.Join(n.Features, ",")))
	}
	_ = tw.Flush()
	passed := 0
	for _, f := range r.Findings {
		if f.Severity == SeverityOK {
			passed++
			continue
		}
		where := "all nodes"
		if f.Node >= 0 {
			where = fmt.Sprintf("node %d (%s)", f.Node, f.Addr)
		}
		fmt.Fprintf(&b, "\n%-8s  %s  %s: %s\n", strings.ToUpper(f.Severity.String()), f.Check, where, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(&b, "          fix: %s\n", f.Fix)
		}
	}
	fmt.Fprintf(&b, "\nworst: %s; %d findings, %d checks passed\n", r.Worst(), len(r.Findings)-passed, passed)
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const (
	// checkMinTimeout is the least Check waits for a node's reads: they
	// are more than an acquisition sends, and a node timeout tuned for
	// SET may be too short for INFO on a busy node.
	checkMinTimeout = 500 * time.Millisecond
	// checkRateGap separates a node's two TIME samples. Long enough to
	// see a rate off by the default drift factor (1% is 1ms here) on a
	// LAN, short enough to keep Check quick.
	checkRateGap = 100 * time.Millisecond
	// checkClockSpread is how far apart the nodes' clocks may be before
	// Check warns: NTP keeps them within milliseconds, so a second apart
	// means a clock nobody synchronises, which will be stepped some day.
	checkClockSpread = time.Second
	// checkClockResolution is the error of one TIME sample beyond the
	// round trip: TIME reports whole microseconds.
	checkClockResolution = 10 * time.Microsecond
)

// checkKey is the lock key, under the Client's prefix, whose keys and channel
// Check writes to find an ACL that does not cover them.
const checkKey = "redlock-check"

// checkKeysSrc runs, on a probe lock key and the marker and fence counter
// derived from it, each command that the lock scripts run, so that an ACL
// that refuses one of them inside a script shows (a reader, a permit or a
// new fence counter calls TIME, for one). It writes only where all three
// keys are missing, gives each key a TTL as soon as it exists, deletes them
// at once, and returns an empty string or the first refusal, as
// "COMMAND: error".
const checkKeysSrc = `local k, w, f, v = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local function try(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    return false, (...) .. ': ' .. r.err
  end
  return true, r
end
local ok, r = try('TIME')
if not ok then return r end
ok, r = try('EXISTS', k, w, f)
if not ok then return r end
if r ~= 0 then return '' end
for _, c in ipairs({
  {'SET', k, v, 'PX', '1000', 'NX'}, {'PTTL', k}, {'PEXPIRE', k, '1000'}, {'GET', k}, {'TYPE', k}, {'DEL', k},
  {'HSET', k, 'mode', 'read'}, {'PEXPIRE', k, '1000'}, {'HGET', k, 'mode'}, {'HMGET', k, 'mode'}, {'HKEYS', k},
  {'HGETALL', k}, {'HLEN', k}, {'HDEL', k, 'mode'}, {'DEL', k},
  {'ZADD', k, '1', v}, {'PEXPIRE', k, '1000'}, {'ZSCORE', k, v}, {'ZRANGE', k, '0', '-1', 'WITHSCORES'},
  {'ZREMRANGEBYSCORE', k, '0', '0'}, {'ZCARD', k}, {'ZREM', k, v}, {'DEL', k},
  {'SET', w, '1', 'PX', '1000'}, {'DEL', w}, {'INCR', f}, {'PEXPIRE', f, '1000'}, {'DEL', f},
}) do
  ok, r = try(unpack(c))
  if not ok then
    redis.pcall('DEL', k, w, f)
    return r
  end
end
return ''`

// checkSrc is a script that only returns, to see that EVAL and EVALSHA work.
const checkSrc = "return 1"

var checkScript = redis.NewScript(checkSrc)

// Check verifies the nodes against the assumptions of docs/SAFETY.md, and
// reports each finding with its severity and fix: there are at least 3
// nodes; every node answers, accepts the client's credentials and DB, is a
// master and a distinct server, cannot evict lock keys, keeps acknowledged
// writes across a crash, runs scripts and a recent enough Redis or Valkey,
// can confirm its fsyncs in time with WAITAOF when the Client uses
// WithFsyncAck, and has a clock that runs at our rate and agrees with the
// others'; and how many of them may still fail. Each node's NodeInfo says
// which server it is and which of the commands the library uses when it
// can it has. It only reads (ROLE, INFO, CONFIG GET, TIME, and a
// script that returns 1), apart from a probe of the ACL that writes keys
// and a release channel under the key prefix and deletes the keys at once
// (with WithFsyncAck, also the SET of a barrier key that expires after a
// millisecond, as each vote's batch has, and a WAITAOF that waits for
// nothing), and never changes a node's settings.
//
// The nodes are checked at once. Each gets as long as the node timeout, at
// least 500ms, plus the 100ms between its two clock samples; a node that has
// not answered by then is reported unreachable, and Check returns without
// it. On healthy nodes Check takes a little over 100ms.
//
// Check returns an error only after Close (ErrClosed), or when ctx ends
// first (the error wraps ctx.Err()); the nodes' problems, unreachable
// nodes included, are findings.
func (c *Client) Check(ctx context.Context) (*Report, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: check: %w", err)
	}
	wait := max(c.cfg.nodeTimeout, checkMinTimeout) + checkRateGap
	deadline := time.Now().Add(wait)
	// The reads are detached from ctx, so that an ended ctx is reported as
	// such rather than as failed nodes, and bounded by our own deadline:
	// go-redis ignores a ctx deadline on reads unless
	// ContextTimeoutEnabled, so Check also stops waiting at the deadline.
	// A read to a hung node may outlive Check, until go-redis's
	// ReadTimeout; c.wg tracks it for Close.
	//
	// One round (see fanout): each node's reads, then its clock again. A
	// node's probe is published as soon as it has come, so that a node
	// too slow for its second clock sample still shows what it answered;
	// the sample is read only when the node's answer was gathered, and so
	// written before it. A late answer writes only its own node's.
	reads := make([]checkRead, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op: "check", quorum: c.quorum, timeout: time.Until(deadline), waitAll: true, waitStalled: true, diagnostic: true, stop: c.done,
		start: func(ctx context.Context, lg *leg) {
			lg.wait(ctx, func(pctx context.Context) {
				r := &reads[lg.n.index]
				p := lg.n.probe(pctx)
				r.probe.Store(p)
				r.second = lg.n.second(pctx, p)
				lg.deliver(1, nil)
			})
		},
	})
	o.finish(nil)
	if err := checkEnded(o, ctx); err != nil {
		return nil, err
	}
	probes := make([]*probe, len(c.nodes))
	seconds := make([]*clockSample, len(c.nodes))
	for i := range reads {
		probes[i] = reads[i].probe.Load()
		if o.got[i] {
			seconds[i] = reads[i].second
		}
	}
	facts := make([]nodeFacts, len(c.nodes))
	for i, n := range c.nodes {
		facts[i] = n.facts(probes[i], seconds[i], wait)
	}
	r := &Report{Nodes: make([]NodeInfo, len(facts)), Findings: c.findings(facts)}
	for i, f := range facts {
		r.Nodes[i] = f.NodeInfo
	}
	return r, nil
}

// checkRead is what Check's round read of one node.
type checkRead struct {
	probe  atomic.Pointer[probe] // set once the probe has come
	second *clockSample          // written before the node answers its leg
}

// clockSample is one reading of a node's clock, with our clock before and
// after the request.
type clockSample struct {
	node       time.Time
	sent, recv time.Time
	err        error
}

func (s *clockSample) rtt() time.Duration { return s.recv.Sub(s.sent) }

// mid is our clock when the node most likely read its own.
func (s *clockSample) mid() time.Time { return s.sent.Add(s.rtt() / 2) }

// probe holds the replies of Check's first request to a node: every read
// in one pipeline. It belongs to the goroutine that fills it until it is
// sent to Check.
type probe struct {
	sent, recv  time.Time
	time        *redis.TimeCmd
	role        *redis.Cmd
	server      *redis.StringCmd
	replication *redis.StringCmd
	memory      *redis.StringCmd
	persistence *redis.StringCmd
	cfgMemory   *redis.MapStringStringCmd
	cfgAOF      *redis.MapStringStringCmd
	eval        *redis.Cmd
	evalSha     *redis.Cmd
	// keys writes, and deletes at once, a probe lock key and the keys the
	// library derives from it; publish publishes on its release channel.
	// They find an ACL that does not cover the Client's key prefix.
	keys    *redis.Cmd
	publish *redis.IntCmd
	// barrier publishes on the probe's barrier channel, with
	// WithReplicaAck only (see transport.Acker).
	barrier *redis.IntCmd
	// mark sets the probe's barrier key as each vote's batch does, and
	// waitAOF runs a WAITAOF that waits for nothing, with WithFsyncAck
	// only (see transport.FsyncAcker): they find an ACL that refuses
	// either, which fails every vote.
	mark    *redis.Cmd
	waitAOF *redis.Cmd
	// cluster is CLUSTER INFO, for a Redis Cluster node only.
	cluster *redis.StringCmd
}

// cmds lists the probe's commands with the names the findings use.
func (p *probe) cmds() []struct {
	name string
	cmd  redis.Cmder
} {
	return []struct {
		name string
		cmd  redis.Cmder
	}{
		{"TIME", p.time}, {"ROLE", p.role}, {"INFO server", p.server}, {"INFO replication", p.replication},
		{"INFO memory", p.memory}, {"INFO persistence", p.persistence}, {"CONFIG GET maxmemory*", p.cfgMemory},
		{"CONFIG GET *append*", p.cfgAOF}, {"EVAL", p.eval}, {"EVALSHA", p.evalSha},
	}
}

// probe reads everything Check needs from the node in one round trip.
func (n *node) probe(ctx context.Context) *probe {
	p := &probe{}
	pl := n.client.Pipeline()
	p.time = pl.Time(ctx)
	p.role = pl.Do(ctx, "role")
	p.server = pl.Info(ctx, "server")
	p.replication = pl.Info(ctx, "replication")
	p.memory = pl.Info(ctx, "memory")
	p.persistence = pl.Info(ctx, "persistence")
	// Globs, because CONFIG GET takes one parameter before Redis 7.0.
	p.cfgMemory = pl.ConfigGet(ctx, "maxmemory*")
	p.cfgAOF = pl.ConfigGet(ctx, "*append*")
	p.eval = pl.Eval(ctx, checkSrc, nil)
	p.evalSha = pl.EvalSha(ctx, checkScript.Hash(), nil)
	pk := n.c.cfg.keyPrefix + checkKey
	p.keys = pl.Eval(ctx, checkKeysSrc, []string{pk, keyspace.Waiting(pk), keyspace.Fence(pk)}, "redlock check")
	p.publish = pl.Publish(ctx, keyspace.Channel(pk), "redlock check")
	if n.c.cfg.replicaAck > 0 {
		p.barrier = pl.Publish(ctx, keyspace.Barrier(pk), "redlock check")
	}
	if n.c.cfg.fsyncAck {
		p.mark = pl.Do(ctx, "set", keyspace.Barrier(pk), "", "px", 1)
		// Without a local fsync or a replica to wait for, WAITAOF answers
		// at once, even without an append-only file.
		p.waitAOF = pl.Do(ctx, "waitaof", 0, 0, 1)
	}
	if n.cluster != nil {
		p.cluster = pl.ClusterInfo(ctx)
	}
	p.sent = time.Now()
	n.execDiag(ctx, pl) // each command keeps its own error
	p.recv = time.Now()
	return p
}

// second reads the node's clock again, checkRateGap after p was sent.
func (n *node) second(ctx context.Context, p *probe) *clockSample {
	s := &clockSample{err: p.time.Err()}
	if s.err != nil {
		return s
	}
	t := time.NewTimer(time.Until(p.sent.Add(checkRateGap)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		s.err = nodeErr(ctx.Err())
		return s
	}
	s.sent = time.Now()
	s.node, s.err = n.client.Time(ctx).Result()
	s.recv = time.Now()
	s.err = nodeErr(s.err)
	return s
}

// checkEnded returns Check's error when one of its rounds ended early: ctx
// ended (the error wraps ctx.Err()), or the Client was closed.
func checkEnded(o *outcome, ctx context.Context) error {
	switch {
	case errors.Is(o.ctxErr, ErrClosed):
		return ErrClosed
	case o.ctxErr != nil:
		return fmt.Errorf("redlock: check: %w", o.ctxErr)
	case ctx.Err() != nil:
		return fmt.Errorf("redlock: check: %w", ctx.Err())
	}
	return nil
}

// nodeFacts is what Check made of one node's replies, for findings.
type nodeFacts struct {
	NodeInfo
	reached    bool             // NodeInfo.Err is nil
	failover   string           // "Redis Cluster" or "Sentinel" when the client fails over
	replicas   int              // a master's connected replicas
	cluster    string           // CLUSTER INFO of a cluster node; "" otherwise
	clusterErr error            // why CLUSTER INFO could not be read
	readOnly   error            // a READONLY reply to any command
	denied     []string         // commands refused with NOPERM
	keysDenied error            // NOPERM to the probe's lock keys
	scriptErr  string           // a command the lock scripts run, refused inside the probe's script
	chanDenied error            // NOPERM to the probe's release channel
	barDenied  error            // NOPERM to the probe's barrier channel (WithReplicaAck)
	markDenied error            // NOPERM to the probe's barrier key (WithFsyncAck)
	waitAOF    error            // the probe's WAITAOF's error (WithFsyncAck)
	errs       map[string]error // why a check could not read its setting, by check
	aofKnown   bool             // AppendOnly was read
	rewrite    string           // no-appendfsync-on-rewrite
	usedMem    int64            // used_memory, 0 when unknown
	serverOK   bool             // INFO server answered (the guard needs it)
	timeOK     bool             // TIME answered (the guard needs it)
	eval       error            // EVAL's error
	evalSha    error            // EVALSHA's error, NOSCRIPT excepted
	first      clockSample      // the TIME of the probe
	second     clockSample      // the later TIME
	// offsetFrom is the sample ClockOffset comes from: the one with the
	// shorter round trip.
	offsetFrom clockSample
	// redisVersion is INFO server's redis_version: Version, on Redis; on
	// another server, the Redis version it is compatible with.
	redisVersion string
}

// facts turns a node's replies into facts; p is nil when the node did not
// answer within wait, and second when the second clock sample did not come.
func (n *node) facts(p *probe, second *clockSample, wait time.Duration) nodeFacts {
	f := nodeFacts{NodeInfo: NodeInfo{Index: n.index, Addr: n.addr}, errs: map[string]error{}}
	switch rc := n.client.(type) {
	case *redis.ClusterClient:
		f.failover = "Redis Cluster"
	case *redis.Client:
		if rc.Options().Addr == failoverAddr {
			f.failover = "Sentinel"
		}
	}
	if p == nil {
		f.Err = fmt.Errorf("%w (Check waited %v)", ErrNodeTimeout, wait)
		return f
	}
	var firstErr error
	failed := 0
	for _, c := range p.cmds() {
		err := c.cmd.Err()
		if err == nil {
			continue
		}
		failed++
		firstErr = cmp.Or(firstErr, err)
		switch {
		case redis.IsPermissionError(err):
			f.denied = append(f.denied, c.name)
		case redis.IsReadOnlyError(err):
			f.readOnly = cmp.Or(f.readOnly, err)
		}
	}
	if err := p.keys.Err(); redis.IsPermissionError(err) {
		f.keysDenied = err
	} else if err == nil {
		f.scriptErr, _ = p.keys.Val().(string)
	}
	if err := p.publish.Err(); redis.IsPermissionError(err) {
		f.chanDenied = err
	}
	if p.barrier != nil {
		if err := p.barrier.Err(); redis.IsPermissionError(err) {
			f.barDenied = err
		}
	}
	if p.mark != nil {
		if err := p.mark.Err(); redis.IsPermissionError(err) {
			f.markDenied = err
		}
		f.waitAOF = p.waitAOF.Err()
	}
	if failed == len(p.cmds()) {
		// Down, refused, unauthenticated, loading...: not a usable node.
		f.Err = nodeErr(firstErr)
		return f
	}
	f.reached = true
	f.RTT = p.recv.Sub(p.sent)
	if p.cluster != nil {
		f.cluster, f.clusterErr = p.cluster.Result()
	}

	if role, err := p.role.Slice(); err == nil && len(role) > 0 {
		f.Role, _ = role[0].(string)
		switch f.Role {
		case "slave":
			if len(role) >= 3 {
				host, _ := role[1].(string)
				f.ReplicaOf = net.JoinHostPort(host, fmt.Sprint(role[2]))
			}
		case "master":
			if len(role) >= 3 {
				if rs, ok := role[2].([]any); ok {
					f.replicas = len(rs)
				}
			}
		}
	} else if info, ierr := p.replication.Result(); ierr == nil && infoField(info, "role") != "" {
		f.Role = infoField(info, "role")
		if f.Role == "slave" {
			f.ReplicaOf = net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
		}
		f.replicas, _ = strconv.Atoi(infoField(info, "connected_slaves"))
	} else {
		f.errs["role"] = fmt.Errorf("ROLE: %w; INFO replication: %w", cmp.Or(err, errEmptyReply), cmp.Or(ierr, errEmptyReply))
	}

	if info, err := p.server.Result(); err == nil {
		f.serverOK = true
		f.RunID = infoField(info, "run_id")
		f.Server, f.Version, f.redisVersion = serverOf(info)
		f.Features = featuresOf(&f)
		if f.RunID == "" {
			f.errs["distinct"] = errors.New("INFO server has no run_id")
		}
		if _, ok := parseVersion(f.Version); !ok {
			f.errs["version"] = fmt.Errorf("INFO server has no %s_version", f.Server)
		}
	} else {
		f.errs["distinct"] = fmt.Errorf("INFO server: %w", err)
		f.errs["version"] = f.errs["distinct"]
	}

	memInfo, memErr := p.memory.Result()
	if memErr == nil {
		f.usedMem, _ = strconv.ParseInt(infoField(memInfo, "used_memory"), 10, 64)
	}
	if m, err := p.cfgMemory.Result(); err == nil && m["maxmemory-policy"] != "" {
		f.MaxmemoryPolicy = m["maxmemory-policy"]
		f.Maxmemory, _ = strconv.ParseInt(m["maxmemory"], 10, 64)
	} else if memErr == nil && infoField(memInfo, "maxmemory_policy") != "" {
		// CONFIG is often renamed away or denied on managed servers.
		f.MaxmemoryPolicy = infoField(memInfo, "maxmemory_policy")
		f.Maxmemory, _ = strconv.ParseInt(infoField(memInfo, "maxmemory"), 10, 64)
	} else {
		f.errs["maxmemory-policy"] = fmt.Errorf("CONFIG GET: %w; INFO memory: %w", cmp.Or(err, errEmptyReply), cmp.Or(memErr, errEmptyReply))
	}

	if m, err := p.cfgAOF.Result(); err == nil && m["appendonly"] != "" {
		f.aofKnown = true
		f.AppendOnly = m["appendonly"] == "yes"
		f.AppendFsync = m["appendfsync"]
		f.rewrite = m["no-appendfsync-on-rewrite"]
	} else if info, ierr := p.persistence.Result(); ierr == nil && infoField(info, "aof_enabled") != "" {
		f.aofKnown = true
		f.AppendOnly = infoField(info, "aof_enabled") == "1"
		f.errs["persistence"] = fmt.Errorf("CONFIG GET: %w", cmp.Or(err, errEmptyReply))
	} else {
		f.errs["persistence"] = fmt.Errorf("CONFIG GET: %w; INFO persistence: %w", cmp.Or(err, errEmptyReply), cmp.Or(ierr, errEmptyReply))
	}

	f.eval = p.eval.Err()
	if err := p.evalSha.Err(); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		// NOSCRIPT means EVALSHA runs; the script cache just lost it.
		f.evalSha = err
	}

	f.first = clockSample{sent: p.sent, recv: p.recv}
	f.first.node, f.first.err = p.time.Result()
	f.timeOK = f.first.err == nil
	if !f.timeOK {
		f.errs["clock"] = fmt.Errorf("TIME: %w", f.first.err)
	}
	switch {
	case !f.timeOK:
		f.second = clockSample{err: f.first.err}
	case second == nil:
		f.second = clockSample{err: fmt.Errorf("%w (Check waited %v)", ErrNodeTimeout, wait)}
	default:
		f.second = *second
	}
	f.offsetFrom = f.first
	if f.second.err == nil {
		if local := f.second.mid().Sub(f.first.mid()); local > 0 {
			f.ClockRate = float64(f.second.node.Sub(f.first.node)) / float64(local)
		}
		if f.second.rtt() < f.first.rtt() {
			// The first round trip may include a dial.
			f.offsetFrom = f.second
		}
	}
	if f.timeOK {
		f.ClockOffset = f.offsetFrom.node.Sub(f.offsetFrom.mid())
	}
	return f
}

// errEmptyReply stands in for a reply that came without an error but
// without the value either.
var errEmptyReply = errors.New("no value in the reply")

// infoField returns the value of one "name:value" line of INFO.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parseVersion reads "major.minor.patch".
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(s, ".", 3)
	if s == "" || len(parts) < 2 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// serverOf reads a server's name and its own version from INFO server, and
// the Redis version it is compatible with. Valkey names itself
// (server_name) and gives its version as valkey_version; Redis names
// itself nowhere.
func serverOf(info string) (name, version, redisVersion string) {
	redisVersion = infoField(info, "redis_version")
	name = strings.ToLower(infoField(info, "server_name"))
	if name == "" || name == "redis" {
		return "redis", redisVersion, redisVersion
	}
	return name, cmp.Or(infoField(info, name+"_version"), redisVersion), redisVersion
}

// serverFeatures are the commands the library uses when a node has them,
// with the first version of Redis and of Valkey that has each.
var serverFeatures = []struct {
	name          string
	redis, valkey [3]int
}{
	{"WAITAOF", [3]int{7, 2, 0}, [3]int{7, 2, 0}},
	{"SET GET", [3]int{6, 2, 0}, [3]int{7, 2, 0}},
	{"SPUBLISH", [3]int{7, 0, 0}, [3]int{7, 2, 0}},
}

// featuresOf lists the serverFeatures a node has, by its server and
// version; nil when the version is unknown. A server that is neither Redis
// nor Valkey is judged by the Redis version it is compatible with.
func featuresOf(f *nodeFacts) []string {
	valkey := f.Server == "valkey"
	version := f.Version
	if !valkey && f.redisVersion != "" {
		version = f.redisVersion
	}
	v, ok := parseVersion(version)
	if !ok {
		return nil
	}
	out := []string{}
	for _, ft := range serverFeatures {
		first := ft.redis
		if valkey {
			first = ft.valkey
		}
		if slices.Compare(v[:], first[:]) >= 0 {
			out = append(out, ft.name)
		}
	}
	return out
}

// serverName is how the findings name a node's server: "Redis 7.0.15",
// "Valkey 8.0.1".
func serverName(f *nodeFacts) string {
	switch f.Server {
	case "", "redis":
		return "Redis " + f.Version
	case "valkey":
		return "Valkey " + f.Version
	}
	return fmt.Sprintf("%s %s (Redis %s)", f.Server, f.Version, f.redisVersion)
}

// findings judges every node's facts, and sorts the findings.
func (c *Client) findings(facts []nodeFacts) []Finding {
	var out []Finding
	add := func(sev Severity, check string, f *nodeFacts, msg, fix string) {
		fd := Finding{Severity: sev, Check: check, Node: -1, Message: msg, Fix: fix}
		if f != nil {
			fd.Node, fd.Addr = f.Index, f.Addr
		}
		out = append(out, fd)
	}
	down := 0
	for i := range facts {
		if !facts[i].reached {
			down++
		}
	}
	maxTTL := c.maxTTL()
	for i := range facts {
		f := &facts[i]
		if !f.reached {
			c.checkFailed(f, down, len(facts), add)
			continue
		}
		add(SeverityOK, "reachable", f, fmt.Sprintf("answered in %v", f.RTT.Round(10*time.Microsecond)), "")
		c.checkRole(f, facts, add)
		checkCluster(f, add)
		c.checkDistinct(f, facts, add)
		checkMemory(f, add)
		c.checkPersistence(f, maxTTL, add)
		c.checkFsyncAck(f, add)
		checkVersion(f, add)
		checkScripting(f, add)
		c.checkClock(f, add)
		c.checkACL(f, add)
		c.checkKeyspace(f, add)
	}
	c.checkCount(len(facts), add)
	// A node that answered but can never take a lock (a replica, scripts
	// off or refused) fails every vote as surely as one that is down.
	unable := map[int]string{}
	for _, fd := range out {
		switch fd.Check {
		case "role", "acl", "scripting", "version", "cluster", "fsync-ack":
			if fd.Severity == SeverityCritical && fd.Node >= 0 {
				if _, dup := unable[fd.Node]; !dup {
					unable[fd.Node] = fd.Check
				}
			}
		}
	}
	c.checkQuorum(facts, down, unable, add)
	c.checkSpread(facts, add)
	slices.SortStableFunc(out, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(b.Severity, a.Severity), cmp.Compare(a.Node, b.Node))
	})
	return out
}

type addFunc func(sev Severity, check string, f *nodeFacts, msg, fix string)

// troubleOf names what kept a node from being checked: the check whose
// finding reports it ("auth", "db", "acl" or "reachable"), and a few words
// for the deployment's summary.
func troubleOf(err error) (check, what string) {
	var dns *net.DNSError
	switch {
	case isAuthErr(err):
		return "auth", "refused the client's credentials"
	case isDBErr(err):
		return "db", "refused the client's DB"
	case redis.IsPermissionError(err):
		return "acl", "refused every command to the client's user"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "reachable", "has a host name that does not resolve"
	case errors.As(err, &dns):
		return "reachable", "has a host name that could not be looked up"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "reachable", "refused the connection"
	case errors.Is(err, ErrNodeTimeout):
		return "reachable", "did not answer in time"
	}
	return "reachable", "did not answer"
}

// checkFailed reports a node that Check could not read, under the check
// that names why: its credentials or DB refused, an ACL that allows none of
// Check's commands, or no answer at all. down is the number of such nodes,
// of n.
func (c *Client) checkFailed(f *nodeFacts, down, n int, add addFunc) {
	left := fmt.Sprintf("with %d of %d nodes failing, %d more can fail before no lock can be taken", down, n, n-down-c.quorum)
	if n-down < c.quorum {
		left = fmt.Sprintf("with %d of %d nodes failing, fewer than the quorum of %d are up, so no lock can be taken", down, n, c.quorum)
	}
	check, what := troubleOf(f.Err)
	switch check {
	case "auth":
		add(SeverityCritical, "auth", f, fmt.Sprintf("the server refused the client's credentials: %v; %s", f.Err, left),
			"give the node's go-redis client the user and password the server expects (Options.Username, Options.Password), "+
				"or give that user that password on the server (ACL SETUSER <user> on >password, or requirepass for the default user)")
	case "db":
		add(SeverityCritical, "db", f, fmt.Sprintf("the server refused the client's DB: %v; %s", f.Err, left),
			"give the node's go-redis client a DB the server has (Options.DB: 0 to databases-1, 16 by default; "+
				"a Redis Cluster has DB 0 only), or raise databases in the server's config")
	case "acl":
		add(SeverityCritical, "acl", f, fmt.Sprintf("the user may run none of the commands Check sends, "+
			"and the locks need some of them: %v; %s", f.Err, left),
			"grant the client's user the commands the library runs (+@all, or see docs/DEPLOYMENT.md)")
	default:
		add(SeverityCritical, "reachable", f, fmt.Sprintf("the node %s: %v; %s", what, f.Err, left),
			"bring the node back, or fix its address in its go-redis client")
	}
}

// minNodes is the fewest nodes with which a lock survives the failure of
// one: Redlock wants independent masters, 3 at least and usually 5.
const minNodes = 3

// checkCount reports a deployment of fewer than minNodes nodes, whose
// quorum is every node.
func (c *Client) checkCount(n int, add addFunc) {
	if n >= minNodes {
		add(SeverityOK, "count", nil, fmt.Sprintf("%d nodes, a quorum of %d: %d of them may fail and locks still work", n, c.quorum, n-c.quorum), "")
		return
	}
	s := "s"
	if n == 1 {
		s = ""
	}
	add(SeverityWarning, "count", nil, fmt.Sprintf("%d node%s: the lock survives no node failure, and without persistence "+
		"a restart forgets it; Redlock wants independent masters, at least %d (5 is usual)", n, s, minNodes),
		fmt.Sprintf("run at least %d independent Redis masters, on machines that fail independently", minNodes))
}

// checkQuorum sums up the nodes that Check could not read (down of them):
// a minority leaves locks working with fewer failures to spare, which
// nothing else shows, since every call still succeeds; a majority leaves
// no quorum.
func (c *Client) checkQuorum(facts []nodeFacts, down int, unable map[int]string, add addFunc) {
	n := len(facts)
	down += len(unable)
	if down == 0 {
		add(SeverityOK, "quorum", nil, fmt.Sprintf("every node answered: %d can fail before no lock can be taken", n-c.quorum), "")
		return
	}
	var b strings.Builder
	for i := range facts {
		f := &facts[i]
		check, cannot := unable[f.Index]
		if f.reached && !cannot {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if cannot {
			fmt.Fprintf(&b, "node %d (%s) answered but cannot take a lock (see its %q finding)", f.Index, f.Addr, check)
			continue
		}
		_, what := troubleOf(f.Err)
		fmt.Fprintf(&b, "node %d (%s) %s: %s", f.Index, f.Addr, what, bare(f.Err))
	}
	const fix = "fix each node named here: each has a finding of its own that says how"
	if n-down < c.quorum {
		add(SeverityCritical, "quorum", nil, fmt.Sprintf("no lock can be taken: %d of %d nodes failed (%s), "+
			"leaving %d, fewer than the quorum of %d", down, n, b.String(), n-down, c.quorum), fix)
		return
	}
	add(SeverityWarning, "quorum", nil, fmt.Sprintf("locks work, but with fewer failures to spare: %d of %d nodes failed (%s), "+
		"so %d more can fail before no lock can be taken, where %d nodes should survive %d", down, n, b.String(),
		n-down-c.quorum, n, n-c.quorum), fix)
}

// checkCluster reports a Redis Cluster node's state: every slot must be
// served, or the locks whose keys live in the missing slots cannot be taken
// on that node.
func checkCluster(f *nodeFacts, add addFunc) {
	switch {
	case f.failover != "Redis Cluster":
	case f.clusterErr != nil:
		add(SeverityInfo, "cluster", f, fmt.Sprintf("could not read CLUSTER INFO: %v", f.clusterErr),
			"check the cluster by hand (CLUSTER INFO)")
	case infoField(f.cluster, "cluster_state") != "ok":
		add(SeverityCritical, "cluster", f, fmt.Sprintf("cluster_state is %s, with %s of 16384 slots ok",
			cmp.Or(infoField(f.cluster, "cluster_state"), "unknown"), cmp.Or(infoField(f.cluster, "cluster_slots_ok"), "?")),
			"bring the failed masters back, or give their slots to others: the locks whose keys live there cannot be taken on this node")
	case infoField(f.cluster, "cluster_slots_ok") != "16384":
		add(SeverityWarning, "cluster", f, fmt.Sprintf("%s of 16384 slots ok (%s in possible failure)",
			infoField(f.cluster, "cluster_slots_ok"), infoField(f.cluster, "cluster_slots_pfail")),
			"look at the masters that serve the other slots")
	default:
		add(SeverityOK, "cluster", f, fmt.Sprintf("cluster ok: %s masters serve all 16384 slots", infoField(f.cluster, "cluster_size")), "")
	}
}

func (c *Client) checkRole(f *nodeFacts, all []nodeFacts, add addFunc) {
	switch f.Role {
	case "master":
		if f.readOnly == nil {
			add(SeverityOK, "role", f, "master", "")
		}
	case "slave":
		of := "master " + f.ReplicaOf
		for _, o := range all {
			if o.Index != f.Index && o.Addr == f.ReplicaOf {
				of = fmt.Sprintf("node %d (%s)", o.Index, o.Addr)
			}
		}
		add(SeverityCritical, "role", f, fmt.Sprintf("the node is a replica of %s: it refuses lock writes (READONLY), "+
			"or, with replica-read-only no, keeps them only until its next sync, and its data is its master's, not its own", of),
			"give Redlock independent masters: REPLICAOF NO ONE on this node, or replace it with a master that replicates from no other node")
	case "sentinel":
		add(SeverityCritical, "role", f, "the node is a Sentinel, not a data node",
			"give Redlock the Redis masters themselves, not their Sentinels")
	case "":
		add(SeverityInfo, "role", f, fmt.Sprintf("could not read the role: %v", f.errs["role"]),
			"make sure by hand that the node is a master (ROLE)")
	default:
		add(SeverityCritical, "role", f, fmt.Sprintf("unknown role %q", f.Role), "give Redlock independent masters")
	}
	if f.readOnly != nil && f.Role != "slave" {
		add(SeverityCritical, "role", f, fmt.Sprintf("the node refused a command as read-only: %v", f.readOnly),
			"give Redlock independent masters that accept writes")
	}
	c.checkReplicas(f, add)
}

// checkReplicas says whether the node's replicas and failover can lose an
// acknowledged key, and whether WithReplicaAck covers it.
func (c *Client) checkReplicas(f *nodeFacts, add addFunc) {
	want := c.cfg.replicaAck
	switch {
	case f.Role != "master":
	case want > f.replicas:
		add(SeverityCritical, "replicas", f, fmt.Sprintf("WithReplicaAck(%d), but the master has %d connected replicas: "+
			"it can never say yes", want, f.replicas),
			fmt.Sprintf("attach at least %d replicas to every node, or lower WithReplicaAck", want))
	case f.replicas > 0 && f.failover == "Redis Cluster":
		add(SeverityWarning, "replicas", f, fmt.Sprintf("the shard's master has %d replicas, and Redis Cluster fails it over: "+
			"replication is asynchronous, so a promoted replica may lack lock keys the master acknowledged", f.replicas),
			"set cluster-replica-no-failover yes on the replicas, or keep a promoted replica out of the lock for the max TTL "+
				"(WithReplicaAck does not support cluster nodes)")
	case want > 0:
		add(SeverityOK, "replicas", f, fmt.Sprintf("%d replicas; a yes counts once %d of them have the key (WithReplicaAck)", f.replicas, want), "")
	case f.replicas > 0 && f.failover != "":
		add(SeverityWarning, "replicas", f, fmt.Sprintf("the master has %d replicas and a %s client fails it over: replication is "+
			"asynchronous, so a promoted replica may lack lock keys the master acknowledged", f.replicas, f.failover),
			"use WithReplicaAck(1), so that a yes counts only once a replica has the key (see docs/DEPLOYMENT.md)")
	case f.replicas > 0:
		add(SeverityWarning, "replicas", f, fmt.Sprintf("the master has %d replicas: replication is asynchronous, so a replica "+
			"promoted in a failover may lack lock keys the master acknowledged", f.replicas),
			"use WithReplicaAck(1), or never fail this node over without keeping the promoted replica out of the lock for the max TTL")
	case f.failover == "Sentinel":
		add(SeverityWarning, "replicas", f, "the node is a Sentinel client, but its master has no replica: "+
			"a failover has nothing to promote",
			"attach a replica and use WithReplicaAck(1), or give a standalone master")
	}
}

func (c *Client) checkDistinct(f *nodeFacts, all []nodeFacts, add addFunc) {
	if f.RunID == "" {
		add(SeverityInfo, "distinct", f, fmt.Sprintf("could not read run_id (%v), so could not tell this node "+
			"from the others' servers", f.errs["distinct"]),
			"make sure by hand that every node is a different Redis server")
		return
	}
	for _, o := range all[:f.Index] {
		if o.RunID == f.RunID {
			add(SeverityCritical, "distinct", f, fmt.Sprintf("node %d (%s) and node %d (%s) are one Redis server "+
				"(run_id %s), which counts twice in the quorum: a quorum of nodes is then fewer independent servers, "+
				"and one crash, restart or pause of it costs both votes at once; two names of one host, or two DBs of "+
				"one server, are still one node", o.Index, o.Addr, f.Index, f.Addr, short(f.RunID)),
				fmt.Sprintf("give each node its own Redis server, on its own machine; drop node %d or point it at another server", f.Index))
			return
		}
	}
	add(SeverityOK, "distinct", f, fmt.Sprintf("run_id %s", short(f.RunID)), "")
}

func checkMemory(f *nodeFacts, add addFunc) {
	const fix = "CONFIG SET maxmemory-policy noeviction (and CONFIG REWRITE, or set it in redis.conf): " +
		"a full node then refuses writes, which costs a vote, not safety; or run without a limit (maxmemory 0)"
	p := f.MaxmemoryPolicy
	switch {
	case p == "":
		add(SeverityInfo, "maxmemory-policy", f, fmt.Sprintf("could not read maxmemory-policy: %v", f.errs["maxmemory-policy"]),
			"make sure by hand that maxmemory-policy is noeviction")
	case p == "noeviction":
		add(SeverityOK, "maxmemory-policy", f, "noeviction", "")
	case f.Maxmemory == 0:
		add(SeverityInfo, "maxmemory-policy", f, fmt.Sprintf("maxmemory-policy %s evicts nothing while maxmemory is 0 "+
			"(no limit), but would evict lock keys once a limit is set", p), fix)
	case strings.HasPrefix(p, "allkeys-") || strings.HasPrefix(p, "volatile-"):
		what := "evicts any key, lock keys included,"
		if strings.HasPrefix(p, "volatile-") {
			what = "evicts keys that have a TTL, and every lock key has one,"
		}
		used := ""
		if f.usedMem > 0 {
			used = fmt.Sprintf(" (%s used now)", bytesString(f.usedMem))
		}
		add(SeverityCritical, "maxmemory-policy", f, fmt.Sprintf("maxmemory-policy %s %s when memory reaches maxmemory %s%s: "+
			"an evicted lock key is a node that forgot the lock", p, what, bytesString(f.Maxmemory), used), fix)
	default:
		add(SeverityWarning, "maxmemory-policy", f, fmt.Sprintf("unknown maxmemory-policy %s with maxmemory %s: it may evict lock keys",
			p, bytesString(f.Maxmemory)), fix)
	}
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func (c *Client) checkPersistence(f *nodeFacts, maxTTL time.Duration, add addFunc) {
	var problem string
	switch {
	case !f.aofKnown:
		problem = fmt.Sprintf("could not read appendonly and appendfsync (%v)", f.errs["persistence"])
	case !f.AppendOnly:
		problem = "appendonly no: a crash or restart loses every lock key"
	case f.AppendFsync == "":
		problem = fmt.Sprintf("appendonly is on, but could not read appendfsync (%v)", f.errs["persistence"])
	case f.AppendFsync != "always":
		problem = fmt.Sprintf("appendfsync %s: a crash loses the lock keys written since the last fsync", f.AppendFsync)
	case f.rewrite == "yes":
		problem = "no-appendfsync-on-rewrite yes: a crash during an AOF rewrite loses the lock keys written since the last fsync"
	}
	switch {
	case problem == "":
		add(SeverityOK, "persistence", f, "appendonly yes, appendfsync always", "")
	case c.cfg.guard && f.serverOK:
		add(SeverityInfo, "persistence", f, problem+"; the node guard keeps a restarted node's votes out for the max TTL, "+
			"as long as every Client runs it", "")
	default:
		guard := "turn on WithNodeGuard(true) in every Client, which keeps a restarted node's votes out for the max TTL"
		if c.cfg.guard {
			guard = "let the node guard read INFO server (it cannot watch this node now)"
		}
		add(SeverityWarning, "persistence", f, problem+"; a node that comes back at once without its keys can "+
			"grant a lock again while its holder still counts on it",
			fmt.Sprintf("CONFIG SET appendonly yes and CONFIG SET appendfsync always (then CONFIG REWRITE); or %s; "+
				"or restart a crashed node only once the max TTL (%v) has passed", guard, maxTTL))
	}
}

func checkVersion(f *nodeFacts, add addFunc) {
	// Another server than Redis is judged by the Redis version it is
	// compatible with: 7.2.4 for every Valkey so far.
	rv := f.Version
	if f.Server != "" && f.Server != "redis" {
		rv = f.redisVersion
	}
	v, ok := parseVersion(rv)
	switch {
	case !ok:
		add(SeverityInfo, "version", f, fmt.Sprintf("could not read the server's version: %v", f.errs["version"]), "")
	case slices.Compare(v[:], []int{2, 6, 12}) < 0:
		add(SeverityCritical, "version", f, fmt.Sprintf("%s is older than 2.6.12: every lock needs Lua scripting (2.6) "+
			"and SET with PX and NX (2.6.12)", serverName(f)), "upgrade the node to Redis 7.0 or later")
	case v[0] < 7:
		add(SeverityInfo, "version", f, fmt.Sprintf("%s refuses SET with both NX and GET (7.0): "+
			"acquisitions after the first attempt run a script there instead, which works; %s", serverName(f), featureSummary(f)),
			"upgrade to Redis 7.0 or later to save the script")
	default:
		add(SeverityOK, "version", f, fmt.Sprintf("%s; %s", serverName(f), featureSummary(f)), "")
	}
}

// featureSummary says which serverFeatures the node has: "has WAITAOF,
// SET GET, SPUBLISH", or "has SET GET, SPUBLISH; lacks WAITAOF".
func featureSummary(f *nodeFacts) string {
	has := featuresOf(f)
	var lacks []string
	for _, ft := range serverFeatures {
		if !slices.Contains(has, ft.name) {
			lacks = append(lacks, ft.name)
		}
	}
	switch {
	case len(has) == 0:
		return "lacks " + strings.Join(lacks, ", ")
	case len(lacks) == 0:
		return "has " + strings.Join(has, ", ")
	}
	return "has " + strings.Join(has, ", ") + "; lacks " + strings.Join(lacks, ", ")
}

// checkFsyncAck says, with WithFsyncAck, whether the node can confirm its
// writes' fsyncs in time: a node that cannot fails every vote, with
// ErrFsyncAck, as surely as one that is down.
func (c *Client) checkFsyncAck(f *nodeFacts, add addFunc) {
	if !c.cfg.fsyncAck {
		return
	}
	const fixAOF = "CONFIG SET appendonly yes and CONFIG SET appendfsync always (then CONFIG REWRITE), or turn WithFsyncAck off"
	// What the WAITAOF may take (see transport.FsyncAcker): half the node
	// timeout, which it shares with WithReplicaAck's WAIT.
	within := c.cfg.nodeTimeout / 2
	bound := fmt.Sprintf("half the node timeout, %v", c.cfg.nodeTimeout)
	if c.cfg.replicaAck > 0 {
		within /= 2
		bound = fmt.Sprintf("a quarter of the node timeout, %v; WithReplicaAck's WAIT has another", c.cfg.nodeTimeout)
	}
	// What each vote's batch runs, refused by the ACL (see node.probe).
	denied := false
	if redis.IsPermissionError(f.waitAOF) {
		denied = true
		add(SeverityCritical, "fsync-ack", f, fmt.Sprintf("the user may not run WAITAOF (%v): "+
			"with WithFsyncAck every vote of this node fails (ErrFsyncAck)", f.waitAOF),
			"grant it to the client's user (ACL SETUSER <user> +waitaof), or turn WithFsyncAck off")
	}
	if f.markDenied != nil {
		denied = true
		p := c.cfg.keyPrefix
		add(SeverityCritical, "fsync-ack", f, fmt.Sprintf("the user may not set the barrier keys under the key prefix %q (%v): "+
			"each vote's WAITAOF follows a SET of one, which expires after a millisecond, so with WithFsyncAck "+
			"every vote of this node fails (ErrFsyncAck)", p, f.markDenied),
			fmt.Sprintf("allow the keys and SET: ACL SETUSER <user> ~%s* +set (see docs/DEPLOYMENT.md)", p))
	}
	features := featuresOf(f)
	switch {
	case features != nil && !slices.Contains(features, "WAITAOF"):
		add(SeverityCritical, "fsync-ack", f, fmt.Sprintf("%s lacks WAITAOF, which Redis 7.2 and Valkey 7.2 brought: "+
			"with WithFsyncAck every vote of this node fails (ErrFsyncAck)", serverName(f)),
			"upgrade the node to Redis 7.2 or later, or to Valkey; or turn WithFsyncAck off")
	case redis.HasErrorPrefix(f.waitAOF, "unknown command"):
		add(SeverityCritical, "fsync-ack", f, fmt.Sprintf("the server does not know WAITAOF (%v): it came with Redis 7.2 "+
			"and Valkey 7.2, and rename-command may hide it; with WithFsyncAck every vote of this node fails (ErrFsyncAck)", f.waitAOF),
			"upgrade the node to Redis 7.2 or later, or to Valkey, and do not rename WAITAOF away; or turn WithFsyncAck off")
	case !f.aofKnown:
		add(SeverityInfo, "fsync-ack", f, fmt.Sprintf("could not read appendonly (%v): WithFsyncAck needs it on", f.errs["persistence"]),
			"make sure by hand that appendonly is yes and appendfsync is always")
	case !f.AppendOnly:
		add(SeverityCritical, "fsync-ack", f, "appendonly no: WAITAOF refuses to run without an append-only file, "+
			"so with WithFsyncAck every vote of this node fails (ErrFsyncAck)", fixAOF)
	case f.AppendFsync == "no":
		add(SeverityCritical, "fsync-ack", f, fmt.Sprintf("appendfsync no: the server never fsyncs by itself, so WAITAOF never "+
			"confirms, and with WithFsyncAck every vote of this node fails (ErrFsyncAck), each after waiting %v", within),
			"CONFIG SET appendfsync always (then CONFIG REWRITE), or turn WithFsyncAck off")
	case f.AppendFsync == "everysec":
		msg := "appendfsync everysec: WAITAOF waits for the next fsync, up to a second"
		if within < time.Second {
			msg += fmt.Sprintf(", longer than the %v it is given (%s), so votes of this node may fail (ErrFsyncAck)", within, bound)
		}
		msg += "; and some servers (Valkey 8.0.1 among them, see redis/redis#13793) confirm it under everysec before " +
			"the fsync, so a crash of the machine can still lose a key that voted yes"
		add(SeverityWarning, "fsync-ack", f, msg, "CONFIG SET appendfsync always (then CONFIG REWRITE)")
	case f.AppendFsync == "":
		add(SeverityInfo, "fsync-ack", f, fmt.Sprintf("appendonly is on, but could not read appendfsync (%v): "+
			"WAITAOF confirms each write at once only with appendfsync always", f.errs["persistence"]),
			"make sure by hand that appendfsync is always")
	case f.rewrite == "yes":
		add(SeverityWarning, "fsync-ack", f, "no-appendfsync-on-rewrite yes: the server does not fsync during an AOF rewrite, "+
			"so WAITAOF confirms nothing then, and this node's votes fail (ErrFsyncAck) until the rewrite ends",
			"CONFIG SET no-appendfsync-on-rewrite no (then CONFIG REWRITE)")
	case features == nil:
		add(SeverityInfo, "fsync-ack", f, fmt.Sprintf("appendonly yes and appendfsync always, but could not read the server's "+
			"version (%v), so could not tell whether it has WAITAOF (Redis 7.2+, Valkey 7.2+)", f.errs["version"]),
			"make sure by hand that the node runs Redis 7.2 or later, or Valkey")
	case !denied:
		add(SeverityOK, "fsync-ack", f, "WAITAOF, appendonly yes, appendfsync always: each yes is confirmed fsynced at once", "")
	}
}

func checkScripting(f *nodeFacts, add addFunc) {
	const fix = "allow EVAL and EVALSHA for the client's user (ACL SETUSER <user> +eval +evalsha), " +
		"and do not rename or disable them: release and extend are scripts"
	for _, e := range []struct {
		name string
		err  error
	}{{"EVAL", f.eval}, {"EVALSHA", f.evalSha}} {
		if e.err == nil {
			continue
		}
		why := e.err.Error()
		if redis.IsPermissionError(e.err) {
			why = "the user may not run it (ACL): " + why
		}
		add(SeverityCritical, "scripting", f, fmt.Sprintf("%s failed: %s", e.name, why), fix)
		return
	}
	add(SeverityOK, "scripting", f, "EVAL and EVALSHA work", "")
}

func (c *Client) checkClock(f *nodeFacts, add addFunc) {
	if !f.timeOK {
		add(SeverityInfo, "clock", f, fmt.Sprintf("could not read the node's clock: %v", f.errs["clock"]), "")
		return
	}
	if f.second.err != nil {
		add(SeverityOK, "clock", f, fmt.Sprintf("rate not measured: second sample: %v", f.second.err), "")
		return
	}
	local := f.second.mid().Sub(f.first.mid())
	dev := f.second.node.Sub(f.first.node) - local
	// The node read each sample somewhere in its round trip.
	uncert := f.first.rtt()/2 + f.second.rtt()/2 + 2*checkClockResolution
	allowed := time.Duration(float64(local) * c.cfg.driftFactor)
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(local) }
	if abs(dev) > uncert+allowed {
		dir := "fast: it expires keys earlier than the drift allowance, subtracted from each validity, covers"
		if dev < 0 {
			dir = "slow: harmless for locks (keys outlive their validity), but a clock is off, ours or the node's"
		}
		add(SeverityWarning, "clock", f, fmt.Sprintf("the node's clock moved %v while ours moved %v, %.2f%% %s; "+
			"the drift factor allows %.2f%% (the round trips account for %.2f%%)",
			(local+dev).Round(time.Microsecond), local.Round(time.Microsecond), math.Abs(pct(dev)), dir,
			100*c.cfg.driftFactor, pct(uncert)),
			"synchronise the node's clock (NTP, slewing rather than stepping), or raise WithDriftFactor above the measured rate")
		return
	}
	if uncert > allowed {
		add(SeverityOK, "clock", f, fmt.Sprintf("rate within %.2f%% of ours: round trips too slow to measure it to the drift factor",
			pct(uncert)), "")
		return
	}
	add(SeverityOK, "clock", f, fmt.Sprintf("rate within %.2f%% of ours", pct(abs(dev)+uncert)), "")
}

func (c *Client) checkACL(f *nodeFacts, add addFunc) {
	var denied []string
	guardNeeds := false
	for _, name := range f.denied {
		if name == "EVAL" || name == "EVALSHA" {
			continue // a scripting finding
		}
		if name == "TIME" {
			// The lock scripts need it too: the probe script's finding
			// says so, critical.
			guardNeeds = true
			continue
		}
		denied = append(denied, name)
		guardNeeds = guardNeeds || name == "INFO server" || name == "TIME"
	}
	if len(denied) == 0 {
		return
	}
	sev, why := SeverityInfo, "only Check reads them"
	if c.cfg.guard && guardNeeds {
		sev, why = SeverityWarning, "the node guard needs INFO server and TIME, and cannot watch this node without them"
	}
	add(sev, "acl", f, fmt.Sprintf("the user may not run %s (NOPERM): %s", strings.Join(denied, ", "), why),
		"grant them to the client's user (ACL SETUSER <user> +role +info +config|get +time), or check those settings by hand")
}

// checkKeyspace reports an ACL that does not let the user write the keys
// and channels of a lock under the Client's key prefix: the lock key, its
// waiting marker and fence counter (~prefix*), and its release channel
// (&prefix*). Every lock script touches some of them.
func (c *Client) checkKeyspace(f *nodeFacts, add addFunc) {
	p := c.cfg.keyPrefix
	if f.keysDenied != nil {
		add(SeverityCritical, "acl", f, fmt.Sprintf("the user may not write the lock keys and the keys derived from them "+
			"under the key prefix %q (%v): the lock scripts cannot run on this node, so it cannot release any lock, "+
			"nor take any but a plain one", p, f.keysDenied),
			fmt.Sprintf("allow the keys: ACL SETUSER <user> ~%s* (see docs/DEPLOYMENT.md)", p))
	}
	if f.scriptErr != "" {
		add(SeverityCritical, "acl", f, fmt.Sprintf("the server refused a command that the lock scripts run, run by a "+
			"probe script on a key under the key prefix %q: %s", p, f.scriptErr),
			"grant the user every command the scripts call (+@all, or see docs/DEPLOYMENT.md), and check the server's rename-command settings")
	}
	if f.chanDenied != nil {
		add(SeverityCritical, "acl", f, fmt.Sprintf("the user may not publish on the release channels under the key prefix %q (%v): "+
			"an Unlock that waiters marked fails on this node, and waiters are not woken", p, f.chanDenied),
			fmt.Sprintf("allow the channels: ACL SETUSER <user> &%s* (see docs/DEPLOYMENT.md)", p))
	}
	if f.barDenied != nil {
		add(SeverityCritical, "acl", f, fmt.Sprintf("the user may not publish on the barrier channels under the key prefix %q (%v): "+
			"with WithReplicaAck, this node's yes never counts (ErrReplicaAck)", p, f.barDenied),
			fmt.Sprintf("allow the channels: ACL SETUSER <user> &%s* (see docs/DEPLOYMENT.md)", p))
	}
	if f.keysDenied == nil && f.scriptErr == "" && f.chanDenied == nil && f.barDenied == nil && f.readOnly == nil {
		add(SeverityOK, "acl", f, fmt.Sprintf("the user may write the lock keys and channels under the key prefix %q", p), "")
	}
}

// checkSpread compares the nodes' clocks with one another.
func (c *Client) checkSpread(facts []nodeFacts, add addFunc) {
	var lo, hi *nodeFacts
	measured := 0
	for i := range facts {
		f := &facts[i]
		if !f.reached || !f.timeOK {
			continue
		}
		measured++
		if lo == nil || f.ClockOffset < lo.ClockOffset {
			lo = f
		}
		if hi == nil || f.ClockOffset > hi.ClockOffset {
			hi = f
		}
	}
	if measured < 2 {
		return
	}
	spread := hi.ClockOffset - lo.ClockOffset
	if spread-hi.offsetFrom.rtt()/2-lo.offsetFrom.rtt()/2 > checkClockSpread {
		add(SeverityWarning, "clock", nil, fmt.Sprintf("the nodes' clocks are %v apart (node %d ahead, node %d behind): "+
			"clocks that far apart are not synchronised, and a clock that is stepped into line later jumps, which "+
			"expires keys early; the drift factor (%.2f%%) covers clocks that run at slightly different rates, not jumps",
			spread.Round(time.Millisecond), hi.Index, lo.Index, 100*c.cfg.driftFactor),
			"run NTP (chrony or ntpd) on every node, slewing rather than stepping, or turn on WithNodeGuard(true) to catch jumps")
		return
	}
	add(SeverityOK, "clock", nil, fmt.Sprintf("the nodes' clocks are within %v of one another", spread.Round(time.Millisecond)), "")
}
