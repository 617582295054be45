package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// maxAbandonRelease bounds the release of a lock whose fn panicked, for
// TTLs longer than this.
const maxAbandonRelease = 5 * time.Second

// Do acquires the lock on key, waiting as Lock does, keeps it alive with
// auto-extension while fn runs, and unlocks when fn returns. fn's ctx is
// cancelled the moment the lock is lost, with the loss as its cause. Do does
// not write into opts, so concurrent calls may share one slice.
//
// Do returns an error that matches ErrNotAcquired when the lock could not be
// acquired (fn did not run), and one that matches ErrLockLost when the lock
// was lost while fn ran or was found gone at Unlock, joined with fn's error.
// Otherwise it returns fn's error. A nil fn gives an error that wraps
// ErrInvalidOption, before anything is sent to the nodes.
//
// When fn panics, or ends its goroutine with runtime.Goexit, Do stops the
// renewals and unlocks before the panic goes on up the stack, with its value
// and stack trace unchanged: a caller that recovers, as net/http does, is not
// left with a key that stays held until Client.Close. That unlock runs even
// when ctx is done, and is bounded by the lock's TTL, up to 5 seconds: the
// nodes forget the key one TTL after the last renewal anyway.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return c.do(ctx, key, fn, opts, c.Lock)
}

// RDo is Do with a shared (read) hold, taken as RLock takes it: any number
// of RDo and RLock calls on key run together, and none while a writer holds
// it. Its errors and its handling of panics are those of Do.
func (c *Client) RDo(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return c.do(ctx, key, fn, opts, c.RLock)
}

// do runs fn under the hold that acquire takes on key: see Do.
func (c *Client) do(ctx context.Context, key string, fn func(ctx context.Context) error, opts []LockOption,
	acquire func(context.Context, string, ...LockOption) (*Lock, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: fn must not be nil", ErrInvalidOption)
	}
	// Clip so that append copies: a caller's opts may have spare capacity
	// that concurrent calls share.
	l, err := acquire(ctx, key, append(slices.Clip(opts), WithAutoExtend(true))...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-stop:
		}
	}()
	unwatch := func() {
		close(stop)
		<-watched
		cancel(nil)
	}

	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked or called runtime.Goexit. Not recovering lets the
		// panic go on as it was, once the lock is released here. Unlock
		// stops the renewals before it releases.
		unwatch()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.cfg.ttl, maxAbandonRelease))
		defer rcancel()
		_ = l.Unlock(rctx)
	}()
	fnErr := fn(fnCtx)
	returned = true
	unwatch()

	if lost := l.Err(); lost != nil {
		// Clear what is left on the nodes that still hold the token, so
		// that others need not wait out its TTL.
		_ = l.Unlock(context.WithoutCancel(ctx))
		return errors.Join(fnErr, lost)
	}
	// Release even when the caller's ctx is done: the nodes must not keep
	// the lock for a full TTL.
	if uerr := l.Unlock(context.WithoutCancel(ctx)); uerr != nil {
		if errors.Is(uerr, ErrNotHeld) {
			uerr = chain(ErrLockLost, uerr)
		}
		return errors.Join(fnErr, uerr)
	}
	return fnErr
}
