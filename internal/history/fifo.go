package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Wait is one call's wait for a fair lock (one that grants its waiters in
// the order in which they began to wait: redlock's WithFair), as the caller
// saw it. Each time is a bound on the side that makes a violation found
// certain: the call began to wait no earlier than Began, was in a quorum's
// queue by Queued, stopped waiting no earlier than Ended, and took the lock
// no later than Acquired. Its zero value is a wait that never queued and
// never acquired. It may be copied.
type Wait struct {
	Key string
	// Holder names who waited, for messages: the client, worker, call.
	Holder string

	// Began is when the call began to wait, or earlier: when the call was
	// made.
	Began time.Time
	// Queued is when the call was known to be queued on a quorum of nodes:
	// when an attempt that a quorum answered first told it its place. Zero
	// when it never was.
	Queued time.Time
	// Ended is when the call stopped waiting, or earlier: when the round
	// that won the lock began, or when its deadline passed or its Client
	// began to close. Zero when it waited to the end of the history.
	Ended time.Time
	// Acquired is when the call returned the lock, which it took before;
	// zero when it did not acquire.
	Acquired time.Time
	// Refreshes are when the call's queued attempts were sent, in order:
	// each one refreshes the call's entry in the queue on the nodes it
	// reaches, and an entry not refreshed in time expires, which lets
	// those behind it pass. Nil when they were not recorded: nothing then
	// excuses an inversion.
	Refreshes []time.Time
}

// WaitEntry is a wait of a checked history and its index there.
type WaitEntry struct {
	Index int
	Wait
}

// FIFOInversion is a violation of a fair lock's order: Behind began to wait
// after Ahead was queued, and took the lock while Ahead still waited.
type FIFOInversion struct {
	Ahead, Behind WaitEntry
	// Stalled is the longest Ahead went without a refresh of its entry
	// before Behind acquired: see FIFOInversions.
	Stalled time.Duration
	// Excused is set when Stalled reaches the tolerance: Ahead's entry
	// may have expired on the nodes Behind won, which the order does not
	// survive (a waiter that stopped refreshing).
	Excused bool
}

// Format describes the inversion, with times relative to t0.
func (v FIFOInversion) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	excused := ""
	if v.Excused {
		excused = " (excused: it may have expired)"
	}
	return fmt.Sprintf("key %s: %s began to wait at %v and acquired at %v, while %s, queued at %v, waited until %v; "+
		"it went at most %v without a refresh%s",
		quoteKey(v.Behind.Key), cmp.Or(v.Behind.Holder, "?"), rel(v.Behind.Began), rel(v.Behind.Acquired),
		cmp.Or(v.Ahead.Holder, "?"), rel(v.Ahead.Queued), ended(v.Ahead.Ended, rel), v.Stalled.Round(time.Microsecond), excused)
}

// ended formats the end of a wait: "the end" when it has none.
func ended(t time.Time, rel func(time.Time) time.Duration) string {
	if t.IsZero() {
		return "the end"
	}
	return rel(t).String()
}

// FIFOInversions returns every pair of fair waits of one key where the
// order was broken: Ahead was queued (Queued) before Behind began to wait
// (Began), and Behind acquired (Acquired) before Ahead stopped waiting
// (Ended). A fair lock promises that it does not happen while Ahead keeps
// its entry alive on the nodes, by attempting often enough.
//
// Stalled is the longest Ahead went without a refresh (Refreshes), from
// the one that queued it, the last sent by Queued, until Behind acquired.
// An inversion whose Stalled reaches tolerance is Excused. tolerance is how
// long a waiter may go between refreshes before its entry may expire, less
// a slack for the nodes' clocks and the requests' way to them: the entry's
// life, or less where a node refreshes an entry only once part of its life
// is gone. A wait with no Refreshes is never excused. The result is in the
// order of keys, then of Behind's acquisition; nil when there is none.
func FIFOInversions(waits []Wait, tolerance time.Duration) []FIFOInversion {
	byKey := map[string][]int{}
	for i, w := range waits {
		byKey[w.Key] = append(byKey[w.Key], i)
	}
	var out []FIFOInversion
	for _, idx := range byKey {
		for _, a := range idx {
			ahead := waits[a]
			if ahead.Queued.IsZero() {
				continue
			}
			for _, b := range idx {
				behind := waits[b]
				if a == b || behind.Acquired.IsZero() || !ahead.Queued.Before(behind.Began) ||
					(!ahead.Ended.IsZero() && !behind.Acquired.Before(ahead.Ended)) {
					continue
				}
				stalled := ahead.stalled(behind.Acquired)
				out = append(out, FIFOInversion{Ahead: WaitEntry{a, ahead}, Behind: WaitEntry{b, behind},
					Stalled: stalled, Excused: len(ahead.Refreshes) > 0 && stalled >= tolerance})
			}
		}
	}
	slices.SortFunc(out, func(x, y FIFOInversion) int {
		return cmp.Or(cmp.Compare(x.Behind.Key, y.Behind.Key), x.Behind.Acquired.Compare(y.Behind.Acquired),
			cmp.Compare(x.Ahead.Index, y.Ahead.Index))
	})
	return out
}

// stalled is the longest the wait went without a refresh before t, from
// the refresh that queued it (see FIFOInversions); 0 when none was
// recorded.
func (w Wait) stalled(t time.Time) time.Duration {
	if len(w.Refreshes) == 0 {
		return 0
	}
	// The refresh that queued the call is the last one sent by Queued;
	// without one, Queued stands for it.
	from := w.Queued
	for _, r := range w.Refreshes {
		if !r.After(w.Queued) {
			from = r
		}
	}
	var most time.Duration
	last := from
	for _, r := range w.Refreshes {
		if !r.After(from) {
			continue
		}
		if r.After(t) {
			break
		}
		most = max(most, r.Sub(last))
		last = r
	}
	return max(most, t.Sub(last))
}
