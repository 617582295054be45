package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStatus(t *testing.T) {
	servers, nodes := startNodes(t, 5)

	code, stdout, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, 0, code, "free: stderr: %s", stderr)
	require.Equal(t, 5, strings.Count(stdout, " free "), "free: got\n%s", stdout)
	require.Contains(t, stdout, "free on every node that answered (5 of 5)")

	h := holdKey(t, nodes, "st")
	lbl := label(t, h.p.cmd.Process.Pid)
	id, ok := strings.CutSuffix(h.token, " "+lbl)
	require.True(t, ok, "REDLOCK_TOKEN: got %q, want it to end with the label %q", h.token, lbl)

	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, 0, code, "held: stderr: %s", stderr)
	require.Regexp(t, `(?m)^  NODE +ADDRESS +STATE +PTTL +LAYOUT +TOKEN +LABEL$`, stdout, "no OWNER column without an owner lock")
	for i, s := range servers {
		// node, address, state, PTTL (a Go duration within the 30s TTL),
		// layout, token up to its label, label
		re := `(?m)^  ` + strconv.Itoa(i) + ` +` + regexp.QuoteMeta(s.Addr()) +
			` +held +[0-9.]+m?s +plain +` + regexp.QuoteMeta(id) + ` +` + regexp.QuoteMeta(lbl) + `$`
		require.Regexp(t, re, stdout, "node %d: got\n%s", i, stdout)
	}
	require.Regexp(t, `(?m)^held by `+regexp.QuoteMeta(id+" ("+lbl+")")+` on 5 of 5 nodes \(quorum 3\), for [0-9.]+m?s more at least$`, stdout)

	// With the prefix in the flags, the key is another one.
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st", "--prefix", "other:")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "free on every node")

	servers[4].Kill()
	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, 0, code, "a node down: stderr: %s", stderr)
	require.Regexp(t, `(?m)^  4 +`+regexp.QuoteMeta(servers[4].Addr())+` +error +redlock: node 4 .*refused$`, stdout, "a node down: got\n%s", stdout)
	require.Regexp(t, `(?m)^held by .* on 4 of 5 nodes \(quorum 3\), for .* more at least; 1 of 5 nodes did not answer$`, stdout)

	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st", "--json")
	require.Equal(t, 0, code, "json: stderr: %s", stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "json: got\n%s", stdout)
	require.Equal(t, "st", rep.Key)
	require.Equal(t, 3, rep.Quorum)
	require.True(t, rep.Held, "held: got false")
	require.Equal(t, h.token, rep.Token, "token: got %q, want REDLOCK_TOKEN %q", rep.Token, h.token)
	require.Equal(t, lbl, rep.Label)
	require.Equal(t, int64(1), rep.Count)
	require.Empty(t, rep.Owner)
	require.Positive(t, rep.RemainingMS)
	require.LessOrEqual(t, rep.RemainingMS, int64(30_000))
	require.Equal(t, h.token, rep.Holder)
	require.Equal(t, 4, rep.HeldOn)
	require.Equal(t, 4, rep.Answered)
	require.Len(t, rep.Nodes, 5)
	for i, n := range rep.Nodes[:4] {
		require.Equal(t, stateHeld, n.State, "node %d: got %+v", i, n)
		require.Equal(t, "plain", n.Layout, "node %d", i)
		require.Equal(t, h.token, n.Token, "node %d", i)
		require.Equal(t, lbl, n.Label, "node %d", i)
		require.Empty(t, n.Value, "node %d: the value is the token", i)
		require.NotNil(t, n.PTTL, "node %d", i)
		require.Greater(t, *n.PTTL, int64(0), "node %d", i)
		require.LessOrEqual(t, time.Duration(*n.PTTL)*time.Millisecond, 30*time.Second, "node %d", i)
	}
	require.Equal(t, stateError, rep.Nodes[4].State, "killed node: got %+v", rep.Nodes[4])
	require.Contains(t, rep.Nodes[4].Error, "refused")

	// Without a quorum of nodes, status says so and exits 69.
	servers[2].Kill()
	servers[3].Kill()
	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, exitUnavailable, code, "3 of 5 down: exit status: got %d, want %d; stderr: %s", code, exitUnavailable, stderr)
	require.Contains(t, stderr, "2 of 5 nodes answered, fewer than the quorum of 3; exiting 69")
	require.Contains(t, stdout, "not held by a quorum (3): "+id+" ("+lbl+") on 2 of 5 nodes; 3 of 5 nodes did not answer")

	h.release(t) // the lock may be lost by now: only the holder's exit matters
}

// Owner locks are hashes on the nodes: status reads them, with the owner and
// the hold count.
func TestStatusOwnerLock(t *testing.T) {
	_, nodes := startNodes(t, 3)
	first := startLock(t, nodes, "own", "--owner", "job-1")
	second := startLock(t, nodes, "own", "--owner", "job-1", "--label", "second hold", "--no-wait")

	code, stdout, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "own")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Regexp(t, `(?m)^  NODE +ADDRESS +STATE +PTTL +LAYOUT +TOKEN +LABEL +OWNER +COUNT$`, stdout)
	require.Equal(t, 3, len(regexp.MustCompile(`(?m)^  \d +\S+ +held +[0-9.]+m?s +owner +\S+ \(\+1\) +\S.* +job-1 +2$`).FindAllString(stdout, -1)),
		"want 3 rows of an owner lock held twice; got\n%s", stdout)
	require.Regexp(t, `(?m)^held by owner job-1, token .*, count 2 on 3 of 3 nodes \(quorum 2\), for [0-9.]+m?s more at least$`, stdout)

	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "own", "--json")
	require.Equal(t, 0, code)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "json: got\n%s", stdout)
	require.True(t, rep.Held)
	require.Equal(t, "job-1", rep.Owner)
	require.Equal(t, int64(2), rep.Count)
	require.ElementsMatch(t, []string{first.token(), second.token()}, rep.Tokens)
	require.Equal(t, 3, rep.HeldOn)
	for i, n := range rep.Nodes {
		require.Equal(t, "owner", n.Layout, "node %d", i)
		require.Equal(t, int64(2), n.Count, "node %d", i)
		require.Len(t, n.Tokens, 2, "node %d", i)
	}

	// Another owner, or a plain lock, is blocked.
	for _, extra := range [][]string{nil, {"--owner", "job-2"}} {
		args := append([]string{"run", "--nodes", nodes, "--key", "own", "-n"}, extra...)
		code, _, stderr = runRedlock(t, nil, append(args, "true")...)
		require.Equal(t, exitNotAcquired, code, "%v: exit status: got %d, want %d; stderr: %s", extra, code, exitNotAcquired, stderr)
	}

	require.Equal(t, 0, second.stop(t, syscall.SIGTERM), "second: stderr: %s", second.p.errText())
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "own", "--json")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, int64(1), rep.Count, "after one release: count: got %d, want 1", rep.Count)
	require.Equal(t, first.token(), rep.Token)

	require.Equal(t, 0, first.stop(t, syscall.SIGTERM), "first: stderr: %s", first.p.errText())
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "own")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "free on every node that answered (3 of 3)")
}

// Readers and a semaphore's permits are shown with their layouts, and the
// verdict counts them; a semaphore's quorum is its own.
func TestStatusReadersAndPermits(t *testing.T) {
	_, nodes := startNodes(t, 5)
	r1 := startLock(t, nodes, "shared", "-s")
	r2 := startLock(t, nodes, "shared", "-s", "--label", "reader two", "--no-wait")
	heldOnAll(t, nodes, "shared", 2)
	code, stdout, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "shared")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Equal(t, 5, len(regexp.MustCompile(`(?m)^  \d +\S+ +held +[0-9.]+m?s +read +\S+ \(\+1\) .*$`).FindAllString(stdout, -1)),
		"want 5 rows of two readers; got\n%s", stdout)
	require.Regexp(t, `(?m)^held by 2 readers, first .* on 5 of 5 nodes \(quorum 3\), for [0-9.]+m?s more at least$`, stdout)
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "shared", "--json")
	require.Equal(t, 0, code)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "json: got\n%s", stdout)
	require.True(t, rep.Held && rep.Shared, "got %+v", rep)
	require.ElementsMatch(t, []string{r1.token(), r2.token()}, rep.Tokens)
	require.Equal(t, 0, r1.stop(t, syscall.SIGTERM), "reader: stderr: %s", r1.p.errText())
	require.Equal(t, 0, r2.stop(t, syscall.SIGTERM), "reader: stderr: %s", r2.p.errText())

	p := startLock(t, nodes, "pool", "--permits", "2")
	heldOnAll(t, nodes, "pool", 1)
	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "pool")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Regexp(t, `(?m)^key "pool" on 5 nodes \(quorum 4\)$`, stdout)
	require.Equal(t, 5, len(regexp.MustCompile(`(?m)^  \d +\S+ +held +[0-9.]+m?s +semaphore .*$`).FindAllString(stdout, -1)), "got\n%s", stdout)
	require.Regexp(t, `(?m)^held by 1 of 2 permits, first .* on 5 of 5 nodes \(quorum 4\), for [0-9.]+m?s more at least$`, stdout)
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "pool", "--json")
	require.Equal(t, 0, code)
	rep = statusReport{}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "json: got\n%s", stdout)
	require.Equal(t, 2, rep.Permits)
	require.Equal(t, 4, rep.Quorum)
	require.Equal(t, p.token(), rep.Token)
	require.Equal(t, 2, rep.Nodes[0].Permits)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "permit: stderr: %s", p.p.errText())
}

// heldOnAll waits until every node holds key for count holders: a lock
// returns at its quorum, before the slower nodes have answered.
func heldOnAll(t *testing.T, nodes, key string, count int64) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s held by %d on every node", key, count), func() bool {
		code, stdout, _ := runRedlock(t, nil, "status", "--nodes", nodes, "--key", key, "--json")
		var rep statusReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
			return false
		}
		for _, n := range rep.Nodes {
			if n.State != stateHeld || n.Count != count {
				return false
			}
		}
		return true
	})
}

// A key that holds something else than a lock is shown as foreign, and run
// finds the key taken, not the nodes down.
func TestStatusForeignKey(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, s := range servers[:2] {
		require.NoError(t, s.NewClient(t).RPush(t.Context(), "foreign", "x").Err())
	}
	code, stdout, stderr := runRedlock(t, nil, "status", "--nodes", nodes, "--key", "foreign")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Equal(t, 2, len(regexp.MustCompile(`(?m)^  \d +\S+ +foreign +no expiry +foreign +- +-$`).FindAllString(stdout, -1)), "got\n%s", stdout)
	require.Contains(t, stdout, "free on every node that answered (3 of 3); 2 of 3 nodes hold a value at the key that is not a lock")

	code, _, stderr = runRedlock(t, nil, "run", "--nodes", nodes, "--key", "foreign", "-n", "true")
	require.Equal(t, exitNotAcquired, code, "run: exit status: got %d, want %d; stderr: %s", code, exitNotAcquired, stderr)
	require.Contains(t, stderr, "wrong type")
}

func TestStatusVerdict(t *testing.T) {
	ms := int64(1000)
	held := func(tok string) nodeStatus {
		return nodeStatus{State: stateHeld, Layout: "plain", Token: tok, PTTL: &ms}
	}
	labelled := func(tok, label string) nodeStatus {
		n := held(tok + " " + label)
		n.Label = label
		return n
	}
	owned := func(owner, tok string, count int64) nodeStatus {
		return nodeStatus{State: stateHeld, Layout: "owner", Owner: owner, Token: tok, Count: count, PTTL: &ms}
	}
	free := nodeStatus{State: stateFree}
	failed := nodeStatus{State: stateError, Error: "refused"}
	foreign := nodeStatus{State: stateForeign, Layout: "foreign", PTTL: &ms}
	tests := []struct {
		name  string
		rep   statusReport // Held, Token, Label, Owner, Count, RemainingMS
		nodes []nodeStatus
		want  string
	}{
		{"held", statusReport{Held: true, Token: "a", RemainingMS: 900}, []nodeStatus{held("a"), held("a"), held("a"), free, failed},
			"held by a on 3 of 5 nodes (quorum 3), for 900ms more at least; 1 of 5 nodes did not answer"},
		{"labelled", statusReport{Held: true, Token: "a host:1", Label: "host:1", RemainingMS: 1500}, []nodeStatus{labelled("a", "host:1"), labelled("a", "host:1"), free},
			"held by a (host:1) on 2 of 3 nodes (quorum 2), for 1.5s more at least"},
		{"owner", statusReport{Held: true, Token: "a", Owner: "job", Count: 2, RemainingMS: 1000}, []nodeStatus{owned("job", "a", 2), owned("job", "b", 3), free},
			"held by owner job, token a, count 2 on 2 of 3 nodes (quorum 2), for 1s more at least"},
		{"no expiry", statusReport{Held: true, Token: "a", NoExpiry: true}, []nodeStatus{held("a")},
			"held by a on 1 of 1 nodes (quorum 1), with no expiry"},
		{"split", statusReport{}, []nodeStatus{held("a"), held("a"), labelled("b", "x y"), free, free},
			`not held by a quorum (3): a on 2, b ("x y") on 1 of 5 nodes`},
		{"free", statusReport{}, []nodeStatus{free, free, free, failed, failed},
			"free on every node that answered (3 of 5); 2 of 5 nodes did not answer"},
		{"foreign", statusReport{}, []nodeStatus{free, foreign, free},
			"free on every node that answered (3 of 3); 1 of 3 nodes hold a value at the key that is not a lock"},
		{"too few answered", statusReport{}, []nodeStatus{free, failed, failed},
			"unknown: free on the 1 of 3 nodes that answered, fewer than the quorum of 2; 2 of 3 nodes did not answer"},
		{"unknown", statusReport{}, []nodeStatus{failed, failed, failed}, "unknown: none of the 3 nodes answered"},
		{"queued", statusReport{Held: true, Token: "a", RemainingMS: 900, Waiters: 2}, []nodeStatus{held("a"), held("a"), free},
			"held by a on 2 of 3 nodes (quorum 2), for 900ms more at least; 2 fair calls queued"},
		{"odd token", statusReport{Held: true, Token: "a b\x00"}, []nodeStatus{held("a b\x00")},
			`held by "a b\x00" on 1 of 1 nodes (quorum 1), for 0s more at least`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := tt.rep
			rep.Key, rep.Quorum, rep.Nodes = "k", len(tt.nodes)/2+1, tt.nodes
			rep.Holder, rep.HeldOn = mostHeld(tt.nodes)
			got := rep.verdict()
			require.Equal(t, tt.want, got, "got %q, want %q", got, tt.want)
		})
	}
}
