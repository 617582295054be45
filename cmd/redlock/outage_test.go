package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
)

// stats builds the Stats of a round from its votes.
func stats(votes ...redlock.Vote) redlock.Stats {
	st := redlock.Stats{Op: redlock.OpLock, Key: "k", Quorum: len(votes)/2 + 1}
	for i, v := range votes {
		st.Nodes = append(st.Nodes, redlock.NodeVote{Index: i, Vote: v})
		switch v {
		case redlock.VoteYes:
			st.Yes++
		case redlock.VoteNo:
			st.No++
		case redlock.VoteFailed:
			st.Failed++
		case redlock.VoteNotWaited:
			st.NotWaited++
		}
	}
	return st
}

// Every mix of votes on 1 to 5 nodes: a round that the votes decided is an
// outage exactly when its failures alone put the quorum out of reach, and
// a round cut short is one when fewer than a quorum answered.
func TestUnreachableEveryPattern(t *testing.T) {
	all := []redlock.Vote{redlock.VoteYes, redlock.VoteNo, redlock.VoteFailed, redlock.VoteNotWaited}
	for n := 1; n <= 5; n++ {
		patterns := 1
		for range n {
			patterns *= len(all)
		}
		for p := range patterns {
			votes := make([]redlock.Vote, n)
			for i, x := 0, p; i < n; i, x = i+1, x/len(all) {
				votes[i] = all[x%len(all)]
			}
			st := stats(votes...)
			q, slack := st.Quorum, n-st.Quorum
			wantDecided := st.Yes >= q || st.No+st.Failed > slack
			require.Equal(t, wantDecided, decided(st), "%v: decided", votes)
			want := st.Yes+st.No < q
			if wantDecided {
				want = st.Failed > slack
			}
			require.Equal(t, want, unreachable(st), "%v: unreachable: got %v, want %v", votes, !want, want)
		}
	}
	require.False(t, unreachable(redlock.Stats{Quorum: 3}), "a round with no votes (ended before any attempt) is no outage")
}

// Named cases, as an operator would read them, on 5 nodes.
func TestUnreachableCases(t *testing.T) {
	const (
		Y = redlock.VoteYes
		N = redlock.VoteNo
		F = redlock.VoteFailed
		W = redlock.VoteNotWaited
	)
	for _, tt := range []struct {
		name  string
		votes []redlock.Vote
		want  bool
	}{
		{"held elsewhere", []redlock.Vote{N, N, N, W, W}, false},
		{"held elsewhere, a node down", []redlock.Vote{N, N, F, W, W}, false},
		{"held elsewhere, two nodes down", []redlock.Vote{N, F, F, W, W}, false},
		{"three nodes down", []redlock.Vote{Y, F, F, F, W}, true},
		{"every node down", []redlock.Vote{F, F, F, F, F}, true},
		{"won but too slow", []redlock.Vote{Y, Y, Y, W, W}, false},
		{"cut short, nodes hung", []redlock.Vote{Y, W, W, W, W}, true},
		{"cut short, a quorum answered", []redlock.Vote{Y, N, N, W, W}, false},
	} {
		require.Equal(t, tt.want, unreachable(stats(tt.votes...)), tt.name)
	}
}

// A wait cut short is judged by the last attempt the votes decided, when
// there was one.
func TestAttemptLog(t *testing.T) {
	const (
		Y = redlock.VoteYes
		N = redlock.VoteNo
		F = redlock.VoteFailed
		W = redlock.VoteNotWaited
	)
	qerr := func(st redlock.Stats) error {
		return fmt.Errorf("wrapped: %w", &redlock.QuorumError{Stats: st})
	}
	cutShort := stats(W, W, W)

	var empty attemptLog
	_, out := empty.unavailable(qerr(cutShort))
	require.True(t, out, "no decided attempt: nobody answered within the wait")
	_, out = empty.unavailable(errors.New("not a quorum error"))
	require.False(t, out)

	var held attemptLog
	held.Attempted(stats(N, N, W), redlock.ErrNotAcquired)
	held.Attempted(stats(Y, W, W), redlock.ErrNotAcquired) // cut short: not kept
	held.Attempted(stats(Y, Y, W), nil)                    // won: not kept
	st, out := held.unavailable(qerr(cutShort))
	require.False(t, out, "the last decided attempt found the key taken")
	require.Equal(t, 2, st.No, "got the votes %+v, want the last decided attempt's", st)

	var down attemptLog
	down.Attempted(stats(N, N, W), redlock.ErrNotAcquired)
	down.Attempted(stats(F, F, W), redlock.ErrNotAcquired)
	_, out = down.unavailable(qerr(cutShort))
	require.True(t, out, "the last decided attempt found two of three nodes down")
	_, out = down.unavailable(qerr(stats(N, N, F)))
	require.False(t, out, "a decided error is judged by its own votes")
}
