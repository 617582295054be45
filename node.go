package redlock

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/transport"
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

	// oldSet is set once the node refused SET with both NX and GET
	// (Redis before 7.0): acquisitions then use acquire.lua there.
	oldSet atomic.Bool

	// readOnly is set once the node answered READONLY, so that it is
	// logged once.
	readOnly atomic.Bool

	c     *Client         // the Client the node belongs to
	guard nodeGuard       // used WithNodeGuard
	pipe  *transport.Pipe // batches the requests to the node

	// cluster is the client when the node is a Redis Cluster, and nil
	// otherwise: releases are then announced on shard channels (SPUBLISH),
	// and waiters listen with SSUBSCRIBE on the key's shard.
	cluster *redis.ClusterClient
	// shardArg is the release scripts' "sharded" argument: "1" for a
	// cluster node, "0" otherwise.
	shardArg any
}

func newNode(c *Client, index int, rc redis.UniversalClient) *node {
	n := &node{index: index, addr: clientAddr(rc), client: rc, c: c, shardArg: "0"}
	if cc, ok := rc.(*redis.ClusterClient); ok {
		n.cluster, n.shardArg = cc, "1"
	}
	n.pipe = transport.New(transport.Config{Client: rc, Now: func() time.Time { return c.now() }, NotSent: errNotSent, WG: &c.wg, StallAfter: stallAfter})
	return n
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
// A Sentinel failover client finds its master at run time, and its options
// name no address (go-redis puts "FailoverClient" there): it can't tell,
// and Check's run_id comparison is what catches two of them on one master.
func serverID(c redis.UniversalClient) (id string, ok bool) {
	if c, isClient := c.(*redis.Client); isClient {
		o := c.Options()
		if o.Addr == failoverAddr {
			return "", false
		}
		return fmt.Sprintf("%s %s db %d", o.Network, o.Addr, o.DB), true
	}
	return "", false
}

// failoverAddr is the address go-redis gives the options of a Sentinel
// failover client (redis.NewFailoverClient).
const failoverAddr = "FailoverClient"

// acquireCmd is how a node is asked to take a lock.
type acquireCmd uint8

const (
	// cmdSet is SET key value PX ttl NX, for the first attempt of a plain
	// one-key lock: the standard wire layout, in one command, with an OK
	// reply when it takes the key. go-redis may write it twice when a
	// reply is lost; a nil reply to a SET written more than once is
	// checked with cmdCheck, since the first copy may have set our value.
	cmdSet acquireCmd = iota
	// cmdCheck is GET key, after such a nil reply: our value means yes.
	cmdCheck
	// cmdSetGet is SET key value PX ttl NX GET, for the later attempts of
	// a plain lock: the GET shows our own value after a retry, and the
	// value of an earlier attempt, which the script then takes over.
	// Redis before 7.0 refuses it; the script does the same there.
	cmdSetGet
	// cmdSetNX is a plain SET NX, which answers no to its own retry. Only
	// the unsafeRetries test switch uses it.
	cmdSetNX
	// cmdScript runs the acquire script (see target.evalAcquire), as
	// EVALSHA, then EVAL after a NOSCRIPT reply: multi-key, owner and
	// fenced locks, readers, permits, the takeover of an earlier attempt's
	// leftover, and nodes older than Redis 7.0.
	cmdScript
)

// guarded turns a yes of a quarantined node into a failure, for extensions.
func (n *node) guarded(c *Client, val int64, err error) (int64, error) {
	if err == nil && val > 0 {
		if qerr := n.guard.status(c.now()); qerr != nil {
			return 0, qerr
		}
	}
	return val, err
}

// sendCounter is an attempt's value as a command argument, which counts
// how many times go-redis wrote its command to a connection: it asks for
// the argument's bytes each time it writes, retries included. It also names
// the attempt, for the job that holds it.
type sendCounter struct {
	at *attempt // never changed once set; nor is its value
	n  atomic.Int32
}

// MarshalBinary returns the attempt's value and counts the write.
func (a *sendCounter) MarshalBinary() ([]byte, error) {
	a.n.Add(1)
	return a.at.value.raw, nil
}

// acquireHow picks how the node is first asked to take the target for
// attempt tk.
func (n *node) acquireHow(t *target, tk token, h *testHooks) acquireCmd {
	switch {
	case !t.plainSingle():
		return cmdScript
	case h.unsafeRetries:
		return cmdSetNX
	case tk.n == 0 && !h.sharedValue:
		// No earlier attempt can have left a value to take over.
		return cmdSet
	case n.oldSet.Load():
		return cmdScript
	}
	return cmdSetGet
}
