package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// TestExtendWithTTL: Extend takes WithTTL, as redislock's Refresh takes a
// TTL, uses it from then on, never shortens a key, and refuses any other
// option.
func TestExtendWithTTL(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Second), WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(t.Context(), "ext")
	require.NoError(t, err)
	ttlIs(t, ms, "ext", time.Second)

	require.NoError(t, l.Extend(t.Context(), WithTTL(5*time.Second)))
	ttlIs(t, ms, "ext", 5*time.Second)
	left := time.Until(l.Until())
	require.Greater(t, left, 4*time.Second, "Until must follow the new TTL")

	// A shorter TTL does not cut the key short, nor move Until back.
	until := l.Until()
	require.NoError(t, l.Extend(t.Context(), WithTTL(200*time.Millisecond)))
	// The nodes that answered the extension ran it: their keys keep 5s.
	yes := 0
	for _, v := range l.Stats().Nodes {
		if v.Vote == VoteYes {
			yes++
			require.Equal(t, 5*time.Second, ms[v.Index].TTL("ext"), "node %d: a shorter TTL must not shorten the key", v.Index)
		}
	}
	require.GreaterOrEqual(t, yes, 3)
	require.False(t, l.Until().Before(until), "Until moved back")

	// Extend without options keeps the last TTL given.
	for _, m := range ms {
		m.SetTTL("ext", 100*time.Millisecond)
	}
	require.NoError(t, l.Extend(t.Context()))
	ttlIs(t, ms, "ext", 200*time.Millisecond)

	for _, bad := range []struct {
		name string
		opt  ExtendOption
		want string
	}{
		{"negative ttl", WithTTL(-time.Second), "ttl must be positive"},
		{"ttl below the drift", WithTTL(time.Millisecond), "leaves no validity"},
	} {
		err := l.Extend(t.Context(), bad.opt)
		require.ErrorIs(t, err, ErrInvalidOption, bad.name)
		require.Contains(t, err.Error(), bad.want, bad.name)
	}
	require.NoError(t, l.Err(), "a refused option must leave the lock alone")
	require.NoError(t, l.Unlock(t.Context()))
}

// ttlIs waits until every node has key with the TTL want: a round returns
// at its quorum, before the slower nodes have answered.
func ttlIs(t *testing.T, ms []*miniredis.Miniredis, key string, want time.Duration) {
	t.Helper()
	for i, m := range ms {
		require.Eventually(t, func() bool { return m.TTL(key) == want }, 5*time.Second, time.Millisecond,
			"node %d: TTL of %q is %v, want %v", i, key, m.TTL(key), want)
	}
}

// TestExtendWithTTLIsCappedByMaxHold: a new TTL cannot carry the lock past
// its max hold.
func TestExtendWithTTLIsCappedByMaxHold(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(time.Second), WithMaxHold(2*time.Second), WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(t.Context(), "capped")
	require.NoError(t, err)
	require.NoError(t, l.Extend(t.Context(), WithTTL(time.Minute)))
	for i, m := range ms {
		require.LessOrEqual(t, m.TTL("capped"), 2*time.Second, "node %d", i)
	}
	require.LessOrEqual(t, time.Until(l.Until()), 2*time.Second)
	require.NoError(t, l.Unlock(t.Context()))
}

// TestExtendWithCancelledCtxIsNotNotHeld: an Extend that ctx ended before
// any node said no says ctx ended, not that the lock is lost, which the
// README's loop reads as "stop".
func TestExtendWithCancelledCtxIsNotNotHeld(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "ext-cancelled")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = l.Extend(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNotHeld)
	require.Equal(t, 1, strings.Count(err.Error(), "redlock:"), "one prefix: %v", err)
	require.NoError(t, l.Err(), "the lock is still held")
	require.NoError(t, l.Extend(t.Context()), "and can still be extended")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestUnlockWithCancelledCtxReleases: a deferred Unlock after the caller's
// ctx ended still frees the nodes, and says so.
func TestUnlockWithCancelledCtxReleases(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "unlock-cancelled")
	require.NoError(t, err)
	eventually(t, ms, "unlock-cancelled", l.Token())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, l.Unlock(ctx), "the release landed on every node")
	eventually(t, ms, "unlock-cancelled", "")
}

// TestAutoExtendThatCannotFitIsRefused: at a TTL of 5 ms a renewal cannot
// reach its quorum before the validity ends; New and the call say why.
func TestAutoExtendThatCannotFitIsRefused(t *testing.T) {
	_, cs := minis(t, 3)
	_, err := New(cs, WithTTL(5*time.Millisecond), WithAutoExtend(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "auto-extension cannot work at ttl 5ms")
	require.Contains(t, err.Error(), "use a TTL of at least")
	// The TTL it suggests works.
	msg := err.Error()
	at := strings.LastIndex(msg, "at least ")
	min, perr := time.ParseDuration(msg[at+len("at least "):])
	require.NoError(t, perr)
	c, err := New(cs, WithTTL(min), WithAutoExtend(true))
	require.NoError(t, err, "the suggested %v", min)
	require.NoError(t, c.Close())

	c = newClient(t, cs, WithNodeTimeout(0))
	_, err = c.TryLock(t.Context(), "auto-5ms", WithTTL(5*time.Millisecond), WithAutoExtend(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "auto-extension cannot work")
}

// TestErrorsHaveOnePrefix: an error that wraps another of ours reads
// "redlock: lock lost: ...", not "redlock: lock lost: redlock: ...".
func TestErrorsHaveOnePrefix(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithTTL(300*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
	l, err := c.TryLock(t.Context(), "prefix", WithAutoExtend(true))
	require.NoError(t, err)
	for _, m := range ms {
		m.Del("prefix")
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not found lost")
	}
	lost := l.Err()
	require.ErrorIs(t, lost, ErrLockLost)
	require.ErrorIs(t, lost, ErrNotHeld)
	require.Equal(t, 1, strings.Count(lost.Error(), "redlock:"), "%v", lost)
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.Equal(t, 1, strings.Count(err.Error(), "redlock:"), "%v", err)

	// A node's error inside a round's error loses its prefix too.
	for _, m := range ms[:2] {
		m.SetError("ERR boom")
	}
	_, err = c.TryLock(t.Context(), "prefix-2")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Equal(t, 1, strings.Count(err.Error(), "redlock:"), "%v", err)
	require.NotContains(t, err.Error(), "validity", "an attempt that never had a quorum has no validity to print: %v", err)
}

// TestWrongTypeIsNamed: a list at the lock key is named as a value of
// another type, for TryLock's SET NX and for Lock's later attempts.
func TestWrongTypeIsNamed(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	for _, m := range ms[:3] {
		_, err := m.Lpush("jobs", "a")
		require.NoError(t, err)
	}
	require.NoError(t, ms[3].Set("jobs", "someone-else"))
	// inFlight allows, for a Lock call cut short by its ctx, a node that
	// its last attempt did not ask, because a request of an earlier
	// attempt was still out (seen on a loaded machine): nothing names it.
	check := func(err error, inFlight bool) {
		t.Helper()
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, ErrWrongType)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		var named []string
		for i := range 3 {
			v := qe.Stats.Nodes[i]
			if inFlight && v.Vote == VoteFailed && errors.Is(v.Err, ErrInFlight) {
				continue
			}
			require.Equal(t, VoteNo, v.Vote, "node %d", i)
			require.ErrorIs(t, v.Err, ErrWrongType, "node %d", i)
			named = append(named, strconv.Itoa(i))
		}
		require.NotEmpty(t, named)
		require.Contains(t, err.Error(), "wrong type at the key (not a lock): nodes "+strings.Join(named, ","))
		require.NotErrorIs(t, qe.Stats.Nodes[3].Err, ErrWrongType, "a string is a lock: taken, not wrong type")
		require.Equal(t, 3-len(named), qe.Stats.Failed, "only nodes not asked may fail")
	}
	_, err := c.TryLock(t.Context(), "jobs")
	check(err, false)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "jobs")
	check(err, true)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// An owner lock's hash is a lock: taken, not wrong type.
	o, err := c.TryLock(t.Context(), "owned", WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "owned")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NotErrorIs(t, err, ErrWrongType)
	require.NoError(t, o.Unlock(t.Context()))
	for i, m := range ms[:3] {
		typ := m.Type("jobs")
		require.Equal(t, "list", typ, "node %d: the foreign list must be left alone", i)
	}
	eventually(t, []*miniredis.Miniredis{ms[4]}, "jobs", "")
}

// TestReadOnlyNodeIsLoggedOnce: a replica given as a node answers READONLY
// to every write; the Client logs it once at Warn.
func TestReadOnlyNodeIsLoggedOnce(t *testing.T) {
	redistest.Require(t)
	srv := redistest.StartN(t, 4, redistest.Options{})
	replica := srv[3].NewClient(t)
	host, port, _ := strings.Cut(srv[0].Addr(), ":")
	require.NoError(t, replica.Do(t.Context(), "replicaof", host, port).Err())
	cs := []redis.UniversalClient{srv[0].NewClient(t), srv[1].NewClient(t), replica}
	logs := &syncBuffer{}
	c := newClient(t, cs, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	for i := range 5 {
		l, err := c.TryLock(t.Context(), "ro")
		if err != nil {
			require.ErrorIs(t, err, ErrNotAcquired, "attempt %d", i)
			continue
		}
		st := l.Stats()
		if st.Nodes[2].Vote == VoteFailed {
			require.Contains(t, st.Nodes[2].Err.Error(), "READONLY", "attempt %d", i)
		}
		require.NoError(t, l.Unlock(t.Context()))
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "read-only replica") }, 5*time.Second, time.Millisecond, "log: %s", logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), "read-only replica"), "logged once: %s", logs.String())
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "read-only replica") {
			require.Contains(t, line, "level=WARN", "logged at Warn, not above or below: %s", line)
		}
	}
}

// TestRealWrongTypeIsNamed: on real redis-servers, a list at the key is
// named for TryLock's SET NX (through TYPE) and for Lock's later attempts,
// whose SET ... GET gets WRONGTYPE, and an owner lock's hash is not.
func TestRealWrongTypeIsNamed(t *testing.T) {
	redistest.Require(t)
	srv := redistest.StartN(t, 3, redistest.Options{})
	c := realClients(t, srv, 1, WithRetryDelay(time.Millisecond, 5*time.Millisecond))[0]
	for _, s := range srv[:2] {
		require.NoError(t, s.NewClient(t).RPush(t.Context(), "real-jobs", "a").Err())
	}
	_, err := c.TryLock(t.Context(), "real-jobs")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrWrongType)
	require.Contains(t, err.Error(), "wrong type at the key (not a lock): nodes 0,1")

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "real-jobs")
	require.ErrorIs(t, err, ErrWrongType)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Zero(t, qe.Stats.Failed, "WRONGTYPE is a no, not a failure: %v", err)

	o, err := c.TryLock(t.Context(), "real-owned", WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "real-owned")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NotErrorIs(t, err, ErrWrongType, "an owner lock is a lock")
	require.NoError(t, o.Unlock(t.Context()))
}

// TestBadLabelsAreRefused: a label is a short, printable description.
func TestBadLabelsAreRefused(t *testing.T) {
	_, cs := minis(t, 3)
	for _, bad := range []struct{ label, want string }{
		{strings.Repeat("x", MaxLabelLen+1), "longer than the 128 allowed"},
		{"job\n7", "control character"},
		{"\xff", "not valid UTF-8"},
	} {
		_, err := New(cs, WithLabel(bad.label))
		require.ErrorIs(t, err, ErrInvalidOption, "%q", bad.label)
		require.Contains(t, err.Error(), bad.want, "%q", bad.label)
	}
	c := newClient(t, cs)
	_, err := c.TryLock(t.Context(), "bad-label", WithLabel("a\tb"))
	require.ErrorIs(t, err, ErrInvalidOption)
	l, err := c.TryLock(t.Context(), "good-label", WithLabel(strings.Repeat("é", MaxLabelLen/2)))
	require.NoError(t, err, "128 bytes of UTF-8 are allowed")
	require.NoError(t, l.Unlock(t.Context()))
}
