package redlockgocron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/redlockgo/redlock"
)

var (
	// ErrNotLeader is matched by every error of IsLeader and Term: this
	// scheduler must not run jobs now. The error also says why: campaigning,
	// the splay after a win, a validity within the margin, or the error
	// that ended the last leadership or campaign.
	ErrNotLeader = errors.New("redlockgocron: not the leader")

	// ErrClosed is returned by Start after Close, and matched by IsLeader's
	// error once Close has been called.
	ErrClosed = errors.New("redlockgocron: elector closed")
)

var (
	errNotStarted  = errors.New("not started")
	errCampaigning = errors.New("campaigning")
)

// Elector is a gocron.Elector backed by a redlock.Election: after Start it
// campaigns in the background, campaigns again whenever its leadership is
// lost, and IsLeader returns nil only while it leads. Make one with
// NewElector; the zero value is not usable. An Elector is safe for
// concurrent use and must not be copied. It serves one scheduler: give
// each scheduler an Elector of its own, on the same election key.
type Elector struct {
	e     *redlock.Election
	value string
	cfg   electorConfig

	mu sync.Mutex
	// lead is the leadership held, nil while campaigning; won is when
	// Campaign returned it, on the monotonic clock, and margin is its
	// margin (WithMargin).
	lead   *redlock.Lock // guarded by mu
	won    time.Time     // guarded by mu
	margin time.Duration // guarded by mu
	// why says why lead is nil: not started, campaigning, the last
	// campaign's error, the lost leadership's Err, or ErrClosed.
	why    error                   // guarded by mu
	closed bool                    // guarded by mu; Close was called
	cancel context.CancelCauseFunc // guarded by mu; set by Start, stops run
	done   chan struct{}           // guarded by mu; set by Start, closed when run returns

	// resigned is the error of the resignation that ended run; written by
	// run before it closes done.
	resigned error
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector that campaigns in e with value, which
// Election.Leader and Observe report while it leads: a host name, a pod
// name. Every scheduler that runs the same jobs needs an Elector on an
// Election of the same key, on a Client of the same nodes, and should use
// the same splay. The Election's TTL (its LockOptions, or the Client's
// default) is how long a leader that died without resigning keeps the
// others from taking over.
//
// On failure, a nil Election, a nil option or an option out of range, it
// returns an error that wraps redlock.ErrInvalidOption.
func NewElector(e *redlock.Election, value string, opts ...ElectorOption) (*Elector, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil Election", redlock.ErrInvalidOption)
	}
	cfg, err := newElectorConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Elector{e: e, value: value, cfg: cfg, why: errNotStarted}, nil
}

// Start begins campaigning in a goroutine of the Elector's own, which runs
// until Close is called or ctx is done, and then resigns. It campaigns again
// after each lost leadership, and waits between campaigns that failed, as
// WithBackoff says. A campaign that fails with redlock.ErrClosed (the
// Client was closed) or redlock.ErrInvalidOption is not tried again:
// IsLeader then returns an error that says so. Once ctx is done, IsLeader's
// error matches context.Cause(ctx); after Close, ErrClosed.
//
// Start returns ErrClosed after Close, and an error when it was called
// before.
func (el *Elector) Start(ctx context.Context) error {
	el.mu.Lock()
	defer el.mu.Unlock()
	switch {
	case el.closed:
		return ErrClosed
	case el.done != nil:
		return errors.New("redlockgocron: elector already started")
	}
	ctx, el.cancel = context.WithCancelCause(ctx)
	el.done = make(chan struct{})
	el.why = errCampaigning
	go el.run(ctx)
	return nil
}

// Close stops campaigning and resigns the leadership if it holds one, so
// that another scheduler takes over at once; IsLeader fails from before the
// resignation on. It waits for the Elector's goroutine to return and
// returns the resignation's error (see redlock.Lock.Unlock), or nil when it
// did not lead. Calls after the first do nothing and return nil.
func (el *Elector) Close() error {
	el.mu.Lock()
	if el.closed {
		el.mu.Unlock()
		return nil
	}
	el.closed = true
	cancel, done := el.cancel, el.done
	if done == nil {
		el.why = ErrClosed
	}
	el.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel(ErrClosed)
	<-done
	return el.resigned
}

// IsLeader returns nil while the Elector leads: it holds a leadership that
// it won more than the splay ago (WithSplay) and whose validity has more
// than the margin left (WithMargin). Otherwise it returns an error that
// matches ErrNotLeader and says why. It answers from memory, without
// asking the nodes, so gocron may call it for every run; ctx is not used.
//
// A leadership is kept by auto-extension, whose renewals run every third of
// the TTL: IsLeader fails only when they have been failing for most of a
// TTL, or once the leadership was lost.
func (el *Elector) IsLeader(context.Context) error {
	_, err := el.leading()
	return err
}

// Term returns the Term of the leadership while IsLeader would return nil,
// and IsLeader's error otherwise. A job that IsLeader let run can fence its
// writes with it (see redlock's docs/ELECTION.md): the Term of a later
// leader is larger.
func (el *Elector) Term() (uint64, error) {
	l, err := el.leading()
	if err != nil {
		return 0, err
	}
	return l.Fence(), nil
}

// leading returns the leadership when IsLeader would return nil, and
// IsLeader's error otherwise.
func (el *Elector) leading() (*redlock.Lock, error) {
	el.mu.Lock()
	l, won, margin, why := el.lead, el.won, el.margin, el.why
	el.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%w: %w", ErrNotLeader, why)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("%w: leadership lost: %w", ErrNotLeader, err)
	}
	now := time.Now()
	if wait := won.Add(el.cfg.splay).Sub(now); wait > 0 {
		return nil, fmt.Errorf("%w: won %v ago, leads jobs once the splay of %v has passed",
			ErrNotLeader, now.Sub(won).Round(time.Millisecond), el.cfg.splay)
	}
	if left := l.Until().Sub(now); left <= margin {
		return nil, fmt.Errorf("%w: %v of validity left, within the margin of %v (renewals failing)",
			ErrNotLeader, left.Round(time.Millisecond), margin)
	}
	return l, nil
}

// run campaigns until ctx is done, then resigns. It is the Elector's one
// goroutine; Close waits for it.
func (el *Elector) run(ctx context.Context) {
	defer close(el.done)
	wait := el.cfg.backoffMin
	for {
		l, err := el.e.Campaign(ctx, el.value)
		if err != nil {
			if ctx.Err() != nil {
				el.set(nil, context.Cause(ctx))
				return
			}
			el.set(nil, fmt.Errorf("campaign: %w", err))
			if errors.Is(err, redlock.ErrClosed) || errors.Is(err, redlock.ErrInvalidOption) {
				return // trying again cannot help
			}
			// Jittered, so that schedulers that failed together do not
			// come back together.
			t := time.NewTimer(wait/2 + rand.N(wait))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				el.set(nil, context.Cause(ctx))
				return
			}
			wait = min(2*wait, el.cfg.backoffMax)
			continue
		}
		wait = el.cfg.backoffMin
		el.set(l, nil)
		select {
		case <-l.Done():
			el.set(nil, fmt.Errorf("leadership lost: %w", l.Err()))
			// Frees the key on the nodes that still hold it, if any, so
			// that the next leader need not wait for them to expire.
			_ = l.Unlock(context.WithoutCancel(ctx))
		case <-ctx.Done():
			// IsLeader fails before the key is freed: the next leader
			// cannot start while this one still says it leads.
			el.set(nil, context.Cause(ctx))
			el.resigned = l.Unlock(context.WithoutCancel(ctx))
			return
		}
	}
}

// set records the leadership l, or with l nil, why there is none.
func (el *Elector) set(l *redlock.Lock, why error) {
	now := time.Now()
	el.mu.Lock()
	defer el.mu.Unlock()
	el.lead, el.why = l, why
	if l == nil {
		return
	}
	el.won = now
	el.margin = el.cfg.margin
	if !el.cfg.marginSet {
		el.margin = l.Until().Sub(now) / 10
	}
}
