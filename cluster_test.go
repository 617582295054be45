package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

// clusterNodes starts n Redis Clusters of three masters each, on real
// redis-servers, and returns a ClusterClient on each: Redlock nodes that
// are clusters.
func clusterNodes(t testing.TB, n int) ([]*redistest.Cluster, []redis.UniversalClient) {
	t.Helper()
	return clusterNodesWith(t, n, redistest.Options{})
}

// clusterNodesWith is clusterNodes with options for every server.
func clusterNodesWith(t testing.TB, n int, opts redistest.Options) ([]*redistest.Cluster, []redis.UniversalClient) {
	t.Helper()
	redistest.Require(t)
	clusters := redistest.StartClusters(t, n, 3, opts)
	cs := make([]redis.UniversalClient, n)
	for i, cl := range clusters {
		cs[i] = cl.NewClient(t)
	}
	return clusters, cs
}

// TestClusterNodes runs every kind of lock on three Redlock nodes that are
// each a Redis Cluster of three masters.
func TestClusterNodes(t *testing.T) {
	clusters, cs := clusterNodes(t, 3)
	ctx := t.Context()
	c := newClient(t, cs, WithTTL(5*time.Second))

	t.Run("lock, extend, unlock", func(t *testing.T) {
		l, err := c.Lock(ctx, "plain")
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "plain")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, WithTTL(8*time.Second)))
		require.NoError(t, l.Unlock(ctx))
		l, err = c.TryLock(ctx, "plain")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("auto-extension and Do", func(t *testing.T) {
		short := newClient(t, cs, WithTTL(300*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
		err := short.Do(ctx, "do", func(ctx context.Context) error {
			time.Sleep(700 * time.Millisecond)
			return ctx.Err()
		})
		require.NoError(t, err)
	})
	t.Run("waiter of another Client wakes on release", func(t *testing.T) {
		// The release is announced on the key's shard (SPUBLISH), and the
		// waiter, in another Client, listens there (SSUBSCRIBE).
		other := newClient(t, cs, WithTTL(5*time.Second))
		l, err := c.Lock(ctx, "wake")
		require.NoError(t, err)
		// A plain subscriber on every master of node 0's cluster: a
		// PUBLISH would reach each of them, a shard channel none.
		var plain []*redis.PubSub
		for _, m := range clusters[0].Masters {
			ps := m.NewClient(t).Subscribe(ctx, releaseChannel("wake"))
			_, err := ps.Receive(ctx) // the subscription's confirmation
			require.NoError(t, err)
			t.Cleanup(func() { _ = ps.Close() })
			plain = append(plain, ps)
		}
		got := make(chan error, 1)
		go func() {
			w, err := other.Lock(ctx, "wake", WithRetryDelay(5*time.Second, 5*time.Second))
			if err == nil {
				err = w.Unlock(context.Background())
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond)
		released := time.Now()
		require.NoError(t, l.Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
			require.Less(t, time.Since(released), 4*time.Second, "woken by the retry delay, not the release")
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter never got the lock")
		}
		for i, ps := range plain {
			select {
			case m := <-ps.Channel():
				t.Fatalf("master %d got %v: the release was broadcast, not sent on the key's shard", i, m)
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	t.Run("multi-key needs one slot", func(t *testing.T) {
		_, err := c.TryLockMulti(ctx, []string{"alice", "bob"})
		require.ErrorIs(t, err, ErrInvalidOption)
		l, err := c.TryLockMulti(ctx, []string{"{acct}:alice", "{acct}:bob"})
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "{acct}:bob")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("owner lock", func(t *testing.T) {
		a, err := c.TryLock(ctx, "owned", WithOwner("w1"))
		require.NoError(t, err)
		b, err := c.TryLock(ctx, "owned", WithOwner("w1"))
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "owned", WithOwner("w2"))
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, b.Unlock(ctx))
		require.NoError(t, a.Unlock(ctx))
	})
	t.Run("fencing", func(t *testing.T) {
		var last uint64
		for range 3 {
			l, err := c.TryLock(ctx, "fenced", WithFencing(true))
			require.NoError(t, err)
			require.Greater(t, l.Fence(), last)
			last = l.Fence()
			require.NoError(t, l.Unlock(ctx))
		}
	})
	t.Run("readers and writers", func(t *testing.T) {
		r1, err := c.TryRLock(ctx, "rw")
		require.NoError(t, err)
		r2, err := c.TryRLock(ctx, "rw")
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "rw")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		w, err := c.TryLock(ctx, "rw")
		require.NoError(t, err)
		_, err = c.TryRLock(ctx, "rw")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, w.Unlock(ctx))
	})
	t.Run("semaphore", func(t *testing.T) {
		s, err := c.Semaphore("sem", 2)
		require.NoError(t, err)
		require.Equal(t, 3, s.Quorum(), "two permits on three nodes need all three")
		a, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		b, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, a.Unlock(ctx))
		require.NoError(t, b.Unlock(ctx))
	})
	t.Run("inspect", func(t *testing.T) {
		l, err := c.TryLock(ctx, "inspected", WithLabel("job 7"))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			h, err := c.Inspect(ctx, "inspected")
			return err == nil && h.Held && h.Token == l.Token() && h.Label == "job 7" && len(h.Nodes) == 3 &&
				h.Nodes[0].Held && h.Nodes[1].Held && h.Nodes[2].Held
		}, 5*time.Second, 10*time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("check", func(t *testing.T) {
		rep, err := c.Check(ctx)
		require.NoError(t, err)
		clusterOK := 0
		for _, f := range rep.Findings {
			require.NotEqual(t, SeverityCritical, f.Severity, "%+v", f)
			if f.Check == "cluster" && f.Severity == SeverityOK {
				require.Contains(t, f.Message, "3 masters serve all 16384 slots")
				clusterOK++
			}
		}
		require.Equal(t, 3, clusterOK, "a cluster finding per node:\n%v", rep)
	})
}

// TestClusterWakeUpsWithoutShardedPubSub: on servers without SSUBSCRIBE and
// SPUBLISH (Redis before 7.0; here the commands are renamed away), the
// release scripts fall back to PUBLISH and the waiters to SUBSCRIBE, and a
// waiter in another Client still wakes at the release.
func TestClusterWakeUpsWithoutShardedPubSub(t *testing.T) {
	_, cs := clusterNodesWith(t, 3, redistest.Options{Args: []string{
		"--rename-command", "SSUBSCRIBE", "", "--rename-command", "SPUBLISH", ""}})
	ctx := t.Context()
	a := newClient(t, cs, WithTTL(20*time.Second))
	b := newClient(t, cs, WithTTL(20*time.Second))
	l, err := a.TryLock(ctx, "old")
	require.NoError(t, err)
	woke := make(chan error, 1)
	go func() {
		w, err := b.Lock(ctx, "old", WithRetryDelay(20*time.Second, 20*time.Second))
		if err == nil {
			err = w.Unlock(context.Background())
		}
		woke <- err
	}()
	time.Sleep(500 * time.Millisecond) // the waiter falls back to plain channels
	released := time.Now()
	require.NoError(t, l.Unlock(ctx))
	select {
	case err := <-woke:
		require.NoError(t, err)
		require.Less(t, time.Since(released), 10*time.Second, "the waiter waited out its retry delay")
	case <-time.After(25 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
}

// TestCheckReportsClusterState: a cluster that lost a master, and so a
// third of its slots, is critical.
func TestCheckReportsClusterState(t *testing.T) {
	clusters, cs := clusterNodes(t, 3)
	c := newClient(t, cs)
	clusters[0].Masters[2].Kill()
	// Back before the clients close: go-redis keeps redialling a dead
	// address, once a second, in a goroutine of its own, which would
	// outlive the test; it ends at its next dial.
	defer func() {
		clusters[0].Masters[2].Restart()
		time.Sleep(1100 * time.Millisecond)
	}()
	require.Eventually(t, func() bool {
		rep, err := c.Check(t.Context())
		if err != nil {
			return false
		}
		for _, f := range rep.Findings {
			if f.Check == "cluster" && f.Node == 0 && f.Severity == SeverityCritical {
				return strings.Contains(f.Message, "cluster_state is fail")
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "Check never reported the failed cluster")
}

// TestClusterSlotMigration moves the slot of held and contended lock keys
// from one master to another, on two of the three Redlock nodes, while
// clients compete for them: no two holders overlap, the held lock's TTL
// survives the move, and its Extend and Unlock follow the key (ASK during
// the move, MOVED after).
func TestClusterSlotMigration(t *testing.T) {
	clusters, cs := clusterNodes(t, 3)
	ctx := t.Context()
	opts := []Option{WithTTL(2 * time.Second), WithNodeTimeout(200 * time.Millisecond), WithRetryDelay(time.Millisecond, 10*time.Millisecond)}
	a := newClient(t, cs, opts...)
	b := newClient(t, cs, opts...)
	const held = "{mig}:held"
	slot := int(cs[0].ClusterKeySlot(ctx, held).Val())
	l, err := a.TryLock(ctx, held, WithFencing(true), WithTTL(20*time.Second))
	require.NoError(t, err)

	// Contention on keys of the same slot, from two Clients, recorded for
	// the overlap checker.
	rec := newChaosRecorder()
	stop, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 6 {
		c := []*Client{a, b}[w%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for stop.Err() == nil {
				key := fmt.Sprintf("{mig}:k%d", rng.IntN(2))
				lctx, lcancel := context.WithTimeout(stop, 2*time.Second)
				lk, err := c.Lock(lctx, key)
				acquired := time.Now()
				lcancel()
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				h := chaosHold{key: key, client: w % 2, worker: w, token: lk.Token(), acquired: acquired, until: lk.Until(), released: time.Now()}
				rec.hold(h)
				_ = lk.Unlock(context.WithoutCancel(stop))
			}
		})
	}
	// A waiter in another Client, subscribed on the slot's masters before
	// the move: the servers drop its shard channels as the slot leaves,
	// and it must follow the slot to hear the release.
	lw, err := a.TryLock(ctx, "{mig}:waited", WithTTL(20*time.Second))
	require.NoError(t, err)
	woke := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		l, err := b.Lock(wctx, "{mig}:waited", WithRetryDelay(20*time.Second, 20*time.Second))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		woke <- err
	}()
	time.Sleep(200 * time.Millisecond)
	for i, cl := range clusters[:2] {
		from, err := cl.SlotOwner(ctx, slot)
		require.NoError(t, err)
		to := (from + 1) % len(cl.Masters)
		require.NoError(t, cl.MigrateSlot(ctx, slot, to, func() { time.Sleep(20 * time.Millisecond) }), "node %d", i)
		owner, err := cl.SlotOwner(ctx, slot)
		require.NoError(t, err)
		require.Equal(t, to, owner, "node %d: the slot did not move", i)
		// The held lock's key moved with its TTL.
		moved := redis.NewClient(&redis.Options{Addr: cl.Masters[to].Addr()})
		pttl, err := moved.PTTL(ctx, held).Result()
		_ = moved.Close()
		require.NoError(t, err)
		require.Greater(t, pttl, 10*time.Second, "node %d: the key lost its TTL in the move", i)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()

	f := rec.figures()
	require.Empty(t, f.overlaps, "holders overlapped during the slot migration")
	require.Positive(t, f.acquisitions, "no lock was taken during the migration")
	t.Logf("slot %d migrated on two nodes under contention: %d acquisitions, 0 overlaps", slot, f.acquisitions)

	time.Sleep(200 * time.Millisecond) // the waiter subscribes where the slot went
	released := time.Now()
	require.NoError(t, lw.Unlock(ctx))
	select {
	case err := <-woke:
		require.NoError(t, err)
		require.Less(t, time.Since(released), 10*time.Second, "the waiter waited out its retry delay: its subscriptions did not follow the slot")
	case <-time.After(25 * time.Second):
		t.Fatal("the waiter never got the lock")
	}

	require.NoError(t, l.Err())
	_, err = b.TryLock(ctx, held)
	require.ErrorIs(t, err, ErrNotAcquired, "the moved lock must still exclude others")
	require.NoError(t, l.Extend(ctx), "Extend follows the key to its new master")
	h, err := a.Inspect(ctx, held)
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)
	require.NoError(t, l.Unlock(ctx), "Unlock follows the key")
	l2, err := b.TryLock(ctx, held, WithFencing(true))
	require.NoError(t, err)
	require.Greater(t, l2.Fence(), l.Fence(), "the fence counter moved with its key")
	require.NoError(t, l2.Unlock(ctx))
}

// TestChaosClusterNodes runs clusterNodesScenario on its own; its figures
// go into no summary. Replay it with:
//
//	go test -race -count=1 -run 'ChaosClusterNodes' -v . -chaos.seed=1234
func TestChaosClusterNodes(t *testing.T) {
	sc := clusterNodesScenario()
	t.Run(sc.name, func(t *testing.T) { runChaosScenario(t, sc, &chaosSummary{}) })
}

// clusterNodesScenario is the chaos scenario on cluster nodes: three
// Redlock nodes, each a Redis Cluster of three masters, under the mixed
// workload from three Clients (chaos_mix_test.go), whose keys all carry
// chaosClusterTag. On one cluster the master that serves the tag's slot is
// killed, and restarted empty once the longest TTL has passed; on another
// it is paused beyond the TTL; on the third the slot moves, keys and all,
// to another master under contention. The clusters take these turns in an
// order drawn from the seed. The mix's checker finds no overlap among any
// kinds of holds, no breach of the API's contracts, and nothing left under
// the prefix on any master once every TTL has passed.
func clusterNodesScenario() chaosScenario {
	// A longer TTL than the mix's default, with a node timeout to match:
	// a ClusterClient under -race on a busy machine.
	const ttl = 500 * time.Millisecond
	return chaosScenario{
		name: "cluster-nodes", mix: true, minSuccess: 5, minAcquisitions: 5, verdicts: true,
		cluster: chaosClusterOpts{backend: clusterBackend, nodes: 3, clients: 3, defaultClients: true},
		load: func(l *chaosLoad) {
			mixLoad(l)
			l.ttl, l.nodeTimeout, l.duration = ttl, 100*time.Millisecond, 7*time.Second
		},
		faults: func(r *chaosRun) {
			nodes := r.pick(3)
			r.at(0.07)
			kill := &slotOwnerRestartFault{node: nodes[0], delay: mixRestartDelay(ttl)}
			r.inject(kill)
			r.heal(kill)
			// A restarted master answers CLUSTERDOWN for its first two
			// seconds (Redis's CLUSTER_WRITABLE_DELAY): the pause waits
			// for that, so that two nodes are not out at once.
			r.at(0.57)
			r.during(&slotOwnerPauseFault{node: nodes[1]}, r.between(2*ttl, 3*ttl))
			r.at(0.8)
			move := &slotMigrationFault{node: nodes[2]}
			r.inject(move)
			r.heal(move)
		},
	}
}

// chaosSlot is the slot of chaosClusterTag, which every key of the mix is
// in on cluster nodes.
var chaosSlot = int(keyspace.Slot(chaosClusterTag))

// chaosSlotOwner returns the index of the master of cluster node i that
// serves chaosSlot.
func chaosSlotOwner(r *chaosRun, i int) int {
	r.t.Helper()
	owner, err := r.cl.nodes[i].cluster.SlotOwner(r.t.Context(), chaosSlot)
	if err != nil {
		r.t.Fatalf("node %d: the owner of slot %d: %v", i, chaosSlot, err)
	}
	return owner
}

// slotOwnerRestartFault kills the master of a cluster node that serves
// chaosSlot and, on heal, once delay has passed since the kill, restarts
// it: without persistence it comes back with no keys but with its cluster
// config (nodes.conf), and serves its slots again.
type slotOwnerRestartFault struct {
	node   int
	delay  time.Duration // more than the longest TTL
	master int           // set by inject
	killed time.Time
}

func (f *slotOwnerRestartFault) String() string {
	return fmt.Sprintf("restart the master of slot %d on cluster node %d (empty, delayed by %v)", chaosSlot, f.node, f.delay)
}

func (f *slotOwnerRestartFault) inject(r *chaosRun) {
	f.master = chaosSlotOwner(r, f.node)
	r.cl.nodes[f.node].cluster.Masters[f.master].Kill()
	f.killed = time.Now()
}

func (f *slotOwnerRestartFault) heal(r *chaosRun) {
	r.sleep(time.Until(f.killed.Add(f.delay)))
	r.cl.nodes[f.node].cluster.Masters[f.master].Restart()
}

// slotOwnerPauseFault stops the master of a cluster node that serves
// chaosSlot with SIGSTOP until heal, as pauseFault does a plain node. It
// must end within the cluster's node timeout (2s), or the other masters
// would mark it failed.
type slotOwnerPauseFault struct{ node, master int }

func (f *slotOwnerPauseFault) String() string {
	return fmt.Sprintf("pause the master of slot %d on cluster node %d", chaosSlot, f.node)
}

func (f *slotOwnerPauseFault) inject(r *chaosRun) {
	f.master = chaosSlotOwner(r, f.node)
	r.cl.nodes[f.node].cluster.Masters[f.master].Pause()
}

func (f *slotOwnerPauseFault) heal(r *chaosRun) {
	r.cl.nodes[f.node].cluster.Masters[f.master].Resume()
}

// slotMigrationFault moves chaosSlot of a cluster node, with every key in
// it, to another of its masters drawn from the seed (redistest's
// MigrateSlot: two keys a batch, 10ms apart), while the workload runs:
// clients get ASK during the move and MOVED after it. inject makes the
// whole move; there is nothing to heal.
type slotMigrationFault struct{ node, from, to int }

func (f *slotMigrationFault) String() string {
	return fmt.Sprintf("migrate slot %d on cluster node %d", chaosSlot, f.node)
}

func (f *slotMigrationFault) inject(r *chaosRun) {
	c := r.cl.nodes[f.node].cluster
	f.from = chaosSlotOwner(r, f.node)
	f.to = (f.from + 1 + r.rng.IntN(len(c.Masters)-1)) % len(c.Masters)
	keys, err := r.cl.nodes[f.node].masters[f.from].ClusterCountKeysInSlot(r.t.Context(), chaosSlot).Result()
	if err != nil {
		r.t.Fatalf("node %d: CLUSTER COUNTKEYSINSLOT: %v", f.node, err)
	}
	if err := c.MigrateSlot(r.t.Context(), chaosSlot, f.to, func() { time.Sleep(10 * time.Millisecond) }); err != nil {
		r.t.Fatalf("node %d: migrate slot %d from master %d to %d: %v", f.node, chaosSlot, f.from, f.to, err)
	}
	if owner := chaosSlotOwner(r, f.node); owner != f.to {
		r.t.Fatalf("node %d: slot %d is on master %d after the move, want %d", f.node, chaosSlot, owner, f.to)
	}
	r.logf("node %d: slot %d moved from master %d to %d, with the %d keys it had when the move began", f.node, chaosSlot, f.from, f.to, keys)
}

func (*slotMigrationFault) heal(*chaosRun) {}
