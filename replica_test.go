package redlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// replicatedNode is a real master with one replica, which replicates
// through a proxy, so that a test can hold back the replication stream: a
// replica that lags.
type replicatedNode struct {
	master, replica *redistest.Server
	link            *faultproxy.Proxy // replica → master
	mc, rc          *redis.Client
}

// startReplicated starts n masters, each with a replica in sync that
// replicates through a proxy (see lag).
func startReplicated(t testing.TB, n int) []*replicatedNode { return startReplicas(t, n, true) }

// startReplicas starts n masters, each with a replica in sync; proxied puts
// a proxy on the replication link, which lag needs. Without it the replicas
// replicate directly, as in production, which benchmarks want.
func startReplicas(t testing.TB, n int, proxied bool) []*replicatedNode {
	t.Helper()
	redistest.Require(t)
	masters := redistest.StartN(t, n, redistest.Options{})
	nodes := make([]*replicatedNode, n)
	for i, m := range masters {
		var link *faultproxy.Proxy
		target := m.Addr()
		if proxied {
			var err error
			link, err = faultproxy.New(m.Addr(), uint64(i))
			require.NoError(t, err)
			t.Cleanup(func() { _ = link.Close() })
			target = link.Addr()
		}
		host, port, _ := strings.Cut(target, ":")
		r := redistest.Start(t, redistest.Options{Args: []string{"--replicaof", host, port}})
		nodes[i] = &replicatedNode{master: m, replica: r, link: link, mc: m.NewClient(t), rc: r.NewClient(t)}
	}
	for i, nd := range nodes {
		// Synced on both sides: the replica's link is up, and the master
		// lists it as online (ROLE), which it does only after the
		// replica's first acknowledgement.
		require.Eventually(t, func() bool {
			info, err := nd.rc.Info(context.Background(), "replication").Result()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
			role, err := nd.mc.Do(context.Background(), "role").Slice()
			if err != nil || len(role) < 3 {
				return false
			}
			replicas, _ := role[2].([]any)
			return len(replicas) == 1
		}, 10*time.Second, 10*time.Millisecond, "node %d: the replica never synced", i)
	}
	return nodes
}

// lag holds back node i's replication stream from now on: the master goes
// on taking writes, and its replica never sees them.
func (nd *replicatedNode) lag() { nd.link.SetMode(faultproxy.DropReplies) }

// failover kills the master and promotes its replica, as Sentinel would.
func (nd *replicatedNode) failover(t *testing.T) {
	t.Helper()
	nd.master.Kill()
	require.NoError(t, nd.rc.Do(context.Background(), "replicaof", "no", "one").Err())
}

func masterClients(nodes []*replicatedNode) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		out[i] = nd.mc
	}
	return out
}

func replicaClients(nodes []*replicatedNode) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		out[i] = nd.rc
	}
	return out
}

// TestReplicaAckAndFailover provokes the lag-then-failover case on three
// real masters with a replica each: replicas lag, a client takes the lock
// on the masters, the masters die, the replicas are promoted, and a second
// client asks for the lock on them.
func TestReplicaAckAndFailover(t *testing.T) {
	const key = "failover"
	opts := func(ack bool) []Option {
		// Half the node timeout bounds the replicas' acknowledgement:
		// 250ms leaves a loaded machine room for a healthy replica.
		o := []Option{WithTTL(10 * time.Second), WithNodeTimeout(500 * time.Millisecond)}
		if ack {
			o = append(o, WithReplicaAck(1))
		}
		return o
	}
	failover := func(t *testing.T, nodes []*replicatedNode) *Client {
		t.Helper()
		for _, nd := range nodes {
			nd.failover(t)
		}
		return newClient(t, replicaClients(nodes), opts(false)...)
	}

	t.Run("control: without WithReplicaAck, two holders", func(t *testing.T) {
		nodes := startReplicated(t, 3)
		nodes[0].lag()
		nodes[1].lag()
		a := newClient(t, masterClients(nodes), opts(false)...)
		la, err := a.TryLock(t.Context(), key)
		require.NoError(t, err)
		b := failover(t, nodes)
		lb, err := b.TryLock(t.Context(), key)
		require.NoError(t, err, "the control must let a second holder in: the promoted replicas 0 and 1 never got the key")
		require.True(t, time.Now().Before(la.Until()), "A's validity ended during the test")
		require.NoError(t, lb.Unlock(t.Context()))
	})

	t.Run("with WithReplicaAck, lagging nodes do not count", func(t *testing.T) {
		nodes := startReplicated(t, 3)
		nodes[0].lag()
		nodes[1].lag()
		a := newClient(t, masterClients(nodes), opts(true)...)
		_, err := a.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, ErrReplicaAck)
		require.Contains(t, err.Error(), "0 of 1 within the node timeout")
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		for _, i := range []int{0, 1} {
			require.Equal(t, VoteFailed, qe.Stats.Nodes[i].Vote, "node %d", i)
			require.ErrorIs(t, qe.Stats.Nodes[i].Err, ErrReplicaAck, "node %d", i)
		}
		// The failed nodes are rolled back, and so is node 2.
		for i, nd := range nodes {
			require.Eventually(t, func() bool {
				n, err := nd.mc.Exists(context.Background(), key).Result()
				return err == nil && n == 0
			}, 5*time.Second, 10*time.Millisecond, "node %d kept the key of a failed acquisition", i)
		}
	})

	t.Run("with WithReplicaAck, a lock survives the failover", func(t *testing.T) {
		nodes := startReplicated(t, 3)
		nodes[0].lag()
		a := newClient(t, masterClients(nodes), opts(true)...)
		la, err := a.TryLock(t.Context(), key)
		require.NoError(t, err, "nodes 1 and 2 replicate: a quorum")
		require.NoError(t, la.Extend(t.Context()), "Extend waits for the replicas too")
		b := failover(t, nodes)
		_, err = b.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired, "a second holder after the failover")
		require.True(t, time.Now().Before(la.Until()), "A's validity ended during the test")
		for _, i := range []int{1, 2} {
			got, err := nodes[i].rc.Get(t.Context(), key).Result()
			require.NoError(t, err, "promoted replica %d", i)
			require.Equal(t, la.Token(), got, "promoted replica %d", i)
		}
	})
}

// TestReplicaAckRenewals: renewals wait for the replicas too. Once two of
// three replicas lag, an auto-extended lock with WithReplicaAck cannot be
// renewed on a quorum, and is lost; without the option it is kept.
func TestReplicaAckRenewals(t *testing.T) {
	for _, ack := range []bool{false, true} {
		t.Run(map[bool]string{false: "without", true: "with"}[ack], func(t *testing.T) {
			nodes := startReplicated(t, 3)
			opts := []Option{WithTTL(time.Second), WithNodeTimeout(300 * time.Millisecond), WithAutoExtend(true)}
			if ack {
				opts = append(opts, WithReplicaAck(1))
			}
			c := newClient(t, masterClients(nodes), opts...)
			l, err := c.TryLock(t.Context(), "renewed")
			require.NoError(t, err)
			nodes[0].lag()
			nodes[1].lag()
			select {
			case <-l.Done():
				require.True(t, ack, "lost without WithReplicaAck: %v", l.Err())
				require.ErrorIs(t, l.Err(), ErrLockLost)
			case <-time.After(3 * time.Second):
				require.False(t, ack, "renewed on masters whose replicas lag")
				require.NoError(t, l.Err())
			}
			_ = l.Unlock(t.Context())
		})
	}
}

func TestReplicaAckOptionChecks(t *testing.T) {
	_, cs := minis(t, 3)
	_, err := New(cs, WithReplicaAck(-1))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithReplicaAck: the number of replicas must not be negative, got -1")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cc.Close() })
	_, err = New([]redis.UniversalClient{cs[0], cs[1], cc}, WithReplicaAck(1))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "not supported on Redis Cluster nodes (node 2)")
	c, err := New([]redis.UniversalClient{cs[0], cs[1], cc})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.TryLock(t.Context(), "k", WithReplicaAck(1))
	require.ErrorIs(t, err, ErrInvalidOption, "per call too")
}

// startSentinel starts one redis-server in Sentinel mode that monitors
// each node's master as "m<i>", with quorum 1 and a fast failover (the
// master is down after 300ms).
func startSentinel(t testing.TB, nodes []*replicatedNode) *redistest.Server {
	t.Helper()
	var conf strings.Builder
	for i, nd := range nodes {
		host, port, _ := strings.Cut(nd.master.Addr(), ":")
		fmt.Fprintf(&conf, "sentinel monitor m%d %s %s 1\n", i, host, port)
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds m%d 300\n", i)
		// Sentinel "fixes" a replica that replicates from another address
		// than the master's (ours go through a proxy) once the failover
		// timeout has passed: a minute keeps it out of the tests.
		fmt.Fprintf(&conf, "sentinel failover-timeout m%d 60000\n", i)
	}
	return redistest.Start(t, redistest.Options{Config: conf.String(), Args: []string{"--sentinel"}})
}

// failoverClients builds a go-redis Sentinel failover client per node.
func failoverClients(t testing.TB, sentinel *redistest.Server, n int) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, n)
	for i := range out {
		fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: fmt.Sprintf("m%d", i), SentinelAddrs: []string{sentinel.Addr()}})
		t.Cleanup(func() { _ = fc.Close() })
		out[i] = fc
	}
	return out
}

// TestSentinelFailoverClientNodes: go-redis's FailoverClient works as a
// node. Under a real Sentinel, node 0's master dies while a lock is held
// with WithReplicaAck; Sentinel promotes its replica, the FailoverClient
// follows it, and the lock is still there: it extends on every node, keeps
// others out, and unlocks.
func TestSentinelFailoverClientNodes(t *testing.T) {
	nodes := startReplicated(t, 3)
	sentinel := startSentinel(t, nodes)
	sc := sentinel.NewClient(t)
	cs := failoverClients(t, sentinel, len(nodes))
	opts := []Option{WithTTL(30 * time.Second), WithNodeTimeout(500 * time.Millisecond), WithReplicaAck(1)}
	c := newClient(t, cs, opts...)
	other := newClient(t, failoverClients(t, sentinel, len(nodes)), opts...)

	l, err := c.TryLock(t.Context(), "sentinel")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := nodes[0].rc.Get(context.Background(), "sentinel").Result()
		return err == nil && got == l.Token()
	}, 5*time.Second, 10*time.Millisecond, "node 0's replica never got the key")

	nodes[0].master.Kill()
	require.Eventually(t, func() bool {
		addr, err := sc.Do(context.Background(), "sentinel", "get-master-addr-by-name", "m0").StringSlice()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == nodes[0].replica.Addr()
	}, 20*time.Second, 50*time.Millisecond, "Sentinel never promoted node 0's replica")

	// The FailoverClient finds the new master: node 0 answers again, and
	// holds the lock there.
	require.Eventually(t, func() bool {
		h, err := c.Inspect(t.Context(), "sentinel")
		return err == nil && h.Nodes[0].Err == nil && h.Nodes[0].Token == l.Token()
	}, 20*time.Second, 100*time.Millisecond, "node 0's FailoverClient never reached the new master, which holds the lock")
	require.NoError(t, l.Extend(t.Context()))
	_, err = other.TryLock(t.Context(), "sentinel")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, l.Unlock(t.Context()))
	l2, err := other.TryLock(t.Context(), "sentinel")
	require.NoError(t, err, "after Unlock")
	require.NoError(t, l2.Unlock(t.Context()))
}

// TestSentinelLagThenFailover is the lag-then-failover case under a real
// Sentinel: the replicas of nodes 0 and 1 lag, a client takes the lock on
// the masters, both masters die, and Sentinel promotes the replicas, which
// never got the key. Without WithReplicaAck (the control) a second client
// then takes the lock while the first still holds it; with it, the first
// never got a lock that a failover could lose.
func TestSentinelLagThenFailover(t *testing.T) {
	for _, ack := range []bool{false, true} {
		t.Run(map[bool]string{false: "control without WithReplicaAck", true: "with WithReplicaAck"}[ack], func(t *testing.T) {
			nodes := startReplicated(t, 3)
			sentinel := startSentinel(t, nodes)
			sc := sentinel.NewClient(t)
			base := []Option{WithTTL(30 * time.Second), WithNodeTimeout(500 * time.Millisecond)}
			opts := base
			if ack {
				opts = append(opts[:len(opts):len(opts)], WithReplicaAck(1))
			}
			a := newClient(t, failoverClients(t, sentinel, len(nodes)), opts...)
			nodes[0].lag()
			nodes[1].lag()
			la, err := a.TryLock(t.Context(), "lagged")
			if ack {
				require.ErrorIs(t, err, ErrReplicaAck)
			} else {
				require.NoError(t, err)
			}
			if la != nil {
				// Every request of A's acquisition has come back: one still
				// out when its master dies would be resent by go-redis to
				// the promoted replica, which would then hold A's key after
				// all (seen under a CPU hog).
				settled(t, la)
			}
			for _, i := range []int{0, 1} {
				nodes[i].master.Kill()
			}
			for _, i := range []int{0, 1} {
				require.Eventually(t, func() bool {
					addr, err := sc.Do(context.Background(), "sentinel", "get-master-addr-by-name", fmt.Sprintf("m%d", i)).StringSlice()
					return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == nodes[i].replica.Addr()
				}, 20*time.Second, 50*time.Millisecond, "Sentinel never promoted node %d's replica", i)
			}
			// B asks without the option: the promoted masters have no
			// replica left to acknowledge anything.
			b := newClient(t, failoverClients(t, sentinel, len(nodes)), base...)
			var lb *Lock
			var lastErr error
			ok := assert.Eventually(t, func() bool {
				lb, lastErr = b.TryLock(t.Context(), "lagged")
				return lastErr == nil
			}, 20*time.Second, 100*time.Millisecond)
			if !ok {
				for i, nd := range nodes {
					v, gerr := nd.rc.Get(context.Background(), "lagged").Result()
					t.Logf("replica %d: key %q (%v)", i, v, gerr)
				}
				t.Fatalf("the promoted replicas never took a lock: %v", lastErr)
			}
			if !ack {
				require.True(t, time.Now().Before(la.Until()), "A's validity ended during the test")
				t.Logf("control: two holders, A until %v and B until %v", la.Until().Format(time.StampMilli), lb.Until().Format(time.StampMilli))
			}
			require.NoError(t, lb.Unlock(t.Context()))
		})
	}
}

// TestCheckReportsReplicas: Check says when a node's replicas could lose a
// lock in a failover, and whether WithReplicaAck covers it.
func TestCheckReportsReplicas(t *testing.T) {
	nodes := startReplicated(t, 3)
	sentinel := startSentinel(t, nodes)
	find := func(rep *Report, node int) *Finding {
		for i := range rep.Findings {
			if f := &rep.Findings[i]; f.Check == "replicas" && f.Node == node {
				return f
			}
		}
		return nil
	}
	for _, tt := range []struct {
		name string
		cs   []redis.UniversalClient
		ack  int
		want Severity
		text string
	}{
		{"masters with replicas", masterClients(nodes), 0, SeverityWarning, "use WithReplicaAck(1)"},
		{"sentinel", failoverClients(t, sentinel, 3), 0, SeverityWarning, "a Sentinel client fails it over"},
		{"with WithReplicaAck(1)", failoverClients(t, sentinel, 3), 1, SeverityOK, "a yes counts once 1 of them have the key"},
		{"with WithReplicaAck(2)", masterClients(nodes), 2, SeverityCritical, "WithReplicaAck(2), but the master has 1 connected replicas"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.cs, WithReplicaAck(tt.ack))
			rep, err := c.Check(t.Context())
			require.NoError(t, err)
			for i := range nodes {
				f := find(rep, i)
				require.NotNil(t, f, "node %d: no replicas finding in\n%v", i, rep)
				require.Equal(t, tt.want, f.Severity, "node %d: %+v", i, f)
				require.Contains(t, f.Message+" "+f.Fix, tt.text, "node %d", i)
			}
		})
	}
	// A standalone master without replicas, through a plain client, has
	// nothing to lose in a failover: no finding.
	_, cs := minis(t, 3)
	rep, err := newClient(t, cs).Check(t.Context())
	require.NoError(t, err)
	require.Nil(t, find(rep, 0))
}
