package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// review28bFsyncNodes starts n Valkey nodes with appendonly yes and
// appendfsync no (where WAITAOF never confirms an fsync, as
// TestFsyncAckExtendAndRenewals uses it), each behind a fault proxy, with
// a go-redis client of default retries (3) through each proxy.
func review28bFsyncNodes(t *testing.T, n int) ([]*redistest.Server, []*faultproxy.Proxy, []redis.UniversalClient) {
	t.Helper()
	requireValkey(t)
	srv := redistest.StartN(t, n, redistest.Options{Persistence: true, Args: []string{"--appendfsync", "no"}})
	ps := make([]*faultproxy.Proxy, n)
	cs := make([]redis.UniversalClient, n)
	for i, s := range srv {
		p, err := faultproxy.New(s.Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
	}
	loadScripts(t, cs)
	drained(t, cs)
	return srv, ps, cs
}

// TestReview28BResentAcquireCountsUnfsyncedYes: with WithFsyncAck, a yes
// must count only once WAITAOF confirmed the key's fsync on that node. On
// nodes with appendfsync no, WAITAOF never confirms, so every acquire must
// fail with ErrFsyncAck (the control, first). But when the acquire's reply
// is lost after the node ran it, go-redis sends the pipeline again on a new
// connection: the copy writes nothing (SET NX finds our value; then the
// library's GET check), the PUBLISH barrier is not propagated on a master
// without replicas, so it does not move the new connection's write offset,
// and WAITAOF answers 1 at once for a connection that wrote nothing. The
// unfsynced yes counts, and Lock succeeds.
func TestReview28BResentAcquireCountsUnfsyncedYes(t *testing.T) {
	_, ps, cs := review28bFsyncNodes(t, 3)
	c := newClient(t, cs, WithFsyncAck(true), WithTTL(30*time.Second))
	ctx := context.Background()

	// Control: no fault, the nodes never confirm an fsync.
	_, err := c.TryLock(ctx, "review28b-control")
	require.ErrorIs(t, err, ErrFsyncAck, "control: appendfsync no must fail every vote")
	drained(t, cs)

	// Lose each node's first reply chunk: the SET ran, go-redis resends.
	for _, p := range ps {
		p.LoseNext(1)
	}
	l, err := c.TryLock(ctx, "review28b-resent")
	if err == nil {
		defer func() { _ = l.Unlock(ctx) }()
	}
	lost := int64(0)
	for _, p := range ps {
		lost += p.Stats().LostReplies
	}
	t.Logf("lost replies: %d; TryLock: %v", lost, err)
	require.ErrorIs(t, err, ErrFsyncAck,
		"a lock was granted on yes votes that no WAITAOF confirmed: the nodes run appendfsync no, and only the resent copies (which wrote nothing on their connection) were 'confirmed'; stats %+v", statsOf(l))
}

func statsOf(l *Lock) any {
	if l == nil {
		return nil
	}
	return l.Stats()
}

// TestReview28BCheckMissesFsyncAckACL: with WithFsyncAck, a node whose ACL
// user may not run WAITAOF (or may not write the barrier that each vote's
// WAITAOF follows) fails every vote with ErrFsyncAck (NOPERM), as surely as
// a node without WAITAOF, which Check reports as critical. Check said
// nothing of it: it probed the barrier only with WithReplicaAck and never
// probed WAITAOF, and its fsync-ack finding was OK ("each yes is confirmed
// fsynced at once") on every node.
//
// The review wrote the barrier case against the barrier channel; since the
// fix of TestReview28BResentAcquireCountsUnfsyncedYes the barrier of a
// WAITAOF is a key (keyspace.Barrier, SET with a 1ms expiry), so the case
// refuses that key instead: the user may write every other key a lock and
// Check use. TestFsyncAckNeedsNoBarrierChannel shows that the channel
// no longer matters.
func TestReview28BCheckMissesFsyncAckACL(t *testing.T) {
	for _, tc := range []struct{ name, rule string }{
		{"no-waitaof", "-waitaof"},
		{"no-barrier-key", "barrier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireValkey(t)
			srv := redistest.StartN(t, 3, redistest.Options{Persistence: true})
			ctx := context.Background()
			cs := make([]redis.UniversalClient, len(srv))
			for i, s := range srv {
				args := []any{"ACL", "SETUSER", "locker", "reset", "on", ">pw", "~*", "&*", "+@all"}
				if tc.rule == "barrier" {
					// The lock key, Check's probe key, and the markers and
					// fence counters: every key but the barrier keys.
					args = []any{"ACL", "SETUSER", "locker", "reset", "on", ">pw", "&*", "+@all",
						"~review28b-acl", "~" + checkKey, "~*redlock:waiting*", "~*redlock:fence*"}
				} else {
					args = append(args, tc.rule)
				}
				require.NoError(t, s.NewClient(t).Do(ctx, args...).Err())
				rc := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "locker", Password: "pw"})
				t.Cleanup(func() { _ = rc.Close() })
				cs[i] = rc
			}
			c := newClient(t, cs, WithFsyncAck(true))
			_, err := c.TryLock(ctx, "review28b-acl")
			require.ErrorIs(t, err, ErrFsyncAck, "the ACL makes every vote fail")
			t.Logf("TryLock: %v", err)

			r, err := c.Check(ctx)
			require.NoError(t, err)
			bad := 0
			for _, f := range r.Findings {
				if f.Severity >= SeverityWarning && f.Node >= 0 {
					t.Logf("finding: %v %s node %d: %s", f.Severity, f.Check, f.Node, f.Message)
					bad++
				}
			}
			require.Positive(t, bad, "Check reports nothing wrong, while every vote fails with ErrFsyncAck:\n%s", r)
		})
	}
}
