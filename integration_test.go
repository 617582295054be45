package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

// The tests in this file run on real redis-server processes. Without
// redis-server they are skipped, unless CI is set: then they fail.

func TestRealManyClientsOneKeyNoOverlap(t *testing.T) {
	srv, _ := realNodes(t, 5)
	clients := realClients(t, srv, 4, WithTTL(2*time.Second), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	const perGoroutine = 15
	var (
		mu    sync.Mutex
		holds []history.Hold
		wg    sync.WaitGroup
	)
	for ci, c := range clients {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range perGoroutine {
					l, err := c.Lock(t.Context(), "real-contended")
					if err != nil {
						t.Errorf("client %d goroutine %d: Lock: %v", ci, g, err)
						return
					}
					h := history.Hold{Key: "real-contended", Holder: fmt.Sprintf("c%d/g%d/%d", ci, g, k), Acquired: time.Now(), Until: l.Until()}
					time.Sleep(200 * time.Microsecond)
					h.Released = time.Now()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("Unlock: %v", err)
					}
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, holds, 4*4*perGoroutine)
	require.Empty(t, overlaps(holds))
	realEventually(t, srv, "real-contended", "")
}

func TestRealTwoNodesKilledStillWorks(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs)
	srv[1].Kill()
	srv[3].Kill()
	for i := range 5 {
		key := fmt.Sprintf("two-killed-%d", i)
		l, err := c.Lock(t.Context(), key)
		require.NoError(t, err)
		st := l.Stats()
		require.GreaterOrEqual(t, st.Yes, 3)
		require.True(t, time.Until(l.Until()) > 0)
		require.NoError(t, l.Extend(t.Context()))
		require.NoError(t, l.Unlock(t.Context()))
		realEventually(t, srv, key, "")
	}
}

func TestRealThreeKilledFailsFastLeavingNothing(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
	srv[0].Kill()
	srv[2].Kill()
	srv[4].Kill()
	_, err := c.TryLock(t.Context(), "three-killed")
	require.ErrorIs(t, err, ErrNotAcquired)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	for _, i := range []int{0, 2, 4} {
		require.Equal(t, VoteFailed, qe.Stats.Nodes[i].Vote, "killed node %d", i)
	}
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	require.Contains(t, []int{0, 2, 4}, ne.Index)
	realEventually(t, srv, "three-killed", "")

	// A waiting Lock keeps trying until its ctx ends, and leaves nothing.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "three-killed")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	realEventually(t, srv, "three-killed", "")
}

func TestRealPausedNodeDoesNotSlowAcquisition(t *testing.T) {
	srv, cs := realNodes(t, 5)
	// A node timeout far above the loopback round trip: an attempt that
	// waited for the paused node would report its vote as a timeout.
	c := newClient(t, cs, WithNodeTimeout(2*time.Second))
	srv[2].Pause()
	defer srv[2].Resume()
	for i := range 10 {
		key := fmt.Sprintf("paused-%d", i)
		l, err := c.TryLock(t.Context(), key)
		require.NoError(t, err)
		st := l.Stats()
		require.Equal(t, VoteNotWaited, st.Nodes[2].Vote,
			"attempt %d: got paused node's vote %v (%v), want not waited for", i, st.Nodes[2].Vote, st.Nodes[2].Err)
		require.ErrorIs(t, st.Nodes[2].Err, ErrNoAnswer)
		require.Zero(t, st.Failed, "attempt %d: a node not waited for is not a failure", i)
		require.GreaterOrEqual(t, st.NotWaited, 1, "attempt %d", i)
		require.NoError(t, l.Unlock(t.Context()))
	}
	srv[2].Resume()
	// Once the node answers, its late yes votes are released, because each
	// lock was unlocked by then.
	for i := range 10 {
		realEventually(t, srv, fmt.Sprintf("paused-%d", i), "")
	}
}

func TestRealUnlockAndExtendAfterExpiryLeaveNewHolderAlone(t *testing.T) {
	srv, _ := realNodes(t, 5)
	clients := realClients(t, srv, 2, WithTTL(150*time.Millisecond), WithNodeTimeout(100*time.Millisecond))
	a, b := clients[0], clients[1]
	la, err := a.TryLock(t.Context(), "expiry")
	require.NoError(t, err)
	// Wait for the keys to expire on the servers, then let b take the lock.
	time.Sleep(200 * time.Millisecond)
	lb, err := b.TryLock(t.Context(), "expiry", WithTTL(time.Minute))
	require.NoError(t, err)
	realEventually(t, srv, "expiry", lb.Token())

	err = la.Extend(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	err = la.Unlock(t.Context())
	require.ErrorIs(t, err, ErrNotHeld)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.Zero(t, qe.Stats.Yes)
	realEventually(t, srv, "expiry", lb.Token())

	// An Extend that reaches the nodes within its own validity, after the
	// key changed hands, does not touch the new holder's TTL either.
	lc, err := a.TryLock(t.Context(), "expiry-2", WithTTL(time.Minute))
	require.NoError(t, err)
	realEventually(t, srv, "expiry-2", lc.Token())
	for _, s := range srv {
		require.NoError(t, s.NewClient(t).Set(t.Context(), "expiry-2", "new-holder", 30*time.Second).Err())
	}
	require.ErrorIs(t, lc.Extend(t.Context()), ErrNotHeld)
	for i, s := range srv {
		rc := s.NewClient(t)
		ttl, err := rc.PTTL(t.Context(), "expiry-2").Result()
		require.NoError(t, err)
		require.LessOrEqual(t, ttl, 30*time.Second, "node %d: Extend reset another holder's TTL", i)
	}
	require.ErrorIs(t, lc.Unlock(t.Context()), ErrNotHeld)
	realEventually(t, srv, "expiry-2", "new-holder")
	require.NoError(t, lb.Unlock(t.Context()))
}

func TestRealNodeScriptCacheFlushed(t *testing.T) {
	// A node that lost its script cache (a restart, SCRIPT FLUSH) answers
	// NOSCRIPT; go-redis falls back to EVAL and the lock still works.
	srv, cs := realNodes(t, 3)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "noscript")
	require.NoError(t, err)
	for _, s := range srv {
		require.NoError(t, s.NewClient(t).ScriptFlush(t.Context()).Err())
	}
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))
	realEventually(t, srv, "noscript", "")
}

// serverCommands reads how many commands a server has run, from its
// commandstats, leaving out the probe's own (INFO, HELLO, CLIENT, PING), and
// its PUBLISH calls.
func serverCommands(t *testing.T, s *redistest.Server) (total, publish int64) {
	t.Helper()
	rc := s.NewClient(t)
	info, err := rc.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err)
		switch {
		case name == "publish":
			publish = n
			total += n
		case name == "info" || name == "hello" || name == "ping" || strings.HasPrefix(name, "client"):
		default:
			total += n
		}
	}
	return total, publish
}

// TestUncontendedCommandsOnTheServers counts, with the servers' INFO, what an
// uncontended lock+unlock costs each node: SET, then EVALSHA with its GET and
// DEL, as a plain compare-and-delete does, and no PUBLISH: no one waits.
// A waiting Lock's marker makes the release publish.
func TestUncontendedCommandsOnTheServers(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs)
	cycle := func(key string) {
		l, err := c.Lock(t.Context(), key)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	}
	cycle("warm") // loads the scripts
	time.Sleep(50 * time.Millisecond)
	const cycles = 10
	before := make([]int64, len(srv))
	for i, s := range srv {
		before[i], _ = serverCommands(t, s)
	}
	for i := range cycles {
		cycle("uncontended:" + strconv.Itoa(i))
	}
	for i, s := range srv {
		// Every request lands, the slower nodes' after Unlock returned;
		// each INFO counts itself, once it has run.
		require.Eventually(t, func() bool {
			total, _ := serverCommands(t, s)
			return total-before[i] >= 4*cycles
		}, 5*time.Second, 5*time.Millisecond, "node %d", i)
		total, publish := serverCommands(t, s)
		require.EqualValues(t, 4*cycles, total-before[i], "node %d: want SET, EVALSHA, GET and DEL per cycle", i)
		require.Zero(t, publish, "node %d: a release no one waits for must not publish", i)
	}

	// A waiter marks the key: the holder's release is announced.
	holder, err := c.Lock(t.Context(), "contended")
	require.NoError(t, err)
	waiter := realClients(t, srv, 1)[0]
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(t.Context(), "contended", WithRetryDelay(time.Minute, time.Minute))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	probes := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		probes[i] = s.NewClient(t)
	}
	require.Eventually(t, func() bool {
		select {
		case err := <-got:
			t.Fatalf("the waiter returned %v while the key was held", err)
		default:
		}
		marked := 0
		for _, p := range probes {
			if n, _ := p.Exists(t.Context(), keyspace.Waiting("contended")).Result(); n == 1 {
				marked++
			}
		}
		return marked == len(srv)
	}, 5*time.Second, time.Millisecond, "the waiter did not mark the key on every node")
	require.NoError(t, holder.Unlock(t.Context()))
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter must be woken by the release, long before its one-minute retry")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	for i, s := range srv {
		_, publish := serverCommands(t, s)
		require.Positive(t, publish, "node %d", i)
	}
}
