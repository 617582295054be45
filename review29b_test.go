package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// The second adversarial review of issue 29: the fair lock's later changes
// (tickets drawn by refusals, the waiting marker, TTL/4 pauses, the stale
// rule). Each test reproduces one defect on real redis-servers.

// TestReview29bFairGiveUpSilencesTheNextRelease: queued fair attempts set
// the key's waiting marker so that "every release of a key with a queue is
// announced", and the calls behind place 2 count on that, pausing a quarter
// of the TTL. But a fair call that gives up takes the marker back (the
// writers' unmark, redlock.go acquireTarget's defer; fairFlavour.unmark is
// set). a and b, ahead of c, give up while h holds the key; c, now the
// head, still pauses TTL/4 (its last place was 3). h's release finds no
// marker and is not announced: the key stays free for most of a quarter
// TTL with a live waiter at the head of every queue.
func TestReview29bFairGiveUpSilencesTheNextRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, cs := realNodes(t, 3)
	cl := realClients(t, srv, 4)
	ctx := context.Background()
	const key = "rev29b:fair:unmark"
	const ttl = 20 * time.Second // c pauses ttl/4 = 5s
	fast := WithRetryDelay(50*time.Millisecond, 100*time.Millisecond)

	h, err := cl[0].Lock(ctx, key, WithTTL(ttl))
	require.NoError(t, err)
	a := startFairWaiter(t, cl[1], key, WithTTL(ttl), fast)
	defer a.cancel()
	b := startFairWaiter(t, cl[2], key, WithTTL(ttl), fast)
	defer b.cancel()
	c := startFairWaiter(t, cl[3], key, WithTTL(ttl), fast)
	defer c.cancel()
	require.Equal(t, int64(3), c.place.Load(), "c was queued behind a and b")
	queuedAt := time.Now() // c's attempt; its next comes ttl/4 later

	a.cancel()
	b.cancel()
	<-a.done
	<-b.done
	// Their leaves and unmarks are sent without waiting for the replies.
	for i, rc := range cs {
		require.Eventually(t, func() bool {
			return rc.ZCard(ctx, keyspace.Queue(key)).Val() == 1
		}, 2*time.Second, time.Millisecond, "node %d: a and b left", i)
	}
	time.Sleep(100 * time.Millisecond) // their unmarks land
	for i, rc := range cs {
		t.Logf("node %d: waiting marker present: %d", i, rc.Exists(ctx, keyspace.Waiting(key)).Val())
	}
	require.Less(t, time.Since(queuedAt), ttl/8, "too slow a machine: c's next attempt may come before the release")

	released := time.Now()
	require.NoError(t, h.Unlock(ctx))
	const soon = 2 * time.Second // a wake-up takes milliseconds
	select {
	case <-c.done:
		require.NoError(t, c.err)
		require.NoError(t, c.lock.Unlock(ctx))
		t.Logf("c got the lock %v after the release", time.Since(released))
	case <-time.After(soon):
		<-c.done
		if c.err == nil {
			_ = c.lock.Unlock(ctx)
		}
		t.Fatalf("c, the head of every queue, got the lock %v after h's release of a free key, not at a wake-up: "+
			"a and b, giving up, deleted the waiting marker, h's release was not announced, and c paused ttl/4 = %v",
			time.Since(released).Round(time.Millisecond), ttl/4)
	}
}

// TestReview29bFairStallUnderHalfTTLReorders: the stale rule (fair.go
// acquisition.stale) drops a call's ticket once no quorum has answered its
// queued attempts for half a TTL. It counts the time the call itself did
// not ask: a waiter stalled for 0.65 TTL between two attempts (here its
// WithQueuePlace function; a GC pause or a stopped container does the
// same), with every node up and its entries alive on all of them, draws a
// new ticket behind b, which began to wait after it. docs/FAIRNESS.md names
// only a waiter that stopped refreshing for a whole TTL, or one cut off from
// most nodes, as one that loses its place.
func TestReview29bFairStallUnderHalfTTLReorders(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 3)
	ctx := context.Background()
	const key = "rev29b:fair:stall"
	const ttl = 2 * time.Second
	fast := WithRetryDelay(50*time.Millisecond, 100*time.Millisecond)

	h, err := cl[0].Lock(ctx, key, WithTTL(30*time.Second))
	require.NoError(t, err)

	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	queued, stalled := make(chan struct{}), make(chan struct{})
	var aPlaces []int // the calling goroutine's; read after aDone
	aDone := make(chan struct{})
	var aLock *Lock
	var aErr error
	go func() {
		defer close(aDone)
		aLock, aErr = cl[1].Lock(actx, key, WithFair(true), WithTTL(ttl), fast, WithQueuePlace(func(p int) {
			aPlaces = append(aPlaces, p)
			if len(aPlaces) == 1 {
				close(queued)
				time.Sleep(ttl * 65 / 100) // well within its entries' life
				close(stalled)
			}
		}))
	}()
	select {
	case <-queued:
	case <-time.After(10 * time.Second):
		t.Fatal("a was not queued within 10s")
	}
	b := startFairWaiter(t, cl[2], key, WithTTL(ttl), fast)
	defer b.cancel()
	require.Equal(t, int64(2), b.place.Load(), "b was queued behind a")
	<-stalled
	time.Sleep(ttl / 4) // a attempts again, a few times

	require.NoError(t, h.Unlock(ctx))
	var first string
	select {
	case <-aDone:
		first = "a"
	case <-b.done:
		first = "b"
	case <-time.After(10 * time.Second):
		t.Fatal("nobody got the lock within 10s")
	}
	if first == "b" {
		require.NoError(t, b.err)
		require.NoError(t, b.lock.Unlock(ctx))
	}
	<-aDone
	require.NoError(t, aErr)
	require.NoError(t, aLock.Unlock(ctx))
	require.Equal(t, "a", first, "b, which began to wait behind a live a, got the lock first; a's places: %v", aPlaces)
}
