package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Leadership is one leader's term of an election, as the leader saw it
// (redlock's Election.Campaign). A leadership is an exclusive hold of the
// election's key whose fence is its Term: Hold gives it to the checks of
// holds, so that no two leaderships overlap (Overlaps) and Terms rise from
// one to the next (FenceInversions). Its zero value claims nothing. It may
// be copied.
type Leadership struct {
	Key string
	// Holder names who led, for messages.
	Holder string
	// Value is what the leader campaigned with: Observe reports it with
	// the Term. Each campaign's value is its own.
	Value string
	Term  uint64
	// Acquired is when Campaign returned, and End when the leader stopped
	// leading: at its resign, or at the end of its validity.
	Acquired, End time.Time
}

// Hold is the leadership as a hold of its key.
func (l Leadership) Hold() Hold {
	return Hold{Key: l.Key, Kind: Exclusive, Holder: l.Holder, Acquired: l.Acquired, Until: l.End, Fence: l.Term}
}

// Observed is one value that an Observe stream delivered.
type Observed struct {
	At time.Time // when the consumer received it
	// Term and Value are the leader's; Term 0 says nobody leads.
	Term  uint64
	Value string
}

// Stream is what one Observe call of an election's key delivered to a
// consumer that read it at once, from From, when it was called, to To,
// when it stopped.
type Stream struct {
	Key    string
	Holder string // who observed, for messages
	From   time.Time
	To     time.Time
	Seen   []Observed
}

// Regression is a value of an Observe stream that broke the order of its
// Terms: Next came after Prev, the last non-zero one before it.
type Regression struct {
	Stream     int // in the checked streams
	Key        string
	Holder     string
	Prev, Next Observed
	// Reason says how: "lower term", "same term, another value" (two
	// leaders with one Term), or "repeated without a vacancy" (a leader
	// sent again when no Term 0 came between).
	Reason string
}

// Format describes the regression, with times relative to t0.
func (r Regression) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	return fmt.Sprintf("key %s: %s: %s: term %d %q at %v after term %d %q at %v",
		quoteKey(r.Key), cmp.Or(r.Holder, "?"), r.Reason, r.Next.Term, r.Next.Value, rel(r.Next.At), r.Prev.Term, r.Prev.Value, rel(r.Prev.At))
}

// ObserveRegressions returns the values of each stream whose non-zero Term
// does not rise above the last non-zero Term before it. Observe drops a
// read that shows an older Term than one it sent, so its leaders' Terms
// only go up; it sends a leader again, with the same Term and value, only
// after a Term 0 (nobody leads) that a read showed in its place. Term 0 is
// not ordered. The result is in the order of streams, then of values; nil
// when there is none.
func ObserveRegressions(streams []Stream) []Regression {
	var out []Regression
	for si, s := range streams {
		var prev Observed
		vacant := false // a Term 0 came since prev
		for _, o := range s.Seen {
			if o.Term == 0 {
				vacant = true
				continue
			}
			reason := ""
			switch {
			case prev.Term == 0:
			case o.Term < prev.Term:
				reason = "lower term"
			case o.Term == prev.Term && o.Value != prev.Value:
				reason = "same term, another value"
			case o.Term == prev.Term && !vacant:
				reason = "repeated without a vacancy"
			}
			if reason != "" {
				out = append(out, Regression{Stream: si, Key: s.Key, Holder: s.Holder, Prev: prev, Next: o, Reason: reason})
			}
			if o.Term >= prev.Term {
				prev = o
			}
			vacant = false
		}
	}
	return out
}

// LeadershipEntry is a leadership of a checked history and its index
// there.
type LeadershipEntry struct {
	Index int
	Leadership
}

// Miss is a leadership that an Observe stream did not deliver in time.
type Miss struct {
	Leader LeadershipEntry
	Stream int // in the checked streams
	// Holder is the stream's observer.
	Holder string
	// Seen is when the stream delivered the leader, late; zero when it
	// never did.
	Seen time.Time
}

// Format describes the miss, with times relative to t0.
func (m Miss) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	when := "never"
	if !m.Seen.IsZero() {
		when = fmt.Sprintf("only at %v", rel(m.Seen))
	}
	l := m.Leader
	return fmt.Sprintf("key %s: %s led term %d %q over [%v, %v); %s saw it %s",
		quoteKey(l.Key), cmp.Or(l.Holder, "?"), l.Term, l.Value, rel(l.Acquired), rel(l.End), cmp.Or(m.Holder, "?"), when)
}

// MissedLeaders returns, for each leadership that lasted at least ttl, each
// stream of its key that ran across it, from its Acquired to ttl+slack
// later, and did not deliver its Term and Value by then. Observe reads at
// least every third of the TTL, and at once when pub/sub announces a new
// term, so a leadership that lasts a TTL is read while it leads; slack is
// for the reads and the consumer's goroutine on a busy machine. A leader
// delivered before its Campaign returned counts: its record, which
// Observe reads, is written before. The result is in the order of
// leaderships, then of streams; nil when there is none.
func MissedLeaders(leaders []Leadership, streams []Stream, ttl, slack time.Duration) []Miss {
	var out []Miss
	for li, l := range leaders {
		if l.End.Sub(l.Acquired) < ttl {
			continue
		}
		by := l.Acquired.Add(ttl + slack)
		for si, s := range streams {
			if s.Key != l.Key || s.From.After(l.Acquired) || s.To.Before(by) {
				continue
			}
			i := slices.IndexFunc(s.Seen, func(o Observed) bool { return o.Term == l.Term && o.Value == l.Value })
			var seen time.Time
			switch {
			case i < 0:
			case s.Seen[i].At.After(by):
				seen = s.Seen[i].At
			default:
				continue
			}
			out = append(out, Miss{Leader: LeadershipEntry{li, l}, Stream: si, Holder: s.Holder, Seen: seen})
		}
	}
	return out
}
