package main

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redlockgo/redlock"
)

// attemptLog is an Observer that keeps the votes of the last acquisition
// attempt that the votes decided. A wait that runs out cuts the attempt in
// flight short, and that attempt's nodes may only not have answered yet:
// the last decided attempt says better whether they are down. It is safe
// for concurrent use; the zero value is ready.
type attemptLog struct {
	mu   sync.Mutex
	last *redlock.Stats // guarded by mu
}

// Attempted records s when it failed and its votes decided it.
func (a *attemptLog) Attempted(s redlock.Stats, err error) {
	if err == nil || !decided(s) {
		return
	}
	s.Nodes = slices.Clone(s.Nodes)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = &s
}

// Extended does nothing.
func (*attemptLog) Extended(redlock.Stats, error) {}

// Lost does nothing.
func (*attemptLog) Lost(string, error) {}

// Released does nothing.
func (*attemptLog) Released(redlock.Stats, error) {}

// unavailable reports whether err, the error of a failed acquisition, is an
// outage rather than a lock held elsewhere, and returns the votes it went
// by: those of err's QuorumError when they decided the attempt, or else
// those of the last attempt they decided.
func (a *attemptLog) unavailable(err error) (redlock.Stats, bool) {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return redlock.Stats{}, false
	}
	st := qe.Stats
	if !decided(st) {
		a.mu.Lock()
		if a.last != nil {
			st = *a.last
		}
		a.mu.Unlock()
	}
	return st, unreachable(st)
}

// decided reports whether the votes of st decided its round: a quorum said
// yes, or so many said no or failed that a quorum of yes was out of reach.
// A round that the caller's ctx cut short is not decided.
func decided(st redlock.Stats) bool {
	n := len(st.Nodes)
	return n > 0 && (st.Yes >= st.Quorum || st.No+st.Failed > n-st.Quorum)
}

// unreachable reports whether, going by st, too few nodes could answer for
// a quorum. In a decided round that is when the failures alone put a quorum
// out of reach: a round lost to a mix of failures and noes still had a
// quorum of live nodes, and the key was taken on some of them. In a round
// cut short, the nodes that had not answered count as unreachable: they
// did not answer within the whole wait.
func unreachable(st redlock.Stats) bool {
	n := len(st.Nodes)
	switch {
	case n == 0:
		return false // ended before any attempt
	case decided(st):
		return st.Failed > n-st.Quorum
	}
	return st.Yes+st.No < st.Quorum
}

// describeFailures says why st counts as an outage, for a message.
func describeFailures(st redlock.Stats) string {
	if decided(st) {
		return fmt.Sprintf("%d of %d nodes failed, leaving fewer than the quorum of %d", st.Failed, len(st.Nodes), st.Quorum)
	}
	return fmt.Sprintf("only %d of %d nodes answered in time, fewer than the quorum of %d", st.Yes+st.No, len(st.Nodes), st.Quorum)
}
