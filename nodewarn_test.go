package redlock

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// warnLog is a slog handler that keeps every record, for the tests of the
// warnings. It is safe for concurrent use.
type warnLog struct {
	mu   sync.Mutex
	recs []slog.Record // guarded by mu
}

func (h *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *warnLog) WithGroup(string) slog.Handler            { return h }

func (h *warnLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// faultWarning is what one warning of a node's failure says.
type faultWarning struct {
	node       int64
	addr, kind string
}

// warnings returns the Warn records about nodes' failures that retrying
// will not fix.
func (h *warnLog) warnings() []faultWarning {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []faultWarning
	for _, r := range h.recs {
		if r.Level != slog.LevelWarn {
			continue
		}
		var w faultWarning
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "node":
				w.node = a.Value.Int64()
			case "addr":
				w.addr = a.Value.String()
			case "kind":
				w.kind = a.Value.String()
			}
			return true
		})
		if w.kind != "" {
			out = append(out, w)
		}
	}
	return out
}

// countOf returns, per node, how many warnings of kind were given.
func countOf(ws []faultWarning, kind string) map[int64]int {
	n := map[int64]int{}
	for _, w := range ws {
		if w.kind == kind {
			n[w.node]++
		}
	}
	return n
}

// hammer makes many acquisitions on c: TryLocks, and Locks that retry
// until their short deadline, so that each node fails many times.
func hammer(t *testing.T, c *Client, key string, rounds int) {
	t.Helper()
	for range rounds {
		_, err := c.TryLock(t.Context(), key)
		require.ErrorIs(t, err, ErrNotAcquired)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_, err = c.Lock(ctx, key)
		cancel()
		require.ErrorIs(t, err, ErrNotAcquired)
	}
}

// A failure that retrying will not fix is logged at Warn once per node and
// kind, however often it recurs, with the node's index and address.
func TestWarnsOncePerNodeAndKind(t *testing.T) {
	srv, _ := realNodes(t, 3)
	admin := make([]*redis.Client, len(srv))
	for i, s := range srv {
		admin[i] = s.NewClient(t)
		require.NoError(t, admin[i].Ping(t.Context()).Err()) // authenticated before the password is set
	}
	requirePass(t, srv, "secret")
	for _, a := range admin { // already authenticated
		require.NoError(t, a.ACLSetUser(t.Context(), "noset", "on", ">pw", "~*", "&*", "+@all", "-set").Err())
	}
	addrs := []string{srv[0].Addr(), srv[1].Addr(), srv[2].Addr()}
	for _, tc := range []struct {
		kind string
		opt  func(*redis.Options)
	}{
		{faultAuth, func(o *redis.Options) { o.Password = "wrong" }},
		{faultDB, func(o *redis.Options) { o.Password, o.DB = "secret", 99 }},
		{faultNoPerm, func(o *redis.Options) { o.Username, o.Password = "noset", "pw" }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			logs := &warnLog{}
			c := newClient(t, clientsOn(t, addrs, tc.opt), WithLogger(slog.New(logs)),
				WithRetryDelay(time.Millisecond, 5*time.Millisecond), WithNodeTimeout(500*time.Millisecond))
			hammer(t, c, "warn-"+tc.kind, 10)
			ws := logs.warnings()
			require.Equal(t, map[int64]int{0: 1, 1: 1, 2: 1}, countOf(ws, tc.kind), "%+v", ws)
			require.Len(t, ws, 3, "only the %s warnings: %+v", tc.kind, ws)
			for _, w := range ws {
				require.Equal(t, addrs[w.node], w.addr)
			}
		})
	}
}

// A different kind of failure on the same node is logged again; the same
// kind once more is not.
func TestWarnsAgainForAnotherKind(t *testing.T) {
	srv, _ := realNodes(t, 1)
	admin := srv[0].NewClient(t)
	require.NoError(t, admin.Ping(t.Context()).Err()) // authenticated before the password is set
	requirePass(t, srv, "other")
	logs := &warnLog{}
	cs := clientsOn(t, []string{srv[0].Addr()}, func(o *redis.Options) { o.Password, o.DB = "pw", 99 })
	c := newClient(t, cs, WithLogger(slog.New(logs)), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	kinds := func() []string {
		var k []string
		for _, w := range logs.warnings() {
			k = append(k, w.kind)
		}
		return k
	}
	hammer(t, c, "again", 3)
	require.Equal(t, []string{faultAuth}, kinds())
	// The password is right now, and the DB is refused.
	require.NoError(t, admin.ConfigSet(t.Context(), "requirepass", "pw").Err())
	hammer(t, c, "again", 3)
	require.Equal(t, []string{faultAuth, faultDB}, kinds())
	require.NoError(t, admin.ConfigSet(t.Context(), "requirepass", "other").Err())
	hammer(t, c, "again", 3)
	require.Equal(t, []string{faultAuth, faultDB}, kinds())
}

// A host name that does not resolve is logged once per node, though the
// failure comes after the round, too late for its vote: the names resolve
// through a slow DNS server on loopback, which answers every question with
// NXDOMAIN after dnsDelay, so that the test sends nothing off the machine.
// A refused connection, which may go away, is not logged.
func TestWarnsOnceForUnknownHost(t *testing.T) {
	dns := nxdomainServer(t)
	dialer := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dns)
	}}}
	viaDNS := func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		}
		quickFail(o) // one dial a request: each fails once, late
		// Never so many failed dials that the pool starts dialing in the
		// background (at PoolSize): its lookups would outlive the test.
		o.PoolSize = 1000
	}
	redistest.Require(t)
	down := redistest.Start(t, redistest.Options{})
	down.Kill()
	addrs := []string{"nonexistent.invalid:6379", "nowhere.invalid:6379", down.Addr()}
	logs := &warnLog{}
	c := newClient(t, clientsOn(t, addrs, viaDNS), WithLogger(slog.New(logs)), WithNodeTimeout(dnsDelay/3))
	_, err := c.TryLock(t.Context(), "dns")
	require.ErrorIs(t, err, ErrUnavailable)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	for _, v := range qe.Stats.Nodes[:2] {
		require.ErrorIs(t, v.Err, ErrNodeTimeout, "node %d answered in time: %v", v.Index, v.Err)
	}
	// No further call: only the late replies of that one can say it.
	require.Eventually(t, func() bool { return len(countOf(logs.warnings(), faultDNS)) == 2 },
		30*time.Second, 10*time.Millisecond, "no warning of both unknown hosts")
	// More failures, late and in time, say nothing more.
	hammer(t, c, "dns", 5)
	ws := logs.warnings()
	require.Equal(t, map[int64]int{0: 1, 1: 1}, countOf(ws, faultDNS), "%+v", ws)
	require.Len(t, ws, 2, "only the DNS warnings, none for the refused node: %+v", ws)
	// A failed vote names the cause now: as a timeout's last error, or
	// in time, once go-redis's pool gives the dial error at once.
	_, err = c.TryLock(t.Context(), "dns")
	require.ErrorAs(t, err, &qe)
	for _, v := range qe.Stats.Nodes[:2] {
		if v.Vote == VoteFailed {
			require.Contains(t, describe(v.Err), "lookup "+addrs[v.Index][:len(addrs[v.Index])-5]+": no such host", "node %d", v.Index)
			require.Contains(t, err.Error(), "no such host")
		}
	}
}

// dnsDelay is how long nxdomainServer takes to answer.
const dnsDelay = 300 * time.Millisecond

// persistentKind tells the failures that retrying will not fix from the
// others.
func TestPersistentKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&redisErr{"WRONGPASS invalid username-password pair or user is disabled."}, faultAuth},
		{&redisErr{"NOAUTH Authentication required."}, faultAuth},
		{&redisErr{"ERR invalid password"}, faultAuth},
		{&redisErr{"ERR Protocol error: unauthenticated multibulk length"}, faultAuth},
		{&redisErr{"ERR DB index is out of range"}, faultDB},
		{&redisErr{"NOPERM User noset has no permissions to run the 'set' command"}, faultNoPerm},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, faultDNS},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}}, ""},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, ""},
		{&redisErr{"ERR disk on fire"}, ""},
		{&redisErr{"LOADING Redis is loading the dataset in memory"}, ""},
		{ErrNodeTimeout, ""},
	} {
		require.Equal(t, tc.want, persistentKind(tc.err), "%v", tc.err)
	}
}

// nxdomainServer answers every DNS question on a loopback UDP port with
// NXDOMAIN, after dnsDelay, and returns its address.
func nxdomainServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	var answers sync.WaitGroup
	answers.Add(1)
	go func() {
		defer answers.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := nxdomain(buf[:n]); reply != nil {
				answers.Go(func() {
					time.Sleep(dnsDelay)
					_, _ = pc.WriteTo(reply, from)
				})
			}
		}
	}()
	t.Cleanup(func() {
		_ = pc.Close()
		answers.Wait()
	})
	return pc.LocalAddr().String()
}

// nxdomain builds the NXDOMAIN answer to a DNS query: its header with QR,
// RA and RCODE 3 set, and its question; nil for a query it cannot read.
func nxdomain(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 { // the name's labels
		end += int(q[end]) + 1
	}
	end += 1 + 4 // the root label, the type and class
	if end > len(q) {
		return nil
	}
	r := append([]byte(nil), q[:end]...)
	flags := binary.BigEndian.Uint16(q[2:4])
	binary.BigEndian.PutUint16(r[2:4], 0x8000|flags&0x7900|0x0080|3) // QR, opcode and RD kept, RA, NXDOMAIN
	binary.BigEndian.PutUint16(r[6:8], 0)                            // answers
	binary.BigEndian.PutUint16(r[8:10], 0)                           // authorities
	binary.BigEndian.PutUint16(r[10:12], 0)                          // additionals
	return r
}
