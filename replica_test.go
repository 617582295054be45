package redlock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/keyspace"
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

// TestWaitOffsetCoversEarlierWrites pins the server behaviour that
// WithReplicaAck rests on. WAIT waits for the writes up to its connection's
// own offset. Redis up to 7.0 moves that offset to the server's replication
// offset after every command the connection runs, even one that writes
// nothing (processCommand: c->woff = server.master_repl_offset). Redis 7.2
// moves it only after a command that propagated something (call(),
// redis/redis#11713, the WAITAOF change): there a resent acquire that finds
// the key already ours, written by its first copy on another connection,
// writes nothing, and a WAIT after it alone would not cover that write. So
// every batch that waits for replicas publishes first on a barrier channel
// (transport.Acker): PUBLISH is replicated, so it moves the offset on every
// version.
//
// The replica is stopped (SIGSTOP), so it acknowledges nothing: connection
// A writes the key; B runs GET, S runs the acquire script, which finds the
// key ours with a longer TTL and writes nothing; each then publishes on the
// barrier channel, and WAIT 1 returns 0: each waits for A's write. What
// WAIT returns after the GET or the script alone, without the PUBLISH, is
// logged: 0 up to 7.0, and 1 (nothing to wait for) from 7.2. A connection
// that has run no command has offset 0, and its WAIT returns the replica at
// once, stopped as it is. Once the replica resumes, WAIT on B and S
// returns 1.
func TestWaitOffsetCoversEarlierWrites(t *testing.T) {
	nd := startReplicas(t, 1, false)[0]
	ctx := t.Context()
	version := infoOf(t, nd.mc, "server", "redis_version")
	t.Logf("redis-server %s", version)
	// The master pings its replicas every 10s by default, through the
	// replication stream: none must come between the offsets compared.
	require.NoError(t, nd.mc.ConfigSet(ctx, "repl-ping-replica-period", "3600").Err())
	offset := func() string { return infoOf(t, nd.mc, "replication", "master_repl_offset") }

	const key = "wait-offset"
	a, b, s, fresh := respDial(t, nd.master.Addr()), respDial(t, nd.master.Addr()), respDial(t, nd.master.Addr()), respDial(t, nd.master.Addr())
	nd.replica.Pause()
	t.Cleanup(nd.replica.Resume)

	require.Equal(t, "OK", a.do(t, "SET", key, "v", "PX", "60000"), "A: SET")
	before := offset()
	require.Equal(t, "v", b.do(t, "GET", key), "B: GET")
	// The acquire script's ARGV: the value, no owner, a TTL shorter than
	// the key's, one key, no fence, the acquisition's id and attempt.
	require.Equal(t, "1", s.do(t, "EVAL", scripts[scriptAcquire].src, "1", key, "v", "", "1000", "1", "0", "id", "1"),
		"S: the acquire script on a key that holds its value: want 1, already ours")
	require.Equal(t, before, offset(), "the master's replication offset across GET and the acquire script: want unchanged, they write nothing")

	for name, c := range map[string]*respConn{"GET": b, "the acquire script": s} {
		// Without the barrier: what this server's version does.
		got := c.do(t, "WAIT", "1", "300")
		t.Logf("redis-server %s: WAIT 1 300 after %s alone, with the replica stopped: %s (0: it waits for A's write)", version, name, got)
		require.Equal(t, "0", c.do(t, "PUBLISH", keyspace.Barrier(key), "redlock"), "PUBLISH on the barrier channel: nobody listens")
		got = c.do(t, "WAIT", "1", "300")
		require.Equal(t, "0", got, "WAIT 1 300 after %s and a PUBLISH, with the replica stopped: got %q, want 0 "+
			"(it waits for A's write); the barrier does not move the offset on redis-server %s", name, got, version)
	}
	start := time.Now()
	got := fresh.do(t, "WAIT", "1", "10000")
	require.Equal(t, "1", got, "WAIT 1 on a connection that has run no command, with the replica stopped: got %q, want 1 at once (offset 0)", got)
	require.Less(t, time.Since(start), 5*time.Second, "WAIT 1 10000 on a connection that has run no command: want an answer at once, not at its timeout")

	nd.replica.Resume()
	for _, c := range []*respConn{b, s} {
		got := c.do(t, "WAIT", "1", "10000")
		require.Equal(t, "1", got, "WAIT 1 after the replica resumed: got %q, want 1", got)
	}
}

// TestReplicaAckResentAcquire: the library's own resend path, with
// WithReplicaAck(1) on a master whose replica is stopped. The first copy
// of a plain lock's SET NX runs on another connection than the library's
// (as when go-redis resends after a lost reply), so the library's copy
// finds the key taken, asks GET (the value written twice), finds its own
// value, and ends that batch with a WAIT on its connection, where nothing
// was written. The yes must not count: WAIT waits for the first copy's
// write (see TestWaitOffsetCoversEarlierWrites), which the stopped replica
// never acknowledges. With the replica running, the same yes counts.
func TestReplicaAckResentAcquire(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		name := map[bool]string{false: "replica running", true: "replica stopped"}[stopped]
		t.Run(name, func(t *testing.T) {
			nd := startReplicas(t, 1, false)[0]
			const key = "resent-acquire"
			dup := &copyElsewhere{key: key, other: nd.master.NewClient(t)}
			nc := redis.NewClient(&redis.Options{Addr: nd.master.Addr()})
			nc.AddHook(dup)
			t.Cleanup(func() { _ = nc.Close() })
			// Half the node timeout bounds each WAIT: 3s leaves a loaded
			// machine room for a running replica, and the stopped
			// replica's WAIT 3s more before the round decides without it.
			c := newClient(t, []redis.UniversalClient{nc}, WithTTL(30*time.Second), WithNodeTimeout(6*time.Second), WithReplicaAck(1))
			if stopped {
				nd.replica.Pause()
				t.Cleanup(nd.replica.Resume)
			}
			l, err := c.TryLock(t.Context(), key)
			var rep copyReport
			require.Eventually(t, func() bool {
				rep = dup.report()
				return rep.checked
			}, 15*time.Second, 5*time.Millisecond, "the library never asked GET after its SET NX found the key: want the recheck of a value written twice")
			require.NoError(t, rep.copyErr, "the first copy of the SET NX, on another connection")
			require.Equal(t, rep.value, rep.got, "GET after the SET NX: got %q, want the first copy's value", rep.got)
			if stopped {
				require.NoError(t, rep.waitErr)
				require.EqualValues(t, 0, rep.acks, "WAIT after the GET, with the replica stopped: got %d, want 0", rep.acks)
				require.ErrorIs(t, err, ErrNotAcquired, "a yes whose first copy never reached the stopped replica counted")
				require.ErrorIs(t, err, ErrReplicaAck, "want the node's yes refused by its WAIT, not lost to a timeout")
				return
			}
			require.NoError(t, err)
			require.NoError(t, rep.waitErr)
			require.EqualValues(t, 1, rep.acks, "WAIT after the GET, with the replica running: got %d, want 1", rep.acks)
			require.Equal(t, rep.value, l.Token())
			got, err := nd.rc.Get(t.Context(), key).Result()
			require.NoError(t, err, "the replica's key")
			require.Equal(t, l.Token(), got, "the replica's key")
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

// copyElsewhere is a go-redis hook that sends the first SET of key, before
// it goes out, on another client's connection: the first copy of a resent
// write. It records what the GET of key that follows, and the WAIT in its
// batch, returned. It is safe for concurrent use.
type copyElsewhere struct {
	key   string
	other *redis.Client

	mu  sync.Mutex
	rep copyReport // guarded by mu
}

// copyReport is what a copyElsewhere saw.
type copyReport struct {
	copied  bool
	copyErr error
	value   string // the key's value after the copy
	checked bool   // a GET of the key came back
	got     string // its reply
	acks    int64  // the WAIT's in the GET's batch
	waitErr error
}

func (h *copyElsewhere) report() copyReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rep
}

func (h *copyElsewhere) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *copyElsewhere) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
			return next(ctx, cmds[0])
		})(ctx, []redis.Cmder{cmd})
	}
}

func (h *copyElsewhere) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !h.is(cmd, "set") || h.report().copied {
				continue
			}
			// The same arguments, the value's counter included: the
			// library sees its value written twice, as after a resend.
			err := h.other.Do(ctx, cmd.Args()...).Err()
			v, _ := h.other.Get(ctx, h.key).Result()
			h.mu.Lock()
			h.rep.copied, h.rep.copyErr, h.rep.value = true, err, v
			h.mu.Unlock()
			// This batch's WAIT does not count (its SET NX answers no,
			// and the GET decides), but it would wait out half the node
			// timeout, and the GET's WAIT would then race the round's
			// deadline: a millisecond, so that the GET's WAIT alone
			// decides the vote.
			for _, w := range cmds {
				if w.Name() == "wait" {
					w.Args()[2] = 1
				}
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if !h.is(cmd, "get") {
				continue
			}
			h.mu.Lock()
			h.rep.checked = true
			h.rep.got, _ = cmd.(*redis.Cmd).Text()
			for _, w := range cmds {
				if wc, ok := w.(*redis.IntCmd); ok && w.Name() == "wait" {
					h.rep.acks, h.rep.waitErr = wc.Result()
				}
			}
			h.mu.Unlock()
		}
		return err
	}
}

// is reports whether cmd is a name command on the hook's key.
func (h *copyElsewhere) is(cmd redis.Cmder, name string) bool {
	args := cmd.Args()
	return cmd.Name() == name && len(args) > 1 && fmt.Sprint(args[1]) == h.key
}

// respConn is a connection that speaks the raw protocol, so that it runs no
// command but the test's: go-redis sends HELLO and CLIENT SETINFO first.
type respConn struct {
	conn net.Conn
	rd   *bufio.Reader
}

func respDial(t *testing.T, addr string) *respConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &respConn{conn: conn, rd: bufio.NewReader(conn)}
}

// do sends a command and returns its reply: the text of a status, an
// integer or a bulk string. It fails t on an error reply, or on any other
// reply.
func (c *respConn) do(t *testing.T, args ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	require.NoError(t, c.conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err := io.WriteString(c.conn, b.String())
	require.NoError(t, err, "send %s", args[0])
	line, err := c.rd.ReadString('\n')
	require.NoError(t, err, "reply to %s", args[0])
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case line == "":
	case line[0] == '+' || line[0] == ':':
		return line[1:]
	case line[0] == '$':
		n, err := strconv.Atoi(line[1:])
		require.NoError(t, err, "reply to %s: %q", args[0], line)
		require.GreaterOrEqual(t, n, 0, "reply to %s: a nil bulk string", args[0])
		buf := make([]byte, n+2)
		_, err = io.ReadFull(c.rd, buf)
		require.NoError(t, err, "reply to %s", args[0])
		return string(buf[:n])
	}
	t.Fatalf("reply to %s: got %q, want a status, an integer or a bulk string", args[0], line)
	return ""
}

// infoOf returns one field of a section of INFO, or fails t.
func infoOf(t *testing.T, c *redis.Client, section, field string) string {
	t.Helper()
	info, err := c.Info(t.Context(), section).Result()
	require.NoError(t, err)
	v := infoField(info, field)
	require.NotEmpty(t, v, "INFO %s: no %s", section, field)
	return v
}
