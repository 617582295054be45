package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseChannel is the pub/sub channel on which Unlock announces the release
// of a Redis key. Waiters subscribe to it to retry at once.
func releaseChannel(rkey string) string { return "redlock:released:" + rkey }

// waitlist wakes a Client's waiting Lock calls when their key is released. It
// holds one subscription connection per node, shared by all waiters, and
// subscribes each node to a key's channel while at least one waiter of this
// Client waits on that key.
//
// A release is announced on every node, so a waiter learns of it even when
// some nodes are down; the copies are told apart by the released token, and
// each release wakes one waiter of the Client, the one that has waited
// longest. Waking them all would only have them race each other and split
// the votes. Messages can be lost, and holders can expire instead of
// unlocking, so waiters keep their jittered retry delay as a fallback.
type waitlist struct {
	c *Client

	mu    sync.Mutex
	keys  map[string]*keyWaiters // guarded by mu; by channel
	subs  []*nodeSub             // guarded by mu; started on first use
	close bool                   // guarded by mu
}

// keyWaiters are the waiters on one channel, oldest first.
type keyWaiters struct {
	queue []*waiter
	last  string // the last release seen, so its copies wake no one
}

// waiter is one waiting Lock call.
type waiter struct {
	ch      string
	wake    chan struct{} // buffered 1
	removed bool          // guarded by waitlist.mu
}

// nodeSub is the subscription connection to one node. Its control goroutine
// sends SUBSCRIBE and UNSUBSCRIBE, so that a hung node never blocks a
// waiter; its reader goroutine dispatches the messages.
type nodeSub struct {
	ps  *redis.PubSub
	ops chan subOp
}

type subOp struct {
	subscribe bool
	ch        string
}

func newWaitlist(c *Client) *waitlist {
	return &waitlist{c: c, keys: make(map[string]*keyWaiters)}
}

// join adds a waiter for rkey. The caller must call leave.
func (w *waitlist) join(rkey string) *waiter {
	wt := &waiter{ch: releaseChannel(rkey), wake: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.close {
		return wt // never woken: the fallback delay still works
	}
	if w.subs == nil {
		w.startLocked()
	}
	kw := w.keys[wt.ch]
	if kw == nil {
		kw = &keyWaiters{}
		w.keys[wt.ch] = kw
		w.sendLocked(subOp{subscribe: true, ch: wt.ch})
	}
	kw.queue = append(kw.queue, wt)
	return wt
}

// leave removes a waiter. When it was woken but gave up without retrying,
// the wake-up passes to the next waiter, so that the release is not lost.
func (w *waitlist) leave(wt *waiter, won bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.removed {
		return
	}
	wt.removed = true
	kw := w.keys[wt.ch]
	if kw == nil {
		return
	}
	for i, x := range kw.queue {
		if x == wt {
			kw.queue = append(kw.queue[:i], kw.queue[i+1:]...)
			break
		}
	}
	if !won && len(wt.wake) > 0 {
		wakeFirst(kw.queue)
	}
	if len(kw.queue) == 0 {
		delete(w.keys, wt.ch)
		if !w.close {
			w.sendLocked(subOp{subscribe: false, ch: wt.ch})
		}
	}
}

// startLocked opens the subscription connections. w.mu must be held. Called
// from within a Client call, so the Client's WaitGroup is above zero.
func (w *waitlist) startLocked() {
	c := w.c
	w.subs = make([]*nodeSub, len(c.nodes))
	for i, n := range c.nodes {
		ns := &nodeSub{
			ps:  n.client.Subscribe(context.Background()),
			ops: make(chan subOp, 64),
		}
		w.subs[i] = ns
		c.wg.Add(2)
		go w.control(ns)
		go w.read(ns)
	}
}

// sendLocked queues a subscription change on every node. w.mu must be held.
// When a node's queue is full (the node is hung), the change is dropped for
// that node: the other nodes still carry the messages, and the retry delay
// covers the rest.
func (w *waitlist) sendLocked(op subOp) {
	for _, ns := range w.subs {
		select {
		case ns.ops <- op:
		default:
		}
	}
}

// control applies subscription changes to one node until the Client closes.
func (w *waitlist) control(ns *nodeSub) {
	defer w.c.wg.Done()
	for {
		select {
		case op := <-ns.ops:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if op.subscribe {
				_ = ns.ps.Subscribe(ctx, op.ch)
			} else {
				_ = ns.ps.Unsubscribe(ctx, op.ch)
			}
			cancel()
		case <-w.c.done:
			return
		}
	}
}

// read dispatches one node's messages until the Client closes.
func (w *waitlist) read(ns *nodeSub) {
	defer w.c.wg.Done()
	for {
		msg, err := ns.ps.ReceiveMessage(context.Background())
		if err != nil {
			select {
			case <-w.c.done:
				return
			case <-time.After(100 * time.Millisecond):
				// The node is down or the connection broke: go-redis
				// reconnects and resubscribes on the next receive.
				continue
			}
		}
		w.dispatch(msg.Channel, msg.Payload)
	}
}

// dispatch wakes the oldest waiter on a channel, once per release.
func (w *waitlist) dispatch(ch, released string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[ch]
	if kw == nil || kw.last == released {
		return
	}
	kw.last = released
	wakeFirst(kw.queue)
}

// wakeFirst wakes the oldest waiter that is not already woken.
func wakeFirst(queue []*waiter) {
	for _, wt := range queue {
		select {
		case wt.wake <- struct{}{}:
			return
		default:
			// Already woken and not yet retried: try the next one.
		}
	}
}

// shutdown closes the subscription connections; called by Client.Close,
// which then waits for the goroutines.
func (w *waitlist) shutdown() {
	w.mu.Lock()
	w.close = true
	subs := w.subs
	w.mu.Unlock()
	for _, ns := range subs {
		_ = ns.ps.Close()
	}
}
