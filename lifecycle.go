package redlock

import (
	"errors"
	"time"
)

var (
	// ErrLockLost is wrapped by Lock.Err when the lock ended without Unlock:
	// its validity ran out (no renewal, or renewals failed), a quorum of
	// nodes reported its token gone, or WithMaxHold's cap was reached. The
	// error also wraps the cause.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrUnlocked is what Lock.Err returns once Unlock has ended the lock.
	ErrUnlocked = errors.New("redlock: unlocked")

	// ErrMaxHold is wrapped, together with ErrLockLost, by Lock.Err when the
	// lock ended because WithMaxHold's cap was reached, and by Extend when
	// the cap leaves no room to extend.
	ErrMaxHold = errors.New("redlock: max hold reached")
)

// WithAutoExtend keeps a lock alive while it is held: a renewal runs every
// third of the TTL, needs a quorum within the validity, and is retried fast
// while validity lasts. When the lock is lost anyway, Done closes and Err
// says why. Unlock stops the renewals before it releases. A Client batches
// the renewals of all its locks into one pipeline per node per tick. The
// default is off.
func WithAutoExtend(enabled bool) LockOption {
	return lockSetting(func(c *config) { c.autoExtend = enabled })
}

// WithMaxHold caps the total time a lock can be held, renewals and Extend
// included, as the Redlock spec asks: the lock's Until never goes past its
// acquisition plus d, and it then ends with an Err that wraps ErrLockLost and
// ErrMaxHold. Zero, the default, means no cap.
func WithMaxHold(d time.Duration) LockOption {
	return lockSetting(func(c *config) { c.maxHold = d })
}

// Done returns a channel that is closed when the lock ends: on Unlock, when
// its validity runs out on the local clock (Until passes), or when renewal
// finds it lost. Err then says why. Holders can select on it. Done and Err
// check Until themselves, so that a holder whose process was paused past
// Until finds the lock ended at once when it resumes, even before the
// expiry timer has run. The logger and the Observer hear of a loss after
// Done has closed, from another goroutine, so that a slow one cannot keep
// Done open.
//
// Until and Done follow the monotonic clock, which on Linux does not advance
// while the host is suspended (CLOCK_MONOTONIC): a holder whose host sleeps
// through its validity may find Done still open for as long as the sleep,
// while the nodes, whose clocks ran on, have let the key go.
func (l *Lock) Done() <-chan struct{} {
	l.expireIfPast()
	return l.done
}

// Err returns nil while the lock is held. Once Done is closed it returns why
// the lock ended: ErrUnlocked after Unlock, or an error that wraps
// ErrLockLost and the cause when the lock expired or was lost.
func (l *Lock) Err() error {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// expireIfPast ends the lock now when Until has passed, rather than when
// the expiry timer gets to run.
func (l *Lock) expireIfPast() {
	if l.c.hooks.timerOnlyExpiry {
		return
	}
	l.mu.Lock()
	past := l.err == nil && !l.c.now().Before(l.until)
	l.mu.Unlock()
	if past {
		l.expire()
	}
}

// start begins the lock's lifecycle once it is acquired: the expiry timer,
// and the renewals when auto-extension is on.
func (l *Lock) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = time.AfterFunc(l.until.Sub(l.c.now()), l.expire)
	if l.cfg.autoExtend {
		l.c.renewer.add(l, l.nextRenewal(l.acquired))
	}
}

// nextRenewal is when the renewal after one that started at from is due: a
// third of the lock's TTL later. l.mu must be held.
func (l *Lock) nextRenewal(from time.Time) time.Time {
	return from.Add(l.ttl / 3)
}

// expire ends the lock when its validity has run out on the local clock. A
// successful extension may have moved Until since the timer was armed.
func (l *Lock) expire() {
	l.mu.Lock()
	if wait := l.until.Sub(l.c.now()); wait > 0 && l.err == nil {
		l.expiry.Reset(wait)
		l.mu.Unlock()
		return
	}
	var cause error = errValidityEnded
	if l.capped {
		cause = ErrMaxHold
	}
	l.mu.Unlock()
	l.end(chain(ErrLockLost, cause))
}

var errValidityEnded = errors.New("validity ended before a renewal succeeded")

// end ends the lock with err, once: Err returns err from then on, and Done
// closes once the renewals are stopped. A loss is then queued for the logger
// and the Observer. Later calls do nothing. It reports whether this call
// ended the lock.
func (l *Lock) end(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	if l.expiry != nil {
		l.expiry.Stop()
	}
	l.mu.Unlock()
	if l.cfg.autoExtend {
		l.c.renewer.remove(l)
	}
	close(l.done)
	// Done closes first, and the logger and the Observer hear of the loss
	// on the notifier's goroutine: a slow one must neither keep the holder
	// acting on a lost lock nor hold up whoever found the loss (a holder's
	// Done or Err, the renewer).
	if errors.Is(err, ErrLockLost) {
		l.c.renewer.notify.lost(l.name(), err)
	}
	return true
}

// extendTTL is the TTL to ask for in an extension that starts at start: the
// lock's TTL (the configured one, or the last given to Extend), cut so that
// the lock does not outlive its max hold. ok is false when the cap leaves no
// validity. Once the cap has cut a TTL, the lock is marked to end with
// ErrMaxHold.
//
// Extend and the renewer both call it just before they send, so this is
// where an extension raises the node guard's max TTL: before the request
// goes out, since it may land even if the round fails.
func (l *Lock) extendTTL(start time.Time) (ttl time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ttl, ok = l.ttl, true
	if !l.holdEnd.IsZero() {
		if left := l.holdEnd.Sub(start); left < ttl {
			ttl = left.Truncate(time.Millisecond)
			l.capped = true
		}
		ok = ttl > clockDrift(ttl, l.cfg.driftFactor) && ttl >= time.Millisecond
	}
	if ok {
		l.c.raiseMaxTTL(ttl)
	}
	return ttl, ok
}
