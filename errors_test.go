package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
	// failure) before its dial failed: then the message leaves it out,
	// and Stats says it was not waited for.
	require.NotContains(t, msg, "not waited for")
	if !strings.Contains(msg, "node 3 ("+closedAddr+") failed") {
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		require.Equal(t, VoteNotWaited, qe.Stats.Nodes[3].Vote, "%v", msg)
	}
	// Two nos, two answers that count: contention, not an outage.
	require.NotErrorIs(t, err, ErrUnavailable)
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Index == 2 || ne.Index == 3, "got node %d", ne.Index)
	eventually(t, ms[4:], "named", "")
}

func TestQuorumErrorUnwrapsOnlyWhatHappened(t *testing.T) {
	e := &QuorumError{Stats: Stats{Op: OpLock, Key: "k", Quorum: 3}, sentinel: ErrNotAcquired}
	require.ErrorIs(t, e, ErrNotAcquired)
	require.NotErrorIs(t, e, ErrNotHeld)
	require.NotErrorIs(t, e, context.Canceled)
	require.True(t, strings.HasPrefix(e.Error(), "redlock: not acquired: lock \"k\""), e.Error())
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
