package redlock

import (
	"context"
	"fmt"
)

// This file is the read side of a read-write lock (see docs/RWLOCK.md).
// A reader is a flavour of target (readerFlavour, see flavour.go): its
// acquire, release and extend go to scripts of their own (rlock.lua,
// runlock.lua, rextend.lua), and the acquisition, attempt, rollback,
// late-reply, Unlock, Extend and renewal machinery carries it unchanged. Writers are plain Lock and TryLock calls
// on the same key.

// RLock acquires a shared (read) hold on key, waiting as Lock does. Any
// number of readers may hold the key at once; a writer (Lock or TryLock on
// the same key, or a plain lock of redsync or node-redlock) excludes them,
// and they exclude it. Readers and writers both need a majority of nodes,
// and each node's script refuses to mix them, so a reader and a writer can
// never both hold a quorum: two majorities share a node.
//
// Each reader's hold is a Lock of its own, with its own expiry on the
// nodes: Until, Done, Err, Extend, auto-extension and Unlock work as for a
// Lock, and one reader's renewals never keep another reader's hold alive.
//
// While a Lock call waits for the key, new readers wait behind it (writer
// preference); readers that hold the key keep it, and may extend it.
//
// WithOwner and WithFencing are refused with ErrInvalidOption. Errors are
// as for Lock: on failure every node has been told to release, including
// the ones that did not answer.
func (c *Client) RLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, true, readerFlavour)
}

// TryRLock makes exactly one attempt to acquire a shared (read) hold on
// key, as RLock does. On failure it returns an error that matches
// ErrNotAcquired.
func (c *Client) TryRLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, opts, false, readerFlavour)
}

// checkReader refuses the options a reader cannot have.
func checkReader(keys []string, cfg *config) error {
	switch {
	case len(keys) != 1:
		return fmt.Errorf("%w: a read lock holds one key", ErrInvalidOption)
	case cfg.owner != "":
		return fmt.Errorf("%w: WithOwner cannot be used with RLock", ErrInvalidOption)
	case cfg.fencing:
		return fmt.Errorf("%w: WithFencing cannot be used with RLock", ErrInvalidOption)
	}
	return nil
}

// readQuorum is a reader's quorum: the lock's majority, or the
// readerQuorum test hook's when it is set.
func readQuorum(c *Client, _ int) int {
	if c.hooks.readerQuorum > 0 {
		return c.hooks.readerQuorum
	}
	return c.quorum
}

// ReleaseRead ends the read hold on key whose token is token, as Unlock of
// the Lock that RLock returned would: a reader of another Client or
// process, such as one whose token `redlock lock -shared` printed. It
// leaves the other readers' holds alone. The Client must have the
// WithKeyPrefix of the acquisition. Its result is Release's.
func (c *Client) ReleaseRead(ctx context.Context, key, token string, opts ...LockOption) error {
	return c.releaseToken(key, token, opts, readerFlavour)
}
