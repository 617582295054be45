package redlock

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestCheckValkey: on Valkey 8, Check names the server valkey, reports its
// own version (valkey_version, not the redis_version it is compatible
// with) and every feature the library uses; with WithFsyncAck it passes a
// node with appendonly yes and appendfsync always, and flags the settings
// that make WAITAOF fail or time out: appendonly no and appendfsync no are
// critical (the node cannot take a lock, which the quorum finding counts),
// appendfsync everysec a warning.
func TestCheckValkey(t *testing.T) {
	requireValkey(t)
	srv := redistest.StartN(t, 5, redistest.Options{Persistence: true})
	cs := serverClients(t, srv)
	info, err := cs[0].Info(t.Context(), "server").Result()
	require.NoError(t, err)
	want := infoField(info, "valkey_version")
	require.NotEmpty(t, want, "INFO server has no valkey_version:\n%s", info)

	r := checkOf(t, newClient(t, cs))
	for _, n := range r.Nodes {
		require.Equal(t, "valkey", n.Server, "node %d", n.Index)
		require.Equal(t, want, n.Version, "node %d", n.Index)
		require.Equal(t, []string{"WAITAOF", "SET GET", "SPUBLISH"}, n.Features, "node %d", n.Index)
	}
	got := requireOnly(t, r, SeverityOK, "version", 0, 1, 2, 3, 4)
	require.Equal(t, "Valkey "+want+"; has WAITAOF, SET GET, SPUBLISH", got[0].Message)
	requireOnly(t, r, SeverityOK, "fsync-ack") // only with WithFsyncAck
	require.Contains(t, r.String(), "valkey")

	configSet(t, srv[1], "appendonly", "no")
	configSet(t, srv[2], "appendfsync", "everysec")
	configSet(t, srv[3], "appendfsync", "no")
	r = checkOf(t, newClient(t, cs, WithFsyncAck(true)))
	requireOnly(t, r, SeverityOK, "fsync-ack", 0, 4)
	crit := requireOnly(t, r, SeverityCritical, "fsync-ack", 1, 3)
	require.Contains(t, crit[1].Message, "appendonly no: WAITAOF refuses to run")
	require.Contains(t, crit[3].Message, "appendfsync no: the server never fsyncs by itself")
	warn := requireOnly(t, r, SeverityWarning, "fsync-ack", 2)
	require.Contains(t, warn[2].Message, "appendfsync everysec")
	require.Contains(t, warn[2].Message, "longer than the 500ms it is given")
	q := requireOnly(t, r, SeverityWarning, "quorum", -1)
	require.Contains(t, q[-1].Message, `node 1 (`+srv[1].Addr()+`) answered but cannot take a lock (see its "fsync-ack" finding)`)
	require.Contains(t, q[-1].Message, `node 3 (`+srv[3].Addr()+`) answered but cannot take a lock`)
}

// TestCheckFeaturesOnRedis70: on Redis 7.0, Check names the server redis
// and finds SET GET and SPUBLISH but no WAITAOF, which makes every node
// critical with WithFsyncAck, and so the quorum.
func TestCheckFeaturesOnRedis70(t *testing.T) {
	srv, cs := realNodes(t, 3)
	for _, s := range srv {
		configSet(t, s, "appendonly", "yes", "appendfsync", "always")
	}
	info, err := cs[0].Info(t.Context(), "server").Result()
	require.NoError(t, err)
	version := infoField(info, "redis_version")
	if v, _ := parseVersion(version); v[0]*100+v[1] >= 702 || infoField(info, "server_name") != "" {
		t.Skipf("the server has WAITAOF (%s %s): this test needs Redis before 7.2, the default redis-server here",
			infoField(info, "server_name"), version)
	}

	r := checkOf(t, newClient(t, cs))
	for _, n := range r.Nodes {
		require.Equal(t, "redis", n.Server, "node %d", n.Index)
		require.Equal(t, version, n.Version, "node %d", n.Index)
		require.Equal(t, []string{"SET GET", "SPUBLISH"}, n.Features, "node %d", n.Index)
	}
	got := requireOnly(t, r, SeverityOK, "version", 0, 1, 2)
	require.Equal(t, "Redis "+version+"; has SET GET, SPUBLISH; lacks WAITAOF", got[0].Message)
	requireOnly(t, r, SeverityCritical, "fsync-ack")

	r = checkOf(t, newClient(t, cs, WithFsyncAck(true)))
	crit := requireOnly(t, r, SeverityCritical, "fsync-ack", 0, 1, 2)
	require.Contains(t, crit[0].Message, "Redis "+version+" lacks WAITAOF")
	requireOnly(t, r, SeverityCritical, "quorum", -1)
}

// TestCheckFsyncAckFindings judges hand-made facts: what each appendonly,
// appendfsync and server version says with WithFsyncAck, and that nothing
// is said without it.
func TestCheckFsyncAckFindings(t *testing.T) {
	mk := func(edit func(f []nodeFacts)) []nodeFacts {
		f := []nodeFacts{healthy(0, 1), healthy(1, 1), healthy(2, 1), healthy(3, 1), healthy(4, 1), healthy(5, 1), healthy(6, 1)}
		edit(f)
		return f
	}
	facts := mk(func(f []nodeFacts) {
		f[1].AppendOnly = false
		f[2].AppendFsync = "no"
		f[3].AppendFsync = "everysec"
		f[4].rewrite = "yes"
		f[5].Version = "7.0.15"
		f[6].Server, f[6].Version, f[6].redisVersion = "valkey", "8.0.1", "7.2.4"
	})
	r := judge(t, facts)
	requireOnly(t, r, SeverityOK, "fsync-ack")
	requireOnly(t, r, SeverityWarning, "fsync-ack")
	requireOnly(t, r, SeverityCritical, "fsync-ack")

	r = judge(t, facts, WithFsyncAck(true))
	requireOnly(t, r, SeverityOK, "fsync-ack", 0, 6)
	crit := requireOnly(t, r, SeverityCritical, "fsync-ack", 1, 2, 5)
	require.Contains(t, crit[1].Message, "appendonly no")
	require.Contains(t, crit[2].Message, "WAITAOF never confirms")
	require.Contains(t, crit[2].Message, "each after waiting 50ms") // half the default node timeout
	require.Contains(t, crit[5].Message, "Redis 7.0.15 lacks WAITAOF")
	warn := requireOnly(t, r, SeverityWarning, "fsync-ack", 3, 4)
	require.Contains(t, warn[3].Message, "longer than the 50ms it is given")
	require.Contains(t, warn[3].Message, "redis/redis#13793")
	require.Contains(t, warn[4].Message, "no-appendfsync-on-rewrite yes")

	// A node timeout that leaves WAITAOF a second: everysec still confirms
	// early on some servers; with WithReplicaAck, WAIT takes half.
	r = judge(t, facts, WithFsyncAck(true), WithTTL(time.Minute), WithNodeTimeout(3*time.Second))
	warn = requireOnly(t, r, SeverityWarning, "fsync-ack", 3, 4)
	require.NotContains(t, warn[3].Message, "it is given")
	r = judge(t, facts, WithFsyncAck(true), WithReplicaAck(1))
	crit = requireOnly(t, r, SeverityCritical, "fsync-ack", 1, 2, 5)
	require.Contains(t, crit[2].Message, "each after waiting 25ms")
}

// TestCheckFsyncAckACLFindings judges hand-made facts: with WithFsyncAck, a
// user that may not run WAITAOF, or may not set the barrier keys that each
// vote's WAITAOF follows, fails every vote, so each is critical under
// fsync-ack, and the quorum finding counts those nodes as unable to take a
// lock; a WAITAOF that the server does not know (renamed away) is critical
// too. Without WithFsyncAck nothing is said of them.
func TestCheckFsyncAckACLFindings(t *testing.T) {
	noperm := replyErr(t, "NOPERM User locker has no permissions to run the 'waitaof' command")
	unknown := replyErr(t, "ERR unknown command 'waitaof', with args beginning with: '0' '0' '1'")
	mk := func() []nodeFacts {
		f := []nodeFacts{healthy(0, 1), healthy(1, 1), healthy(2, 1), healthy(3, 1), healthy(4, 1)}
		f[1].waitAOF = noperm
		f[2].markDenied = replyErr(t, "NOPERM No permissions to access a key")
		f[3].waitAOF = unknown
		return f
	}
	require.True(t, redis.IsPermissionError(noperm), "the fake reply must read as NOPERM: %v", noperm)

	r := judge(t, mk())
	requireOnly(t, r, SeverityCritical, "fsync-ack")
	requireOnly(t, r, SeverityOK, "quorum", -1)

	r = judge(t, mk(), WithFsyncAck(true))
	requireOnly(t, r, SeverityOK, "fsync-ack", 0, 4)
	crit := requireOnly(t, r, SeverityCritical, "fsync-ack", 1, 2, 3)
	require.Contains(t, crit[1].Message, "the user may not run WAITAOF (NOPERM")
	require.Contains(t, crit[1].Fix, "+waitaof")
	require.Contains(t, crit[2].Message, "the user may not set the barrier keys")
	require.Contains(t, crit[2].Fix, "~* +set")
	require.Contains(t, crit[3].Message, "the server does not know WAITAOF")
	q := requireOnly(t, r, SeverityCritical, "quorum", -1)
	for _, i := range []int{1, 2, 3} {
		require.Contains(t, q[-1].Message, fmt.Sprintf("node %d (n%d) answered but cannot take a lock (see its \"fsync-ack\" finding)", i, i))
	}

	// Two refusals on one node are two findings, and a refusal hides no
	// setting that fails the votes too.
	f := mk()
	f[1].markDenied, f[1].AppendFsync = f[2].markDenied, "no"
	r = judge(t, f, WithFsyncAck(true))
	var msgs []string
	for _, fd := range r.Findings {
		if fd.Node == 1 && fd.Check == "fsync-ack" {
			require.Equal(t, SeverityCritical, fd.Severity, "%+v", fd)
			msgs = append(msgs, fd.Message)
		}
	}
	require.Len(t, msgs, 3, "node 1's fsync-ack findings: got %q, want WAITAOF, the barrier keys and appendfsync no", msgs)
}

// replyErr returns msg as go-redis reads an error reply of the server, so
// that redis.IsPermissionError and redis.HasErrorPrefix judge it as they
// judge a real one.
func replyErr(t *testing.T, msg string) error {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = rc.Close() })
	require.NoError(t, rc.Ping(t.Context()).Err())
	m.SetError(msg)
	err := rc.Ping(t.Context()).Err()
	require.EqualError(t, err, msg)
	return err
}

// The features of a server follow its name and version; a server that is
// neither Redis nor Valkey is judged by the Redis version it reports.
func TestCheckFeaturesOf(t *testing.T) {
	for _, tt := range []struct {
		info string
		want []string
	}{
		{"redis_version:6.0.16\r\n", []string{}},
		{"redis_version:6.2.0\r\n", []string{"SET GET"}},
		{"redis_version:7.0.15\r\n", []string{"SET GET", "SPUBLISH"}},
		{"redis_version:7.2.0\r\n", []string{"WAITAOF", "SET GET", "SPUBLISH"}},
		{"redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", []string{"WAITAOF", "SET GET", "SPUBLISH"}},
		{"redis_version:6.2.6\r\nserver_name:other\r\n", []string{"SET GET"}},
		{"run_id:x\r\n", nil},
	} {
		f := nodeFacts{}
		f.Server, f.Version, f.redisVersion = serverOf(tt.info)
		require.Equal(t, tt.want, featuresOf(&f), "%q", strings.TrimSpace(tt.info))
	}
	name, version, rv := serverOf("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n")
	require.Equal(t, []string{"valkey", "8.0.1", "7.2.4"}, []string{name, version, rv})
	name, version, _ = serverOf("redis_version:7.0.15\r\n")
	require.Equal(t, []string{"redis", "7.0.15"}, []string{name, version})
}
