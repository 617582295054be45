package redlock

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// onePrefix requires that err's message has one "redlock:" prefix, and
// none of go-redis's or our internal wording.
func onePrefix(t *testing.T, err error) string {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	require.Equal(t, 1, strings.Count(msg, "redlock:"), "one prefix: %s", msg)
	require.True(t, strings.HasPrefix(msg, "redlock: "), "%s", msg)
	require.NotContains(t, msg, "no reply", msg)
	require.NotContains(t, msg, "go-redis", msg)
	return msg
}

// quickFail makes go-redis give a failed dial up at once, rather than after
// its dial retries and command retries (seconds): the node's failure then
// comes within the node timeout.
func quickFail(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 }

// clientsOn returns a go-redis client per address, with opts applied.
func clientsOn(t *testing.T, addrs []string, opts ...func(*redis.Options)) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o := &redis.Options{Addr: a}
		for _, f := range opts {
			f(o)
		}
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return cs
}

// A refused node is named by what happened, in the network's words, not
// go-redis's: "connection refused".
func TestMessageNamesRefusedNode(t *testing.T) {
	srv, _ := realNodes(t, 3)
	addrs := []string{srv[0].Addr(), srv[1].Addr(), srv[2].Addr()}
	for _, s := range srv {
		s.Kill()
	}
	c := newClient(t, clientsOn(t, addrs, quickFail))
	for _, opts := range [][]LockOption{nil, {WithFencing(true)}} { // SET, and a script
		_, err := c.TryLock(t.Context(), "refused", opts...)
		msg := onePrefix(t, err)
		require.ErrorIs(t, err, ErrUnavailable)
		require.Contains(t, msg, "failed: connection refused", msg)
		require.NotContains(t, msg, "dial tcp", msg)
		var ne *NodeError
		require.ErrorAs(t, err, &ne)
		require.Equal(t, "redlock: node "+strconv.Itoa(ne.Index)+" ("+ne.Addr+"): connection refused", ne.Error())
		require.ErrorIs(t, ne, syscall.ECONNREFUSED)
	}
}

// A node refused for its credentials or DB is named by the server's words,
// on the single-command path (SET) and on the pipeline path (the node
// guard's sample after the vote; the SET NX GET of a later attempt), never
// as "no reply".
func TestMessageNamesRefusedSetup(t *testing.T) {
	srv, _ := realNodes(t, 3)
	requirePass(t, srv, "secret")
	addrs := []string{srv[0].Addr(), srv[1].Addr(), srv[2].Addr()}
	for _, tc := range []struct {
		name string
		opt  func(*redis.Options)
		want string
	}{
		{"wrong password", func(o *redis.Options) { o.Password = "wrong" }, "WRONGPASS"},
		{"no password", func(*redis.Options) {}, "NOAUTH"},
		{"bad DB", func(o *redis.Options) { o.Password, o.DB = "secret", 99 }, "DB index is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, guard := range []bool{false, true} {
				c := newClient(t, clientsOn(t, addrs, tc.opt), WithNodeGuard(guard), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
				_, err := c.TryLock(t.Context(), "setup")
				msg := onePrefix(t, err)
				require.Contains(t, msg, tc.want, "guard %v", guard)
				require.ErrorIs(t, err, ErrUnavailable)
				// A Lock's later attempts send SET NX GET, through a
				// pipeline.
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				_, err = c.Lock(ctx, "setup-wait")
				cancel()
				msg = onePrefix(t, err)
				require.Contains(t, msg, tc.want, "guard %v", guard)
				require.ErrorIs(t, err, ErrUnavailable)
			}
		})
	}
}

// A node that does not answer within the node timeout is named by it, and
// by its last failure when one is known.
func TestMessageNamesTimeout(t *testing.T) {
	c := newClient(t, clientsOn(t, []string{hungServer(t), hungServer(t), hungServer(t)}, func(o *redis.Options) {
		o.ReadTimeout, o.MaxRetries = time.Second, -1
	}), WithNodeTimeout(100*time.Millisecond))
	_, err := c.TryLock(t.Context(), "hung")
	msg := onePrefix(t, err)
	require.Contains(t, msg, "failed: no answer within the node timeout of 100ms", msg)
	require.NotContains(t, msg, "last error", msg)
	require.ErrorIs(t, err, ErrNodeTimeout)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	// Once node 0 was seen refusing a connection, its timeouts say so.
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	c.faults.failed(0, refused)
	_, err = c.TryLock(t.Context(), "hung-2")
	msg = onePrefix(t, err)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	v := qe.Stats.Nodes[0]
	require.Equal(t, VoteFailed, v.Vote)
	require.ErrorIs(t, v.Err, ErrNodeTimeout)
	require.ErrorIs(t, v.Err, syscall.ECONNREFUSED)
	want := "(last error: connection refused)"
	if errors.Is(v.Err, ErrInFlight) {
		// Still busy with the first call's request.
		require.Contains(t, v.Err.Error(), "previous request to this node still in flight "+want)
	} else {
		require.Equal(t, "redlock: no answer within the node timeout of 100ms "+want, v.Err.Error())
	}
	require.Contains(t, msg, want)
	require.NotContains(t, qe.Stats.Nodes[1].Err.Error(), "last error", "node 1 never failed so")

	// An answer without an error clears it, and so does an error reply:
	// the node is reachable. Another timeout does not.
	te := &timeoutError{after: time.Second}
	for _, answer := range []reply{{i: 0}, {i: 0, err: &redisErr{"ERR disk on fire"}}} {
		c.faults.failed(0, refused)
		c.faults.seen(reply{i: 0, err: te})
		require.ErrorIs(t, c.faults.explain(0, te), syscall.ECONNREFUSED)
		c.faults.seen(answer)
		require.Same(t, ErrInFlight, c.faults.explain(0, ErrInFlight), "after %v", answer.err)
		require.Same(t, error(te), c.faults.explain(0, te), "after %v", answer.err)
	}
}

// A healthy conflict does not list the nodes that were not waited for:
// every conflict has some. Stats still has them.
func TestMessageLeavesOutNotWaited(t *testing.T) {
	ms, cs := minis(t, 5)
	for _, m := range ms {
		require.NoError(t, m.Set("busy", "someone"))
	}
	c := newClient(t, cs)
	for range 5 {
		_, err := c.TryLock(t.Context(), "busy")
		msg := onePrefix(t, err)
		require.NotContains(t, msg, "not waited", msg)
		require.NotContains(t, msg, "unavailable", msg)
		require.Contains(t, msg, "taken: nodes ", msg)
	}
}

// A conflict names the holder's label, when it has one, in the error of
// TryLock and of a Lock that waited; NodeVote.Holder has it.
func TestMessageNamesHolder(t *testing.T) {
	srv, cs := realNodes(t, 5)
	holder := newClient(t, cs)
	c := realClients(t, srv, 1)[0]
	l, err := holder.Lock(t.Context(), "labelled", WithLabel("host:1234"), WithTTL(time.Minute))
	require.NoError(t, err)
	realEventually(t, srv, "labelled", l.Token())
	ml, err := holder.LockMulti(t.Context(), []string{"multi-a", "multi-b"}, WithLabel("batch job"), WithTTL(time.Minute))
	require.NoError(t, err)
	realEventually(t, srv, "multi-b", ml.Token())
	unl, err := holder.Lock(t.Context(), "unlabelled", WithTTL(time.Minute))
	require.NoError(t, err)
	realEventually(t, srv, "unlabelled", unl.Token())

	_, err = c.TryLock(t.Context(), "labelled")
	msg := onePrefix(t, err)
	require.Contains(t, msg, `, held by "host:1234"`, msg)
	require.NotErrorIs(t, err, ErrUnavailable)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	for _, v := range qe.Stats.Nodes {
		if v.Vote == VoteNo {
			require.Equal(t, "host:1234", v.Holder, "node %d", v.Index)
		} else {
			require.Empty(t, v.Holder, "node %d: %v", v.Index, v.Vote)
		}
	}
	require.Equal(t, 1, strings.Count(msg, "held by"), msg)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "labelled")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, onePrefix(t, err), `held by "host:1234"`)

	_, err = c.TryLockMulti(t.Context(), []string{"multi-b", "multi-c"})
	require.Contains(t, onePrefix(t, err), `held by "batch job"`)

	_, err = c.TryLock(t.Context(), "unlabelled")
	require.NotContains(t, onePrefix(t, err), "held by")
}

// A semaphore whose quorum needs more nodes than answer says so.
func TestSemaphoreSaysItNeedsMoreNodes(t *testing.T) {
	srv, cs := realNodes(t, 5)
	srv[4].Kill()
	c := newClient(t, cs, WithNodeTimeout(200*time.Millisecond))
	for _, tc := range []struct {
		permits int
		ok      bool
		want    string
	}{
		{1, true, ""},
		{2, true, ""},
		{4, false, "unavailable: too few nodes answered for a quorum (a semaphore of 4 permits needs 5 of 5 nodes; only 4 answered)"},
	} {
		s, err := c.Semaphore("sem-"+strconv.Itoa(tc.permits), tc.permits)
		require.NoError(t, err)
		l, err := s.TryAcquire(t.Context())
		if tc.ok {
			require.NoError(t, err, "%d permits", tc.permits)
			require.NoError(t, l.Unlock(t.Context()))
			continue
		}
		msg := onePrefix(t, err)
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.Contains(t, msg, tc.want, msg)
	}
	srv[3].Kill()
	s, err := c.Semaphore("sem-2-down", 2)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, onePrefix(t, err), "a semaphore of 2 permits needs 4 of 5 nodes; only 3 answered")
}

// A lock's message has no semaphore wording.
func TestLockMessageHasNoSemaphoreWording(t *testing.T) {
	srv, cs := realNodes(t, 3)
	for _, s := range srv[:2] {
		s.Kill()
	}
	c := newClient(t, cs, WithNodeTimeout(200*time.Millisecond))
	_, err := c.TryLock(t.Context(), "plain")
	msg := onePrefix(t, err)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, msg, `redlock: not acquired: lock "plain": unavailable: too few nodes answered for a quorum: 1/3 yes (quorum 2)`, msg)
	require.Equal(t, 1, strings.Count(msg, "too few nodes answered"), msg)
	require.NotContains(t, msg, "semaphore", msg)
}
