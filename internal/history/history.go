// Package history is the model the tests, the chaos suite and `redlock demo`
// check a run against: a record of every hold of a lock, semaphore or
// read-write lock, and the checks that find where two holders were where
// the model allows only one. Beside the holds it checks the order of a
// fair lock's waiters (fifo.go), and an election's leaderships and what
// its observers saw of them (election.go).
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

	// Start is when the round that acquired the hold began, as the lock
	// counts it (a little before Acquired); zero when unknown. A minimum
	// hold counts from it.
	Start time.Time
	// MinHold is the lock's minimum hold (WithMinHold), and LockDelay its
	// lock-delay (WithLockDelay); 0 for none. Each keeps the key from
	// others past the hold's window, under its own rule: see Kept.
	MinHold, LockDelay time.Duration
	// Unlocked is when a release that the holder called while the hold was
	// valid returned, confirmed by a quorum of nodes; zero when there was
	// none (the hold was left to expire, released past Until, or its
	// release was not confirmed). A minimum hold binds such a release: it
	// leaves the key until Start+MinHold rather than free it.
	Unlocked time.Time

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

// releasedValid reports whether the holder called its release while the
// hold was valid: before Until.
func (h Hold) releasedValid() bool { return !h.Released.IsZero() && h.Released.Before(h.Until) }

// Kept returns until when the hold keeps its key from every hold it may
// not share the key with, and which rule keeps it: its End ("") or later,
// under the rules that keep a key past its holder's use of it:
//
//   - "min-hold": a minimum hold, after a release called while the hold
//     was valid and confirmed (see Unlocked), keeps the key until
//     Start+MinHold;
//   - "lock-delay": a lock-delay, after a hold that was not released
//     while valid (it expired, was lost, or was released past Until),
//     keeps the key until Until+LockDelay.
//
// slack is taken off the end of each rule, for the clocks: the nodes', by
// which the key expires, and the holder's, by which Start and Until are
// read.
func (h Hold) Kept(slack time.Duration) (time.Time, string) {
	end, rule := h.End(), ""
	if h.MinHold > 0 && !h.Start.IsZero() && !h.Unlocked.IsZero() {
		if t := h.Start.Add(h.MinHold - slack); t.After(end) {
			end, rule = t, "min-hold"
		}
	}
	if h.LockDelay > 0 && !h.releasedValid() && !h.Until.IsZero() {
		if t := h.Until.Add(h.LockDelay - slack); t.After(end) {
			end, rule = t, "lock-delay"
		}
	}
	return end, rule
}

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
// an earlier hold of the key with the largest fence, with a fence that is
// not larger.
type Inversion struct {
	Prev, Next Entry
}

// String describes the inversion.
func (v Inversion) String() string {
	return fmt.Sprintf("key %q: %s got fence %d after %s got %d", v.Next.Key, v.Next.describe(), v.Next.Fence, v.Prev.describe(), v.Prev.Fence)
}

// FenceInversions returns, for each key, the holds whose fence is not
// larger than that of every hold acquired before them: holders that never
// overlap must see their fences rise in the order they acquired. Holds of
// one owner that overlap are left out of each other's comparison: an owner
// lock's holds nest, and their acquisitions, when concurrent, take the
// fences of the nodes in any order. Holds without a fence (0: fencing
// off), and holds with a recorded Until that claim nothing (see
// Hold.Claims), are left out: a rival may have acquired, with a larger
// fence, before such a lock call returned. The result is in the order of
// keys, then of acquisition; nil when there is none.
func FenceInversions(holds []Hold) []Inversion {
	order := byKeyThenAcquired(holds, func(h Hold) bool {
		return h.Fence != 0 && (h.Until.IsZero() || h.Claims())
	})
	var out []Inversion
	for n, i := range order {
		next := holds[i]
		prev := -1
		for m := n - 1; m >= 0 && holds[order[m]].Key == next.Key; m-- {
			p := holds[order[m]]
			if next.Owner != "" && p.Owner == next.Owner && (p.Until.IsZero() || p.End().After(next.Acquired)) {
				continue
			}
			if prev < 0 || p.Fence > holds[prev].Fence {
				prev = order[m]
			}
		}
		if prev >= 0 && next.Fence <= holds[prev].Fence {
			out = append(out, Inversion{Prev: Entry{prev, holds[prev]}, Next: Entry{i, next}})
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

// Delay is a violation of a rule that keeps a key past its holder's use of
// it (see Hold.Kept): B began after A's window ended, but while A still
// kept the key from it. For a semaphore, B is the permit that made one
// holder more than its permits, counting the permits kept, and A the
// earliest of those kept past their window.
type Delay struct {
	A, B Entry
	// Rule is the rule that kept A's key: "min-hold" or "lock-delay".
	Rule string
	// Early is how long before the end of A's keep, slack taken off, B
	// began.
	Early time.Duration
	// Holders is how many held or kept the key when B began, B included:
	// 2 for a pair.
	Holders int
}

// Format describes the violation, with times relative to t0.
func (d Delay) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	return fmt.Sprintf("key %s: %s broken by %v, %d holders: %s held [%v, %v) (min-hold %v, lock-delay %v) and %s began at %v",
		quoteKey(d.A.Key), d.Rule, d.Early.Round(time.Microsecond), d.Holders,
		d.A.describe(), rel(d.A.Acquired), rel(d.A.End()), d.A.MinHold, d.A.LockDelay, d.B.describe(), rel(d.B.Acquired))
}

// quoteKey quotes a key for a message, cut when it is long: the checks run
// on keys of thousands of bytes.
func quoteKey(k string) string {
	if len(k) > 40 {
		return fmt.Sprintf("%q...(%d bytes)", k[:16], len(k))
	}
	return fmt.Sprintf("%q", k)
}

// Delays returns every violation of the rules that keep a key past its
// holder's use of it: a hold B that began after the window of a hold A of
// its key had ended, while A kept the key (Hold.Kept, with slack), when the
// two may not share the key; and a permit B that began while its Permits
// or more other permits of the key held it or kept it, at least one of
// them only kept. What the windows alone forbid is Overlaps' to report, not
// this. B begins when its lock call returned, which is after it took the
// key: a violation found is certain, and one that took the key earlier but
// returned late goes unseen. A hold with an empty window still keeps its
// key under the lock-delay; a B with an empty window is left out. The
// result is in the order of keys, then of B's acquisition; nil when there
// is none.
func Delays(holds []Hold, slack time.Duration) []Delay {
	order := byKeyThenAcquired(holds, func(h Hold) bool { return !h.Acquired.IsZero() })
	var out []Delay
	for n, i := range order {
		b := holds[i]
		if !b.Claims() {
			continue
		}
		var permits []int // permits of b's key that hold or keep it
		first := -1       // the earliest of them that only keeps it
		for m := n - 1; m >= 0 && holds[order[m]].Key == b.Key; m-- {
			j := order[m]
			a := holds[j]
			kept, rule := a.Kept(slack)
			if !b.Acquired.Before(kept) {
				continue
			}
			onlyKept := rule != "" && !b.Acquired.Before(a.End())
			if a.Kind == Permit && b.Kind == Permit {
				if a.Claims() || onlyKept {
					permits = append(permits, j)
					if onlyKept {
						first = j
					}
				}
				continue
			}
			if !onlyKept || compatible(a, b) {
				continue
			}
			out = append(out, Delay{A: Entry{j, a}, B: Entry{i, b}, Rule: rule, Early: kept.Sub(b.Acquired), Holders: 2})
		}
		if b.Kind == Permit && first >= 0 && len(permits) >= max(b.Permits, 1) {
			a := holds[first]
			kept, rule := a.Kept(slack)
			out = append(out, Delay{A: Entry{first, a}, B: Entry{i, b}, Rule: rule, Early: kept.Sub(b.Acquired), Holders: len(permits) + 1})
		}
	}
	slices.SortStableFunc(out, func(x, y Delay) int {
		return cmp.Or(cmp.Compare(x.B.Key, y.B.Key), x.B.Acquired.Compare(y.B.Acquired), cmp.Compare(x.A.Index, y.A.Index))
	})
	return out
}

// Validation is one check of a fence against the nodes (redlock's
// ValidateFence), made by the holder of that fence.
type Validation struct {
	Key   string
	Fence uint64
	// Hold is the index, among the holds checked with it, of the hold whose
	// fence it checked; -1 when unknown, which leaves it out of the rule
	// on releases.
	Hold int
	// Holder names who asked, for messages.
	Holder string
	// Called is when the check was called, and Returned when it returned.
	Called, Returned time.Time
	// Valid is the check's verdict: the fence was the live holder's.
	Valid bool
}

// StaleValidation is a check that found a fence valid when it could not
// have been: By made it stale before the check began.
type StaleValidation struct {
	Index int // in the checked validations
	Validation
	// By is the hold that made the fence stale: one with a newer fence, or
	// the fence's own hold, released.
	By Entry
	// Reason says which: "newer fence" or "released".
	Reason string
}

// Format describes the stale validation, with times relative to t0.
func (s StaleValidation) Format(t0 time.Time) string {
	rel := func(t time.Time) time.Duration { return t.Sub(t0).Round(time.Microsecond) }
	what := fmt.Sprintf("%s got fence %d at %v", s.By.describe(), s.By.Fence, rel(s.By.Acquired))
	if s.Reason == "released" {
		what = fmt.Sprintf("%s released it at %v (confirmed at %v, min-hold %v from %v)",
			s.By.describe(), rel(s.By.Released), rel(s.By.Unlocked), s.By.MinHold, rel(s.By.Start))
	}
	return fmt.Sprintf("key %s: %s validated fence %d in [%v, %v), but %s: %s",
		quoteKey(s.Key), cmp.Or(s.Holder, "?"), s.Fence, rel(s.Called), rel(s.Returned), s.Reason, what)
}

// StaleValidations returns the checks of a fence that said it was valid
// when it was not, by the rules of redlock's ValidateFence, given every
// hold of the checked keys, each of which took a fence:
//
//   - "newer fence": an Exclusive hold of the key with a larger fence had
//     been acquired before the check was called. Its lock call returned
//     once its fence was on a quorum of nodes, and no quorum can then show
//     the older one.
//   - "released": the fence's own hold (Validation.Hold) had been released
//     while valid, confirmed by a quorum (Hold.Unlocked), and its minimum
//     hold, if any, had ended (Start+MinHold, slack added) before the
//     check was called: no quorum then holds the key for it. For an owner
//     lock the holder is the owner, so another hold of the same owner that
//     held the key when the check was called, or had acquired by the time
//     it returned, keeps the fence valid: until it was unlocked, or until
//     its Until, its lock-delay and linger have passed, linger being how
//     long a holder's key may outlive its Until on the nodes.
//
// A check that said stale is never wrong here: a live holder's fence may
// fail for want of answers, and the rules leave that to the caller. The
// result is in the order of vs; nil when there is none.
func StaleValidations(holds []Hold, vs []Validation, slack, linger time.Duration) []StaleValidation {
	byKey := map[string][]int{}
	for i, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], i)
	}
	var out []StaleValidation
	for vi, v := range vs {
		if !v.Valid {
			continue
		}
		newer := -1
		for _, j := range byKey[v.Key] {
			g := holds[j]
			if g.Kind == Exclusive && g.Fence > v.Fence && g.Acquired.Before(v.Called) &&
				(newer < 0 || g.Acquired.Before(holds[newer].Acquired)) {
				newer = j
			}
		}
		if newer >= 0 {
			out = append(out, StaleValidation{Index: vi, Validation: v, By: Entry{newer, holds[newer]}, Reason: "newer fence"})
			continue
		}
		if v.Hold < 0 || v.Hold >= len(holds) {
			continue
		}
		h := holds[v.Hold]
		if h.Unlocked.IsZero() || !freedBy(h, slack).Before(v.Called) {
			continue
		}
		if h.Owner != "" && slices.ContainsFunc(byKey[v.Key], func(j int) bool {
			o := holds[j]
			return j != v.Hold && o.Owner == h.Owner && o.Kind == Exclusive && o.Acquired.Before(v.Returned) &&
				ownedUntil(o, slack, linger).After(v.Called)
		}) {
			continue
		}
		out = append(out, StaleValidation{Index: vi, Validation: v, By: Entry{v.Hold, h}, Reason: "released"})
	}
	return out
}

// freedBy is when a hold released while valid and confirmed (Unlocked is
// set) no longer holds its key on a quorum: when its release returned, or
// at the end of its minimum hold, slack added, if that is later.
func freedBy(h Hold, slack time.Duration) time.Time {
	end := h.Unlocked
	if h.MinHold > 0 && !h.Start.IsZero() {
		if t := h.Start.Add(h.MinHold + slack); t.After(end) {
			end = t
		}
	}
	return end
}

// ownedUntil is how long an owner lock's hold may keep its owner at the
// key: until it was freed, if its release was confirmed; otherwise until its
// Until, its lock-delay and linger have passed.
func ownedUntil(h Hold, slack, linger time.Duration) time.Time {
	if !h.Unlocked.IsZero() {
		return freedBy(h, slack)
	}
	return h.Until.Add(h.LockDelay + linger)
}
