package redlock

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

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
	return c.acquire(ctx, keys, opts, true, false)
}

// TryLockMulti makes exactly one attempt to acquire one lock over several
// keys, all or nothing, as LockMulti does.
func (c *Client) TryLockMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, keys, opts, false, false)
}

// target checks the keys of an acquisition and builds what it will hold.
func (c *Client) target(keys []string, cfg *config, reader bool) (*target, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys given", ErrInvalidOption)
	}
	t := &target{
		rkeys:  make([]string, len(keys)),
		id:     uuid.NewString(),
		owner:  cfg.owner,
		quorum: c.quorum,
	}
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if k == "" {
			if len(keys) == 1 {
				return nil, fmt.Errorf("%w: key must not be empty", ErrInvalidOption)
			}
			return nil, fmt.Errorf("%w: key %d must not be empty", ErrInvalidOption, i)
		}
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("%w: key %q is given twice (at %d and %d)", ErrInvalidOption, k, j, i)
		}
		seen[k] = i
		t.rkeys[i] = cfg.keyPrefix + k
		if err := keyspace.Check(t.rkeys[i]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	if reader {
		if err := checkReader(keys, cfg); err != nil {
			return nil, err
		}
		t.reader = true
		if c.hooks.readerQuorum > 0 {
			t.quorum = c.hooks.readerQuorum
		}
	}
	if cfg.owner != "" && len(keys) > 1 {
		return nil, fmt.Errorf("%w: WithOwner locks one key; a multi-key lock cannot be reentrant", ErrInvalidOption)
	}
	if cfg.fencing {
		t.fence = make([]string, len(keys))
		for i, rk := range t.rkeys {
			t.fence[i] = keyspace.Fence(rk)
		}
	}
	if err := c.checkSlots(t); err != nil {
		return nil, err
	}
	t.box()
	return t, nil
}

// checkSlots refuses, on a Redis Cluster node, keys that do not share a hash
// slot: a script can only touch keys of one slot there.
func (c *Client) checkSlots(t *target) error {
	keys := t.scriptKeys()
	if len(keys) < 2 {
		return nil
	}
	cluster := false
	for _, n := range c.nodes {
		if _, ok := n.client.(*redis.ClusterClient); ok {
			cluster = true
		}
	}
	if !cluster {
		return nil
	}
	first := keyspace.Slot(keys[0])
	for _, k := range keys[1:] {
		if keyspace.Slot(k) != first {
			return fmt.Errorf("%w: keys %q and %q are in different hash slots of a Redis Cluster: "+
				"use hash tags so that they share one, such as {order:42}:a and {order:42}:b",
				ErrInvalidOption, keys[0], k)
		}
	}
	return nil
}
