package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

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

// errGaveUp is the error of a request that its client gave up on: a
// timeout, which neither go-redis nor the library sends again.
var errGaveUp = fmt.Errorf("gave up waiting (test): %w", context.DeadlineExceeded)

// lateRelease is a go-redis hook that, once armed, takes the next release
// the client sends, reports an error at once, as go-redis does when it gives
// up on a request, and delivers the request to the node only after delay:
// a request that arrives after its sender moved on. It delivers it through
// a client of its own (via), as the network would, whatever became of the
// connection the request was sent on.
type lateRelease struct {
	via    redis.UniversalClient
	delay  time.Duration
	armed  atomic.Bool
	onHold func() // runs as the release is held; may be nil
	held   atomic.Int32
	wg     sync.WaitGroup
}

func (h *lateRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hold(cmd) {
			return errGaveUp
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook holds the release when it goes in a pipeline, as the
// Client sends it, and sends the rest of the pipeline on.
func (h *lateRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := make([]redis.Cmder, 0, len(cmds))
		for _, cmd := range cmds {
			if !h.hold(cmd) {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return errGaveUp
		}
		return next(ctx, rest)
	}
}

// hold holds cmd when it is the armed release: it fails it at once with
// errGaveUp, and sends a copy after the delay.
func (h *lateRelease) hold(cmd redis.Cmder) bool {
	if !isRelease(cmd) || !h.armed.CompareAndSwap(true, false) {
		return false
	}
	late := redis.NewCmd(context.Background(), cmd.Args()...)
	h.held.Add(1)
	h.wg.Go(func() {
		time.Sleep(h.delay)
		_ = h.via.Process(context.Background(), late)
	})
	if h.onHold != nil {
		h.onHold()
	}
	cmd.SetErr(errGaveUp)
	return true
}

// TestLateRollbackCannotDeleteALaterAttemptsKey reproduces, on 3 nodes, the
// overlap a late rollback caused when every attempt of a Lock call wrote the
// same token. B holds nodes 0 and 2. A's attempt 0 wins node 1 only and
// rolls back there; that rollback "times out" at once but lands 300ms later.
// B frees node 2, and A's attempt 1 wins nodes 1 and 2. Then the late
// rollback lands, B frees node 0, and C tries the key while A is well
// within its validity. With a value per attempt the late rollback deletes
// nothing of attempt 1, and C fails; the control, one shared value, lets C
// in.
func TestLateRollbackCannotDeleteALaterAttemptsKey(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "value-per-attempt"
		if control {
			name = "control-shared-value"
		}
		t.Run(name, func(t *testing.T) {
			const key = "late-rollback"
			ms, csC := minis(t, 3)
			// The late release is an EVALSHA: the script must be there.
			loadScripts(t, csC)
			late := &lateRelease{via: csC[1], delay: 300 * time.Millisecond}
			t.Cleanup(late.wg.Wait)
			csA := make([]redis.UniversalClient, 3)
			for i, m := range ms {
				rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
				if i == 1 {
					rc.AddHook(late)
				}
				t.Cleanup(func() { _ = rc.Close() })
				csA[i] = rc
			}
			opts := []Option{WithTTL(3 * time.Second), WithNodeTimeout(500 * time.Millisecond),
				WithRetryDelay(50*time.Millisecond, 50*time.Millisecond), WithPubSub(false)}
			a := setHooks(newClient(t, csA, opts...), testHooks{sharedValue: control})
			c := newClient(t, csC, WithTTL(3*time.Second), WithNodeTimeout(500*time.Millisecond))

			for _, i := range []int{0, 2} {
				require.NoError(t, ms[i].Set(key, "B"))
				ms[i].SetTTL(key, time.Minute)
			}
			late.onHold = func() { ms[2].Del(key) } // B frees node 2
			late.armed.Store(true)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			l, err := a.Lock(ctx, key)
			require.NoError(t, err)
			require.EqualValues(t, 1, late.held.Load(), "got %d held rollbacks, want 1", late.held.Load())
			late.wg.Wait() // the late rollback has landed
			ms[0].Del(key) // B frees node 0

			lc, errC := c.TryLock(t.Context(), key)
			require.True(t, time.Now().Before(l.Until()), "A's validity ended during the test")
			require.NoError(t, l.Err())
			if control {
				require.NoError(t, errC, "the control must let C in while A holds the lock")
				require.NoError(t, lc.Unlock(t.Context()))
				_ = l.Unlock(t.Context())
				return
			}
			require.ErrorIs(t, errC, ErrNotAcquired, "got C holding the lock while A holds it until %v", l.Until())
			for _, i := range []int{1, 2} {
				got, _ := ms[i].Get(key)
				require.Equal(t, l.Token(), got, "node %d", i)
			}
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
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

// TestRetriedWritesAreRecognised loses one reply, so that go-redis sends the
// request again on a new connection after the node ran it. A retried SET
// finds our own value, and a retried release finds the key its first copy
// deleted: neither is a no. The control acquires with a plain SET NX and
// counts a release that finds the key gone as a no.
func TestRetriedWritesAreRecognised(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "recognised"
		if control {
			name = "control-unsafe-retries"
		}
		t.Run(name, func(t *testing.T) {
			ms, ps, cs := proxiedNodes(t, 3)
			c := setHooks(newClient(t, cs), testHooks{unsafeRetries: control})

			// Acquire: nodes 1 and 2 are taken, node 0 loses its reply.
			for _, m := range ms[1:] {
				require.NoError(t, m.Set("retried-set", "other"))
			}
			ps[0].LoseNext(1)
			_, err := c.TryLock(t.Context(), "retried-set")
			require.ErrorIs(t, err, ErrNotAcquired)
			// TryLock may decide on the two nos before node 0's reply
			// comes back to be lost.
			lostReplies(t, ps[0], 1)
			if control {
				require.True(t, ms[0].Exists("retried-set"), "the control must leave our key behind")
			} else {
				eventually(t, ms[:1], "retried-set", "")
			}

			// Release: the lock is held on every node, and two of them lose
			// the reply to the release.
			l, err := c.TryLock(t.Context(), "retried-release")
			require.NoError(t, err)
			eventually(t, ms, "retried-release", l.Token())
			// The key is on every node before the last node's reply has
			// passed its proxy: let those replies through before the next
			// one is lost.
			drained(t, cs)
			ps[0].LoseNext(1)
			ps[1].LoseNext(1)
			err = l.Unlock(t.Context())
			eventually(t, ms, "retried-release", "")
			if control {
				require.ErrorIs(t, err, ErrNotHeld, "the control must report the release that worked as not held")
				return
			}
			require.NoError(t, err)
		})
	}
}

// TestRetriedReleaseAfterScriptFlush: the release's EVALSHA deletes the key
// and its reply is lost; the node loses its script cache before go-redis
// sends the EVALSHA again, which gets NOSCRIPT. That NOSCRIPT says nothing
// of the first copy: the EVAL that follows finds the key gone, and the
// release must still count the node as released.
func TestRetriedReleaseAfterScriptFlush(t *testing.T) {
	ms, ps, cs := proxiedNodes(t, 3)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "flushed-release")
	require.NoError(t, err)
	eventually(t, ms, "flushed-release", l.Token())
	drained(t, cs)
	for i := range 2 {
		direct := redis.NewClient(&redis.Options{Addr: ms[i].Addr()})
		t.Cleanup(func() { _ = direct.Close() })
		ps[i].OnLost(func() { _ = direct.ScriptFlush(context.Background()).Err() })
		ps[i].LoseNext(1)
	}
	err = l.Unlock(t.Context())
	eventually(t, ms, "flushed-release", "")
	lostReplies(t, ps[0], 1)
	lostReplies(t, ps[1], 1)
	require.NoError(t, err, "a release whose resent EVALSHA met NOSCRIPT must count as released")
}

// TestNodeBusyWithAnEarlierAttemptIsNotAskedAgain: a node that has not
// answered an attempt's request is not sent the next attempt's; that
// attempt counts it failed, with ErrInFlight. Three nodes are taken, two
// hold their SET replies, and Lock retries until its ctx ends: each slow
// node gets one request only, and its late yes is rolled back.
func TestNodeBusyWithAnEarlierAttemptIsNotAskedAgain(t *testing.T) {
	const key = "in-flight"
	ms, cs, g := slowNodes(t, 2, "set")
	rec := &recorder{}
	c := newClient(t, cs, WithNodeTimeout(5*time.Second), WithRetryDelay(time.Millisecond, 2*time.Millisecond),
		WithPubSub(false), WithObserver(rec))
	t.Cleanup(g.release)
	for _, m := range ms[:3] {
		require.NoError(t, m.Set(key, "someone-else"))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// The first attempt is decided by the three nos; the later ones
		// find the slow nodes still busy with it.
		for ctx.Err() == nil {
			if attempts, _, _, _ := rec.counts(); attempts >= 3 {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := c.Lock(ctx, key)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	st := qe.Stats
	for _, i := range []int{3, 4} {
		require.Equal(t, VoteFailed, st.Nodes[i].Vote, "node %d: got %v, want failed", i, st.Nodes[i].Vote)
		require.ErrorIs(t, st.Nodes[i].Err, ErrInFlight, "node %d: got %v", i, st.Nodes[i].Err)
	}
	require.Equal(t, 2, st.Failed, "got %d failed, want the 2 busy nodes", st.Failed)
	require.Zero(t, st.Yes)
	g.release()
	// The first attempt's SET landed on the slow nodes; its yes, late, is
	// rolled back.
	eventually(t, ms[3:], key, "")
	eventually(t, ms[:3], key, "someone-else")
	require.EqualValues(t, 2, g.waiting.Load(), "got %d SET replies held, want one per slow node", g.waiting.Load())
}
