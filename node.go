package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)
)

// node is one independent Redis master. It is safe for concurrent use.
type node struct {
	index  int
	addr   string
	client redis.UniversalClient

	// stalled counts this node's requests that outlived their node timeout
	// and have not answered yet. While it is above zero the node is treated
	// as hung: rounds that would wait for every node do not wait for it.
	stalled atomic.Int32
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

// acquire votes on key for token. The first attempt of an acquisition uses a
// plain SET NX PX, the wire layout that redsync and the reference clients
// share: a fresh token cannot already be on the node. Later attempts use the
// script, which also counts a leftover of our own token as a yes.
func (n *node) acquire(ctx context.Context, key, token string, ttl time.Duration, first bool) (bool, error) {
	if first {
		return n.client.SetNX(ctx, key, token, ttl).Result()
	}
	v, err := acquireScript.Run(ctx, n.client, []string{key}, token, ttl.Milliseconds()).Int64()
	return v == 1, err
}

// release deletes key when it still holds token, and announces it on
// channel unless channel is empty.
func (n *node) release(ctx context.Context, key, token, channel string) (bool, error) {
	v, err := releaseScript.Run(ctx, n.client, []string{key}, token, channel).Int64()
	return v == 1, err
}

// extend resets the TTL of key when it still holds token.
func (n *node) extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	v, err := extendScript.Run(ctx, n.client, []string{key}, token, ttl.Milliseconds()).Int64()
	return v == 1, err
}
