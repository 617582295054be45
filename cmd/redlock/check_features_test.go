package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// persistentNodes starts n servers with appendonly yes and appendfsync
// always, and returns them with their URL list.
func persistentNodes(t *testing.T, n int) ([]*redistest.Server, string) {
	t.Helper()
	servers := redistest.StartN(t, n, redistest.Options{Persistence: true})
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
	}
	return servers, strings.Join(urls, ",")
}

// check prints each node's server, version and features, in its table and
// in its JSON; with -fsync-ack, a Redis 7.0 node, which lacks WAITAOF, is
// critical.
func TestCheckFeaturesAndFsyncAck(t *testing.T) {
	servers, nodes := persistentNodes(t, 3)
	info, err := servers[0].NewClient(t).Info(t.Context(), "server").Result()
	require.NoError(t, err)
	if !strings.Contains(info, "redis_version:7.0.") || strings.Contains(info, "server_name:") {
		t.Skip("this test needs Redis 7.0, the default redis-server here")
	}

	code, rep, stderr := runCheck(t, nodes)
	require.Equal(t, wantCheckCode(rep.Worst), code, "stderr:\n%s", stderr)
	for i, n := range rep.Nodes {
		require.Equal(t, "redis", n.Server, "node %d", i)
		require.True(t, strings.HasPrefix(n.Version, "7.0."), "node %d: version %q", i, n.Version)
		require.Equal(t, []string{"SET GET", "SPUBLISH"}, n.Features, "node %d", i)
	}
	require.Empty(t, findingsOf(rep, "fsync-ack"), "without -fsync-ack")

	code, rep, stderr = runCheck(t, nodes, "-fsync-ack")
	require.Equal(t, exitCheckCritical, code, "stderr:\n%s", stderr)
	fa := findingsOf(rep, "fsync-ack")
	require.Len(t, fa, 3, "fsync-ack findings: %+v", fa)
	for _, f := range fa {
		require.Equal(t, "critical", f.Severity, "%+v", f)
		require.Contains(t, f.Message, "lacks WAITAOF")
	}

	code, stdout, _ := runRedlock(t, nil, "check", "--nodes", nodes, "-fsync-ack")
	require.Equal(t, exitCheckCritical, code)
	require.Regexp(t, `(?m)^  NODE +ADDRESS +ROLE +SERVER +VERSION +MAXMEMORY-POLICY +AOF +CLOCK +FEATURES$`, stdout)
	for _, s := range servers {
		require.Regexp(t, `(?m)^  \d +`+regexp.QuoteMeta(s.Addr())+` +master +redis +7\.0\.\S+ +noeviction +yes, fsync always +\S+ +SET GET, SPUBLISH$`, stdout)
	}
	require.Regexp(t, `(?m)^  CRITICAL  node 0 \(`+regexp.QuoteMeta(servers[0].Addr())+`\)  fsync-ack: Redis 7\.0\.\S+ lacks WAITAOF`, stdout)
}

// On Valkey, check names the server valkey, shows Valkey's own version,
// and every feature; with -fsync-ack, nodes with appendonly yes and
// appendfsync always pass.
func TestCheckValkeyServer(t *testing.T) {
	redistest.Require(t)
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		const msg = "valkey-server not found: install it (make valkey-server)"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; CI is set, so the Valkey tests must not be skipped (%v)", msg, err)
		}
		t.Skip(msg + "; skipping Valkey test")
	}
	t.Setenv("REDIS_SERVER", bin) // for redistest, in this process only
	servers, nodes := persistentNodes(t, 3)
	info, err := servers[0].NewClient(t).Info(t.Context(), "server").Result()
	require.NoError(t, err)
	version := regexp.MustCompile(`(?m)^valkey_version:(\S+)`).FindStringSubmatch(info)
	require.Len(t, version, 2, "INFO server of %s has no valkey_version:\n%s", bin, info)

	code, rep, stderr := runCheck(t, nodes, "-fsync-ack")
	require.Equal(t, wantCheckCode(rep.Worst), code, "stderr:\n%s", stderr)
	for i, n := range rep.Nodes {
		require.Equal(t, "valkey", n.Server, "node %d", i)
		require.Equal(t, version[1], n.Version, "node %d", i)
		require.Equal(t, []string{"WAITAOF", "SET GET", "SPUBLISH"}, n.Features, "node %d", i)
	}
	fa := findingsOf(rep, "fsync-ack")
	require.Len(t, fa, 3, "fsync-ack findings: %+v", fa)
	for _, f := range fa {
		require.Equal(t, "ok", f.Severity, "%+v", f)
	}

	_, stdout, _ := runRedlock(t, nil, "check", "--nodes", nodes)
	for _, s := range servers {
		require.Regexp(t, `(?m)^  \d +`+regexp.QuoteMeta(s.Addr())+` +master +valkey +`+regexp.QuoteMeta(version[1])+
			` +noeviction +yes, fsync always +\S+ +WAITAOF, SET GET, SPUBLISH$`, stdout)
	}
}
