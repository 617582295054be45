package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// releaseChannel is the pub/sub channel on which Unlock announces the release
// of rkey (see internal/keyspace). On a Redis Cluster node it is a shard
// channel in the key's hash slot.
func releaseChannel(rkey string) string { return keyspace.Channel(rkey) }

// waitlist wakes a Client's waiting Lock calls when their key is released.
// While any of them waits, it holds one subscription connection per node,
// shared by all waiters, and subscribes each node to a key's channel while at
// least one waiter of this Client waits on that key. A channel stays
// subscribed for subLinger after its last waiter left, and the connections
// close once no channel is left, so that an idle Client runs no goroutine.
//
// A release is announced by every node that deleted the key, so a waiter
// learns of it even when some nodes are down. The copies are told apart by
// the released token, and a release wakes one waiter of the Client, the one
// that has waited longest, once a quorum of nodes announced it: before that,
// the key is still held on too many nodes for a retry to win (the quorum
// of the waiters' locks: a semaphore's is larger than a majority). Waking
// every waiter would only have them race each other and split the votes.
// Messages can be lost, and holders can expire instead of unlocking, so
// waiters keep their jittered retry delay as a fallback.
//
// A subscription takes effect when the node confirms it, not when join
// returns. Each waiter has a ready channel, closed once every node confirmed
// its channels (or could not be asked): a release that lands before then
// may not be announced to it, so its first retry waits for ready.
//
// Beside the waiters, which queue for a key, a channel may have watchers
// (an Election's Observe): each is woken by any one announcement on any of
// its channels, from any node, and never takes a waiter's turn. A channel
// stays subscribed while it has a waiter or a watcher.
type waitlist struct {
	c *Client

	mu    sync.Mutex
	keys  map[string]*keyWaiters // guarded by mu; by channel
	subs  []*nodeSub             // guarded by mu; started on first use
	close bool                   // guarded by mu
	sweep *time.Timer            // guarded by mu; set while a sweep is due
}

// subLinger is how long a channel stays subscribed, and the connections
// open, once no waiter of the Client waits on it. Under contention the next
// waiter usually comes within it, and reuses them: opening a connection and
// subscribing again costs each node several commands per Lock call.
const subLinger = time.Second

// keyWaiters are the waiters on one channel, oldest first.
type keyWaiters struct {
	queue []*waiter
	idle  time.Time // when the queue became empty; zero while not empty
	last  string    // the token of the last release announced
	from  []bool    // the nodes that announced it
	count int       // how many did
	// quorum is how many announcements wake a waiter: the largest quorum
	// of the waiters that joined.
	quorum int
	// settled marks the nodes that confirmed the subscription, or that
	// could not be asked; nsettled counts them. pending are the waiters
	// whose ready waits for the rest.
	settled  []bool
	nsettled int
	pending  []*waiter
	// watchers are woken by every announcement on the channel.
	watchers []*watcher
}

// used reports whether a waiter or a watcher still needs the channel.
func (kw *keyWaiters) used() bool { return len(kw.queue) > 0 || len(kw.watchers) > 0 }

// wakeWatchers wakes every watcher of the channel that is not already
// woken.
func (kw *keyWaiters) wakeWatchers() {
	for _, wt := range kw.watchers {
		select {
		case wt.wake <- struct{}{}:
		default:
		}
	}
}

// waiter is one waiting Lock call. A multi-key lock waits on the channel of
// each of its keys.
type waiter struct {
	chans   []string
	wake    chan struct{} // buffered 1
	removed bool          // guarded by waitlist.mu
	// ready is closed once the subscriptions of all the waiter's channels
	// took effect on every node that could be asked.
	ready   chan struct{}
	unready int // guarded by waitlist.mu; channels not yet settled
	// fl is the flavour of the waiting call: readers (a shared flavour)
	// that wait in a row are woken together, since they can all hold the
	// key at once.
	fl *flavour
	// ticket and id order a fair call (WithFair) among the Client's fair
	// waiters as the nodes' queues order it, so that a release wakes the
	// one whose turn it is; ticket is 0 for the other calls, which queue
	// in the order they joined.
	ticket int64
	id     string
}

// nodeSub is the subscription connection to one node. Its control goroutine
// sends SUBSCRIBE and UNSUBSCRIBE, so that a hung node never blocks a
// waiter; its reader goroutine dispatches the messages.
//
// On a Redis Cluster node, releases come on shard channels (see
// releaseChannel), which a master serves for its own slots only: the control
// goroutine subscribes each channel with SSUBSCRIBE on the master of its
// slot, over one connection per master, each with a reader of its own. A
// server without SSUBSCRIBE (before 7.0) announces on the plain channel, and
// the node falls back to it.
type nodeSub struct {
	node int
	ps   *redis.PubSub
	ops  chan subOp
	stop chan struct{} // closed when the connection is no longer wanted

	cluster *redis.ClusterClient // set for a cluster node
	// plain is set once the cluster's servers refused SSUBSCRIBE (before
	// Redis 7.0): the node then uses plain channels, as its servers'
	// release scripts do.
	plain   atomic.Bool
	shards  map[string]*redis.PubSub // by master address; control goroutine only
	shardOf map[string]string        // plain channel → master address; control goroutine only
	// names maps each shard channel to the plain channel waiters know,
	// for the shard readers.
	namesMu sync.Mutex
	names   map[string]string // guarded by namesMu
}

// watcher listens on channels for an Election's Observe: it is woken by
// any announcement on any of them, from any node, outside the waiters'
// queue. Its owner reads what changed itself.
type watcher struct {
	chans   []string
	wake    chan struct{} // buffered 1
	removed bool          // guarded by waitlist.mu
}

type subOp struct {
	subscribe bool
	ch        string
	// moved marks a subscription again after the server dropped it: the
	// channel's slot moved to another master.
	moved bool
}

func newWaitlist(c *Client) *waitlist {
	return &waitlist{c: c, keys: make(map[string]*keyWaiters)}
}

// join adds a waiter for the keys of t, woken once t's quorum of nodes
// announced a release; ticket is a fair call's ticket, and 0 for the other
// calls (see waiter.ticket). The caller must call leave.
func (w *waitlist) join(t *target, ticket int64) *waiter {
	wt := &waiter{
		chans:  t.chans, // never changed
		wake:   make(chan struct{}, 1),
		fl:     t.fl,
		ready:  make(chan struct{}),
		ticket: ticket,
		id:     t.id,
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.close {
		return wt // never woken: the fallback delay still works
	}
	for _, ch := range wt.chans {
		kw := w.channelLocked(ch)
		kw.quorum = max(kw.quorum, t.quorum)
		kw.queue = enqueueWaiter(kw.queue, wt)
		if kw.nsettled < len(kw.settled) {
			wt.unready++
			kw.pending = append(kw.pending, wt)
		}
	}
	if wt.unready == 0 {
		close(wt.ready)
	}
	return wt
}

// enqueueWaiter adds wt to queue: at the end, or for a fair call before
// the first fair waiter that the nodes' queues order after it (by ticket,
// then id, as a sorted set orders equal scores).
func enqueueWaiter(queue []*waiter, wt *waiter) []*waiter {
	if wt.ticket > 0 {
		for i, o := range queue {
			if o.ticket > wt.ticket || o.ticket == wt.ticket && o.id > wt.id {
				return slices.Insert(queue, i, wt)
			}
		}
	}
	return append(queue, wt)
}

// channelLocked returns the waiters of channel ch, and subscribes it on
// every node, opening the connections first, when nobody used it yet. w.mu
// must be held, and the waitlist open. Called from within a Client call
// (see startLocked).
func (w *waitlist) channelLocked(ch string) *keyWaiters {
	if w.subs == nil {
		w.startLocked()
	}
	kw := w.keys[ch]
	if kw == nil {
		kw = &keyWaiters{settled: make([]bool, len(w.subs))}
		w.keys[ch] = kw
		w.sendLocked(subOp{subscribe: true, ch: ch})
	}
	kw.idle = time.Time{}
	return kw
}

// watch adds a watcher of chans, woken by any announcement on any of them.
// The caller must be inside a Client call, and must call unwatch. A watcher
// that joins after Close is never woken.
func (w *waitlist) watch(chans []string) *watcher {
	wt := &watcher{chans: chans, wake: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.close {
		return wt
	}
	for _, ch := range chans {
		kw := w.channelLocked(ch)
		kw.watchers = append(kw.watchers, wt)
	}
	return wt
}

// unwatch removes a watcher. Its channels stay subscribed for subLinger
// once nobody uses them, as a waiter's do.
func (w *waitlist) unwatch(wt *watcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.removed {
		return
	}
	wt.removed = true
	for _, ch := range wt.chans {
		kw := w.keys[ch]
		if kw == nil {
			continue
		}
		if i := slices.Index(kw.watchers, wt); i >= 0 {
			kw.watchers = slices.Delete(kw.watchers, i, i+1)
		}
		w.idleLocked(kw)
	}
}

// idleLocked starts the linger of a channel that nobody uses any more.
// w.mu must be held.
func (w *waitlist) idleLocked(kw *keyWaiters) {
	if !kw.used() {
		// Kept subscribed for subLinger: the sweep drops it.
		kw.idle = time.Now()
		w.armSweepLocked()
	}
}

// settle records that a node confirmed the subscription of a channel, or
// could not be asked (its connection is down), and closes the ready channel
// of the waiters that waited only for that.
func (w *waitlist) settle(ch string, node int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[ch]
	if kw == nil || kw.settled[node] {
		return
	}
	kw.settled[node] = true
	if kw.nsettled++; kw.nsettled < len(kw.settled) {
		return
	}
	for _, wt := range kw.pending {
		if wt.unready--; wt.unready == 0 {
			close(wt.ready)
		}
	}
	kw.pending = nil
}

// waiting reports whether a waiter of this Client waits on one of t's
// keys, that a call of t's flavour should queue behind.
//
// A writer (a flavour that is not shared) does not queue behind readers: it
// marks the key at once, so that new readers wait behind it (writer
// preference).
func (w *waitlist) waiting(t *target) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keys) == 0 {
		return false
	}
	for _, ch := range t.chans {
		if kw := w.keys[ch]; kw != nil && len(kw.queue) > 0 {
			if t.fl.shared || slices.ContainsFunc(kw.queue, func(o *waiter) bool { return !o.fl.shared }) {
				return true
			}
		}
	}
	return false
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
	woken := !won && len(wt.wake) > 0
	for _, ch := range wt.chans {
		kw := w.keys[ch]
		if kw == nil {
			continue
		}
		if i := slices.Index(kw.queue, wt); i >= 0 {
			kw.queue = slices.Delete(kw.queue, i, i+1)
		}
		if woken {
			wakeFirst(kw.queue)
		}
		w.idleLocked(kw)
	}
}

// armSweepLocked makes sure a sweep is due. w.mu must be held.
func (w *waitlist) armSweepLocked() {
	if w.sweep == nil && !w.close {
		w.sweep = time.AfterFunc(subLinger, w.sweepIdle)
	}
}

// sweepIdle unsubscribes the channels no waiter has used for subLinger, and
// closes the connections once no channel is left, so that a Client with no
// waiter runs no goroutine. The next waiter opens them again.
func (w *waitlist) sweepIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweep = nil
	if w.close {
		return
	}
	now, pending := time.Now(), false
	for ch, kw := range w.keys {
		switch {
		case kw.used():
		case now.Sub(kw.idle) >= subLinger:
			delete(w.keys, ch)
			w.sendLocked(subOp{subscribe: false, ch: ch})
		default:
			pending = true
		}
	}
	if len(w.keys) == 0 {
		w.closeSubsLocked()
	}
	if pending {
		w.armSweepLocked()
	}
}

// closeSubsLocked stops the subscription connections and their goroutines.
// w.mu must be held. Each control goroutine closes its connection, which
// ends its reader; neither blocks the caller.
func (w *waitlist) closeSubsLocked() {
	for _, ns := range w.subs {
		close(ns.stop)
	}
	w.subs = nil
}

// startLocked opens the subscription connections. w.mu must be held. Called
// from within a Client call, so the Client's WaitGroup is above zero.
func (w *waitlist) startLocked() {
	c := w.c
	w.subs = make([]*nodeSub, len(c.nodes))
	for i, n := range c.nodes {
		ns := &nodeSub{
			node:    i,
			ps:      n.client.Subscribe(context.Background()),
			ops:     make(chan subOp, 64),
			stop:    make(chan struct{}),
			cluster: n.cluster,
		}
		if n.cluster != nil {
			ns.shards, ns.shardOf, ns.names = map[string]*redis.PubSub{}, map[string]string{}, map[string]string{}
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
// covers the rest (such a node never settles, so its waiters' first retry
// waits for the retry delay).
func (w *waitlist) sendLocked(op subOp) {
	for _, ns := range w.subs {
		select {
		case ns.ops <- op:
		default:
		}
	}
}

// control applies subscription changes to one node until the connection is
// no longer wanted or the Client closes; then it closes the connection.
func (w *waitlist) control(ns *nodeSub) {
	defer w.c.wg.Done()
	defer ns.ps.Close()
	defer func() {
		for _, ps := range ns.shards {
			_ = ps.Close()
		}
	}()
	for {
		select {
		case op := <-ns.ops:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if ns.cluster != nil && !ns.plain.Load() {
				w.shardOp(ctx, ns, op)
				cancel()
				continue
			}
			if op.subscribe {
				if err := ns.ps.Subscribe(ctx, op.ch); err != nil {
					// Not sent: the node is down. go-redis subscribes
					// again when it reconnects.
					w.settle(op.ch, ns.node)
				}
			} else {
				_ = ns.ps.Unsubscribe(ctx, op.ch)
			}
			cancel()
		case <-ns.stop:
			return
		case <-w.c.done:
			return
		}
	}
}

// shardOp applies a subscription change of a cluster node on the shard
// channel. A server that does not know SSUBSCRIBE says so to the reader,
// which then switches the node to plain channels (see toPlain).
func (w *waitlist) shardOp(ctx context.Context, ns *nodeSub, op subOp) {
	sch := op.ch // in the key's slot already
	if !op.subscribe {
		// Forgotten first, so that the reader takes the server's
		// confirmation for ours, not for a slot that moved.
		ns.namesMu.Lock()
		delete(ns.names, sch)
		ns.namesMu.Unlock()
		if ps := ns.shards[ns.shardOf[op.ch]]; ps != nil {
			_ = ps.SUnsubscribe(ctx, sch)
		}
		delete(ns.shardOf, op.ch)
		return
	}
	master, err := ns.cluster.MasterForKey(ctx, sch)
	if op.moved {
		// The cluster client's view of the slots may predate the move:
		// ask the cluster where the slot is now.
		master, err = slotMaster(ctx, ns.cluster, sch)
	}
	if err != nil {
		// The cluster is unreachable: the retry delay covers it.
		w.settle(op.ch, ns.node)
		return
	}
	addr := master.Options().Addr
	ps := ns.shards[addr]
	if ps == nil {
		ps = master.SSubscribe(context.Background())
		ns.shards[addr] = ps
		w.c.wg.Add(1)
		go w.readShard(ns, ps)
	}
	ns.namesMu.Lock()
	ns.names[sch] = op.ch
	ns.namesMu.Unlock()
	ns.shardOf[op.ch] = addr
	if err := ps.SSubscribe(ctx, sch); err != nil { // a refusal comes to the reader
		w.settle(op.ch, ns.node)
	}
}

// unknownCommand reports a server's refusal of a command it does not know.
func unknownCommand(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// toPlain switches a cluster node to plain channels once its server refused
// SSUBSCRIBE: every channel its waiters want is subscribed again, plainly.
func (w *waitlist) toPlain(ns *nodeSub) {
	if ns.plain.Swap(true) {
		return
	}
	ns.namesMu.Lock()
	chans := make([]string, 0, len(ns.names))
	for _, ch := range ns.names {
		chans = append(chans, ch)
	}
	ns.namesMu.Unlock()
	for _, ch := range chans {
		select {
		case ns.ops <- subOp{subscribe: true, ch: ch}:
		default:
		}
	}
}

// slotMaster returns the client of the master that serves ch's slot now,
// as CLUSTER SLOTS tells it.
func slotMaster(ctx context.Context, cc *redis.ClusterClient, ch string) (*redis.Client, error) {
	slot := int(keyspace.Slot(ch))
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	addr := ""
	for _, r := range ranges {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			addr = r.Nodes[0].Addr
		}
	}
	var found *redis.Client
	err = cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			found = m
		}
		return nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("no master serves slot %d", slot)
	}
	return found, err
}

// readShard dispatches the messages of one master's shard channels until
// its connection is closed, under the plain channel names. When the server
// drops a channel that is still wanted (its slot moved to another master),
// it has the control goroutine subscribe it again where the slot is now.
func (w *waitlist) readShard(ns *nodeSub, ps *redis.PubSub) {
	defer w.c.wg.Done()
	for {
		m, err := ps.Receive(context.Background())
		var msg *redis.Message
		switch v := m.(type) {
		case *redis.Message:
			msg = v
		case *redis.Subscription:
			ns.namesMu.Lock()
			ch, wanted := ns.names[v.Channel]
			ns.namesMu.Unlock()
			switch {
			case !wanted:
			case v.Kind == "ssubscribe":
				w.settle(ch, ns.node)
			case v.Kind == "sunsubscribe":
				select {
				case ns.ops <- subOp{subscribe: true, ch: ch, moved: true}:
				default:
				}
			}
			continue
		}
		if err == nil && msg == nil {
			continue // a pong
		}
		if unknownCommand(err) {
			w.toPlain(ns) // a server before Redis 7.0
			continue
		}
		if err != nil {
			if !w.backoff(ns) {
				return
			}
			continue
		}
		ns.namesMu.Lock()
		ch, ok := ns.names[msg.Channel]
		ns.namesMu.Unlock()
		if ok {
			w.dispatch(ch, msg.Payload, ns.node)
		}
	}
}

// read dispatches one node's messages until its connection is closed.
func (w *waitlist) read(ns *nodeSub) {
	defer w.c.wg.Done()
	for {
		m, err := ns.ps.Receive(context.Background())
		if err != nil {
			// The node is down or the connection broke: go-redis
			// reconnects and resubscribes on the next receive.
			if !w.backoff(ns) {
				return
			}
			continue
		}
		switch v := m.(type) {
		case *redis.Message:
			w.dispatch(v.Channel, v.Payload, ns.node)
		case *redis.Subscription:
			if v.Kind == "subscribe" {
				w.settle(v.Channel, ns.node)
			}
		}
	}
}

// backoff waits a moment before a reader receives again after an error. It
// returns false when the connection is no longer wanted or the Client
// closed: the reader then ends.
func (w *waitlist) backoff(ns *nodeSub) bool {
	select {
	case <-ns.stop:
		return false
	case <-w.c.done:
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}

// dispatch counts one node's announcement of a release, and wakes the oldest
// waiter on the channel when a quorum of nodes has announced it. Every
// announcement wakes the channel's watchers.
func (w *waitlist) dispatch(ch, released string, node int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[ch]
	if kw == nil {
		return
	}
	kw.wakeWatchers()
	if kw.last != released || kw.from == nil {
		kw.last, kw.from, kw.count = released, make([]bool, len(w.c.nodes)), 0
	}
	if kw.from[node] {
		return
	}
	kw.from[node] = true
	if kw.count++; kw.count == kw.quorum {
		wakeFirst(kw.queue)
	}
}

// releasedLocally wakes the oldest waiter on each of the keys, for a release
// of value that this Client confirmed on a quorum, and counts the release as
// announced, so that its announcements do not wake another waiter. It wakes
// the keys' watchers too: the release may go unannounced.
func (w *waitlist) releasedLocally(rkeys []string, value string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keys) == 0 {
		return
	}
	for _, rk := range rkeys {
		kw := w.keys[releaseChannel(rk)]
		if kw == nil {
			continue
		}
		kw.wakeWatchers()
		if len(kw.queue) == 0 {
			continue
		}
		if kw.last == value && kw.count >= kw.quorum {
			continue // already announced by a quorum
		}
		if kw.last != value || kw.from == nil {
			kw.last, kw.from = value, make([]bool, len(w.c.nodes))
		}
		kw.count = kw.quorum + len(w.c.nodes) // past the quorum for good
		wakeFirst(kw.queue)
	}
}

// wakeFirst wakes the oldest waiter that is not already woken. When that is
// a reader, the readers right behind it are woken too: they can share.
func wakeFirst(queue []*waiter) {
	for i, wt := range queue {
		select {
		case wt.wake <- struct{}{}:
			if wt.fl.shared {
				for _, o := range queue[i+1:] {
					if !o.fl.shared {
						break
					}
					select {
					case o.wake <- struct{}{}:
					default:
					}
				}
			}
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
	defer w.mu.Unlock()
	w.close = true
	if w.sweep != nil {
		w.sweep.Stop()
		w.sweep = nil
	}
	w.closeSubsLocked()
}
