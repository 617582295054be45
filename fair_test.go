package redlock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// fairWaiter is one waiting fair Lock call of a test: it reports its
// places, and its lock once it got it.
type fairWaiter struct {
	place  atomic.Int64 // the last place it was told
	queued chan struct{}
	done   chan struct{}
	lock   *Lock
	err    error
	cancel context.CancelFunc
}

// startFairWaiter starts a fair Lock of key on c, and waits until it is
// queued (a quorum told it a place).
func startFairWaiter(t *testing.T, c *Client, key string, opts ...LockOption) *fairWaiter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &fairWaiter{queued: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	opts = append([]LockOption{WithFair(true), WithQueuePlace(func(p int) {
		if w.place.Swap(int64(p)) == 0 {
			close(w.queued)
		}
	})}, opts...)
	go func() {
		defer close(w.done)
		w.lock, w.err = c.Lock(ctx, key, opts...)
	}()
	select {
	case <-w.queued:
	case <-w.done:
		t.Fatalf("the fair Lock returned before it was queued: %v", w.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the fair Lock was not queued within 10s")
	}
	return w
}

// grantOrder releases holder, and returns the order in which the waiters
// got the lock; each releases it at once.
func grantOrder(t *testing.T, holder *Lock, ws []*fairWaiter) []int {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-w.done
			if w.err != nil {
				t.Errorf("waiter %d: %v", i, w.err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, w.lock.Unlock(ctx))
		}()
	}
	require.NoError(t, holder.Unlock(ctx))
	wg.Wait()
	return order
}

// TestFairFIFOAcrossClients queues eight fair Lock calls of eight Clients
// in turn behind a holder, and checks that they get the lock in that order.
// Its negative control makes each call draw a ticket below the last one
// (the hook ticketOf): the order is then reversed, so the check can fail.
func TestFairFIFOAcrossClients(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	for _, control := range []bool{false, true} {
		name := "fair"
		if control {
			name = "negative control: tickets that go down"
		}
		t.Run(name, func(t *testing.T) {
			srv, _ := realNodes(t, 5)
			const n = 8
			cl := realClients(t, srv, n+1, WithTTL(5*time.Second))
			if control {
				var next atomic.Int64
				next.Store(1 << 40)
				for _, c := range cl {
					c.hooks.ticketOf = func(int64) int64 { return next.Add(-1) }
				}
			}
			ctx := context.Background()
			const key = "fair:fifo"
			holder, err := cl[n].Lock(ctx, key, WithFair(true))
			require.NoError(t, err)

			ws := make([]*fairWaiter, n)
			for i := range n {
				ws[i] = startFairWaiter(t, cl[i], key)
			}
			order := grantOrder(t, holder, ws)
			want := []int{0, 1, 2, 3, 4, 5, 6, 7}
			if control {
				assert.NotEqual(t, want, order, "with tickets that go down the queue is out of order")
				return
			}
			assert.Equal(t, want, order, "granted in the order the calls were queued")
		})
	}
}

// TestFairPlaces checks that each queued call learns its place, that the
// places count down as the calls ahead get the lock, and that Inspect
// counts the waiters.
func TestFairPlaces(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	cl := realClients(t, srv, 4, WithTTL(5*time.Second))
	ctx := context.Background()
	const key = "fair:places"
	holder, err := cl[3].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	ws := make([]*fairWaiter, 3)
	for i := range ws {
		ws[i] = startFairWaiter(t, cl[i], key)
	}
	// The last one queued is third.
	require.Eventually(t, func() bool { return ws[2].place.Load() == 3 }, 5*time.Second, 10*time.Millisecond)
	h, err := cl[3].Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, 3, h.Waiters, "Inspect counts the queued calls")

	require.NoError(t, holder.Unlock(ctx))
	<-ws[0].done
	require.NoError(t, ws[0].err)
	// The third is second now.
	require.Eventually(t, func() bool { return ws[2].place.Load() == 2 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, ws[0].lock.Unlock(ctx))
	for _, w := range ws[1:] {
		<-w.done
		require.NoError(t, w.err)
		require.NoError(t, w.lock.Unlock(ctx))
	}
	h, err = cl[3].Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, 0, h.Waiters, "nobody waits")
}

// TestFairLeavesAtOnce cancels the head of the queue: the call behind it
// gets the lock as soon as the holder releases, not a TTL later when the
// head's entry would expire.
func TestFairLeavesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	const ttl = 20 * time.Second
	cl := realClients(t, srv, 3, WithTTL(ttl))
	ctx := context.Background()
	const key = "fair:leave"
	holder, err := cl[2].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	head := startFairWaiter(t, cl[0], key)
	next := startFairWaiter(t, cl[1], key)
	head.cancel()
	<-head.done
	require.ErrorIs(t, head.err, context.Canceled)
	start := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	select {
	case <-next.done:
	case <-time.After(ttl / 2):
		t.Fatalf("the next call did not get the lock within %v of the release: the cancelled head still holds the queue", ttl/2)
	}
	require.NoError(t, next.err)
	t.Logf("the next call got the lock %v after the release", time.Since(start))
	require.NoError(t, next.lock.Unlock(ctx))
}

// TestFairCrashedWaiterHoldsAtMostOneTTL puts the entry of a call that
// crashed at the head of every node's queue, as its last attempt left it:
// a waiter behind it gets the lock once the entry expired, one TTL after it
// was written, and not before.
func TestFairCrashedWaiterHoldsAtMostOneTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	const ttl = 2 * time.Second
	cl := realClients(t, srv, 1, WithTTL(ttl))
	ctx := context.Background()
	const key = "fair:crashed"
	crashed := time.Now()
	for _, s := range srv {
		rc := s.NewClient(t)
		now, err := rc.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, rc.ZAdd(ctx, keyspace.Queue(key), redis.Z{Score: 1, Member: "ghost"}).Err())
		require.NoError(t, rc.ZAdd(ctx, keyspace.Deadline(key), redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: "ghost"}).Err())
	}
	l, err := cl[0].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	waited := time.Since(crashed)
	t.Logf("got the lock %v after the crashed call's last attempt", waited)
	assert.GreaterOrEqual(t, waited, ttl-100*time.Millisecond, "the crashed call's entry held the queue until it expired")
	assert.Less(t, waited, ttl+3*time.Second, "and no longer than its TTL and a few retries")
	require.NoError(t, l.Unlock(ctx))
}

// TestFairExcludesPlain checks that a fair lock and a plain lock of one key
// exclude each other, both ways.
func TestFairExcludesPlain(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	cl := realClients(t, srv, 2)
	ctx := context.Background()
	const key = "fair:plain"
	fair, err := cl[0].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	_, err = cl[1].TryLock(ctx, key)
	require.ErrorIs(t, err, ErrNotAcquired, "a plain lock waits for a fair holder")
	require.NoError(t, fair.Unlock(ctx))

	plain, err := cl[1].Lock(ctx, key)
	require.NoError(t, err)
	_, err = cl[0].TryLock(ctx, key, WithFair(true))
	require.ErrorIs(t, err, ErrNotAcquired, "a fair lock waits for a plain holder")
	w := startFairWaiter(t, cl[0], key)
	require.NoError(t, plain.Unlock(ctx))
	<-w.done
	require.NoError(t, w.err)
	require.NoError(t, w.lock.Unlock(ctx))
}

// TestFairTryLockDoesNotJumpQueue checks that TryLock with WithFair takes a
// free key only when nobody is queued, and does not queue itself.
func TestFairTryLockDoesNotJumpQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	cl := realClients(t, srv, 3, WithTTL(5*time.Second))
	ctx := context.Background()
	const key = "fair:try"
	l, err := cl[0].TryLock(ctx, key, WithFair(true))
	require.NoError(t, err, "a free key with nobody queued")
	w := startFairWaiter(t, cl[1], key)
	require.NoError(t, l.Unlock(ctx))
	<-w.done
	require.NoError(t, w.err)
	// Held by w; a second waiter queues; w releases; a TryLock in the
	// window before the queued call wins must not take the key.
	w2 := startFairWaiter(t, cl[0], key)
	h, err := cl[2].Inspect(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 1, h.Waiters)
	w2.cancel() // keep it from winning: its leave must empty the queue
	<-w2.done
	require.NoError(t, w.lock.Unlock(ctx))
	l, err = cl[2].TryLock(ctx, key, WithFair(true))
	require.NoError(t, err, "the queue is empty again")
	require.NoError(t, l.Unlock(ctx))

	// Now with a live waiter queued behind a holder: TryLock fails while
	// the key is free between the holder's release and the waiter's win is
	// too narrow to hit, so check the queued state directly: a node with a
	// live entry refuses an unticketed attempt even on a free key.
	holder, err := cl[0].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	w3 := startFairWaiter(t, cl[1], key)
	// Free the key on every node behind the holder's back: the queue alone
	// must keep TryLock out.
	for _, s := range srv {
		require.NoError(t, s.NewClient(t).Del(ctx, key).Err())
	}
	_, err = cl[2].TryLock(ctx, key, WithFair(true))
	require.ErrorIs(t, err, ErrNotAcquired, "a fair TryLock does not jump the queue")
	h, err = cl[2].Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, 1, h.Waiters, "and does not queue itself")
	<-w3.done
	require.NoError(t, w3.err)
	require.NoError(t, w3.lock.Unlock(ctx))
	_ = holder.Unlock(ctx)
}

// TestFairRefusals checks the options a fair lock refuses.
func TestFairRefusals(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"multi-key": func() error { _, err := c.LockMulti(ctx, []string{"a", "b"}, WithFair(true)); return err },
		"owner":     func() error { _, err := c.Lock(ctx, "a", WithFair(true), WithOwner("o")); return err },
		"rlock":     func() error { _, err := c.RLock(ctx, "a", WithFair(true)); return err },
		"semaphore": func() error {
			s, err := c.Semaphore("s", 2)
			if err != nil {
				return err
			}
			_, err = s.Acquire(ctx, WithFair(true))
			return err
		},
		"queue place without fair": func() error { _, err := c.Lock(ctx, "a", WithQueuePlace(func(int) {})); return err },
	} {
		err := call()
		assert.ErrorIs(t, err, ErrInvalidOption, name)
		assert.ErrorContains(t, err, "WithFair", name)
	}
}

// TestFairMinorityDown checks that fair calls keep their order with two of
// five nodes down.
func TestFairMinorityDown(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 5)
	cl := realClients(t, srv, 4, WithTTL(5*time.Second))
	ctx := context.Background()
	const key = "fair:minority"
	srv[3].Kill()
	srv[4].Kill()
	holder, err := cl[3].Lock(ctx, key, WithFair(true))
	require.NoError(t, err)
	ws := make([]*fairWaiter, 3)
	for i := range ws {
		start := time.Now()
		ws[i] = startFairWaiter(t, cl[i], key)
		t.Logf("waiter %d queued in %v", i, time.Since(start))
	}
	assert.Equal(t, []int{0, 1, 2}, grantOrder(t, holder, ws))
}

// TestFairScripts checks fairacquire.lua, fairleave.lua and ticket.lua on
// one node: who may take the key, the places, the leave's announcement, the
// tombstone, the expiry of a crashed call's entry, and a copy of an attempt.
func TestFairScripts(t *testing.T) {
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := context.Background()
	now := time.Now()
	m.SetTime(now)
	const key = "fair:scripts"
	const ttl = 10 * time.Second
	n := &node{shardArg: "0"}
	calls := map[string]*target{}
	call := func(name string) *target {
		if calls[name] == nil {
			calls[name] = newTarget(fairFlavour, []string{key}, name+"-0000-4000-8000-000000000000", "", false, 1)
		}
		return calls[name]
	}
	var first int64 // the first ticket; the calls' tickets are counted from it
	attempt := func(name string, ticket int64, n int) int64 {
		t.Helper()
		tg := call(name)
		tk := attemptToken(tg.id, n, "")
		if ticket > 0 {
			ticket += first
		}
		tk.ticket = strconv.FormatInt(ticket, 10)
		cmd := tg.evalAcquire(true, tk, ttl, ttl.Milliseconds(), &testHooks{})
		require.NoError(t, rc.Process(ctx, cmd))
		v, err := cmd.Int64()
		require.NoError(t, err)
		return v
	}
	release := func(name string, n int) {
		t.Helper()
		tg := call(name)
		require.NoError(t, rc.Process(ctx, tg.evalRelease(nil, true, &node{shardArg: "0"}, attemptToken(tg.id, n, "").arg, false)))
	}
	leave := func(name string, announce bool) int64 {
		t.Helper()
		tg := call(name)
		cmd := redis.NewCmd(ctx, append(withKeys(evalStart(nil, scriptFairLeave, true), tg.fair.leave), tg.id, ttl.Milliseconds(), tg.channel(announce), n.shardArg)...)
		require.NoError(t, rc.Process(ctx, cmd))
		v, err := cmd.Int64()
		require.NoError(t, err)
		return v
	}

	tk := redis.NewCmd(ctx, withKeys(evalStart(nil, scriptTicket, true), call("a").fair.ticket)...)
	require.NoError(t, rc.Process(ctx, tk))
	var err error
	first, err = tk.Int64()
	require.NoError(t, err)
	require.Greater(t, first, int64(1_000_000_000_000_000), "a new counter starts at the node's clock in microseconds")

	assert.EqualValues(t, 1, attempt("a", 0, 0), "no ticket, nobody queued, a free key: taken")
	release("a", 0)
	assert.EqualValues(t, 1, attempt("a", 100, 1), "the head of the queue takes a free key")
	assert.Equal(t, strconv.FormatInt(first+100, 10), rc.Get(ctx, keyspace.Ticket(key)).Val(), "the ticket is written back")
	release("a", 1) // a rolled-back minority yes: a stays queued
	assert.EqualValues(t, -2, attempt("b", 200, 0), "the second in the queue does not take a free key")
	drawn := attempt("c", 0, 0)
	assert.Less(t, drawn, -first, "no ticket and someone queued: refused, with a ticket drawn above the first")
	assert.Equal(t, strconv.FormatInt(-drawn, 10), rc.Get(ctx, keyspace.Ticket(key)).Val(), "the counter it drew")
	assert.Zero(t, rc.ZScore(ctx, keyspace.Queue(key), call("c").id).Val())

	ps := rc.Subscribe(ctx, keyspace.Channel(key))
	defer ps.Close()
	_, err = ps.Receive(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, leave("a", true), "a leaves")
	msg, err := ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "!"+call("a").id, msg.Payload, "the head's leave from a free key is announced")
	assert.EqualValues(t, 0, attempt("a", 100, 2), "a late copy of the call that left does not queue it again")
	assert.EqualValues(t, 1, attempt("b", 200, 1), "b is the head now")
	assert.EqualValues(t, 1, attempt("b", 200, 1), "a copy of the winning attempt counts as taken")
	assert.EqualValues(t, 1, leave("b", false), "the winner leaves the queue")

	assert.EqualValues(t, -1, attempt("e", 50, 0), "e queues at the head, the key held by b")
	assert.EqualValues(t, -2, attempt("d", 300, 0), "d behind it")
	m.SetTime(now.Add(ttl + time.Second)) // e crashed: its entry expires
	assert.EqualValues(t, -1, attempt("d", 300, 1), "d is the head once e's entry expired")
	release("b", 1)
	assert.EqualValues(t, 1, attempt("d", 300, 2), "and takes the key")
}
