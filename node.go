package redlock

import (
	"context"
	_ "embed"
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

// target is what one acquisition holds on every node: its keys, token, and
// owner. It is never changed once built.
type target struct {
	rkeys []string // the Redis keys: prefix + keys as given
	token string
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

// acquire votes on the target's keys. It returns 0 when another holder has
// one of them, and otherwise 1, or with fencing the largest new fence value.
//
// With plain set, a plain one-key acquisition is a plain SET NX PX, the wire
// layout that redsync and the reference clients share: the caller sets it
// when none of our token can be on the node (the first attempt, or the node
// said no to the last one). Every other case runs acquire.lua, which also
// counts a leftover of our own token as taken by us.
func (n *node) acquire(ctx context.Context, t *target, ttl time.Duration, plain bool) (int64, error) {
	if plain && t.plainSingle() {
		ok, err := n.client.SetNX(ctx, t.rkeys[0], t.token, ttl).Result()
		if ok {
			return 1, err
		}
		return 0, err
	}
	return acquireScript.Run(ctx, n.client, t.scriptKeys(), acquireArgs(t, ttl)...).Int64()
}

// acquireGuarded is acquire with the node guard: INFO server and TIME go in
// the same pipeline, on the same connection, right after the acquire
// command, so that the guard sees a restart or a clock jump that happened
// before the node voted, or while it did, before the vote is counted; a step
// that comes between the vote and the sample only quarantines the node
// sooner. A quarantined node's yes comes back as an error that wraps
// ErrQuarantined; the key it may have set is rolled back with the failed
// votes, or released by Unlock.
func (n *node) acquireGuarded(ctx context.Context, c *Client, t *target, ttl time.Duration, plain bool, cfg *config) (int64, error) {
	run := func(eval bool) (r guardedReply) {
		pipe := n.client.Pipeline()
		var set *redis.BoolCmd
		var script *redis.Cmd
		switch {
		case plain && t.plainSingle():
			set = pipe.SetNX(ctx, t.rkeys[0], t.token, ttl)
		case eval:
			script = acquireScript.Eval(ctx, pipe, t.scriptKeys(), acquireArgs(t, ttl)...)
		default:
			script = acquireScript.EvalSha(ctx, pipe, t.scriptKeys(), acquireArgs(t, ttl)...)
		}
		r.info = pipe.Info(ctx, "server")
		r.tm = pipe.Time(ctx)
		r.sent = c.now()
		_, _ = pipe.Exec(ctx) // each command carries its own error
		r.recv = c.now()
		if set != nil {
			ok, err := set.Result()
			if ok {
				r.val = 1
			}
			r.err = err
			return r
		}
		r.val, r.err = script.Int64()
		return r
	}
	r := run(false)
	if redis.HasErrorPrefix(r.err, "NOSCRIPT") {
		// The node lost its script cache: send the script itself, and
		// sample the node again with it.
		r = run(true)
	}
	qerr := n.guard.observe(n, r.info.Val(), r.info.Err(), r.tm.Val(), r.tm.Err(), r.sent, r.recv, c.maxTTL(), cfg.driftFactor, c.log)
	if r.err == nil && r.val > 0 && qerr != nil {
		return r.val, qerr
	}
	return r.val, r.err
}

// guardedReply is one guarded acquire request: the vote and the sample.
type guardedReply struct {
	val        int64
	err        error
	info       *redis.StringCmd
	tm         *redis.TimeCmd
	sent, recv time.Time
}

// acquireArgs are the ARGV of acquire.lua.
func acquireArgs(t *target, ttl time.Duration) []any {
	fence := "0"
	if t.fence != nil {
		fence = "1"
	}
	return []any{t.token, t.owner, ttl.Milliseconds(), len(t.rkeys), fence}
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

// release releases the target's keys where they hold its token, announcing
// each release on a channel named channelPrefix+key unless channelPrefix is
// empty. It returns 1 when every key held the token.
func (n *node) release(ctx context.Context, t *target, channelPrefix string) (int64, error) {
	return releaseScript.Run(ctx, n.client, t.rkeys, t.token, t.owner, channelPrefix).Int64()
}

// extend resets the TTL of the target's keys when they all hold its token.
func (n *node) extend(ctx context.Context, t *target, ttl time.Duration) (int64, error) {
	return extendScript.Run(ctx, n.client, t.rkeys, t.token, t.owner, ttl.Milliseconds()).Int64()
}

// writeFence raises the target's fence counters to at least m while the node
// holds its keys.
func (n *node) writeFence(ctx context.Context, t *target, m int64) (int64, error) {
	return fenceScript.Run(ctx, n.client, t.scriptKeys(), t.token, t.owner, m, len(t.rkeys)).Int64()
}
