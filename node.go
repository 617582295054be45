package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed holds.lua
	holdsLua string

	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(holdsLua + acquireLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(holdsLua + releaseLua)

	//go:embed extend.lua
	extendLua    string
	extendScript = redis.NewScript(holdsLua + extendLua)

	//go:embed fence.lua
	fenceLua    string
	fenceScript = redis.NewScript(holdsLua + fenceLua)
)

// target is what one acquisition holds on every node: its keys, id, and
// owner. It is never changed once built. Each attempt writes a value of its
// own, derived from the id (see token).
type target struct {
	rkeys []string // the Redis keys: prefix + keys as given
	id    string   // the acquisition's random id
	owner string   // "" for a plain lock
	fence []string // the keys' fence counters; nil without fencing
}

// scriptKeys returns the lock keys, followed by the fence counters when there
// are any.
func (t *target) scriptKeys() []string {
	if t.fence == nil {
		return t.rkeys
	}
	return append(slices.Clip(t.rkeys), t.fence...)
}

// plainSingle reports whether the target has the standard wire layout: one
// plain key, no fence counter.
func (t *target) plainSingle() bool {
	return len(t.rkeys) == 1 && t.owner == "" && t.fence == nil
}

// node is one independent Redis master. It is safe for concurrent use.
type node struct {
	index  int
	addr   string
	client redis.UniversalClient

	// stalled counts this node's requests that outlived their node timeout
	// and have not answered yet. While it is above zero the node is treated
	// as hung: rounds that would wait for every node do not wait for it.
	stalled atomic.Int32

	// oldSet is set once the node refused SET with both NX and GET
	// (Redis before 7.0): acquisitions then use acquire.lua there.
	oldSet atomic.Bool

	guard nodeGuard // used WithNodeGuard
}

func newNode(index int, c redis.UniversalClient) *node {
	return &node{index: index, addr: clientAddr(c), client: c}
}

// clientAddr names a client for errors and diagnostics.
func clientAddr(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case fmt.Stringer:
		return c.String()
	}
	return fmt.Sprintf("%T", c)
}

// serverID identifies the server behind a client, so that New can refuse two
// clients that point at the same database; ok is false when it can't tell.
func serverID(c redis.UniversalClient) (id string, ok bool) {
	if c, isClient := c.(*redis.Client); isClient {
		o := c.Options()
		return fmt.Sprintf("%s %s db %d", o.Network, o.Addr, o.DB), true
	}
	return "", false
}

// acquireCmd is how a node is asked to take a lock.
type acquireCmd uint8

const (
	// cmdSetGet is SET key value NX PX ttl GET: the standard wire layout,
	// in one command, and safe against go-redis's retries: a SET whose
	// reply was lost and that go-redis sends again finds our own value, and
	// GET shows it.
	cmdSetGet acquireCmd = iota
	// cmdSetNX is a plain SET NX, which answers no to its own retry. Only
	// the unsafeRetries test switch uses it.
	cmdSetNX
	// cmdEvalSha and cmdEval run acquire.lua: multi-key, owner and fenced
	// locks, the takeover of an earlier attempt's leftover, and nodes older
	// than Redis 7.0.
	cmdEvalSha
	cmdEval
)

// acquire votes on the target's keys for one attempt's token. It returns 0
// when another holder has one of them, and otherwise 1, or with fencing the
// largest new fence value. A key that already holds this attempt's value
// counts as taken by us (go-redis may have sent the write twice), and one
// that holds an earlier attempt's value of the same acquisition is taken
// over.
//
// With the node guard on, INFO server and TIME go in the same pipeline, on
// the same connection, right after the acquire command, so that the guard
// sees a restart or a clock jump that happened before the node voted, or
// while it did, before the vote is counted; a step that comes between the
// vote and the sample only quarantines the node sooner. A quarantined
// node's yes comes back as an error that wraps ErrQuarantined; the key it
// may have set is rolled back with the failed votes, or released by Unlock.
func (n *node) acquire(ctx context.Context, c *Client, t *target, tk token, ttl time.Duration, cfg *config) (int64, error) {
	cmd := cmdEvalSha
	if t.plainSingle() {
		switch {
		case cfg.unsafeRetries:
			cmd = cmdSetNX
		case !n.oldSet.Load():
			cmd = cmdSetGet
		}
	}
	for {
		r := n.acquireOnce(ctx, c, t, tk, ttl, cfg, cmd)
		switch {
		case cmd == cmdSetGet && redis.HasErrorPrefix(r.err, "ERR syntax error"):
			// Redis before 7.0 refuses NX with GET; nothing was set.
			n.oldSet.Store(true)
			cmd = cmdEvalSha
		case cmd == cmdSetGet && r.takeover:
			cmd = cmdEvalSha
		case cmd == cmdEvalSha && cfg.guard && redis.HasErrorPrefix(r.err, "NOSCRIPT"):
			// The node lost its script cache: send the script itself,
			// and sample the node again with it.
			cmd = cmdEval
		default:
			if cfg.guard {
				if qerr := n.guard.observe(n, r.info.Val(), r.info.Err(), r.tm.Val(), r.tm.Err(), r.sent, r.recv, c.maxTTL(), cfg.driftFactor, c.log); qerr != nil && r.err == nil && r.val > 0 {
					return r.val, qerr
				}
			}
			return r.val, r.err
		}
	}
}

// acquireReply is one acquire request's outcome, with the guard's sample.
type acquireReply struct {
	val      int64
	err      error
	takeover bool // SET found an earlier attempt's value: run the script
	info     *redis.StringCmd
	tm       *redis.TimeCmd
	sent     time.Time
	recv     time.Time
}

// acquireOnce sends one acquire command, pipelined with the guard's sample
// when the guard is on.
func (n *node) acquireOnce(ctx context.Context, c *Client, t *target, tk token, ttl time.Duration, cfg *config, cmd acquireCmd) (r acquireReply) {
	var sc commander = n.client
	var pipe redis.Pipeliner
	if cfg.guard {
		pipe = n.client.Pipeline()
		sc = pipe
	}
	var set *redis.Cmd
	var setNX *redis.BoolCmd
	var script *redis.Cmd
	switch cmd {
	case cmdSetGet:
		set = sc.Do(ctx, "set", t.rkeys[0], tk.value, "px", ttl.Milliseconds(), "nx", "get")
	case cmdSetNX:
		setNX = sc.SetNX(ctx, t.rkeys[0], tk.value, ttl)
	case cmdEvalSha:
		if pipe == nil {
			// Run sends EVALSHA, and EVAL on NOSCRIPT.
			script = acquireScript.Run(ctx, sc, t.scriptKeys(), acquireArgs(t, tk, ttl)...)
		} else {
			script = acquireScript.EvalSha(ctx, sc, t.scriptKeys(), acquireArgs(t, tk, ttl)...)
		}
	case cmdEval:
		script = acquireScript.Eval(ctx, sc, t.scriptKeys(), acquireArgs(t, tk, ttl)...)
	}
	if pipe != nil {
		r.info = pipe.Info(ctx, "server")
		r.tm = pipe.Time(ctx)
		r.sent = c.now()
		_, _ = pipe.Exec(ctx) // each command carries its own error
		r.recv = c.now()
	}
	switch {
	case set != nil:
		old, err := set.Text()
		switch {
		case errors.Is(err, redis.Nil):
			r.val = 1 // the key was free: it is ours now
		case err != nil:
			r.err = err
		case old == tk.value:
			r.val = 1 // our own write, sent again by go-redis
		case tk.earlier(old):
			r.takeover = true
		}
	case setNX != nil:
		ok, err := setNX.Result()
		if ok {
			r.val = 1
		}
		r.err = err
	default:
		r.val, r.err = script.Int64()
	}
	return r
}

// commander is what acquireOnce sends through: the node's client, or a
// pipeline on it.
type commander interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
}

// acquireArgs are the ARGV of acquire.lua.
func acquireArgs(t *target, tk token, ttl time.Duration) []any {
	fence := "0"
	if t.fence != nil {
		fence = "1"
	}
	return []any{tk.value, t.owner, ttl.Milliseconds(), len(t.rkeys), fence, tk.id, tk.n}
}

// guarded turns a yes of a quarantined node into a failure, for extensions.
func (n *node) guarded(c *Client, val int64, err error) (int64, error) {
	if err == nil && val > 0 {
		if qerr := n.guard.status(c.now()); qerr != nil {
			return 0, qerr
		}
	}
	return val, err
}

// release releases the target's keys where they hold value, announcing
// each release on a channel named channelPrefix+key unless channelPrefix is
// empty. It returns 1 when every key held value, -1 when a key held
// something else, and 0 when some key was gone and none held something
// else. resent reports that go-redis wrote the request more than once: it
// retries a request whose connection failed, so the first copy may have
// deleted the key that the last copy found gone.
func (n *node) release(ctx context.Context, t *target, value, channelPrefix string) (v int64, resent bool, err error) {
	// EVALSHA and EVAL are sent by hand, not by Script.Run, so that the
	// count is of one command: a NOSCRIPT reply means the EVALSHA did
	// nothing.
	arg := &sendCounter{s: value}
	cmd := releaseScript.EvalSha(ctx, n.client, t.rkeys, arg, t.owner, channelPrefix)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		arg = &sendCounter{s: value}
		cmd = releaseScript.Eval(ctx, n.client, t.rkeys, arg, t.owner, channelPrefix)
	}
	v, err = cmd.Int64()
	return v, arg.n.Load() > 1, err
}

// sendCounter is a command argument that counts how many times go-redis
// wrote its command to a connection: it asks for the argument's bytes each
// time it writes, retries included.
type sendCounter struct {
	s string
	n atomic.Int32
}

// MarshalBinary returns the argument's bytes and counts the write.
func (a *sendCounter) MarshalBinary() ([]byte, error) {
	a.n.Add(1)
	return []byte(a.s), nil
}

// extend resets the TTL of the target's keys when they all hold value.
func (n *node) extend(ctx context.Context, t *target, value string, ttl time.Duration) (int64, error) {
	return extendScript.Run(ctx, n.client, t.rkeys, value, t.owner, ttl.Milliseconds()).Int64()
}

// writeFence raises the target's fence counters to at least m while the node
// holds its keys for value.
func (n *node) writeFence(ctx context.Context, t *target, value string, m int64) (int64, error) {
	return fenceScript.Run(ctx, n.client, t.scriptKeys(), value, t.owner, m, len(t.rkeys)).Int64()
}
