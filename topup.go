package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the quorum top-up (WithTopUp): once an extension of a lock
// won, Extend's or the renewer's, the nodes that never said yes are asked
// to take the key (topup.lua), so that a lock won on exactly a quorum grows
// to every node that is free, and the loss of one node of that quorum no
// longer lets a second client in.
//
// Where a top-up may go:
//   - only right after an extension won: a quorum just confirmed that it
//     holds the token, so the lock is valid, and it was not released by
//     token (Client.Release) on a quorum before that round;
//   - only to a node that never said yes (Lock.held): one that held the key
//     and lost it is never asked again, since the key may have been
//     released by token there, or taken by the next holder;
//   - never once the release of the lock began, and never ahead of it: a
//     top-up is a request of the won attempt in flight, like its acquire,
//     so that Unlock's release to that node waits for its reply (see
//     attempt.claimRelease) rather than overtake it.
//
// A node that answers yes is held from then on: later extensions extend it,
// and count it, and Unlock releases it. The top-ups are not part of the
// extension's round: they add a request to the nodes that need one, after
// it, and no round trip to the extension.

// topUp asks the nodes that never said yes to l to take it, for ttl, the
// TTL of the extension that just won. It does not wait for the answers.
func (l *Lock) topUp(ttl time.Duration) {
	if !l.cfg.topUp || !l.t.fl.topUp || l.byToken {
		return
	}
	c := l.c
	for i := range c.nodes {
		l.mu.Lock()
		held := l.held[i]
		l.mu.Unlock()
		if held || !l.att.beginRequest(i) {
			continue
		}
		j := &topUpJob{l: l, ttl: ttl, end: time.Now().Add(l.cfg.nodeTimeout), i: i}
		c.nodes[i].pipe.Submit(j)
	}
}

// beginRequest counts a request of the won attempt in flight on node i (a
// top-up), unless the release of the lock began, or a request of the
// attempt is in flight there already (an earlier top-up, or the acquire,
// whose answer may make the node held): Unlock's release to the node waits
// for it (claimRelease), and goes out once its reply came (endRequest). It
// reports whether the request may go.
func (at *attempt) beginRequest(i int) bool {
	a := at.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if at.state != won || at.unlocking || at.nodes[i].released || at.inflight[i] > 0 {
		return false
	}
	a.busy[i]++
	at.inflight[i]++
	at.nodes[i].mayHold = true
	return true
}

// endRequest ends a request on node i that beginRequest counted: it
// answered (held when the node holds the lock now), failed, or was never
// sent. A node that holds it is marked held, unless the release began; a
// release that waited for the request goes out now.
func (at *attempt) endRequest(i int, held bool) {
	a := at.a
	a.mu.Lock()
	a.busy[i]--
	at.inflight[i]--
	at.wakeLocked()
	markHeld := held && !at.unlocking
	parked := at.unparkLocked(i)
	a.mu.Unlock()
	if markHeld {
		at.lock.markHeld(i)
	}
	if parked != nil {
		at.sendParked(parked)
	}
}

// topUpJob asks node i to take a lock (topup.lua), and reports the answer
// to the lock's attempt. No round waits for it.
type topUpJob struct {
	l   *Lock
	ttl time.Duration
	end time.Time
	i   int
	cmd *redis.Cmd
	evalFallback
}

func (j *topUpJob) Deadline() time.Time { return j.end }
func (j *topUpJob) Fail(error)          { j.l.att.endRequest(j.i, false) }

func (j *topUpJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmd = j.l.evalTopUp(nil, j.eval, j.ttl)
	return append(cmds, j.cmd)
}

func (j *topUpJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	v, err := j.cmd.Int64()
	j.l.att.endRequest(j.i, err == nil && v == 1)
	return false
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
