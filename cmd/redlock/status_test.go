package main

import (
	"encoding/json"
	"regexp"
	"strings"
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
	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, 0, code, "held: stderr: %s", stderr)
	for i, s := range servers {
		// node, address, state, PTTL (a Go duration within the 30s TTL), token
		re := `(?m)^  ` + regexp.QuoteMeta(string(rune('0'+i))) + ` +` + regexp.QuoteMeta(s.Addr()) +
			` +held +[0-9.]+m?s +` + regexp.QuoteMeta(h.token) + `$`
		require.Regexp(t, re, stdout, "node %d: got\n%s", i, stdout)
	}
	require.Contains(t, stdout, "held by "+h.token+" on 5 of 5 nodes (quorum 3)\n")

	// With the prefix in the flags, the key is another one.
	code, stdout, _ = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st", "--prefix", "other:")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "free on every node")

	servers[4].Kill()
	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st")
	require.Equal(t, 0, code, "a node down: stderr: %s", stderr)
	require.Regexp(t, `(?m)^  4 +`+regexp.QuoteMeta(servers[4].Addr())+` +error +- +dial tcp .*refused$`, stdout, "a node down: got\n%s", stdout)
	require.Contains(t, stdout, "held by "+h.token+" on 4 of 5 nodes (quorum 3); 1 of 5 nodes did not answer\n")

	code, stdout, stderr = runRedlock(t, nil, "status", "--nodes", nodes, "--key", "st", "--json")
	require.Equal(t, 0, code, "json: stderr: %s", stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "json: got\n%s", stdout)
	require.Equal(t, "st", rep.Key)
	require.Equal(t, 3, rep.Quorum)
	require.Equal(t, h.token, rep.Holder)
	require.Equal(t, 4, rep.HeldOn)
	require.Len(t, rep.Nodes, 5)
	for i, n := range rep.Nodes[:4] {
		require.Equal(t, stateHeld, n.State, "node %d: got %+v", i, n)
		require.Equal(t, h.token, n.Token, "node %d", i)
		require.NotNil(t, n.PTTL, "node %d", i)
		require.Greater(t, *n.PTTL, int64(0), "node %d", i)
		require.LessOrEqual(t, time.Duration(*n.PTTL)*time.Millisecond, 30*time.Second, "node %d", i)
	}
	require.Equal(t, stateError, rep.Nodes[4].State, "killed node: got %+v", rep.Nodes[4])
	require.Contains(t, rep.Nodes[4].Error, "refused")

	require.Equal(t, 0, h.release(t))
}

func TestStatusVerdict(t *testing.T) {
	ms := int64(1000)
	held := func(tok string) nodeStatus { return nodeStatus{State: stateHeld, Token: tok, PTTL: &ms} }
	free := nodeStatus{State: stateFree}
	failed := nodeStatus{State: stateError, Error: "refused"}
	tests := []struct {
		name  string
		nodes []nodeStatus
		want  string
	}{
		{"held", []nodeStatus{held("a"), held("a"), held("a"), free, failed}, "held by a on 3 of 5 nodes (quorum 3); 1 of 5 nodes did not answer"},
		{"split", []nodeStatus{held("a"), held("a"), held("b"), free, free}, "not held by a quorum (3): a on 2, b on 1 of 5 nodes"},
		{"free", []nodeStatus{free, free, free, failed, failed}, "free on every node that answered (3 of 5); 2 of 5 nodes did not answer"},
		{"unknown", []nodeStatus{failed, failed, failed}, "unknown: none of the 3 nodes answered"},
		{"odd token", []nodeStatus{held("a b\x00")}, `held by "a b\x00" on 1 of 1 nodes (quorum 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &statusReport{Key: "k", Quorum: len(tt.nodes)/2 + 1, Nodes: tt.nodes}
			for _, n := range tt.nodes {
				if n.State == stateHeld && rep.HeldOn == 0 {
					rep.Holder = n.Token
				}
				if n.State == stateHeld && n.Token == rep.Holder {
					rep.HeldOn++
				}
			}
			got := rep.verdict()
			require.Equal(t, tt.want, got, "got %q, want %q", got, tt.want)
		})
	}
}
