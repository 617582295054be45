package redlock

import "context"

// LockMulti acquires one lock over several keys, all or nothing, waiting as
// Lock does. On each node one Lua script takes every key or none of them, and
// a node votes yes only when it took them all; quorum, validity, rollback,
// Unlock, Extend and auto-extension then work as for one key. A single-key
// lock on any of the keys conflicts with it, in both directions.
//
// Because no node ever holds some of the keys while waiting for others, two
// LockMulti calls on overlapping keys, in any order, cannot deadlock.
//
// Keys must be non-empty and distinct. On a Redis Cluster node they must
// share a hash slot: use a hash tag, such as {order:42}:stock and
// {order:42}:payment. Errors are as for Lock.
func (c *Client) LockMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, keys, opts, true, plainFlavour)
}

// TryLockMulti makes exactly one attempt to acquire one lock over several
// keys, all or nothing, as LockMulti does.
func (c *Client) TryLockMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, keys, opts, false, plainFlavour)
}
