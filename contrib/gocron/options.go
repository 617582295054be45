package redlockgocron

import (
	"fmt"
	"time"

	"github.com/redlockgo/redlock"
)

// Defaults of the options.
const (
	// DefaultKeyPrefix goes before a job's name to make the Locker's lock
	// key, so that job names do not collide with the application's own locks.
	DefaultKeyPrefix = "gocron:"
	// DefaultBackoffMin and DefaultBackoffMax bound the jittered wait of an
	// Elector between two campaigns that failed; the wait doubles after
	// each failure.
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 5 * time.Second
)

// A LockerOption sets one setting of a Locker. NewLocker takes it.
type LockerOption interface {
	applyLocker(*lockerConfig)
}

// An ElectorOption sets one setting of an Elector. NewElector takes it.
type ElectorOption interface {
	applyElector(*electorConfig)
}

// An Option fits both NewLocker and NewElector. WithSplay returns one.
type Option interface {
	LockerOption
	ElectorOption
}

type lockerConfig struct {
	prefix string
	splay  time.Duration
	opts   []redlock.LockOption
}

type electorConfig struct {
	splay      time.Duration
	margin     time.Duration // 0 and !marginSet: a tenth of the won validity
	marginSet  bool
	backoffMin time.Duration
	backoffMax time.Duration
}

type lockerSetting func(*lockerConfig)

func (f lockerSetting) applyLocker(c *lockerConfig) { f(c) }

type electorSetting func(*electorConfig)

func (f electorSetting) applyElector(c *electorConfig) { f(c) }

type splaySetting time.Duration

func (d splaySetting) applyLocker(c *lockerConfig)   { c.splay = time.Duration(d) }
func (d splaySetting) applyElector(c *electorConfig) { c.splay = time.Duration(d) }

// WithSplay sets how far apart the triggers of one tick may be on two
// schedulers (their clock skew plus how late a trigger may fire) without
// the tick running twice. The default, 0, assumes they fire together.
//
// Given to NewLocker, it keeps a job's lock at least d after it was taken
// (redlock.WithMinHold), so that a job that ended fast still holds off a
// scheduler whose trigger of the same tick comes up to d later. Given to
// NewElector, a new leader starts jobs only d after it won, so that the
// tick the old leader ran just before it resigned does not run again on
// the new one, whose trigger came later.
//
// d must be shorter than the job's interval minus the skew: a key still
// held when the next tick fires makes every scheduler skip that tick, and
// a new leader skips the ticks of its first d. A negative d is refused.
func WithSplay(d time.Duration) Option { return splaySetting(d) }

// WithKeyPrefix sets what goes before a job's name to make the Locker's
// lock key. The default is DefaultKeyPrefix. The Client's own key prefix
// (redlock.WithKeyPrefix) still goes before both.
func WithKeyPrefix(prefix string) LockerOption {
	return lockerSetting(func(c *lockerConfig) { c.prefix = prefix })
}

// WithLockOptions adds options to every lock the Locker takes, such as
// redlock.WithTTL or redlock.WithFencing. They come after the Locker's own
// (redlock.WithAutoExtend(true), and redlock.WithMinHold of the splay), so
// they override them. Options that do not fit a lock of one key taken with
// TryLock make every Lock fail, which gocron reports to the job's
// AfterLockError listener.
func WithLockOptions(opts ...redlock.LockOption) LockerOption {
	return lockerSetting(func(c *lockerConfig) { c.opts = append(c.opts, opts...) })
}

// WithMargin sets how much of its validity a leadership must have left for
// IsLeader to return nil. A leader whose renewals fail stops starting jobs d
// before its validity ends, so that a job it starts has at least d to run
// before another leader can win, and a pause between IsLeader and the
// job's start does not carry the start past the validity. The default is a
// tenth of the validity the leadership had when it was won, about a tenth
// of the TTL. A d of the TTL or more keeps IsLeader from ever returning
// nil. A negative d is refused.
func WithMargin(d time.Duration) ElectorOption {
	return electorSetting(func(c *electorConfig) { c.margin, c.marginSet = d, true })
}

// WithBackoff sets the range of the jittered wait between two campaigns
// that failed: the first waits about min, and each failure in a row doubles
// it, up to max. A won leadership starts again from min. The defaults are
// DefaultBackoffMin and DefaultBackoffMax. min must be positive and max at
// least min.
func WithBackoff(min, max time.Duration) ElectorOption {
	return electorSetting(func(c *electorConfig) { c.backoffMin, c.backoffMax = min, max })
}

func newLockerConfig(opts []LockerOption) (lockerConfig, error) {
	c := lockerConfig{prefix: DefaultKeyPrefix}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil LockerOption", redlock.ErrInvalidOption)
		}
		o.applyLocker(&c)
	}
	if c.splay < 0 {
		return c, fmt.Errorf("%w: splay must not be negative, got %v", redlock.ErrInvalidOption, c.splay)
	}
	return c, nil
}

func newElectorConfig(opts []ElectorOption) (electorConfig, error) {
	c := electorConfig{backoffMin: DefaultBackoffMin, backoffMax: DefaultBackoffMax}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil ElectorOption", redlock.ErrInvalidOption)
		}
		o.applyElector(&c)
	}
	switch {
	case c.splay < 0:
		return c, fmt.Errorf("%w: splay must not be negative, got %v", redlock.ErrInvalidOption, c.splay)
	case c.margin < 0:
		return c, fmt.Errorf("%w: margin must not be negative, got %v", redlock.ErrInvalidOption, c.margin)
	case c.backoffMin <= 0:
		return c, fmt.Errorf("%w: backoff min must be positive, got %v", redlock.ErrInvalidOption, c.backoffMin)
	case c.backoffMax < c.backoffMin:
		return c, fmt.Errorf("%w: backoff max must be at least min, got max %v < min %v", redlock.ErrInvalidOption, c.backoffMax, c.backoffMin)
	}
	return c, nil
}
