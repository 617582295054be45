package redlock

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

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
