package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// requireValkey skips t unless REDIS_SERVER names valkey-server, which
// internal/redistest then runs: make test runs the Valkey tests a second
// time so (VALKEY_TESTS in the Makefile). With CI set, a machine without valkey-server
// fails t instead, so that CI never passes with the Valkey tests skipped.
func requireValkey(t testing.TB) {
	t.Helper()
	redistest.Require(t)
	if isValkey(os.Getenv("REDIS_SERVER")) {
		return
	}
	if _, err := exec.LookPath("valkey-server"); err != nil {
		const msg = "valkey-server not found: install it (make valkey-server)"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; CI is set, so the Valkey tests must not be skipped (%v)", msg, err)
		}
		t.Skip(msg + "; skipping Valkey test")
	}
	t.Skip("REDIS_SERVER does not name valkey-server: make test runs this test on Valkey " +
		"(REDIS_SERVER=$(command -v valkey-server), VALKEY_TESTS)")
}

// isValkey reports whether bin is a valkey-server binary. Debian's
// valkey-server is a symbolic link to valkey-check-rdb, which acts on the
// name it is run by, so the binary is asked rather than its path read.
func isValkey(bin string) bool {
	if bin == "" {
		return false
	}
	out, err := exec.Command(bin, "--version").Output()
	return err == nil && bytes.HasPrefix(out, []byte("Valkey server"))
}

// serverClients returns a default go-redis client for each server.
func serverClients(t *testing.T, srv []*redistest.Server) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	return cs
}

// waitaofCalls returns how many WAITAOF commands the node has run since it
// started, from INFO commandstats.
func waitaofCalls(t *testing.T, rc redis.UniversalClient) int {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	v, ok := strings.CutPrefix(infoField(info, "cmdstat_waitaof"), "calls=")
	if !ok {
		return 0 // none yet
	}
	n, err := strconv.Atoi(v[:strings.IndexByte(v+",", ',')])
	require.NoError(t, err, "cmdstat_waitaof: %q", infoField(info, "cmdstat_waitaof"))
	return n
}

// settledCalls returns every node's WAITAOF count once it stops changing:
// the requests of a call that returned at its quorum may still be running
// on the other nodes.
func settledCalls(t *testing.T, cs []redis.UniversalClient) []int {
	t.Helper()
	read := func() []int {
		out := make([]int, len(cs))
		for i, rc := range cs {
			out[i] = waitaofCalls(t, rc)
		}
		return out
	}
	last := read()
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		now := read()
		if slices.Equal(now, last) {
			return now
		}
		last = now
	}
	t.Fatalf("the nodes' WAITAOF counts never settled: %v", last)
	return nil
}

// requireFsyncFailures checks the votes of a call that failed for want of
// fsync acknowledgements: every failed vote wraps ErrFsyncAck and says
// why, and enough failed that no quorum was left.
func requireFsyncFailures(t *testing.T, err error, quorum int, why ...string) {
	t.Helper()
	require.ErrorIs(t, err, ErrFsyncAck)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	failed := 0
	for _, nv := range qe.Stats.Nodes {
		if nv.Vote != VoteFailed {
			continue
		}
		failed++
		require.ErrorIs(t, nv.Err, ErrFsyncAck, "node %d: got %v", nv.Index, nv.Err)
		for _, w := range why {
			require.Contains(t, nv.Err.Error(), w, "node %d", nv.Index)
		}
	}
	require.Greater(t, failed, len(qe.Stats.Nodes)-quorum, "failed votes: got %d of %d: %v", failed, len(qe.Stats.Nodes), err)
}

// TestFsyncAckSurvivesKill: on Valkey with appendonly yes, a node of the
// quorum of a Lock taken with WithFsyncAck, killed with SIGKILL as soon as
// Lock returns and restarted from its AOF, still holds the key with the
// lock's token: 20 times of 20. Every node that voted yes ran a WAITAOF
// for it.
func TestFsyncAckSurvivesKill(t *testing.T) {
	requireValkey(t)
	srv := redistest.StartN(t, 5, redistest.Options{Persistence: true})
	cs := serverClients(t, srv)
	c := newClient(t, cs, WithFsyncAck(true))
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx := t.Context()
	for run := range 20 {
		before := settledCalls(t, cs)
		key := fmt.Sprintf("fsync-kill-%d", run)
		l, err := c.Lock(ctx, key)
		require.NoError(t, err, "run %d", run)
		yes := yesNodes(l)
		require.GreaterOrEqual(t, len(yes), c.Quorum(), "run %d: %+v", run, l.Stats())
		k := yes[rng.IntN(len(yes))]
		srv[k].Kill()
		srv[k].Restart()
		got, err := cs[k].Get(ctx, key).Result()
		require.NoError(t, err, "run %d: node %d voted yes, and forgot %s after kill -9 and a restart from its AOF", run, k, key)
		require.Equal(t, l.Token(), got, "run %d: node %d", run, k)
		for _, i := range yes {
			if i != k { // a restart resets the node's counts
				require.Greater(t, waitaofCalls(t, cs[i]), before[i], "run %d: node %d voted yes without a WAITAOF", run, i)
			}
		}
		require.NoError(t, l.Unlock(ctx), "run %d", run)
	}
}

// TestFsyncAckAppendonlyOff: on Valkey nodes with appendonly off, a Lock
// with WithFsyncAck fails: WAITAOF refuses, every vote fails with an
// ErrFsyncAck that says appendonly is off, each node warns once, and
// nothing is left on the nodes. Without it (the negative control) the lock
// is taken, and a node of its quorum killed and restarted has forgotten it.
func TestFsyncAckAppendonlyOff(t *testing.T) {
	requireValkey(t)
	srv := redistest.StartN(t, 5, redistest.Options{})
	cs := serverClients(t, srv)
	ctx := t.Context()
	const key = "fsync-aof-off"

	logs := &warnLog{}
	c := newClient(t, cs, WithFsyncAck(true), WithLogger(slog.New(logs)))
	for range 3 {
		_, err := c.TryLock(ctx, key)
		require.ErrorIs(t, err, ErrNotAcquired)
		requireFsyncFailures(t, err, c.Quorum(), "appendonly is off")
	}
	warned := countOf(logs.warnings(), faultAOFOff)
	require.GreaterOrEqual(t, len(warned), c.Quorum(), "warnings: got %v", logs.warnings())
	for i, n := range warned {
		require.Equal(t, 1, n, "node %d: warned %d times, want once", i, n)
	}
	for i, rc := range cs {
		require.Eventually(t, func() bool {
			n, err := rc.Exists(ctx, key).Result()
			return err == nil && n == 0
		}, 5*time.Second, 10*time.Millisecond, "node %d kept the key of a failed acquisition", i)
	}

	l, err := newClient(t, cs).Lock(ctx, key)
	require.NoError(t, err, "without WithFsyncAck the lock is taken")
	k := yesNodes(l)[0]
	srv[k].Kill()
	srv[k].Restart()
	n, err := cs[k].Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the control: node %d runs without AOF, and must forget the key in a restart", k)
}

// TestNoWAITAOFOnRedis70: Redis 7.0 has no WAITAOF, so every vote of a lock
// taken with WithFsyncAck fails, with an ErrFsyncAck that says the server
// lacks WAITAOF and which versions have it, and each node warns of it once.
// The same nodes take the lock without WithFsyncAck.
func TestNoWAITAOFOnRedis70(t *testing.T) {
	srv, cs := realNodes(t, 3)
	for _, s := range srv {
		configSet(t, s, "appendonly", "yes", "appendfsync", "always")
	}
	info, err := cs[0].Info(t.Context(), "server").Result()
	require.NoError(t, err)
	if v, _ := parseVersion(infoField(info, "redis_version")); v[0]*100+v[1] >= 702 || infoField(info, "server_name") != "" {
		t.Skipf("the server has WAITAOF (%s %s): this test needs Redis before 7.2, the default redis-server here",
			infoField(info, "server_name"), infoField(info, "redis_version"))
	}
	ctx := t.Context()
	logs := &warnLog{}
	c := newClient(t, cs, WithFsyncAck(true), WithLogger(slog.New(logs)))
	for range 3 {
		_, err := c.TryLock(ctx, "no-waitaof")
		require.ErrorIs(t, err, ErrNotAcquired)
		requireFsyncFailures(t, err, c.Quorum(), "the server lacks WAITAOF", "Redis 7.2+ or Valkey 7.2+", "unknown command")
	}
	warned := countOf(logs.warnings(), faultNoWAITAOF)
	require.GreaterOrEqual(t, len(warned), c.Quorum(), "warnings: got %v", logs.warnings())
	for i, n := range warned {
		require.Equal(t, 1, n, "node %d: warned %d times, want once", i, n)
	}

	l, err := newClient(t, cs).TryLock(ctx, "no-waitaof")
	require.NoError(t, err, "without WithFsyncAck")
	require.NoError(t, l.Unlock(ctx))
}

// TestFsyncAckExtendAndRenewals: on Valkey, Extend and auto-extension
// renewals wait for WAITAOF as acquisitions do. Once three of five nodes run
// with appendfsync no, where WAITAOF never confirms, Extend fails with
// ErrFsyncAck and an auto-extended lock is lost; without WithFsyncAck (the
// negative control) both go on.
func TestFsyncAckExtendAndRenewals(t *testing.T) {
	requireValkey(t)
	srv := redistest.StartN(t, 5, redistest.Options{Persistence: true})
	cs := serverClients(t, srv)
	ctx := t.Context()
	opts := []Option{WithTTL(2 * time.Second), WithNodeTimeout(300 * time.Millisecond)}
	c := newClient(t, cs, append(opts, WithFsyncAck(true))...)

	l, err := c.Lock(ctx, "fsync-extend")
	require.NoError(t, err)
	before := settledCalls(t, cs)
	require.NoError(t, l.Extend(ctx))
	after := settledCalls(t, cs)
	yes := yesNodes(l)
	require.GreaterOrEqual(t, len(yes), c.Quorum(), "%+v", l.Stats())
	for _, i := range yes {
		require.Greater(t, after[i], before[i], "node %d: Extend's yes without a WAITAOF", i)
	}

	auto, err := c.Lock(ctx, "fsync-renewed", WithAutoExtend(true))
	require.NoError(t, err)
	before = settledCalls(t, cs)
	until := auto.Until()
	require.Eventually(t, func() bool { return auto.Until().After(until) }, 5*time.Second, 10*time.Millisecond, "no renewal")
	for i, n := range settledCalls(t, cs) {
		require.Greater(t, n, before[i], "node %d: renewed without a WAITAOF", i)
	}

	ctl := newClient(t, cs, opts...)
	ctlLock, err := ctl.Lock(ctx, "fsync-control")
	require.NoError(t, err)
	ctlAuto, err := ctl.Lock(ctx, "fsync-control-renewed", WithAutoExtend(true))
	require.NoError(t, err)

	for _, s := range srv[:3] {
		configSet(t, s, "appendfsync", "no")
	}
	err = l.Extend(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	requireFsyncFailures(t, err, c.Quorum(), "WAITAOF confirmed no fsync within the node timeout")
	select {
	case <-auto.Done():
		require.ErrorIs(t, auto.Err(), ErrLockLost)
	case <-time.After(10 * time.Second):
		t.Fatalf("the auto-extended lock was still renewed on nodes that confirm no fsync: %+v", auto.Stats())
	}

	require.NoError(t, ctlLock.Extend(ctx), "the control: without WithFsyncAck, Extend needs no fsync")
	require.NoError(t, ctlLock.Unlock(ctx))
	select {
	case <-ctlAuto.Done():
		t.Fatalf("the control: lost without WithFsyncAck: %v", ctlAuto.Err())
	case <-time.After(3 * time.Second):
	}
	require.NoError(t, ctlAuto.Unlock(ctx))
}

// TestFsyncAckNeedsNoBarrierChannel: the barrier before WAITAOF is a key,
// not the channel that WithReplicaAck publishes on. A user that may
// publish on the release channels only takes a lock with WithFsyncAck,
// and Check finds nothing wrong with the node; the barrier keys are gone
// from the nodes at once, leaving nothing for a scan of the key prefix to
// find once the lock is released.
func TestFsyncAckNeedsNoBarrierChannel(t *testing.T) {
	requireValkey(t)
	srv := redistest.StartN(t, 3, redistest.Options{Persistence: true})
	ctx := t.Context()
	cs := make([]redis.UniversalClient, len(srv))
	admins := serverClients(t, srv)
	for i, s := range srv {
		require.NoError(t, admins[i].Do(ctx, "ACL", "SETUSER", "locker", "reset", "on", ">pw", "~*", "+@all", "&*released*").Err())
		cs[i] = optClient(t, &redis.Options{Addr: s.Addr(), Username: "locker", Password: "pw"})
	}
	c := newClient(t, cs, WithFsyncAck(true))
	l, err := c.TryLock(ctx, "fsync-no-channel")
	require.NoError(t, err, "the user lacks only the barrier channel, which WAITAOF does not need")
	require.NoError(t, l.Unlock(ctx))

	r, err := c.Check(ctx)
	require.NoError(t, err)
	for _, f := range r.Findings {
		require.Less(t, f.Severity, SeverityWarning, "got %s %s node %d: %s\n%s", f.Severity, f.Check, f.Node, f.Message, r)
	}
	for i, rc := range admins {
		require.Eventually(t, func() bool {
			n, err := rc.DBSize(ctx).Result()
			return err == nil && n == 0
		}, 5*time.Second, 10*time.Millisecond, "node %d keeps keys after the release: %v", i, rc.Keys(ctx, "*").Val())
	}
}

// TestFsyncAckUnknownCommand: a node without WAITAOF (miniredis here)
// fails every vote of WithFsyncAck with the error that names it, and the
// same nodes vote yes without the option.
func TestFsyncAckUnknownCommand(t *testing.T) {
	ms, cs := minis(t, 3)
	_, err := newClient(t, cs, WithFsyncAck(true)).TryLock(t.Context(), "fsync-mini")
	require.ErrorIs(t, err, ErrNotAcquired)
	requireFsyncFailures(t, err, 2, "the server lacks WAITAOF: WithFsyncAck needs Redis 7.2+ or Valkey 7.2+")
	for i, m := range ms {
		require.Eventually(t, func() bool { return !m.Exists("fsync-mini") }, 5*time.Second, 10*time.Millisecond,
			"node %d kept the key of a failed acquisition", i)
	}
	l, err := newClient(t, cs).TryLock(t.Context(), "fsync-mini")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
}

// TestFsyncAckOptionChecks: WithFsyncAck is refused on Redis Cluster nodes,
// as WithReplicaAck is.
func TestFsyncAckOptionChecks(t *testing.T) {
	_, cs := minis(t, 2)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cc.Close() })
	_, err := New([]redis.UniversalClient{cs[0], cs[1], cc}, WithFsyncAck(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithFsyncAck is not supported on Redis Cluster nodes (node 2): WAITAOF would not reach the key's shard")
	c, err := New([]redis.UniversalClient{cs[0], cs[1], cc}, WithFsyncAck(false))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// TestFsyncAckErr: the outcomes of a WAITAOF, as a vote's error.
func TestFsyncAckErr(t *testing.T) {
	require.NoError(t, fsyncAckErr(1, nil))
	err := fsyncAckErr(0, nil)
	require.ErrorIs(t, err, ErrFsyncAck)
	require.Contains(t, err.Error(), "WAITAOF confirmed no fsync within the node timeout")
	other := errors.New("WAITAOF failed: i/o error")
	err = fsyncAckErr(0, other)
	require.ErrorIs(t, err, ErrFsyncAck)
	require.ErrorIs(t, err, other)
	require.Empty(t, persistentKind(err), "a failure that may pass is not one to warn of")
}

// aofReady waits until the server's append-only file is written, after a
// CONFIG SET appendonly yes: its first rewrite has ended.
func aofReady(t *testing.T, rc redis.UniversalClient) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := rc.Info(context.Background(), "persistence").Result()
		return err == nil && infoField(info, "aof_enabled") == "1" &&
			infoField(info, "aof_rewrite_in_progress") == "0" && infoField(info, "aof_rewrite_scheduled") == "0"
	}, 10*time.Second, 10*time.Millisecond, "the AOF was never written")
}

// TestFsyncAckWithReplicaAck: with both options, a yes counts only once
// the replicas acknowledged it and the master fsynced it. Each batch to a
// master ends with WAIT and WAITAOF. Lagging replicas fail the votes with
// ErrReplicaAck although the masters fsync; masters without AOF fail them
// with ErrFsyncAck although the replicas acknowledge.
func TestFsyncAckWithReplicaAck(t *testing.T) {
	requireValkey(t)
	opts := []Option{WithReplicaAck(1), WithFsyncAck(true), WithNodeTimeout(500 * time.Millisecond)}
	t.Run("both acknowledge", func(t *testing.T) {
		nodes := startReplicated(t, 3)
		cs := masterClients(nodes)
		for _, nd := range nodes {
			require.NoError(t, nd.mc.ConfigSet(t.Context(), "appendonly", "yes").Err())
			require.NoError(t, nd.mc.ConfigSet(t.Context(), "appendfsync", "always").Err())
			aofReady(t, nd.mc)
		}
		c := newClient(t, cs, opts...)
		l, err := c.TryLock(t.Context(), "fsync-replicas")
		require.NoError(t, err)
		require.NoError(t, l.Extend(t.Context()))
		for i, rc := range cs {
			info, err := rc.Info(t.Context(), "commandstats").Result()
			require.NoError(t, err)
			require.NotEmpty(t, infoField(info, "cmdstat_wait"), "node %d ran no WAIT", i)
			require.NotEmpty(t, infoField(info, "cmdstat_waitaof"), "node %d ran no WAITAOF", i)
		}
		require.NoError(t, l.Unlock(t.Context()))

		nodes[0].lag()
		nodes[1].lag()
		_, err = c.TryLock(t.Context(), "fsync-replicas-lag")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, ErrReplicaAck)
	})
	t.Run("replicas without a fsync", func(t *testing.T) {
		nodes := startReplicated(t, 3)
		_, err := newClient(t, masterClients(nodes), opts...).TryLock(t.Context(), "fsync-replicas")
		require.ErrorIs(t, err, ErrNotAcquired)
		requireFsyncFailures(t, err, 2, "appendonly is off")
	})
}

// A node that cannot confirm fsyncs still answers: its failure is warned
// of, but does not explain a later timeout of the node, as a refused
// connection would.
func TestFsyncAckFaultExplainsNoSilence(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	timeout := fmt.Errorf("%w: no answer", ErrNodeTimeout)
	for _, cause := range []error{errAOFOff, errNoWAITAOF} {
		c.faults.failed(0, fmt.Errorf("%w: %w", ErrFsyncAck, cause))
		require.Same(t, timeout, c.faults.explain(0, timeout), "after %v", cause)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	c.faults.failed(0, refused)
	require.ErrorIs(t, c.faults.explain(0, timeout), syscall.ECONNREFUSED, "a refused connection explains the timeout")
}

// BenchmarkLockUnlockFsyncAck times Lock+Unlock on 5 Valkey nodes with
// appendonly yes and appendfsync always, with and without WithFsyncAck:
// the cost of the WAITAOF (run with REDIS_SERVER naming valkey-server).
func BenchmarkLockUnlockFsyncAck(b *testing.B) {
	requireValkey(b)
	srv := redistest.StartN(b, microNodes, redistest.Options{Persistence: true})
	nodes := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		nodes[i] = s.NewClient(b)
	}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync-ack=%v", on), func(b *testing.B) {
			c, err := New(nodes, WithFsyncAck(on))
			require.NoError(b, err)
			b.Cleanup(func() { _ = c.Close() })
			lockUnlockLoop(b, c, fmt.Sprintf("micro:fsync-%v:", on))
		})
	}
}
