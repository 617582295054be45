package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
)

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

func TestNodeDeadlineIsNotTheCallersDeadline(t *testing.T) {
	require.ErrorIs(t, nodeErr(context.DeadlineExceeded), ErrNodeTimeout)
	require.NotErrorIs(t, nodeErr(context.DeadlineExceeded), context.DeadlineExceeded)
	require.NotErrorIs(t, nodeErr(fmt.Errorf("dial: %w", context.Canceled)), context.Canceled)
	require.ErrorIs(t, nodeErr(&net.OpError{Op: "read", Err: timeoutErr{}}), ErrNodeTimeout)
	other := errors.New("ERR something")
	require.Equal(t, other, nodeErr(other))

	// One dead node, two taken: each attempt waits for the dead node until
	// the node timeout, and go-redis's retries (dial, back off, dial) end
	// on the request's deadline.
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(20*time.Millisecond), WithTTL(time.Second))
	ms[4].Close()
	for _, m := range ms[:2] {
		require.NoError(t, m.Set("dead", "other"))
	}
	for i := range 20 {
		_, err := c.TryLock(context.Background(), "dead")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "try %d: got %v, want no ctx error: the caller's ctx never ended", i, err)
		require.NotErrorIs(t, err, context.Canceled, "try %d", i)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestUnansweredNodesVoteByHowTheRoundEnded: the nodes that have not
// answered when a round ends get the vote of what ended it. Once a quorum
// can no longer say yes (two nos and a failure of five), the round ends at
// once: the two slow nodes are not waited for, which is not a failure. At
// the node timeout they have failed, with ErrNodeTimeout. When the caller's
// ctx ends the round, they were not waited for. Stats counts each vote
// where it belongs.
func TestUnansweredNodesVoteByHowTheRoundEnded(t *testing.T) {
	t.Run("quorum out of reach", func(t *testing.T) {
		ms, cs, g := slowNodes(t, 2, "set")
		// A node timeout the round must not wait for.
		c := newClient(t, cs, WithNodeTimeout(5*time.Second))
		t.Cleanup(g.release)
		const key = "out-of-reach"
		require.NoError(t, ms[0].Set(key, "someone-else"))
		require.NoError(t, ms[1].Set(key, "someone-else"))
		ms[2].SetError("ERR injected failure")
		_, err := c.TryLock(t.Context(), key)
		ms[2].SetError("")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NotErrorIs(t, err, ErrNodeTimeout)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		st := qe.Stats
		for i, want := range []Vote{VoteNo, VoteNo, VoteFailed, VoteNotWaited, VoteNotWaited} {
			require.Equal(t, want, st.Nodes[i].Vote, "node %d: got %v, want %v", i, st.Nodes[i].Vote, want)
		}
		require.ErrorIs(t, st.Nodes[3].Err, ErrNoAnswer)
		require.ErrorIs(t, st.Nodes[4].Err, ErrNoAnswer)
		require.Equal(t, [4]int{0, 2, 1, 2}, [4]int{st.Yes, st.No, st.Failed, st.NotWaited},
			"got yes, no, failed, not waited %d, %d, %d, %d, want 0, 2, 1, 2", st.Yes, st.No, st.Failed, st.NotWaited)
		g.release()
		eventually(t, ms[2:], key, "")
		eventually(t, ms[:2], key, "someone-else")
	})
	t.Run("node timeout", func(t *testing.T) {
		ms, cs, g := slowNodes(t, 3, "set")
		// Two yes votes of five: the round waits for the slow nodes, in
		// vain, until the node timeout.
		c := newClient(t, cs, WithNodeTimeout(50*time.Millisecond))
		t.Cleanup(g.release)
		_, err := c.TryLock(t.Context(), "timed-out")
		require.ErrorIs(t, err, ErrNotAcquired)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		st := qe.Stats
		for i := 2; i < 5; i++ {
			require.Equal(t, VoteFailed, st.Nodes[i].Vote, "node %d: got %v, want failed", i, st.Nodes[i].Vote)
			require.ErrorIs(t, st.Nodes[i].Err, ErrNodeTimeout, "node %d", i)
		}
		// A loaded machine may keep a fast node past 50 ms too: it then
		// fails the same way.
		require.Zero(t, st.NotWaited, "got %d nodes not waited for, want none: the round waited for all", st.NotWaited)
		require.Equal(t, 5, st.Yes+st.Failed, "got yes %d, failed %d", st.Yes, st.Failed)
		g.release()
		eventually(t, ms, "timed-out", "")
	})
	t.Run("ctx ended", func(t *testing.T) {
		ms, cs, g := slowNodes(t, 3, "set")
		c := newClient(t, cs, WithNodeTimeout(5*time.Second))
		t.Cleanup(g.release)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			// The slow nodes ran the SET, and hold its reply.
			for g.waiting.Load() < 3 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := c.TryLock(ctx, "ctx-ended")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		st := qe.Stats
		for i := 2; i < 5; i++ {
			require.Equal(t, VoteNotWaited, st.Nodes[i].Vote, "node %d: got %v, want not waited", i, st.Nodes[i].Vote)
			require.ErrorIs(t, st.Nodes[i].Err, ErrNoAnswer, "node %d", i)
		}
		// A fast node may not have answered by the cancel either.
		require.Zero(t, st.Failed, "got %d failed, want none: the caller ended the round", st.Failed)
		require.Equal(t, 5, st.Yes+st.NotWaited, "got yes %d, not waited %d", st.Yes, st.NotWaited)
		g.release()
		eventually(t, ms, "ctx-ended", "")
	})
}
