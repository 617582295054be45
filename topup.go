package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the quorum top-up (WithTopUp): with each extension of a
// lock, Extend's and the renewer's, the nodes that never said yes are asked
// to take the key (topup.lua) instead of extending it (extend.lua), so that
// a lock won on exactly a quorum grows to every node that is free, and the
// loss of one node of that quorum no longer lets a second client in.
//
// Where a top-up may go:
//   - only while the lock is valid: the extensions that carry it go out
//     before Until (Extend and the renewer refuse past it);
//   - only to a node that never said yes (Lock.held): one that held the key
//     and lost it gets extend.lua, which never re-creates a key, since the
//     key may have been released by token there, or taken by the next
//     holder;
//   - never once the release of the lock began, and never ahead of it: a
//     top-up is a request of the won attempt in flight, like its acquire,
//     so that Unlock's release to that node waits for its reply (see
//     attempt.claimRelease) and cannot be overtaken by it.
//
// A node that answers yes is held from then on: later extensions extend it,
// Unlock releases it, and the rounds count it.

// topUpOn reports whether an extension of l sends a top-up to node i
// rather than an extension, and if so counts the request in flight on the
// node (see attempt.beginTopUp). Only the calling job's Commands calls it,
// once per lock and node.
func (l *Lock) topUpOn(i int) bool {
	if !l.cfg.topUp || !l.t.fl.topUp || l.byToken {
		return false
	}
	l.mu.Lock()
	held := l.held[i]
	l.mu.Unlock()
	return !held && l.att.beginTopUp(i)
}

// beginTopUp counts a top-up request in flight on node i, unless the
// release of the won attempt began there: Unlock's release then waits for
// it (claimRelease), and the late handler's machinery sends it once the
// reply came. It reports whether the top-up may go.
func (at *attempt) beginTopUp(i int) bool {
	a := at.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if at.state != won || at.unlocking || at.nodes[i].released {
		return false
	}
	a.busy[i]++
	at.inflight[i]++
	at.nodes[i].mayHold = true
	return true
}

// endTopUp ends a top-up request on node i that beginTopUp counted: it
// answered (yes when the node holds the key for the lock now), failed, or
// was never sent. A yes marks the node held, unless the release began; a
// release that waited for the request goes out now.
func (at *attempt) endTopUp(i int, yes bool) {
	a := at.a
	a.mu.Lock()
	a.busy[i]--
	at.inflight[i]--
	at.wakeLocked()
	markHeld := yes && !at.unlocking
	parked := at.unparkLocked(i)
	a.mu.Unlock()
	if markHeld {
		at.lock.markHeld(i)
	}
	if parked != nil {
		at.sendParked(parked)
	}
}

// evalTopUp builds topup.lua's command for the target's hold with attempt
// tk's value, in dst's backing array when it fits. KEYS: the lock keys,
// then their fence counters with fencing. ARGV: the value, the owner, ttl
// (what the nodes keep the key for), the number of lock keys, the fence (0
// without fencing), the acquisition's id, the attempt's number.
func (t *target) evalTopUp(dst []any, eval bool, tk *token, ttl time.Duration, fence uint64) *redis.Cmd {
	var f any = int64(0)
	if t.fence != nil {
		f = int64(fence)
	}
	args := withKeys(evalStart(dst, scriptTopUp, eval), t.skargs)
	args = append(args, tk.arg, t.ownerArg, ttl.Milliseconds(), len(t.rkeys), f, tk.id, tk.n)
	return redis.NewCmd(context.Background(), args...)
}

// evalTopUp builds the top-up of l to ttl (see target.evalTopUp).
func (l *Lock) evalTopUp(dst []any, eval bool, ttl time.Duration) *redis.Cmd {
	return l.t.evalTopUp(dst, eval, &l.att.value, l.cfg.nodeTTL(ttl), l.fence)
}
