package redlock

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// badSetup is a node whose server refuses the client's login or DB. When
// the refusal comes in the connection's setup (AUTH, SELECT), go-redis
// returns it from Exec but leaves every pipelined command without an error
// and with a zero value; Inspect and Check must report it as the node's
// error, in the server's words, never read it as data.
type badSetup struct {
	name  string
	check string // the Check finding it gets
	words string // what the node's error must say
	// prepare configures the servers; opts is the go-redis client of a
	// node, bad or not.
	prepare func(t *testing.T, srv []*redistest.Server)
	opts    func(addr string, bad bool) *redis.Options
}

var badSetups = []badSetup{
	{
		name:  "wrong password",
		check: "auth",
		words: "AUTH: WRONGPASS invalid username-password pair",
		prepare: func(t *testing.T, srv []*redistest.Server) {
			for _, s := range srv {
				configSet(t, s, "requirepass", "secret")
			}
		},
		opts: func(addr string, bad bool) *redis.Options {
			pw := "secret"
			if bad {
				pw = "wrong"
			}
			return &redis.Options{Addr: addr, Password: pw}
		},
	},
	{
		// No password at all: go-redis sends no AUTH, and the server
		// refuses each command, which is its own error already.
		name:  "no password",
		check: "auth",
		words: "NOAUTH Authentication required",
		prepare: func(t *testing.T, srv []*redistest.Server) {
			for _, s := range srv {
				configSet(t, s, "requirepass", "secret")
			}
		},
		opts: func(addr string, bad bool) *redis.Options {
			pw := "secret"
			if bad {
				pw = ""
			}
			return &redis.Options{Addr: addr, Password: pw}
		},
	},
	{
		name:    "bad DB",
		check:   "db",
		words:   "SELECT 99: ERR DB index is out of range",
		prepare: func(*testing.T, []*redistest.Server) {},
		opts: func(addr string, bad bool) *redis.Options {
			db := 0
			if bad {
				db = 99 // a server has 16 by default
			}
			return &redis.Options{Addr: addr, DB: db}
		},
	},
}

// badSetupClient starts 5 servers and returns a Client whose first nBad
// nodes fail their connection setup as bs does.
func badSetupClient(t *testing.T, bs badSetup, nBad int) *Client {
	t.Helper()
	redistest.Require(t)
	srv := redistest.StartN(t, 5, redistest.Options{})
	bs.prepare(t, srv)
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		rc := redis.NewClient(bs.opts(s.Addr(), i < nBad))
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return newClient(t, cs, WithTTL(10*time.Second))
}

// TestInspectBadSetup: a node that refuses AUTH or SELECT is an Err in
// Inspect, in the server's words; before, it read as a node holding a
// "foreign" key (TYPE's zero value, ""), with a nil Err.
func TestInspectBadSetup(t *testing.T) {
	for _, bs := range badSetups {
		for _, nBad := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s on %d of 5", bs.name, nBad), func(t *testing.T) {
				c := badSetupClient(t, bs, nBad)
				key := "diag-" + strings.ReplaceAll(t.Name(), "/", "-")
				var token string
				if nBad < c.quorum {
					l, err := c.TryLock(t.Context(), key)
					require.NoError(t, err, "the good nodes are a quorum")
					token = l.Token()
				}
				h, err := c.Inspect(t.Context(), key)
				require.NoError(t, err)
				for _, nh := range h.Nodes {
					if nh.Index >= nBad {
						// TryLock returns once a quorum said yes: the last
						// good node's write may still be on its way.
						require.NoError(t, nh.Err, "node %d is good", nh.Index)
						require.Contains(t, []string{layoutPlain, layoutFree}, nh.Layout, "node %d", nh.Index)
						continue
					}
					require.Error(t, nh.Err, "node %d: got no error, want %q; layout %q, value %q", nh.Index, bs.words, nh.Layout, nh.Value)
					require.Contains(t, nh.Err.Error(), bs.words, "node %d: the error names the server's refusal", nh.Index)
					var ne *NodeError
					require.ErrorAs(t, nh.Err, &ne)
					require.Equal(t, nh.Index, ne.Index)
					require.Empty(t, nh.Layout, "node %d: got layout %q, want none", nh.Index, nh.Layout)
					require.False(t, nh.Held)
				}
				require.Equal(t, token != "", h.Held, "got held %v", h.Held)
				require.Equal(t, token, h.Token)
			})
		}
	}
}

// TestCheckBadSetup: a node that refuses AUTH or SELECT is a node error in
// Check, with a critical finding of its own (auth, db) that quotes the
// server; before, it passed as reached, with a clock read as year 1, and
// Check warned of clocks 2562047h apart.
func TestCheckBadSetup(t *testing.T) {
	for _, bs := range badSetups {
		for _, nBad := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s on %d of 5", bs.name, nBad), func(t *testing.T) {
				c := badSetupClient(t, bs, nBad)
				r := checkOf(t, c)
				bad := make([]int, nBad)
				for i := range bad {
					bad[i] = i
				}
				got := requireOnly(t, r, SeverityCritical, bs.check, bad...)
				for _, i := range bad {
					n := r.Nodes[i]
					require.Error(t, n.Err, "node %d", i)
					require.Contains(t, n.Err.Error(), bs.words, "node %d: NodeInfo.Err", i)
					require.Zero(t, n.ClockOffset, "node %d: a clock was read from a node that did not answer", i)
					require.Empty(t, n.RunID)
					require.Contains(t, got[i].Message, bs.words, "node %d: the finding quotes the server", i)
					for _, f := range r.Findings {
						if f.Node == i {
							require.Equal(t, bs.check, f.Check, "node %d gets no other finding: %+v", i, f)
						}
					}
				}
				for _, f := range r.Findings {
					if f.Check == "clock" {
						require.NotContains(t, f.Message, "2562047h", "a zero TIME was read as a clock: %+v", f)
					}
				}
				requireOnly(t, r, SeverityWarning, "clock")
				if nBad < c.quorum {
					for i := nBad; i < 5; i++ {
						require.NoError(t, r.Nodes[i].Err, "node %d is good", i)
					}
					requireOnly(t, r, SeverityOK, "reachable", 1, 2, 3, 4)
				}
			})
		}
	}
}
