package redlock

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// unresolvable is a go-redis client for a host name that does not resolve.
// Its dialer fails as net.Dial does for such a name, without asking a DNS
// server: the tests send nothing beyond loopback.
func unresolvable(t *testing.T) *redis.Client {
	t.Helper()
	const host = "redlock-test.invalid"
	rc := redis.NewClient(&redis.Options{
		Addr: host + ":6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp",
				Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		},
		// One dial: go-redis's five, 100ms apart, would take half of
		// Check's wait on this node.
		MaxRetries: -1, DialerRetries: 1,
	})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// optClient is a go-redis client with the given options; a test cleanup
// closes it.
func optClient(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// TestCheckCount: with 1 or 2 nodes, Check warns that the lock survives no
// node failure, in the words of the CLI's own finding of that name.
func TestCheckCount(t *testing.T) {
	_, cs := realNodes(t, 3)
	for _, tt := range []struct {
		n    int
		want string
	}{
		{1, "1 node: the lock survives no node failure"},
		{2, "2 nodes: the lock survives no node failure"},
	} {
		r := checkOf(t, newClient(t, cs[:tt.n]))
		got := requireOnly(t, r, SeverityWarning, "count", -1)
		require.Contains(t, got[-1].Message, tt.want)
		require.Contains(t, got[-1].Message, "Redlock wants independent masters, at least 3 (5 is usual)")
		require.Contains(t, got[-1].Fix, "at least 3 independent Redis masters")
	}
	r := checkOf(t, newClient(t, cs))
	requireOnly(t, r, SeverityWarning, "count")
	got := requireOnly(t, r, SeverityOK, "count", -1)
	require.Contains(t, got[-1].Message, "3 nodes, a quorum of 2: 1 of them may fail and locks still work")
}

// TestCheckAliasFindings: two entries that reach one server (by run_id),
// under two names of one host or in two DBs of it, are a critical finding
// that names both nodes: the server counts twice in the quorum.
func TestCheckAliasFindings(t *testing.T) {
	srv, _ := realNodes(t, 4)
	_, port, _ := strings.Cut(srv[1].Addr(), ":")
	for _, tt := range []struct {
		name  string
		alias *redis.Options
	}{
		{"localhost beside 127.0.0.1", &redis.Options{Addr: "localhost:" + port}},
		{"DB 1 beside DB 0", &redis.Options{Addr: srv[1].Addr(), DB: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := []redis.UniversalClient{
				optClient(t, &redis.Options{Addr: srv[0].Addr()}),
				optClient(t, &redis.Options{Addr: srv[1].Addr()}),
				optClient(t, &redis.Options{Addr: srv[2].Addr()}),
				optClient(t, tt.alias),
				optClient(t, &redis.Options{Addr: srv[3].Addr()}),
			}
			r := checkOf(t, newClient(t, cs))
			got := requireOnly(t, r, SeverityCritical, "distinct", 3)
			msg := got[3].Message
			require.Contains(t, msg, fmt.Sprintf("node 1 (%s) and node 3 (%s) are one Redis server", srv[1].Addr(), tt.alias.Addr))
			require.Contains(t, msg, "counts twice in the quorum")
			requireOnly(t, r, SeverityOK, "distinct", 0, 1, 2, 4)
			require.Equal(t, r.Nodes[1].RunID, r.Nodes[3].RunID)
		})
	}
}

// TestCheckMisconfiguredNodes: nodes with a wrong password, a DB the server
// lacks, a host name that does not resolve, or nothing listening at the
// port each get a critical finding of their own, and the deployment gets
// one that names them all: a warning while the others are a quorum (every
// call succeeds, but fewer failures are spared), critical when they are
// not.
func TestCheckMisconfiguredNodes(t *testing.T) {
	redistest.Require(t)
	srv := redistest.StartN(t, 5, redistest.Options{})
	configSet(t, srv[1], "requirepass", "secret")
	good := func(i int) redis.UniversalClient { return optClient(t, &redis.Options{Addr: srv[i].Addr()}) }
	wrongPass := optClient(t, &redis.Options{Addr: srv[1].Addr(), Password: "wrong"})
	badDB := optClient(t, &redis.Options{Addr: srv[2].Addr(), DB: 99})
	noHost := unresolvable(t)
	srv[4].Kill()
	refused := optClient(t, &redis.Options{Addr: srv[4].Addr(), MaxRetries: -1, DialerRetries: 1})

	t.Run("minority", func(t *testing.T) {
		cs := []redis.UniversalClient{good(0), wrongPass, good(2), good(3), noHost}
		r := checkOf(t, newClient(t, cs))
		got := requireOnly(t, r, SeverityWarning, "quorum", -1)
		msg := got[-1].Message
		require.True(t, strings.HasPrefix(msg, "locks work, but with fewer failures to spare: 2 of 5 nodes failed"), "got %q", msg)
		require.Contains(t, msg, fmt.Sprintf("node 1 (%s) refused the client's credentials: AUTH: WRONGPASS", srv[1].Addr()))
		require.Contains(t, msg, "node 4 (redlock-test.invalid:6379) has a host name that does not resolve")
		require.Contains(t, msg, "0 more can fail before no lock can be taken, where 5 nodes should survive 2")
		requireOnly(t, r, SeverityCritical, "quorum")
		requireOnly(t, r, SeverityCritical, "auth", 1)
		requireOnly(t, r, SeverityCritical, "reachable", 4)

		// The lock works, as the finding says.
		l, err := newClient(t, cs).TryLock(t.Context(), "misconfigured-minority")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	})
	t.Run("majority", func(t *testing.T) {
		cs := []redis.UniversalClient{good(0), wrongPass, badDB, good(3), refused}
		r := checkOf(t, newClient(t, cs))
		got := requireOnly(t, r, SeverityCritical, "quorum", -1)
		msg := got[-1].Message
		require.True(t, strings.HasPrefix(msg, "no lock can be taken: 3 of 5 nodes failed"), "got %q", msg)
		require.Contains(t, msg, fmt.Sprintf("node 1 (%s) refused the client's credentials: AUTH: WRONGPASS", srv[1].Addr()))
		require.Contains(t, msg, fmt.Sprintf("node 2 (%s) refused the client's DB: SELECT 99: ERR DB index is out of range", srv[2].Addr()))
		require.Contains(t, msg, fmt.Sprintf("node 4 (%s) refused the connection", srv[4].Addr()))
		require.Contains(t, msg, "leaving 2, fewer than the quorum of 3")
		requireOnly(t, r, SeverityWarning, "quorum")
		requireOnly(t, r, SeverityCritical, "auth", 1)
		requireOnly(t, r, SeverityCritical, "db", 2)
		requireOnly(t, r, SeverityCritical, "reachable", 4)
	})
	t.Run("none", func(t *testing.T) {
		r := checkOf(t, newClient(t, []redis.UniversalClient{good(0), good(2), good(3)}))
		got := requireOnly(t, r, SeverityOK, "quorum", -1)
		require.Contains(t, got[-1].Message, "every node answered")
	})
}

// TestCheckAuthAndACLAreDistinct: a wrong password is an "auth" finding, and
// an ACL that refuses a command the lock scripts run is an "acl" one; each
// names its node and quotes the server, and neither passes for the other.
func TestCheckAuthAndACLAreDistinct(t *testing.T) {
	srv, admin := realNodes(t, 4)
	ctx := t.Context()
	for _, s := range admin[:3] {
		require.NoError(t, s.Do(ctx, "ACL", "SETUSER", "app", "reset", "on", ">pw", "~*", "&*", "+@all", "-zadd").Err())
	}
	require.NoError(t, admin[3].Do(ctx, "ACL", "SETUSER", "none", "reset", "on", ">pw", "~*", "&*", "-@all").Err())
	noZadd := optClient(t, &redis.Options{Addr: srv[0].Addr(), Username: "app", Password: "pw", DisableIdentity: true})
	wrong := optClient(t, &redis.Options{Addr: srv[1].Addr(), Username: "app", Password: "nope", DisableIdentity: true})
	noUser := optClient(t, &redis.Options{Addr: srv[2].Addr(), Username: "nobody", Password: "pw", DisableIdentity: true})
	nothing := optClient(t, &redis.Options{Addr: srv[3].Addr(), Username: "none", Password: "pw", DisableIdentity: true})
	c := newClient(t, []redis.UniversalClient{noZadd, wrong, noUser, nothing})

	r := checkOf(t, c)
	acl := requireOnly(t, r, SeverityCritical, "acl", 0, 3)
	// Inside a script, Redis 7.0 words a NOPERM as "ERR The user executing
	// the script can't run this command".
	require.Contains(t, acl[0].Message, "the lock scripts run")
	require.Contains(t, acl[0].Message, "ZADD: ")
	require.Contains(t, acl[3].Message, "NOPERM")
	for _, i := range []int{0, 3} {
		require.NotContains(t, acl[i].Message, "WRONGPASS")
		require.Empty(t, findingsOf(r, SeverityCritical, "auth")[i].Check, "node %d: got an auth finding", i)
	}
	auth := requireOnly(t, r, SeverityCritical, "auth", 1, 2)
	for _, i := range []int{1, 2} {
		require.Contains(t, auth[i].Message, "WRONGPASS invalid username-password pair", "node %d quotes the server", i)
		require.NotContains(t, auth[i].Message, "NOPERM")
		for _, f := range r.Findings {
			if f.Node == i {
				require.Equal(t, "auth", f.Check, "node %d: got another finding: %+v", i, f)
			}
		}
	}
}
