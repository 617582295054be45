package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis's pool retries a failed dial from a goroutine of its own,
	// which sees the pool closed only after its next second of sleep: a
	// client closed just before the end of the run leaves it for up to a
	// second, past goleak's retries.
	goleak.VerifyTestMain(partitionSwept{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// minis starts n miniredis nodes and a default go-redis client for each.
func minis(t *testing.T, n int, hooks ...redis.Hook) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: ms[i].Addr()})
		for _, h := range hooks {
			rc.AddHook(h)
		}
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return ms, cs
}

// eventually waits until key holds want on every node, or is missing
// everywhere when want is "". A round ends at its quorum, so the slower
// nodes may still be applying the request when the call returns.
func eventually(t *testing.T, ms []*miniredis.Miniredis, key, want string) {
	t.Helper()
	for i, m := range ms {
		require.Eventually(t, func() bool {
			got, err := m.Get(key)
			if want == "" {
				return errors.Is(err, miniredis.ErrKeyNotFound)
			}
			return got == want
		}, 5*time.Second, time.Millisecond, "node %d: key %q never became %q", i, key, want)
	}
}

// newClient builds a Client on cs and closes it when the test ends. Unless
// the test sets it, or its TTL is too short for it, the node timeout is a
// patient second: the race detector on a loaded machine can make a healthy
// node miss the default, and most tests are not about slow nodes.
func newClient(t testing.TB, cs []redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(cs, append([]Option{WithNodeTimeout(time.Second)}, opts...)...)
	if errors.Is(err, ErrInvalidOption) {
		c, err = New(cs, opts...)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNewRejectsBadInput(t *testing.T) {
	_, cs := minis(t, 3)
	var nilClient *redis.Client
	sameServer := redis.NewClient(&redis.Options{Addr: cs[0].(*redis.Client).Options().Addr})
	t.Cleanup(func() { _ = sameServer.Close() })
	cases := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes given"},
		{"nil node", []redis.UniversalClient{cs[0], nil, cs[2]}, nil, "node 1 is nil"},
		{"typed nil node", []redis.UniversalClient{cs[0], nilClient}, nil, "node 1 is nil"},
		{"same client twice", []redis.UniversalClient{cs[0], cs[1], cs[0]}, nil, "node 2 is the same client as node 0"},
		{"same server twice", []redis.UniversalClient{cs[0], cs[1], sameServer}, nil, "node 2 points at the same server as node 0"},
		{"zero ttl", cs, []Option{WithTTL(0)}, "ttl must be positive, got 0s"},
		{"negative ttl", cs, []Option{WithTTL(-time.Second)}, "ttl must be positive, got -1s"},
		{"sub-ms ttl", cs, []Option{WithTTL(time.Microsecond)}, "ttl must be at least 1ms"},
		{"ttl eaten by drift", cs, []Option{WithTTL(2 * time.Millisecond)}, "leaves no validity after clock drift"},
		{"ttl eaten by node timeout", cs, []Option{WithTTL(100 * time.Millisecond), WithNodeTimeout(98 * time.Millisecond)}, "leaves no validity"},
		{"negative drift", cs, []Option{WithDriftFactor(-0.1)}, "drift factor must be in [0, 0.5), got -0.1"},
		{"drift of one half", cs, []Option{WithDriftFactor(0.5)}, "drift factor must be in [0, 0.5), got 0.5"},
		{"NaN drift", cs, []Option{WithDriftFactor(math.NaN())}, "drift factor must be in [0, 0.5), got NaN"},
		{"negative node timeout", cs, []Option{WithNodeTimeout(-time.Millisecond)}, "node timeout must not be negative"},
		{"retry min above max", cs, []Option{WithRetryDelay(time.Second, time.Millisecond)}, "retry delay must satisfy"},
		{"negative retry", cs, []Option{WithRetryDelay(-time.Millisecond, time.Millisecond)}, "retry delay must satisfy"},
		{"zero retry", cs, []Option{WithRetryDelay(0, 0)}, "retry delay must satisfy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.nodes, tc.opts...)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBadCallOptionsAndKey(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs)
	_, err := c.TryLock(t.Context(), "")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "key must not be empty")
	_, err = c.Lock(t.Context(), "bad-opts", WithTTL(-1))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "ttl must be positive")
	for _, m := range ms {
		require.Empty(t, m.Keys(), "a rejected call must not touch the nodes")
	}
}

func TestQuorumIsMajorityOfConfigured(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4, 9: 5} {
		_, cs := minis(t, n)
		c := newClient(t, cs)
		require.Equal(t, want, c.Quorum(), "N=%d: got quorum %d, want %d", n, c.Quorum(), want)
	}
}

// TestEveryPatternOfFailedAndTakenNodes runs TryLock for each of the 3^5
// ways five nodes can be free, taken by another token, or failing, and checks
// the decision, the votes, the error, and what is left on the nodes.
func TestEveryPatternOfFailedAndTakenNodes(t *testing.T) {
	const n = 5
	ms, cs := minis(t, n)
	c := newClient(t, cs, WithNodeTimeout(time.Second))
	const (
		free = iota
		taken
		failed
	)
	patterns := 1
	for range n {
		patterns *= 3
	}
	for p := range patterns {
		state := make([]int, n)
		for i, x := 0, p; i < n; i, x = i+1, x/3 {
			state[i] = x % 3
		}
		key := fmt.Sprintf("pattern-%d", p)
		wantYes, wantNo, wantFailed := 0, 0, 0
		for i, s := range state {
			ms[i].SetError("")
			switch s {
			case free:
				wantYes++
			case taken:
				wantNo++
				require.NoError(t, ms[i].Set(key, "someone-else"))
			case failed:
				wantFailed++
				ms[i].SetError("ERR injected failure")
			}
		}
		name := fmt.Sprintf("pattern %v", state)
		l, err := c.TryLock(t.Context(), key)
		for i := range ms {
			ms[i].SetError("")
		}
		if wantYes >= 3 {
			require.NoError(t, err, name)
			st := l.Stats()
			// The round stops at the quorum: later answers may be missing.
			require.GreaterOrEqual(t, st.Yes, 3, name)
			var freeNodes []*miniredis.Miniredis
			for i, s := range state {
				if s == free {
					freeNodes = append(freeNodes, ms[i])
				}
			}
			eventually(t, freeNodes, key, l.Token())
			require.NoError(t, l.Unlock(t.Context()), name)
			eventually(t, freeNodes, key, "")
		} else {
			require.ErrorIs(t, err, ErrNotAcquired, name)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe, name)
			st := qe.Stats
			require.Less(t, st.Yes, 3, name)
			require.Len(t, st.Nodes, n, name)
			// Each vote that was gathered must match the node's state.
			for i, v := range st.Nodes {
				if v.Vote == VoteNotWaited || (v.Vote == VoteFailed && errors.Is(v.Err, ErrNodeTimeout)) {
					continue
				}
				want := map[int]Vote{free: VoteYes, taken: VoteNo, failed: VoteFailed}[state[i]]
				require.Equal(t, want, v.Vote, "%s: node %d voted %v, want %v", name, i, v.Vote, want)
				if v.Vote == VoteFailed {
					var ne *NodeError
					require.ErrorAs(t, err, &ne, name)
					require.Contains(t, err.Error(), "injected failure", name)
					require.Contains(t, err.Error(), ms[i].Addr(), name)
				}
			}
		}
		// Nothing of ours is left behind, and another holder's key is
		// never touched. A failed attempt rolls back the nodes that had not
		// answered when it was decided as soon as they answer.
		for i, s := range state {
			if s == taken {
				got, _ := ms[i].Get(key)
				require.Equal(t, "someone-else", got, "%s: node %d", name, i)
			} else {
				eventually(t, ms[i:i+1], key, "")
			}
		}
	}
}

func TestDriftAndValidityArithmetic(t *testing.T) {
	require.Equal(t, 102*time.Millisecond, clockDrift(10*time.Second, 0.01))
	require.Equal(t, 2*time.Millisecond, clockDrift(10*time.Second, 0))
	require.Equal(t, 12*time.Millisecond, clockDrift(time.Second, 0.01))
	require.Equal(t, 10*time.Second-300*time.Millisecond-102*time.Millisecond,
		validity(10*time.Second, 300*time.Millisecond, 102*time.Millisecond))
	require.Equal(t, 100*time.Millisecond, defaultNodeTimeout(10*time.Second))
	require.Equal(t, 10*time.Millisecond, defaultNodeTimeout(100*time.Millisecond))
	require.Equal(t, 2*time.Millisecond, defaultNodeTimeout(5*time.Millisecond))
}

// steppedClock reads the real time until armed; once armed, it returns t0
// on its next reading and t0+step on every later one, so that the next
// round's elapsed time is exactly step.
type steppedClock struct {
	mu    sync.Mutex
	armed bool
	step  time.Duration
	t0    time.Time
}

func (s *steppedClock) arm(step time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.step, s.t0 = true, step, time.Time{}
}

func (s *steppedClock) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.armed:
		return time.Now()
	case s.t0.IsZero():
		s.t0 = time.Now()
		return s.t0
	}
	return s.t0.Add(s.step)
}

// start returns the reading the armed clock gave first.
func (s *steppedClock) start() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t0
}

func TestValidityDecidesTheAcquisition(t *testing.T) {
	const ttl = 10 * time.Second
	drift := clockDrift(ttl, DefaultDriftFactor) // 102ms
	cases := []struct {
		elapsed time.Duration
		won     bool
	}{
		{time.Second, true},
		{ttl - drift - time.Millisecond, true},
		{ttl - drift, false}, // validity 0 is not enough
		{ttl, false},
	}
	for _, tc := range cases {
		t.Run(tc.elapsed.String(), func(t *testing.T) {
			ms, cs := minis(t, 5)
			clk := &steppedClock{}
			clk.arm(tc.elapsed)
			c, err := New(cs)
			require.NoError(t, err)
			c.now = clk.now
			t.Cleanup(func() { _ = c.Close() })
			l, err := c.TryLock(t.Context(), "validity")
			if !tc.won {
				require.ErrorIs(t, err, ErrNotAcquired)
				var qe *QuorumError
				require.ErrorAs(t, err, &qe)
				require.Equal(t, "no validity left", qe.Reason)
				require.Equal(t, tc.elapsed, qe.Stats.Elapsed)
				require.Equal(t, ttl-tc.elapsed-drift, qe.Stats.Validity)
				eventually(t, ms, "validity", "")
				return
			}
			require.NoError(t, err)
			st := l.Stats()
			require.Equal(t, tc.elapsed, st.Elapsed)
			require.Equal(t, drift, st.Drift)
			require.Equal(t, ttl-tc.elapsed-drift, st.Validity)
			// Until counts from the start of the round: start + ttl - drift.
			require.Equal(t, clk.start().Add(ttl-drift), l.Until())
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

// gate is a go-redis hook that lets the commands it matches through to the
// server but holds their replies until the gate opens: a node that is slow
// to answer one kind of request.
type gate struct {
	match   func(redis.Cmder) bool
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int32 // replies held so far
}

// newGate holds the replies of every command named cmd.
func newGate(cmd string) *gate {
	return &gate{match: func(c redis.Cmder) bool { return c.Name() == cmd }, open: make(chan struct{})}
}

// release opens the gate; it may be called more than once.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if g.match(cmd) {
				g.waiting.Add(1)
				<-g.open
				break
			}
		}
		return err
	}
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if g.match(cmd) {
			g.waiting.Add(1)
			<-g.open
		}
		return err
	}
}

// slowNodes returns five miniredis nodes whose last `slow` ones hold the
// replies of cmd until the gate opens. The caller must open it before
// Client.Close, which waits for the held requests: register g.release with
// t.Cleanup after newClient.
func slowNodes(t *testing.T, slow int, cmd string) ([]*miniredis.Miniredis, []redis.UniversalClient, *gate) {
	t.Helper()
	g := newGate(cmd)
	fast, fcs := minis(t, 5-slow)
	sl, scs := minis(t, slow, g)
	return append(fast, sl...), append(fcs, scs...), g
}

func TestDecidesAtQuorumAndRemembersLateYes(t *testing.T) {
	ms, cs, g := slowNodes(t, 2, "set")
	c := newClient(t, cs, WithNodeTimeout(5*time.Second))
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "early")
	require.NoError(t, err)
	// TryLock returned while two nodes were still holding their replies.
	st := l.Stats()
	require.Equal(t, 3, st.Yes)
	for _, i := range []int{3, 4} {
		require.Equal(t, VoteNotWaited, st.Nodes[i].Vote, "node %d", i)
		require.ErrorIs(t, st.Nodes[i].Err, ErrNoAnswer, "node %d", i)
	}
	require.Equal(t, 2, st.NotWaited)
	require.Zero(t, st.Failed, "nodes not waited for are not failures")
	g.release()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !slices.Contains(l.held, false)
	}, 5*time.Second, time.Millisecond, "late yes votes were not remembered")
	eventually(t, ms, "early", l.Token())
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "early", "")
}

func TestLateYesAfterFailureIsRolledBack(t *testing.T) {
	// Three nodes are slow to answer; the caller gives up first.
	ms, cs, g := slowNodes(t, 3, "set")
	c := newClient(t, cs, WithNodeTimeout(5*time.Second))
	t.Cleanup(g.release)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// The SETs have landed on the slow nodes before we cancel.
		for !ms[2].Exists("late") || !ms[3].Exists("late") || !ms[4].Exists("late") {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := c.TryLock(ctx, "late")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	// The fast nodes are rolled back at once (before TryLock returns when
	// their answers were in; as they come, otherwise).
	eventually(t, ms[:2], "late", "")
	for _, m := range ms[2:] {
		require.True(t, m.Exists("late"), "a slow node's SET is still unanswered")
	}
	g.release()
	for i, m := range ms {
		require.Eventually(t, func() bool { return !m.Exists("late") }, 5*time.Second, time.Millisecond,
			"node %d: a yes that came after the decision was left behind", i)
	}
}

func TestRollbackReachesNodesThatErrored(t *testing.T) {
	// A node whose SET landed but whose reply was lost looks failed: the
	// rollback must go there too. Nodes 0 and 1 are taken and slow, so the
	// attempt is decided by the three failures.
	g := newGate("set")
	slow, scs := minis(t, 2, g)
	dropping, dcs := minis(t, 3, dropReply{})
	ms, cs := append(slow, dropping...), append(scs, dcs...)
	c := newClient(t, cs, WithNodeTimeout(5*time.Second))
	t.Cleanup(g.release)
	for _, m := range slow {
		require.NoError(t, m.Set("dropped", "someone-else"))
	}
	_, err := c.TryLock(t.Context(), "dropped")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, errReplyDropped)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	dropped := 0
	for _, e := range qe.Unwrap() {
		var ne *NodeError
		if errors.As(e, &ne) && errors.Is(ne, errReplyDropped) {
			require.Equal(t, ms[ne.Index].Addr(), ne.Addr)
			require.GreaterOrEqual(t, ne.Index, 2)
			dropped++
		}
	}
	require.Equal(t, 3, dropped, "got %d node errors for the dropped replies, want 3", dropped)
	for i, m := range dropping {
		require.False(t, m.Exists("dropped"), "node %d kept our key", i+2)
	}
	for _, m := range slow {
		got, _ := m.Get("dropped")
		require.Equal(t, "someone-else", got)
	}
}

var errReplyDropped = errors.New("reply dropped")

// setTook reports whether a SET command took the key: SET NX answers true,
// SET NX GET answers nil.
func setTook(cmd redis.Cmder, err error) bool {
	switch v := cmd.(type) {
	case *redis.BoolCmd:
		return err == nil && v.Val()
	case *redis.Cmd:
		// SET NX answers OK when it took the key; SET NX GET answers
		// nil.
		return errors.Is(err, redis.Nil) || (err == nil && v.Val() == "OK")
	}
	return false
}

// dropReply lets SET through to the server but reports an error, as a
// connection reset after the write would.
type dropReply struct{}

func (dropReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (dropReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "set" && setTook(cmd, cmd.Err()) {
				cmd.SetErr(errReplyDropped)
				err = errReplyDropped
			}
		}
		return err
	}
}
func (dropReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "set" && setTook(cmd, err) {
			cmd.SetErr(errReplyDropped)
			return errReplyDropped
		}
		return err
	}
}

func TestNodeTimeoutIsEnforcedByTheLibrary(t *testing.T) {
	// The go-redis clients ignore ctx deadlines on reads (the default), and
	// three nodes never answer in time: the attempt must still end at the
	// node timeout, not at go-redis's ReadTimeout.
	ms, cs, g := slowNodes(t, 3, "set")
	c := newClient(t, cs, WithNodeTimeout(20*time.Millisecond))
	t.Cleanup(g.release)
	_, err := c.TryLock(t.Context(), "timeout")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrNodeTimeout)
	require.Contains(t, err.Error(), "no answer within the node timeout")
	g.release()
	for i, m := range ms {
		require.Eventually(t, func() bool { return !m.Exists("timeout") }, 5*time.Second, time.Millisecond, "node %d", i)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	holder, err := c.TryLock(t.Context(), "wait")
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), "wait")
	require.ErrorIs(t, err, ErrNotAcquired)

	got := make(chan *Lock)
	go func() {
		l, err := c.Lock(t.Context(), "wait")
		if err != nil {
			t.Errorf("Lock: got %v, want the lock", err)
		}
		got <- l
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, holder.Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	require.NotEqual(t, holder.Token(), l.Token(), "each acquisition has a fresh token")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestLockStopsWhenCtxEnds(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Millisecond, 2*time.Millisecond))
	holder, err := c.TryLock(t.Context(), "ctx")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "ctx")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Stats.Nodes, 5, "the last attempt's votes are kept")
	require.Less(t, qe.Stats.Yes, 3)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = c.Lock(ctx, "ctx")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	// The failed attempts left nothing of theirs: every node holds the
	// holder's token, or nothing (where a waiter's attempt beat the
	// holder's slower request and then rolled back).
	require.Eventually(t, func() bool {
		held := 0
		for _, m := range ms {
			got, err := m.Get("ctx")
			switch {
			case err == nil && got == holder.Token():
				held++
			case err == nil:
				return false
			}
		}
		return held >= 3
	}, 5*time.Second, time.Millisecond)
}

func TestLaterAttemptTakesOverEarlierLeftovers(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	tg := newTarget(plainFlavour, []string{"leftover"}, "acq", "", false, c.quorum)
	a := c.newAcquisition(&c.cfg, []string{"leftover"}, tg)
	a.made = 2 // the next attempt is attempt 2, which writes "acq.2"
	// Rollbacks of attempts 0 and 1 have not landed on nodes 0 and 1; a
	// late write of attempt 5 (of a future that cannot be, but shows the
	// rule) holds node 2: a later attempt's value is never taken over.
	require.NoError(t, ms[0].Set("leftover", "acq"))
	require.NoError(t, ms[1].Set("leftover", "acq.1"))
	require.NoError(t, ms[2].Set("leftover", "acq.5"))
	l, qerr := a.attempt(t.Context())
	require.Nil(t, qerr)
	require.Equal(t, "acq.2", l.Token())
	st := l.Stats()
	// The round may be decided before node 2 answers; it must never say yes.
	require.NotEqual(t, VoteYes, st.Nodes[2].Vote, "got yes on the node that holds a later attempt's value, want no")
	eventually(t, []*miniredis.Miniredis{ms[0], ms[1], ms[3], ms[4]}, "leftover", "acq.2")
	require.Eventually(t, func() bool { return ms[0].TTL("leftover") == DefaultTTL }, 5*time.Second, time.Millisecond,
		"the leftover's TTL is refreshed")
	got, _ := ms[2].Get("leftover")
	require.Equal(t, "acq.5", got)
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, []*miniredis.Miniredis{ms[0], ms[1], ms[3], ms[4]}, "leftover", "")
}

func countPending(s Stats) int {
	n := 0
	for _, v := range s.Nodes {
		if errors.Is(v.Err, ErrNoAnswer) {
			n++
		}
	}
	return n
}

func TestUnlockNeverTouchesAnotherHolder(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "mine")
	require.NoError(t, err)
	// Our lock expired everywhere, and someone else took it on all but one node.
	for _, m := range ms[:4] {
		require.NoError(t, m.Set("mine", "new-holder"))
		m.SetTTL("mine", time.Minute)
	}
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.Contains(t, err.Error(), "not holding our token: nodes ")
	for _, m := range ms[:4] {
		require.Equal(t, time.Minute, m.TTL("mine"), "Extend changed another holder's TTL")
	}
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.LessOrEqual(t, qe.Stats.Yes, 1)
	eventually(t, ms[4:], "mine", "")
	eventually(t, ms[:4], "mine", "new-holder")
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld, "a second Unlock")
}

func TestExtend(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Second))
	l, err := c.TryLock(t.Context(), "extend")
	require.NoError(t, err)
	eventually(t, ms, "extend", l.Token())
	for _, m := range ms {
		m.FastForward(600 * time.Millisecond)
	}
	before := l.Until()
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	require.True(t, l.Until().After(before), "got Until %v, want after %v", l.Until(), before)
	st := l.Stats()
	require.Equal(t, OpExtend, st.Op)
	for i, m := range ms {
		require.Eventually(t, func() bool { return m.TTL("extend") == time.Second }, 5*time.Second, time.Millisecond, "node %d", i)
	}
	// A key that is gone is not re-created.
	ms[0].Del("extend")
	ms[1].Del("extend")
	ms[2].Del("extend")
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.False(t, ms[0].Exists("extend"))
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld, "Extend after Unlock")
}

func TestExtendRefusesAfterUntil(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(100*time.Millisecond), WithNodeTimeout(50*time.Millisecond))
	l, err := c.TryLock(t.Context(), "expired")
	require.NoError(t, err)
	eventually(t, ms, "expired", l.Token())
	time.Sleep(time.Until(l.Until()) + time.Millisecond)
	err = l.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	require.Contains(t, err.Error(), "validity ended")
	// The nodes were not asked: miniredis time stood still, so our keys are
	// still there with their first TTL.
	for _, m := range ms {
		require.Equal(t, 100*time.Millisecond, m.TTL("expired"))
	}
	require.NoError(t, l.Unlock(t.Context()))
}

func TestExtendRecomputesUntilFromItsStart(t *testing.T) {
	_, cs := minis(t, 5)
	clk := &steppedClock{}
	c, err := New(cs)
	require.NoError(t, err)
	c.now = clk.now
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryLock(t.Context(), "until")
	require.NoError(t, err)
	clk.arm(3 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context()))
	require.Equal(t, clk.start().Add(DefaultTTL-clockDrift(DefaultTTL, DefaultDriftFactor)), l.Until())
	require.NoError(t, l.Unlock(t.Context()))
}

func TestPerCallOptionsOverrideDefaults(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Minute), WithKeyPrefix("app:"))
	l, err := c.TryLock(t.Context(), "opts", WithTTL(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, "opts", l.Key())
	eventually(t, ms, "app:opts", l.Token())
	for _, m := range ms {
		require.Equal(t, 3*time.Second, m.TTL("app:opts"))
	}
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "app:opts", "")
	l, err = c.TryLock(t.Context(), "opts")
	require.NoError(t, err)
	eventually(t, ms, "app:opts", l.Token())
	require.Equal(t, time.Minute, ms[0].TTL("app:opts"), "the default is unchanged")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestRedsyncWireLayout checks that we and a client using redsync's layout
// (SET key value NX PX ttl, and its compare-and-delete script) exclude each
// other on the same keys.
func TestRedsyncWireLayout(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	const redsyncDelete = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`
	redsyncLock := func(key, value string) int {
		n := 0
		for _, rc := range cs {
			ok, err := rc.SetNX(t.Context(), key, value, 8*time.Second).Result()
			require.NoError(t, err)
			if ok {
				n++
			}
		}
		return n
	}
	redsyncUnlock := func(key, value string) {
		for _, rc := range cs {
			require.NoError(t, rc.Eval(t.Context(), redsyncDelete, []string{key}, value).Err())
		}
	}

	// Our lock is a plain string holding the token, with the TTL in ms.
	l, err := c.TryLock(t.Context(), "shared")
	require.NoError(t, err)
	eventually(t, ms, "shared", l.Token())
	for _, m := range ms {
		require.Equal(t, DefaultTTL, m.TTL("shared"))
	}
	require.Zero(t, redsyncLock("shared", "redsync-value"), "redsync took a key we hold")
	redsyncUnlock("shared", "redsync-value")
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "shared", "")

	// A key that redsync holds blocks us.
	require.Equal(t, 5, redsyncLock("shared", "redsync-value"))
	_, err = c.TryLock(t.Context(), "shared")
	require.ErrorIs(t, err, ErrNotAcquired)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Zero(t, qe.Stats.Yes)
	require.GreaterOrEqual(t, qe.Stats.No, 3)
	redsyncUnlock("shared", "redsync-value")
	l, err = c.TryLock(t.Context(), "shared")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
}

func TestErrorNamesEachNode(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	require.NoError(t, ms[0].Set("named", "other"))
	require.NoError(t, ms[1].Set("named", "other"))
	ms[2].SetError("ERR disk on fire")
	closedAddr := ms[3].Addr()
	ms[3].Close()
	_, err := c.TryLock(t.Context(), "named")
	require.ErrorIs(t, err, ErrNotAcquired)
	msg := err.Error()
	for _, want := range []string{`lock "named"`, "quorum 3", "taken: nodes 0,1", "node 2 (" + ms[2].Addr() + ") failed: ERR disk on fire"} {
		require.Contains(t, msg, want)
	}
	// The closed node failed, or the round was decided (two nos and a
	// failure) before its dial failed.
	if !strings.Contains(msg, "node 3 ("+closedAddr+") failed") {
		require.Regexp(t, `not waited for: nodes (\d,)*3`, msg)
	}
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Index == 2 || ne.Index == 3, "got node %d", ne.Index)
	eventually(t, ms[4:], "named", "")
}

func TestConcurrentClientsNeverOverlap(t *testing.T) {
	_, cs := minis(t, 5)
	var clients []*Client
	for range 3 {
		// Each Client has its own go-redis clients, as separate processes would.
		own := make([]redis.UniversalClient, len(cs))
		for i, rc := range cs {
			own[i] = redis.NewClient(&redis.Options{Addr: rc.(*redis.Client).Options().Addr})
			t.Cleanup(func() { _ = own[i].Close() })
		}
		clients = append(clients, newClient(t, own, WithRetryDelay(time.Millisecond, 3*time.Millisecond), WithNodeTimeout(time.Second)))
	}
	var (
		mu      sync.Mutex
		holding int
		total   int
	)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					l, err := c.Lock(t.Context(), "contended")
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					mu.Lock()
					holding++
					total++
					if holding != 1 {
						t.Errorf("got %d holders, want 1", holding)
					}
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
					mu.Lock()
					holding--
					mu.Unlock()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	require.Equal(t, 3*4*10, total)
}

func TestCloseStopsWaitersAndRejectsCalls(t *testing.T) {
	_, cs := minis(t, 3)
	c, err := New(cs)
	require.NoError(t, err)
	holder, err := c.TryLock(t.Context(), "close")
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := c.Lock(t.Context(), "close")
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Close())
	err = <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.TryLock(t.Context(), "close")
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, holder.Unlock(t.Context()), ErrClosed)
}

func TestQuorumErrorUnwrapsOnlyWhatHappened(t *testing.T) {
	e := &QuorumError{Stats: Stats{Op: OpLock, Key: "k", Quorum: 3}, sentinel: ErrNotAcquired}
	require.ErrorIs(t, e, ErrNotAcquired)
	require.NotErrorIs(t, e, ErrNotHeld)
	require.NotErrorIs(t, e, context.Canceled)
	require.True(t, strings.HasPrefix(e.Error(), "redlock: not acquired: lock \"k\""), e.Error())
}

// After a failed attempt, the wait adds a draw in [0, the attempt's
// duration]: on a machine where attempts outlast the retry delay's range,
// contenders' attempts would otherwise collide again and again.
func TestRetrySpreadCoversTheAttempt(t *testing.T) {
	require.Zero(t, spread(0))
	require.Zero(t, spread(-time.Millisecond))
	const took = 10 * time.Millisecond
	low, high := 0, 0
	for range 1000 {
		d := spread(took)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, took)
		if d < took/2 {
			low++
		} else {
			high++
		}
	}
	// Uniform: each half gets about 500 of 1000; 300 is far below.
	require.Greater(t, low, 300, "draws below half the attempt's duration")
	require.Greater(t, high, 300, "draws above half the attempt's duration")
}
