// Package history is the model the tests, the chaos suite and `redlock demo`
// check a run against: a record of every hold of a lock, semaphore or
// read-write lock, and the checks that find where two holders were where
// the model allows only one.
//
// Times are read on the recording process's monotonic clock (time.Now, and
// Until as the library computes it from one), so that wall-clock steps
// cannot make or hide a violation. A hold claims its key over the half-open
// window [Acquired, End): one that ends exactly when the next begins does
// not overlap it.
//
// The package knows nothing of redlock itself: each user turns its own
// records into Holds, and maps a violation back to its record through
// Entry.Index.
package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Kind is what a hold claims of its key.
type Kind uint8

const (
	// Exclusive is a lock: plain, fenced, a writer, a multi-key lock on
	// each of its keys. It excludes every other hold of the key, save the
	// holds of its own owner (see Hold.Owner).
	Exclusive Kind = iota
	// Reader is a reader of a read-write lock: readers share the key with
	// each other, never with a writer or a permit.
	Reader
	// Permit is one permit of a semaphore of Hold.Permits permits: at most
	// that many may hold the key at once, and nothing else may hold it.
	Permit
)

// String returns the kind's name, as the checks' messages print it.
func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Reader:
		return "reader"
	case Permit:
		return "permit"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Hold is one holder's claim on a key, as the holder saw it. Its zero value
// is an exclusive hold that claims nothing. It may be copied.
type Hold struct {
	Key  string
	Kind Kind
	// Permits is the semaphore's number of permits k, for a Permit: a
	// Permit below 1 counts as 1. It is ignored for the other kinds.
	Permits int
	// Owner is the id of a reentrant (WithOwner) lock's owner: two
	// Exclusive holds of one owner nest and may overlap, never anyone
	// else's. "" for no owner.
	Owner string
	// Holder names who held it, for messages: the client, worker, ...
	Holder string

	Acquired time.Time // when the lock call returned
	Until    time.Time // the end of its validity, after the last extension
	// Released is when the holder stopped using the key, read before the
	// release call; zero when the hold was left to expire.
	Released time.Time
	// Fence is the hold's fencing token; 0 without fencing.
	Fence uint64

	// DoneAt is when the lock's lost signal (Lock.Done) was seen closed,
	// and UntilFired when a timer that the watcher armed at Until fired
	// while it was still open (zero when it closed first). Both are zero
	// for holds nobody watched. See LateDone.
	DoneAt, UntilFired time.Time
}

// End is when the holder stopped claiming the key: at its release, or at
// Until if that came first. Past Until a holder may not rely on the lock,
// so the claim ends there whatever it did.
func (h Hold) End() time.Time {
	if !h.Released.IsZero() && h.Released.Before(h.Until) {
		return h.Released
	}
	return h.Until
}

// Claims reports whether the hold's window [Acquired, End) is not empty. A
// lock call that returned after its Until had passed claims nothing: a
// rival may rightly have acquired before it returned.
func (h Hold) Claims() bool { return h.Acquired.Before(h.End()) }

// Overran reports whether the holder was still using the key past Until:
// it was released after its validity ended.
func (h Hold) Overran() bool { return h.Released.After(h.Until) }

// describe names the holder and what it held, for messages.
func (h Hold) describe() string {
	who := cmp.Or(h.Holder, "?")
	switch {
	case h.Kind == Permit:
		return fmt.Sprintf("%s (permit of %d)", who, max(h.Permits, 1))
	case h.Owner != "":
		return fmt.Sprintf("%s (%s, owner %q)", who, h.Kind, h.Owner)
	}
	return fmt.Sprintf("%s (%s)", who, h.Kind)
}

// Entry is a hold of a checked history and its index there, so that the
// caller can find its own record of it.
type Entry struct {
	Index int
	Hold
}

// Overlap is a violation of mutual exclusion: two holds of one key whose
// windows intersect where the model forbids it, or, for a semaphore, the
// permit B that made one holder more than its permits, and A the earliest
// of the others that held with it.
type Overlap struct {
	A, B Entry
	// By is how long the holds overlapped: the length of the intersection
	// of A's and B's windows, or for permits of all the holders'.
	By time.Duration
	// Holders is how many held the key at once, B included: 2 for a pair.
	Holders int
}

// Format describes the overlap, with times relative to t0.
func (o Overlap) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	return fmt.Sprintf("key %q: overlap by %v, %d holders: %s held [%v, %v) and %s held [%v, %v)",
		o.A.Key, o.By.Round(time.Microsecond), o.Holders,
		o.A.describe(), rel(o.A.Acquired), rel(o.A.End()), o.B.describe(), rel(o.B.Acquired), rel(o.B.End()))
}

// compatible reports whether two holds of one key may overlap: two readers,
// or two Exclusive holds of one owner, which nest. Permits are compatible
// with no other kind; with each other they are counted instead.
func compatible(a, b Hold) bool {
	switch {
	case a.Kind == Permit || b.Kind == Permit:
		return false
	case a.Kind == Reader || b.Kind == Reader:
		return a.Kind == Reader && b.Kind == Reader
	}
	return a.Owner != "" && a.Owner == b.Owner
}

// byKeyThenAcquired returns the indexes of the holds for which keep is true,
// in the order of their keys and then of their acquisition; ties keep the
// order of holds.
func byKeyThenAcquired(holds []Hold, keep func(Hold) bool) []int {
	var order []int
	for i, h := range holds {
		if keep(h) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return cmp.Or(cmp.Compare(holds[i].Key, holds[j].Key), holds[i].Acquired.Compare(holds[j].Acquired))
	})
	return order
}

// Overlaps returns every violation of mutual exclusion in holds: each pair
// of holds of one key whose windows intersect and that may not share the key
// (two readers may, and two Exclusive holds of one owner), and for each
// permit of a semaphore that began while its Permits or more other permits
// of the key held, one Overlap with all of them. The number of holders at
// once peaks when one of them begins, so checking there finds every excess.
// Holds that claim nothing (see Hold.Claims) are left out. The result is in
// the order of keys, then of B's acquisition; nil when there is none.
func Overlaps(holds []Hold) []Overlap {
	order := byKeyThenAcquired(holds, Hold.Claims)
	var out []Overlap
	var open []int // holds of the current key still claiming it
	for n, i := range order {
		h := holds[i]
		if n > 0 && holds[order[n-1]].Key != h.Key {
			open = open[:0]
		}
		open = slices.DeleteFunc(open, func(o int) bool { return !holds[o].End().After(h.Acquired) })
		var permits []int // open permits, when h is one
		for _, o := range open {
			if holds[o].Kind == Permit && h.Kind == Permit {
				permits = append(permits, o)
				continue
			}
			if compatible(holds[o], h) {
				continue
			}
			end := earliest(holds[o].End(), h.End())
			out = append(out, Overlap{A: Entry{o, holds[o]}, B: Entry{i, h}, By: end.Sub(h.Acquired), Holders: 2})
		}
		if h.Kind == Permit && len(permits) >= max(h.Permits, 1) {
			end := h.End()
			for _, o := range permits {
				end = earliest(end, holds[o].End())
			}
			out = append(out, Overlap{A: Entry{permits[0], holds[permits[0]]}, B: Entry{i, h}, By: end.Sub(h.Acquired), Holders: len(permits) + 1})
		}
		open = append(open, i)
	}
	return out
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Inversion is a violation of fencing: Next acquired the key after Prev,
// the hold acquired just before it, with a fence that is not larger.
type Inversion struct {
	Prev, Next Entry
}

// String describes the inversion.
func (v Inversion) String() string {
	return fmt.Sprintf("key %q: %s got fence %d after %s got %d", v.Next.Key, v.Next.describe(), v.Next.Fence, v.Prev.describe(), v.Prev.Fence)
}

// FenceInversions returns, for each key, the holds whose fence is not
// larger than that of the hold acquired just before them: holders that never
// overlap must see their fences rise in the order they acquired. Holds
// without a fence (0: fencing off) are left out, and so are holds with a
// recorded Until that claim nothing (see Hold.Claims): a rival may have
// acquired, with a larger fence, before such a lock call returned. The
// result is in the order of keys, then of acquisition; nil when there is
// none.
func FenceInversions(holds []Hold) []Inversion {
	order := byKeyThenAcquired(holds, func(h Hold) bool {
		return h.Fence != 0 && (h.Until.IsZero() || h.Claims())
	})
	var out []Inversion
	for n := 1; n < len(order); n++ {
		prev, next := holds[order[n-1]], holds[order[n]]
		if next.Key == prev.Key && next.Fence <= prev.Fence {
			out = append(out, Inversion{Prev: Entry{order[n-1], prev}, Next: Entry{order[n], next}})
		}
	}
	return out
}

// LateDone returns the watched holds whose lost signal did not come by
// Until: the watcher's timer at Until fired with it still open (UntilFired
// is set), and it then closed more than grace later, or never. Timers fire
// late on a busy machine, the watcher's as much as the library's expiry
// timer, so the grace is counted from the watcher's timer, not from Until:
// it covers the expiry timer's goroutine getting to run. Holds nobody
// watched are left out. The result is in the order of holds; nil when
// there is none.
func LateDone(holds []Hold, grace time.Duration) []Entry {
	var out []Entry
	for i, h := range holds {
		if h.UntilFired.IsZero() {
			continue
		}
		if h.DoneAt.IsZero() || h.DoneAt.Sub(h.UntilFired) > grace {
			out = append(out, Entry{i, h})
		}
	}
	return out
}
