package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// checkOf runs Check and requires that it returns a report, sorted as
// documented, with one NodeInfo per node.
func checkOf(t *testing.T, c *Client) *Report {
	t.Helper()
	r, err := c.Check(t.Context())
	require.NoError(t, err)
	require.Len(t, r.Nodes, len(c.nodes))
	for i, n := range r.Nodes {
		require.Equal(t, i, n.Index, "NodeInfo %d: got index %d, want %d", i, n.Index, i)
	}
	require.True(t, slices.IsSortedFunc(r.Findings, func(a, b Finding) int {
		if a.Severity != b.Severity {
			return int(b.Severity) - int(a.Severity)
		}
		return a.Node - b.Node
	}), "findings not sorted worst first, then by node:\n%s", r)
	t.Logf("\n%s", r)
	return r
}

// findingsOf returns the findings of one check at one severity, by node.
func findingsOf(r *Report, sev Severity, check string) map[int]Finding {
	out := map[int]Finding{}
	for _, f := range r.Findings {
		if f.Severity == sev && f.Check == check {
			out[f.Node] = f
		}
	}
	return out
}

// nodesOf returns the sorted keys of a findingsOf result.
func nodesOf(m map[int]Finding) []int {
	var out []int
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// requireOnly requires that the check found sev on exactly the nodes given.
func requireOnly(t *testing.T, r *Report, sev Severity, check string, nodes ...int) map[int]Finding {
	t.Helper()
	got := findingsOf(r, sev, check)
	require.Equal(t, nodes, nodesOf(got), "%s %s: got nodes %v, want %v", sev, check, nodesOf(got), nodes)
	return got
}

func configSet(t *testing.T, s *redistest.Server, kv ...string) {
	t.Helper()
	rc := s.NewClient(t)
	for i := 0; i < len(kv); i += 2 {
		require.NoError(t, rc.ConfigSet(t.Context(), kv[i], kv[i+1]).Err(), "CONFIG SET %s %s", kv[i], kv[i+1])
	}
}

func TestCheckHealthyNodes(t *testing.T) {
	_, cs := realNodes(t, 5)
	c := newClient(t, cs)
	start := time.Now()
	r := checkOf(t, c)
	t.Logf("Check took %v", time.Since(start))

	// The test servers run without AOF: that is the only thing to say.
	require.Equal(t, SeverityWarning, r.Worst(), "got worst %v, want warning", r.Worst())
	requireOnly(t, r, SeverityWarning, "persistence", 0, 1, 2, 3, 4)
	for _, f := range r.Findings {
		if f.Severity != SeverityOK {
			require.Equal(t, "persistence", f.Check, "got an unexpected finding: %+v", f)
		}
	}
	for _, check := range []string{"reachable", "role", "distinct", "maxmemory-policy", "version", "scripting"} {
		requireOnly(t, r, SeverityOK, check, 0, 1, 2, 3, 4)
	}
	// Each node's rate, and the spread between them (node -1).
	requireOnly(t, r, SeverityOK, "clock", -1, 0, 1, 2, 3, 4)
	runIDs := map[string]bool{}
	for _, n := range r.Nodes {
		require.NoError(t, n.Err)
		require.Equal(t, "master", n.Role)
		require.Len(t, n.RunID, 40, "node %d: got run_id %q", n.Index, n.RunID)
		runIDs[n.RunID] = true
		require.NotEmpty(t, n.Version)
		require.Equal(t, "noeviction", n.MaxmemoryPolicy)
		require.Zero(t, n.Maxmemory)
		require.False(t, n.AppendOnly)
		require.Equal(t, "everysec", n.AppendFsync)
		require.Positive(t, n.RTT)
		require.Less(t, abs(n.ClockOffset), time.Second, "node %d: the servers share our clock", n.Index)
		if n.ClockRate != 0 {
			require.InDelta(t, 1, n.ClockRate, 0.5, "node %d: got clock rate %v", n.Index, n.ClockRate)
		}
	}
	require.Len(t, runIDs, 5)
	require.Contains(t, r.String(), "WARNING   persistence  node 0 (")
}

func TestCheckReplica(t *testing.T) {
	srv, cs := realNodes(t, 5)
	host, port, _ := strings.Cut(srv[0].Addr(), ":")
	require.NoError(t, srv[1].NewClient(t).SlaveOf(t.Context(), host, port).Err())
	c := newClient(t, cs)

	r := checkOf(t, c)
	got := requireOnly(t, r, SeverityCritical, "role", 1)
	require.Contains(t, got[1].Message, "replica of node 0 ("+srv[0].Addr()+")")
	require.Equal(t, "slave", r.Nodes[1].Role)
	require.Equal(t, srv[0].Addr(), r.Nodes[1].ReplicaOf)
	requireOnly(t, r, SeverityOK, "role", 0, 2, 3, 4)
}

func TestCheckAliasedNodes(t *testing.T) {
	srv, _ := realNodes(t, 3)
	_, port, _ := strings.Cut(srv[0].Addr(), ":")
	// New cannot tell these are one server: the addresses differ, or the DB.
	aliases := []*redis.Options{
		{Addr: srv[0].Addr()},
		{Addr: "localhost:" + port},
		{Addr: srv[0].Addr(), DB: 1},
		{Addr: srv[1].Addr()},
		{Addr: srv[2].Addr()},
	}
	cs := make([]redis.UniversalClient, len(aliases))
	for i, o := range aliases {
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	c := newClient(t, cs)

	r := checkOf(t, c)
	got := requireOnly(t, r, SeverityCritical, "distinct", 1, 2)
	for _, i := range []int{1, 2} {
		msg := got[i].Message
		require.Contains(t, msg, fmt.Sprintf("node 0 (%s)", srv[0].Addr()), "node %d: the finding names node 0", i)
		require.Contains(t, msg, fmt.Sprintf("node %d (%s)", i, aliases[i].Addr), "node %d: the finding names it", i)
	}
	requireOnly(t, r, SeverityOK, "distinct", 0, 3, 4)
	require.Equal(t, SeverityCritical, r.Findings[0].Severity)
}

func TestCheckMaxmemoryPolicy(t *testing.T) {
	srv, cs := realNodes(t, 5)
	configSet(t, srv[0], "maxmemory", "100mb", "maxmemory-policy", "allkeys-lru")
	configSet(t, srv[1], "maxmemory", "100mb", "maxmemory-policy", "volatile-ttl")
	configSet(t, srv[2], "maxmemory-policy", "volatile-lru") // no limit: evicts nothing yet
	configSet(t, srv[3], "maxmemory", "100mb")               // noeviction: a full node refuses writes
	c := newClient(t, cs)

	r := checkOf(t, c)
	got := requireOnly(t, r, SeverityCritical, "maxmemory-policy", 0, 1)
	require.Contains(t, got[0].Message, "allkeys-lru evicts any key")
	require.Contains(t, got[1].Message, "volatile-ttl evicts keys that have a TTL")
	require.Contains(t, got[0].Fix, "CONFIG SET maxmemory-policy noeviction")
	got = requireOnly(t, r, SeverityInfo, "maxmemory-policy", 2)
	require.Contains(t, got[2].Message, "maxmemory is 0")
	requireOnly(t, r, SeverityOK, "maxmemory-policy", 3, 4)
	require.Equal(t, int64(100<<20), r.Nodes[0].Maxmemory)
	require.Equal(t, "volatile-ttl", r.Nodes[1].MaxmemoryPolicy)
}

func TestCheckPersistence(t *testing.T) {
	srv, cs := realNodes(t, 5)
	for _, s := range srv[:4] {
		configSet(t, s, "appendonly", "yes", "appendfsync", "always")
	}
	configSet(t, srv[3], "no-appendfsync-on-rewrite", "yes")
	configSet(t, srv[4], "appendonly", "yes", "appendfsync", "everysec")

	r := checkOf(t, newClient(t, cs))
	got := requireOnly(t, r, SeverityWarning, "persistence", 3, 4)
	require.Contains(t, got[3].Message, "no-appendfsync-on-rewrite yes")
	require.Contains(t, got[4].Message, "appendfsync everysec")
	require.Contains(t, got[4].Fix, "WithNodeGuard(true)")
	requireOnly(t, r, SeverityOK, "persistence", 0, 1, 2)
	require.True(t, r.Nodes[0].AppendOnly)
	require.Equal(t, "always", r.Nodes[0].AppendFsync)

	// The node guard keeps restarted nodes out: no change is needed.
	r = checkOf(t, newClient(t, cs, WithNodeGuard(true)))
	requireOnly(t, r, SeverityWarning, "persistence")
	requireOnly(t, r, SeverityInfo, "persistence", 3, 4)
}

func TestCheckKilledNode(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs)
	srv[2].Kill()

	r := checkOf(t, c)
	got := requireOnly(t, r, SeverityCritical, "reachable", 2)
	require.Contains(t, got[2].Message, "1 more can fail")
	require.Error(t, r.Nodes[2].Err)
	require.Empty(t, r.Nodes[2].RunID)
	for _, f := range r.Findings {
		if f.Node == 2 {
			require.Equal(t, "reachable", f.Check, "an unreachable node gets no other finding: %+v", f)
		}
	}
	requireOnly(t, r, SeverityOK, "reachable", 0, 1, 3, 4)
	require.Equal(t, "master", r.Nodes[3].Role)
}

func TestCheckPausedNode(t *testing.T) {
	srv, cs := realNodes(t, 5)
	// go-redis would wait 10s for this node's reply, and ignores the ctx
	// deadline: only Check's own timer ends the wait.
	slow := redis.NewClient(&redis.Options{Addr: srv[3].Addr(), ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = slow.Close() })
	cs[3] = slow
	c := newClient(t, cs) // node timeout 1s: Check waits 1.1s
	srv[3].Pause()
	// Resume before Close (cleanups run last first), so the read in flight
	// ends at once.
	t.Cleanup(srv[3].Resume)

	start := time.Now()
	r := checkOf(t, c)
	took := time.Since(start)
	require.Less(t, took, 5*time.Second, "got Check in %v, want it bounded by its own deadline", took)
	requireOnly(t, r, SeverityCritical, "reachable", 3)
	require.ErrorIs(t, r.Nodes[3].Err, ErrNodeTimeout)
	require.Equal(t, "master", r.Nodes[0].Role, "the other nodes are still checked")
}

func TestCheckContextDone(t *testing.T) {
	_, cs := minis(t, 2)
	// A short ReadTimeout lets Close, at the end, find the read to it done.
	hung := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = hung.Close() })
	c := newClient(t, append(cs, hung)) // node timeout 1s

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r, err := c.Check(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, r)

	// The hung node keeps Check waiting for its deadline, until ctx ends.
	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	r, err = c.Check(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, r)
}

func TestCheckAfterClose(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	require.NoError(t, c.Close())
	r, err := c.Check(t.Context())
	require.ErrorIs(t, err, ErrClosed)
	require.Nil(t, r)
}

func TestCheckACL(t *testing.T) {
	srv, cs := realNodes(t, 3)
	require.NoError(t, srv[0].NewClient(t).Do(t.Context(),
		"ACL", "SETUSER", "checker", "on", ">pw", "~*", "&*", "+@all", "-config", "-role", "-eval").Err())
	rc := redis.NewClient(&redis.Options{Addr: srv[0].Addr(), Username: "checker", Password: "pw"})
	t.Cleanup(func() { _ = rc.Close() })
	cs[0] = rc

	r := checkOf(t, newClient(t, cs))
	got := requireOnly(t, r, SeverityInfo, "acl", 0)
	require.Contains(t, got[0].Message, "ROLE, CONFIG GET maxmemory*, CONFIG GET *append*")
	got = requireOnly(t, r, SeverityCritical, "scripting", 0)
	require.Contains(t, got[0].Message, "EVAL failed: the user may not run it (ACL)")
	// What CONFIG and ROLE would have said comes from INFO instead.
	require.Equal(t, "master", r.Nodes[0].Role)
	require.Equal(t, "noeviction", r.Nodes[0].MaxmemoryPolicy)
	requireOnly(t, r, SeverityOK, "maxmemory-policy", 0, 1, 2)
	requireOnly(t, r, SeverityOK, "role", 0, 1, 2)
	got = requireOnly(t, r, SeverityWarning, "persistence", 0, 1, 2)
	require.Contains(t, got[0].Message, "appendonly no", "INFO persistence says AOF is off")
}

func TestCheckMiniredisClocks(t *testing.T) {
	ms, cs := minis(t, 5)
	// Node 2's clock stands still, 5s ahead of the others.
	ms[2].SetTime(time.Now().Add(5 * time.Second))
	c := newClient(t, cs)

	// A round trip longer than the gap between the samples hides any rate:
	// try again on a machine that slow.
	var r *Report
	for range 5 {
		r = checkOf(t, c)
		if len(findingsOf(r, SeverityWarning, "clock")) == 2 {
			break
		}
	}
	got := requireOnly(t, r, SeverityWarning, "clock", -1, 2)
	require.Contains(t, got[-1].Message, "node 2 ahead")
	require.Contains(t, got[2].Message, "slow")
	require.Less(t, r.Nodes[2].ClockRate, 0.5, "got rate %v for a clock that stands still", r.Nodes[2].ClockRate)
	require.Greater(t, r.Nodes[2].ClockOffset, 4*time.Second)
	requireOnly(t, r, SeverityOK, "clock", 0, 1, 3, 4)
	// miniredis has no ROLE, INFO server or CONFIG: those checks say so.
	requireOnly(t, r, SeverityInfo, "role", 0, 1, 2, 3, 4)
	requireOnly(t, r, SeverityOK, "scripting", 0, 1, 2, 3, 4)
}

// judge runs the findings on made-up facts, for what no test server can
// show: old versions, skewed clocks, denied commands.
func judge(t *testing.T, facts []nodeFacts, opts ...Option) *Report {
	t.Helper()
	cs := make([]redis.UniversalClient, len(facts))
	for i := range cs {
		// New does no I/O: these never connect.
		rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("192.0.2.1:%d", 6379+i)})
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	c, err := New(cs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	r := &Report{Findings: c.findings(facts)}
	t.Logf("\n%s", r)
	return r
}

// healthy returns the facts of a node that passes every check, with a
// clock sample pair whose round trips are 100µs and which ran at rate.
func healthy(i int, rate float64) nodeFacts {
	t0 := time.Now()
	first := clockSample{sent: t0, recv: t0.Add(100 * time.Microsecond)}
	first.node = first.mid()
	second := clockSample{sent: t0.Add(checkRateGap), recv: t0.Add(checkRateGap + 100*time.Microsecond)}
	second.node = first.node.Add(time.Duration(float64(second.mid().Sub(first.mid())) * rate))
	return nodeFacts{
		NodeInfo: NodeInfo{Index: i, Addr: fmt.Sprint("n", i), Role: "master", RunID: fmt.Sprint("run", i),
			Version: "7.2.4", MaxmemoryPolicy: "noeviction", AppendOnly: true, AppendFsync: "always"},
		reached: true, aofKnown: true, serverOK: true, timeOK: true, first: first, second: second,
		errs: map[string]error{},
	}
}

func TestCheckFindings(t *testing.T) {
	mk := func(edit func(f []nodeFacts)) []nodeFacts {
		f := []nodeFacts{healthy(0, 1), healthy(1, 1), healthy(2, 1)}
		edit(f)
		return f
	}
	t.Run("healthy", func(t *testing.T) {
		r := judge(t, mk(func([]nodeFacts) {}))
		require.Equal(t, SeverityOK, r.Worst())
	})
	t.Run("version", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) { f[0].Version, f[1].Version = "2.6.11", "6.2.14" }))
		requireOnly(t, r, SeverityCritical, "version", 0)
		got := requireOnly(t, r, SeverityInfo, "version", 1)
		require.Contains(t, got[1].Message, "SET with both NX and GET")
		requireOnly(t, r, SeverityOK, "version", 2)
	})
	t.Run("clock-rate", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) {
			f[0] = healthy(0, 1.03)  // 3% fast: 3ms over 100ms, beyond 1ms + 0.1ms
			f[1] = healthy(1, 1.005) // 0.5%: within the drift factor
		}))
		got := requireOnly(t, r, SeverityWarning, "clock", 0)
		require.Contains(t, got[0].Message, "3.00% fast")
		requireOnly(t, r, SeverityOK, "clock", -1, 1, 2)

		// The same rate is not flagged when the round trips could explain it.
		slow := mk(func(f []nodeFacts) { f[0] = healthy(0, 1.03) })
		slow[0].second.recv = slow[0].second.sent.Add(20 * time.Millisecond)
		slow[0].second.node = slow[0].second.mid().Add(3 * time.Millisecond)
		r = judge(t, slow)
		requireOnly(t, r, SeverityWarning, "clock")

		// A larger drift factor allows it.
		r = judge(t, mk(func(f []nodeFacts) { f[0] = healthy(0, 1.03) }), WithDriftFactor(0.05))
		requireOnly(t, r, SeverityWarning, "clock")
	})
	t.Run("clock-spread", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) { f[1].ClockOffset = 1500 * time.Millisecond }))
		got := requireOnly(t, r, SeverityWarning, "clock", -1)
		require.Contains(t, got[-1].Message, "node 1 ahead")
		r = judge(t, mk(func(f []nodeFacts) { f[1].ClockOffset = 500 * time.Millisecond }))
		requireOnly(t, r, SeverityWarning, "clock")
	})
	t.Run("readonly", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) {
			f[2].readOnly = errors.New("READONLY You can't write against a read only replica.")
		}))
		requireOnly(t, r, SeverityCritical, "role", 2)
	})
	t.Run("denied", func(t *testing.T) {
		facts := mk(func(f []nodeFacts) { f[1].denied = []string{"INFO server", "TIME"} })
		requireOnly(t, judge(t, facts), SeverityInfo, "acl", 1)
		got := requireOnly(t, judge(t, facts, WithNodeGuard(true)), SeverityWarning, "acl", 1)
		require.Contains(t, got[1].Message, "node guard")
	})
	t.Run("guard-needs-info", func(t *testing.T) {
		facts := mk(func(f []nodeFacts) {
			f[0].AppendOnly = false
			f[1].AppendOnly = false
			f[1].serverOK = false // the guard cannot see its restarts
		})
		r := judge(t, facts, WithNodeGuard(true))
		requireOnly(t, r, SeverityInfo, "persistence", 0)
		requireOnly(t, r, SeverityWarning, "persistence", 1)
	})
	t.Run("maxmemory", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) {
			f[0].MaxmemoryPolicy, f[0].Maxmemory = "volatile-lfu", 1<<30
			f[1].MaxmemoryPolicy, f[1].Maxmemory = "allkeys-random", 0
			f[2].MaxmemoryPolicy, f[2].Maxmemory = "some-new-policy", 1<<30
		}))
		requireOnly(t, r, SeverityCritical, "maxmemory-policy", 0)
		requireOnly(t, r, SeverityInfo, "maxmemory-policy", 1)
		requireOnly(t, r, SeverityWarning, "maxmemory-policy", 2)
	})
	t.Run("unreachable", func(t *testing.T) {
		r := judge(t, mk(func(f []nodeFacts) {
			f[0] = nodeFacts{NodeInfo: NodeInfo{Index: 0, Addr: "n0", Err: ErrNodeTimeout}}
			f[1] = nodeFacts{NodeInfo: NodeInfo{Index: 1, Addr: "n1", Err: ErrNodeTimeout}}
		}))
		got := requireOnly(t, r, SeverityCritical, "reachable", 0, 1)
		require.Contains(t, got[0].Message, "fewer than the quorum of 2 are up")
	})
}
