package redlock

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestWaiterWakesOnRelease(t *testing.T) {
	forEachBackend(t, "wake", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients)
		holder, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		// Waiters whose fallback delay is far longer than the test: only the
		// release message can wake them in time.
		other := newClient(t, ownClients(t, n.clients))
		got := make(chan error, 1)
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			l, err := other.Lock(t.Context(), n.key, WithRetryDelay(time.Minute, time.Minute))
			if err == nil {
				err = l.Unlock(t.Context())
			}
			got <- err
		}()
		<-waiting
		// Wait until the waiter is subscribed on every node.
		require.Eventually(t, func() bool { return subscribed(t, n.clients, n.key) }, 5*time.Second, time.Millisecond)
		require.NoError(t, holder.Unlock(t.Context()))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter did not wake on release")
		}
	})
}

func TestWaiterFallsBackToDelayWithoutMessage(t *testing.T) {
	forEachBackend(t, "no-message", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithRetryDelay(5*time.Millisecond, 10*time.Millisecond))
		holder, err := c.TryLock(t.Context(), n.key, WithTTL(time.Minute))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return n.keyOn(0) && n.keyOn(1) && n.keyOn(2) && n.keyOn(3) && n.keyOn(4) }, 5*time.Second, time.Millisecond)
		got := make(chan error, 1)
		go func() {
			l, err := c.Lock(t.Context(), n.key)
			if err == nil {
				err = l.Unlock(t.Context())
			}
			got <- err
		}()
		time.Sleep(30 * time.Millisecond)
		// The holder vanishes without a release message, as an expiry would.
		for i := range 5 {
			n.drop(i)
		}
		require.NoError(t, <-got)
		_ = holder
	})
}

// TestWokenWaiterHandsOnLocally: a waiter woken by a release takes the lock
// without marking the key (that release deleted the marker), so its own
// release is not announced; its Unlock wakes the Client's next waiter
// itself. Both waiters' retry delays are a minute: only a wake-up gets them
// the lock in time.
func TestWokenWaiterHandsOnLocally(t *testing.T) {
	_, cs := realNodes(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Minute, time.Minute))
	holder, err := c.Lock(t.Context(), "handoff")
	require.NoError(t, err)
	order := make(chan int, 2)
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			l, err := c.Lock(t.Context(), "handoff")
			if err == nil {
				order <- w
				time.Sleep(10 * time.Millisecond)
				err = l.Unlock(t.Context())
			}
			errs <- err
		}()
		// The second waiter joins after the first.
		require.Eventually(t, func() bool {
			c.waitlist.mu.Lock()
			defer c.waitlist.mu.Unlock()
			kw := c.waitlist.keys[releaseChannel("handoff")]
			return kw != nil && len(kw.queue) == w+1
		}, 5*time.Second, time.Millisecond)
	}
	require.NoError(t, holder.Unlock(t.Context()))
	for range 2 {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not woken: it would have waited for its one-minute retry")
		}
	}
	require.Equal(t, 0, <-order, "the waiters take the lock in the order they came")
	require.Equal(t, 1, <-order)
}

func TestOneSubscriptionPerNodePerClient(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs, WithRetryDelay(time.Second, time.Second))
	holders := make([]*Lock, 3)
	for k := range holders {
		var err error
		holders[k], err = c.TryLock(t.Context(), fmt.Sprintf("subs-%d", k))
		require.NoError(t, err)
	}
	var waiting atomic.Int32
	done := make(chan error, 12)
	for k := range 12 {
		go func() {
			waiting.Add(1)
			l, err := c.Lock(t.Context(), fmt.Sprintf("subs-%d", k%3))
			if err == nil {
				err = l.Unlock(t.Context())
			}
			done <- err
		}()
	}
	for _, key := range []string{"subs-0", "subs-1", "subs-2"} {
		require.Eventually(t, func() bool { return subscribed(t, cs, key) }, 5*time.Second, time.Millisecond)
	}
	for i, s := range srv {
		n, err := s.NewClient(t).PubSubNumSub(t.Context(), releaseChannel("subs-0")).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n[releaseChannel("subs-0")], "node %d: 4 waiters of one Client share one subscription", i)
		clients, err := s.NewClient(t).ClientList(t.Context()).Result()
		require.NoError(t, err)
		require.Equal(t, 1, countSubscribers(clients), "node %d: got %d subscription connections, want 1", i, countSubscribers(clients))
	}
	for _, h := range holders {
		require.NoError(t, h.Unlock(t.Context()))
	}
	for range 12 {
		require.NoError(t, <-done)
	}
}

// countSubscribers counts the connections in a CLIENT LIST reply that are in
// subscriber mode.
func countSubscribers(list string) int {
	n := 0
	for _, line := range splitLines(list) {
		if containsField(line, "sub=") && !containsField(line, "sub=0") {
			n++
		}
	}
	return n
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func containsField(line, f string) bool {
	for i := 0; i+len(f) <= len(line); i++ {
		if line[i:i+len(f)] == f && (i == 0 || line[i-1] == ' ') {
			return true
		}
	}
	return false
}

// slowSubscribeConn delays every write that subscribes to a channel: a node
// that is slow to take a subscription into effect.
type slowSubscribeConn struct {
	net.Conn
	delay time.Duration
}

func (c slowSubscribeConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) {
		time.Sleep(c.delay)
	}
	return c.Conn.Write(b)
}

// slowSubscribers opens go-redis clients to the servers of cs whose
// subscriptions reach the server delay late.
func slowSubscribers(t *testing.T, cs []redis.UniversalClient, delay time.Duration) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(cs))
	for i, rc := range cs {
		var d net.Dialer
		c := redis.NewClient(&redis.Options{
			Addr: rc.(*redis.Client).Options().Addr,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return slowSubscribeConn{Conn: conn, delay: delay}, nil
			},
		})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

// A release that lands after a waiter's failed attempt but before its
// subscription took effect is announced to nobody. The waiter's next
// attempt must come after the subscription took effect, or it waits out its
// whole retry delay. Here the holder releases right after the waiter's
// second attempt; with that attempt sent before the (delayed) SUBSCRIBE
// reached the nodes, the waiter would sleep 10 s.
func TestFirstRetryWaitsForTheSubscription(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs)
	holder, err := c.TryLock(t.Context(), "sub-race")
	require.NoError(t, err)

	rec := &recorder{}
	other := newClient(t, slowSubscribers(t, cs, 500*time.Millisecond),
		WithObserver(rec), WithRetryDelay(10*time.Second, 10*time.Second))
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		l, err := other.Lock(ctx, "sub-race")
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		attempts, _, _, _ := rec.counts()
		return attempts >= 2
	}, 5*time.Second, time.Millisecond, "the waiter did not retry once subscribed")
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-got, "the release was not announced to the waiter")
}

// holdRequests is a go-redis hook that holds the requests it matches for a
// while before sending them: a node that applies them late.
type holdRequests struct {
	match func(redis.Cmder) bool
	delay time.Duration
}

func (h holdRequests) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h holdRequests) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) {
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}
func (h holdRequests) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.match(cmd) {
				time.Sleep(h.delay)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// A semaphore's permit is free for a waiter once it is free on the
// semaphore's quorum (4 of 5 for 2 permits), not on a majority. A waiter
// woken by 3 announcements retries while 2 nodes are still full, fails, and
// sleeps its whole retry delay.
func TestSemaphoreWaiterWakesAtItsQuorum(t *testing.T) {
	_, cs := minis(t, 5)
	// The holder's releases reach node 3 after 300 ms and node 4 after
	// 600 ms.
	hcs := ownClients(t, cs)
	isRelease := func(cmd redis.Cmder) bool { return isScript(cmd, scriptSemRelease) }
	hcs[3].AddHook(holdRequests{match: isRelease, delay: 300 * time.Millisecond})
	hcs[4].AddHook(holdRequests{match: isRelease, delay: 600 * time.Millisecond})
	c := newClient(t, hcs)
	a, b := takeBothPermits(t, c, cs, "sem-quorum-wake")

	other := newClient(t, cs, WithRetryDelay(10*time.Second, 10*time.Second))
	so, err := other.Semaphore("sem-quorum-wake", 2)
	require.NoError(t, err)
	got := acquireAndUnlock(t, so, 5*time.Second)
	require.Eventually(t, func() bool { return marked(t, cs, "sem-quorum-wake") }, 5*time.Second, time.Millisecond)
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, <-got, "the waiter was not woken when a quorum of nodes had a free permit")
	require.NoError(t, b.Unlock(t.Context()))
}
