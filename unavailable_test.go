package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// acquireKind is one kind of acquisition, run on its own key.
type acquireKind struct {
	name string
	// waits is set for the kinds that wait for the lock: they get a ctx
	// with a deadline, and their error also matches it.
	waits bool
	run   func(ctx context.Context, c *Client, key string) error
}

// acquireKinds are every kind of acquisition. The semaphore has one permit
// here, so that its quorum is the lock's majority; TestSemaphoreSaysItNeedsMoreNodes
// covers the larger quorums.
var acquireKinds = []acquireKind{
	{"Lock", true, func(ctx context.Context, c *Client, k string) error { return held(c.Lock(ctx, k)) }},
	{"TryLock", false, func(ctx context.Context, c *Client, k string) error { return held(c.TryLock(ctx, k)) }},
	{"TryLock fenced", false, func(ctx context.Context, c *Client, k string) error {
		return held(c.TryLock(ctx, k, WithFencing(true)))
	}},
	{"TryLock owner", false, func(ctx context.Context, c *Client, k string) error {
		return held(c.TryLock(ctx, k, WithOwner("me")))
	}},
	{"LockMulti", true, func(ctx context.Context, c *Client, k string) error {
		return held(c.LockMulti(ctx, []string{k, k + "-2"}))
	}},
	{"TryLockMulti", false, func(ctx context.Context, c *Client, k string) error {
		return held(c.TryLockMulti(ctx, []string{k, k + "-2"}))
	}},
	{"RLock", true, func(ctx context.Context, c *Client, k string) error { return held(c.RLock(ctx, k)) }},
	{"TryRLock", false, func(ctx context.Context, c *Client, k string) error { return held(c.TryRLock(ctx, k)) }},
	{"Semaphore.Acquire", true, func(ctx context.Context, c *Client, k string) error {
		s, err := c.Semaphore(k, 1)
		if err != nil {
			return err
		}
		return held(s.Acquire(ctx))
	}},
	{"Semaphore.TryAcquire", false, func(ctx context.Context, c *Client, k string) error {
		s, err := c.Semaphore(k, 1)
		if err != nil {
			return err
		}
		return held(s.TryAcquire(ctx))
	}},
	{"Do", true, func(ctx context.Context, c *Client, k string) error {
		return c.Do(ctx, k, func(context.Context) error { return errors.New("fn ran without the lock") })
	}},
}

// held returns the error of an acquisition, and unlocks a lock that should
// not have been had.
func held(l *Lock, err error) error {
	if l != nil {
		_ = l.Unlock(context.Background())
		return errors.New("acquired, want a failure")
	}
	return err
}

// checkKinds runs every kind of acquisition on c, each on its own key
// (key, then its name), and requires ErrNotAcquired from each, and
// ErrUnavailable exactly when unavailable is set.
func checkKinds(t *testing.T, c *Client, key string, unavailable bool) {
	t.Helper()
	// At once: the waiting kinds each wait for their deadline.
	errs := make([]error, len(acquireKinds))
	var wg sync.WaitGroup
	for i, k := range acquireKinds {
		wg.Go(func() {
			ctx := t.Context()
			if k.waits {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 700*time.Millisecond)
				defer cancel()
			}
			errs[i] = k.run(ctx, c, key+"/"+k.name)
		})
	}
	wg.Wait()
	for i, k := range acquireKinds {
		err := errs[i]
		require.ErrorIs(t, err, ErrNotAcquired, "%s: %v", k.name, err)
		if unavailable {
			require.ErrorIs(t, err, ErrUnavailable, "%s: %v", k.name, err)
			require.Contains(t, err.Error(), "too few nodes answered for a quorum", k.name)
		} else {
			require.NotErrorIs(t, err, ErrUnavailable, "%s: %v", k.name, err)
			require.NotContains(t, err.Error(), "too few nodes answered", k.name)
		}
		if k.waits {
			require.ErrorIs(t, err, context.DeadlineExceeded, "%s: %v", k.name, err)
		}
	}
}

// outageClient is a Client on servers, with a short node timeout so that
// the down nodes' rounds end soon.
func outageClient(t *testing.T, cs []redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	return newClient(t, cs, append([]Option{WithNodeTimeout(200 * time.Millisecond), WithRetryDelay(20*time.Millisecond, 50*time.Millisecond)}, opts...)...)
}

// TestUnavailableWhenTooFewAnswer: with too few nodes answering for a
// quorum, whatever the reason, every kind of acquisition fails with an
// error that matches ErrUnavailable beside ErrNotAcquired.
func TestUnavailableWhenTooFewAnswer(t *testing.T) {
	t.Run("all down", func(t *testing.T) {
		srv, cs := realNodes(t, 5)
		for _, s := range srv {
			s.Kill()
		}
		checkKinds(t, outageClient(t, cs), "all-down", true)
	})
	t.Run("3 of 5 down", func(t *testing.T) {
		srv, cs := realNodes(t, 5)
		for _, s := range srv[:3] {
			s.Kill()
		}
		checkKinds(t, outageClient(t, cs), "three-down", true)
	})
	t.Run("wrong password", func(t *testing.T) {
		srv, _ := realNodes(t, 5)
		requirePass(t, srv, "secret")
		checkKinds(t, outageClient(t, passClients(t, srv, "wrong")), "wrong-password", true)
	})
	t.Run("quarantined", func(t *testing.T) {
		// Fresh servers have been up for less than the max TTL: the guard
		// counts none of their yes votes.
		_, cs := realNodes(t, 5)
		c := outageClient(t, cs, WithNodeGuard(true), WithTTL(time.Hour))
		_, err := c.TryLock(t.Context(), "quarantined")
		require.ErrorIs(t, err, ErrQuarantined)
		checkKinds(t, c, "quarantined", true)
	})
}

// TestAvailableWhenHeldElsewhere: with enough nodes answering, a key held
// elsewhere is contention, not an outage, even with some nodes down.
func TestAvailableWhenHeldElsewhere(t *testing.T) {
	for _, down := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d down", down), func(t *testing.T) {
			srv, cs := realNodes(t, 5)
			holder := newClient(t, cs)
			key := fmt.Sprintf("held-%d", down)
			for _, k := range acquireKinds {
				l, err := holder.LockMulti(t.Context(), []string{key + "/" + k.name, key + "/" + k.name + "-2"}, WithTTL(time.Minute))
				require.NoError(t, err)
				// Never unlocked: the keys die with the servers.
				// Every node holds the keys, the ones about to go down
				// too: none of them can give a yes.
				realEventually(t, srv, key+"/"+k.name, l.Token())
			}
			for _, s := range srv[5-down:] {
				s.Kill()
			}
			checkKinds(t, outageClient(t, ownClients(t, cs)), key, false)
		})
	}
}

// TestUnavailableLockWithDeadline: a Lock during an outage waits until its
// ctx ends, and its error says both: the ctx's, and the outage.
func TestUnavailableLockWithDeadline(t *testing.T) {
	srv, cs := realNodes(t, 5)
	for _, s := range srv {
		s.Kill()
	}
	c := outageClient(t, cs)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := c.Lock(ctx, "deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrUnavailable)
}

// TestUnavailableCutShort: a call whose ctx ends before any attempt was
// decided is judged by the attempt cut short: nodes that did not answer
// within the whole wait count as not answering.
func TestUnavailableCutShort(t *testing.T) {
	hung := func(t *testing.T, n int) []redis.UniversalClient {
		cs := make([]redis.UniversalClient, n)
		for i := range cs {
			rc := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: 2 * time.Second, MaxRetries: -1})
			t.Cleanup(func() { _ = rc.Close() })
			cs[i] = rc
		}
		return cs
	}
	t.Run("all hung", func(t *testing.T) {
		c := newClient(t, hung(t, 5), WithNodeTimeout(5*time.Second), WithTTL(time.Minute))
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, "cut")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		require.Equal(t, 5, qe.Stats.NotWaited, "the attempt was cut short: %v", err)
		require.ErrorIs(t, err, ErrUnavailable)
	})
	t.Run("three answered", func(t *testing.T) {
		// Two nodes hung; two hold the key, one gives it: no quorum yet,
		// but a quorum answered.
		_, live := realNodes(t, 3)
		for _, rc := range live[:2] {
			require.NoError(t, rc.Set(t.Context(), "cut-3", "other", time.Minute).Err())
		}
		c := newClient(t, append(live, hung(t, 2)...), WithNodeTimeout(5*time.Second), WithTTL(time.Minute))
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := c.TryLock(ctx, "cut-3")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		require.Equal(t, 2, qe.Stats.NotWaited, "%v", err)
		require.NotErrorIs(t, err, ErrUnavailable)
	})
}

// TestJudgeByLastDecidedAttempt: an attempt that the ctx cut short is
// judged as the call's last decided attempt, when there is one, whatever
// its own votes say.
func TestJudgeByLastDecidedAttempt(t *testing.T) {
	votes := func(vs ...Vote) *Stats {
		st := &Stats{Quorum: 3}
		for i, v := range vs {
			nv := NodeVote{Index: i, Vote: v}
			switch v {
			case VoteYes:
				st.Yes++
			case VoteNo:
				st.No++
			case VoteFailed:
				st.Failed++
				nv.Err = &timeoutError{after: time.Second}
			case VoteNotWaited:
				st.NotWaited++
				nv.Err = ErrNoAnswer
			}
			st.Nodes = append(st.Nodes, nv)
		}
		return st
	}
	y, n, f, w := VoteYes, VoteNo, VoteFailed, VoteNotWaited
	outageRound := votes(f, f, f, n, n) // decided: three failed
	conflict := votes(n, n, n, f, f)    // decided: three said no
	cutQuiet := votes(w, w, w, w, w)    // cut short, nobody answered
	cutBusy := votes(y, n, n, w, w)     // cut short, three answered
	quarantined := votes(f, f, f, y, w) // decided
	for i := range 3 {
		quarantined.Nodes[i].Err = ErrQuarantined
	}
	// Decided, but the failures answered: they refused for the key.
	refused := votes(f, f, f, y, n)
	refused.Nodes[0].Err = &redisErr{"WRONGTYPE Operation against a key holding the wrong kind of value"}
	refused.Nodes[1].Err = fmt.Errorf("%w: key is held with 2 permits", ErrPermitsMismatch)
	refused.Nodes[2].Err = ErrWrongType

	for _, tc := range []struct {
		name  string
		seq   []*Stats
		want  bool
		wants []bool // each attempt's verdict, when not all want
	}{
		{"outage", []*Stats{outageRound}, true, nil},
		{"conflict", []*Stats{conflict}, false, nil},
		{"quarantined", []*Stats{quarantined}, true, nil},
		{"refusals answered", []*Stats{refused}, false, nil},
		{"cut short alone, quiet", []*Stats{cutQuiet}, true, nil},
		{"cut short alone, answered", []*Stats{cutBusy}, false, nil},
		// A quorum answered the attempt cut short: the nodes are back, and
		// the key is held elsewhere (the adversarial review's finding 7).
		{"cut short after an outage, answered", []*Stats{outageRound, cutBusy}, false, []bool{true, false}},
		{"cut short after an outage, quiet", []*Stats{outageRound, cutQuiet}, true, []bool{true, true}},
		// One said taken, and the silent ones could make a quorum with it:
		// contention as far as anyone knows (finding 6).
		{"cut short, taken on one", []*Stats{votes(n, w, w, w, w)}, false, nil},
		{"cut short, taken on one, the rest failed", []*Stats{votes(n, f, f, f, w)}, true, nil},
		{"cut short after a conflict", []*Stats{conflict, cutQuiet}, false, []bool{false, false}},
		{"conflict, then outage", []*Stats{conflict, outageRound, cutQuiet}, true, []bool{false, true, true}},
		{"outage, then conflict", []*Stats{outageRound, conflict, cutQuiet}, false, []bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &acquisition{}
			var got bool
			for i, st := range tc.seq {
				got = a.judge(&QuorumError{Stats: *st})
				if tc.wants != nil {
					require.Equal(t, tc.wants[i], got, "attempt %d", i)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// redisErr is an error reply of Redis, as go-redis gives it.
type redisErr struct{ s string }

func (e *redisErr) Error() string { return e.s }
func (e *redisErr) RedisError()   {}

// requirePass sets a password on every server. redistest's readiness
// probe has none, so it is set once the servers are up.
func requirePass(t *testing.T, srv []*redistest.Server, pass string) {
	t.Helper()
	for _, s := range srv {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		require.NoError(t, rc.ConfigSet(t.Context(), "requirepass", pass).Err())
		require.NoError(t, rc.Close())
	}
}

// passClients returns a go-redis client per server, with the password.
func passClients(t *testing.T, srv []*redistest.Server, pass string) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: pass})
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return cs
}

// When the ctx cuts the last attempt short, the call's error is the last
// attempt that its votes decided, which names the failed nodes, with the
// ctx's error; an attempt cut short is reported only when none was decided.
func TestAbandonReportsDecidedAttempt(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	keys := []string{"abandon"}
	tg, err := c.target(keys, &c.cfg, plainFlavour)
	require.NoError(t, err)
	failed := func(i int) NodeVote {
		return NodeVote{Index: i, Vote: VoteFailed, Err: &redisErr{"WRONGPASS invalid username-password pair or user is disabled."}}
	}
	notWaited := func(i int) NodeVote { return NodeVote{Index: i, Vote: VoteNotWaited, Err: ErrNoAnswer} }
	dec := &QuorumError{Stats: Stats{Op: OpLock, Key: "abandon", Quorum: 2, Failed: 2, NotWaited: 1,
		Nodes: []NodeVote{failed(0), failed(1), notWaited(2)}}, sentinel: ErrNotAcquired}
	cut := func() *QuorumError {
		return &QuorumError{Stats: Stats{Op: OpLock, Key: "abandon", Quorum: 2, NotWaited: 3,
			Nodes: []NodeVote{notWaited(0), notWaited(1), notWaited(2)}}, sentinel: ErrNotAcquired}
	}

	a := c.newAcquisition(&c.cfg, keys, tg)
	dec.unavailable = a.judge(dec)
	last := cut()
	last.unavailable = a.judge(last)
	err = a.abandon(last, context.DeadlineExceeded)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, dec.Stats.Nodes, qe.Stats.Nodes, "the decided attempt's votes")
	require.NotSame(t, dec, qe, "the Observer was given the attempt's error: abandon writes on a copy")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), "WRONGPASS")

	// No decided attempt: the one cut short.
	a = c.newAcquisition(&c.cfg, keys, tg)
	last = cut()
	last.unavailable = a.judge(last)
	err = a.abandon(last, context.DeadlineExceeded)
	require.ErrorAs(t, err, &qe)
	require.Equal(t, last.Stats.Nodes, qe.Stats.Nodes)
	require.ErrorIs(t, err, ErrUnavailable)
}
