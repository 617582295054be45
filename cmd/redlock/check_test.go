package main

import (
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// runCheck runs redlock check --json and returns its exit status and report.
func runCheck(t *testing.T, nodes string, flags ...string) (int, checkReport, string) {
	t.Helper()
	args := append([]string{"check", "--nodes", nodes, "--json"}, flags...)
	code, stdout, stderr := runRedlock(t, nil, args...)
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "check --json: got\n%s\nstderr:\n%s", stdout, stderr)
	return code, rep, stderr
}

// wantCheckCode is check's exit status for a report that a quorum answered.
func wantCheckCode(worst string) int {
	switch worst {
	case "critical":
		return exitCheckCritical
	case "warning":
		return exitCheckWarning
	}
	return exitOK
}

func findingsOf(rep checkReport, check string) []checkFinding {
	var out []checkFinding
	for _, f := range rep.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// Nodes without persistence draw a warning each: exit 1. The text output
// has a row per node, the findings, and the summary.
func TestCheckWarnings(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	code, rep, stderr := runCheck(t, nodes)
	require.Equal(t, exitCheckWarning, code, "exit status: got %d, want %d; stderr:\n%s", code, exitCheckWarning, stderr)
	require.Equal(t, "warning", rep.Worst)
	require.Equal(t, 2, rep.Quorum)
	require.Equal(t, 3, rep.Checked)
	require.Len(t, rep.Nodes, 3)
	for i, n := range rep.Nodes {
		require.Equal(t, servers[i].Addr(), n.Addr, "node %d", i)
		require.Equal(t, "master", n.Role, "node %d", i)
		require.NotEmpty(t, n.Version, "node %d", i)
		require.False(t, n.AppendOnly, "node %d", i)
		require.Empty(t, n.Error, "node %d", i)
	}
	persistence := findingsOf(rep, "persistence")
	require.Len(t, persistence, 3, "persistence findings: got %+v", persistence)
	for _, f := range persistence {
		require.Equal(t, "warning", f.Severity)
		require.NotEmpty(t, f.Fix)
	}
	require.Zero(t, rep.Counts["critical"])
	require.Equal(t, len(rep.Findings), rep.Counts["ok"]+rep.Counts["info"]+rep.Counts["warning"])

	code, stdout, _ := runRedlock(t, nil, "check", "--nodes", nodes)
	require.Equal(t, exitCheckWarning, code)
	require.Contains(t, stdout, "3 nodes (quorum 2), 3 answered\n")
	for _, s := range servers {
		require.Regexp(t, `(?m)^  \d +`+regexp.QuoteMeta(s.Addr())+` +master +\S+ +\S+ +noeviction +no +[-+]?[0-9.]+[µm]?s +\S.*$`, stdout)
	}
	require.Regexp(t, `(?m)^  WARNING   node 0 \(`+regexp.QuoteMeta(servers[0].Addr())+`\)  persistence: `, stdout)
	require.Regexp(t, `(?m)^            fix: `, stdout)
	require.Regexp(t, `(?m)^warning: 0 critical, 3 warning, \d+ info, \d+ ok$`, stdout)
	require.NotContains(t, stdout, "  OK  ", "passed checks are listed only with -v")

	_, stdout, _ = runRedlock(t, nil, "check", "--nodes", nodes, "-v")
	require.Regexp(t, `(?m)^  OK        node 0 .* reachable: `, stdout)
}

// With persistence on, nothing is a warning about it; the exit status
// follows the worst finding, whatever this machine's clocks say.
func TestCheckPersistent(t *testing.T) {
	servers := redistest.StartN(t, 3, redistest.Options{Persistence: true})
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	code, rep, stderr := runCheck(t, strings.Join(addrs, ","))
	require.Equal(t, wantCheckCode(rep.Worst), code, "worst %s: exit status: got %d; stderr:\n%s", rep.Worst, code, stderr)
	require.Zero(t, rep.Counts["critical"], "findings: %+v", rep.Findings)
	for _, f := range findingsOf(rep, "persistence") {
		require.Equal(t, "ok", f.Severity, "persistence: got %+v", f)
	}
}

// A replica among the nodes is critical: exit 3.
func TestCheckReplica(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	host, port, err := net.SplitHostPort(servers[0].Addr())
	require.NoError(t, err)
	require.NoError(t, servers[2].NewClient(t).SlaveOf(t.Context(), host, port).Err())

	code, rep, stderr := runCheck(t, nodes)
	require.Equal(t, exitCheckCritical, code, "exit status: got %d, want %d; stderr:\n%s", code, exitCheckCritical, stderr)
	require.Equal(t, "critical", rep.Worst)
	require.Equal(t, "critical", rep.Findings[0].Severity, "the worst first: got %+v", rep.Findings[0])
	var critical []checkFinding
	for _, f := range findingsOf(rep, "role") {
		if f.Severity == "critical" {
			critical = append(critical, f)
		}
	}
	require.Len(t, critical, 1, "role findings: got %+v", findingsOf(rep, "role"))
	require.Equal(t, 2, critical[0].Node)
}

// Fewer than a quorum of nodes answering is an outage: exit 69. Fewer than
// 3 nodes is a warning of its own.
func TestCheckUnavailableAndFewNodes(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	servers[1].Kill()
	servers[2].Kill()
	code, rep, stderr := runCheck(t, nodes)
	require.Equal(t, exitUnavailable, code, "exit status: got %d, want %d; stderr:\n%s", code, exitUnavailable, stderr)
	require.Equal(t, 1, rep.Checked)
	require.Contains(t, stderr, "1 of 3 nodes answered, fewer than the quorum of 2; exiting 69")
	require.NotEmpty(t, rep.Nodes[1].Error)
	reach := findingsOf(rep, "reachable")
	require.Len(t, reach, 3)

	code, rep, stderr = runCheck(t, servers[0].Addr())
	require.Equal(t, wantCheckCode(rep.Worst), code, "one node: stderr:\n%s", stderr)
	require.GreaterOrEqual(t, code, exitCheckWarning, "one node: got %d, want at least a warning", code)
	count := findingsOf(rep, "count")
	require.Len(t, count, 1, "findings: %+v", rep.Findings)
	require.Equal(t, "warning", count[0].Severity)
	require.Equal(t, -1, count[0].Node)
	require.Contains(t, count[0].Message, "1 node: the lock survives no node failure")
}
