// Package redlockgocron runs go-co-op/gocron v2 jobs once across several
// schedulers, with redlock on a quorum of Redis masters.
//
// It has one adapter for each of gocron's two ways:
//
//   - Locker (gocron.WithDistributedLocker) takes a lock named after the job
//     each time a job is due: the scheduler that gets it runs that tick, and
//     the others skip it.
//   - Elector (gocron.WithDistributedElector) campaigns in a
//     redlock.Election: only the leader runs jobs, and another scheduler
//     takes over within about one TTL when the leader resigns or dies.
//
// Schedulers' triggers of one tick do not fire at the same instant: their
// clocks differ, and a busy process fires late. WithSplay says by how much
// they may differ, so that neither adapter lets a late trigger run a tick
// again.
package redlockgocron

import (
	"context"
	"fmt"

	"github.com/go-co-op/gocron/v2"

	"github.com/redlockgo/redlock"
)

// Locker is a gocron.Locker that takes a redlock lock for each run of a
// job: the scheduler that takes the lock on the job's name runs the tick,
// and the others skip it. Make one with NewLocker; the zero value is not
// usable. A Locker is safe for concurrent use, and one may serve every job
// of a scheduler.
type Locker struct {
	c   *redlock.Client
	cfg lockerConfig
	// opts are the options of every TryLock: the Locker's own, then the
	// user's. Never changed after NewLocker.
	opts []redlock.LockOption
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes its locks with c. Every scheduler
// that runs the same jobs needs a Locker with the same key prefix, on a
// Client of the same nodes (and key prefix), and should use the same splay.
//
// On failure, a nil Client, a nil option or a negative splay, it returns an
// error that wraps redlock.ErrInvalidOption.
func NewLocker(c *redlock.Client, opts ...LockerOption) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", redlock.ErrInvalidOption)
	}
	cfg, err := newLockerConfig(opts)
	if err != nil {
		return nil, err
	}
	lockOpts := []redlock.LockOption{redlock.WithAutoExtend(true)}
	if cfg.splay > 0 {
		lockOpts = append(lockOpts, redlock.WithMinHold(cfg.splay))
	}
	lockOpts = append(lockOpts, cfg.opts...)
	return &Locker{c: c, cfg: cfg, opts: lockOpts}, nil
}

// Lock makes one attempt (redlock's TryLock) to take the lock on the key
// prefix plus key, which gocron sets to the job's name, and returns it. The
// lock is auto-extended until gocron calls its Unlock after the job's run,
// so a job may run longer than the TTL; with a splay, the Unlock of a run
// shorter than the splay leaves the key held until the splay has passed
// since it was taken.
//
// It does not wait for a held lock: a scheduler that waited would run the
// tick again once the first one released it. On failure it returns the
// error of TryLock, which matches redlock.ErrNotAcquired (also
// redlock.ErrUnavailable when too few nodes answered), and gocron skips the
// run.
//
// A lock lost during a run (its renewals failed for a whole TTL) does not
// stop the job: gocron gives the job no way to hear of it. Jobs that must
// not overlap with another scheduler's should take a redlock lock of their
// own, with WithFencing, and fence their writes.
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := lk.c.TryLock(ctx, lk.cfg.prefix+key, lk.opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}
