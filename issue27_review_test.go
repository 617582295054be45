package redlock

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestSemaphoreReleaseOfPermitsMemberReleasesNothing: Semaphore.Release
// takes any token, and "#permits" is the member every semaphore key keeps
// for its number of permits. A release by that token must release nothing:
// semrelease.lua finds the member's score (minus the permits) an expired
// permit, removes it, and deletes the key with the live holder's permit in
// it, after which a semaphore of 2 permits hands out two more while the
// first holder's Until is 10 s away: three holders.
func TestSemaphoreReleaseOfPermitsMemberReleasesNothing(t *testing.T) {
	const key = "sem-permits"
	srv, _ := realNodes(t, 3)
	cl := realClients(t, srv, 2, WithTTL(10*time.Second))
	ctx := context.Background()
	s0, err := cl[0].Semaphore(key, 2)
	require.NoError(t, err)
	s1, err := cl[1].Semaphore(key, 2)
	require.NoError(t, err)
	p1, err := s0.TryAcquire(ctx)
	require.NoError(t, err)
	defer func() { _ = p1.Unlock(ctx) }()
	direct := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		direct[i] = s.NewClient(t)
	}

	err = s1.Release(ctx, permitsMember)
	require.Error(t, err, "a release by the token %q", permitsMember)
	// The release returns once its outcome is known: give the slower nodes
	// time to run it.
	assert.Never(t, func() bool {
		for _, rc := range direct {
			if _, err := rc.ZScore(ctx, key, p1.Token()).Result(); errors.Is(err, redis.Nil) {
				return true
			}
		}
		return false
	}, 500*time.Millisecond, 10*time.Millisecond, "a release by the token %q deleted a live permit", permitsMember)

	var more []*Lock
	for range 2 {
		if p, err := s1.TryAcquire(ctx); err == nil {
			more = append(more, p)
		}
	}
	for _, p := range more {
		_ = p.Unlock(ctx)
	}
	require.Len(t, more, 1, "a semaphore of 2 permits gave %d more beside the live one, valid for %v more",
		len(more), time.Until(p1.Until()).Round(time.Second))
	require.NoError(t, p1.Extend(ctx))
}

// proxiedReal starts n redis-servers, each behind a fault proxy, and a
// go-redis client with go-redis's default retries (3) through each proxy,
// on one connection that already has the lock scripts loaded, as
// proxiedNodes does for miniredis.
func proxiedReal(t *testing.T, n int) ([]*redistest.Server, []*faultproxy.Proxy, []redis.UniversalClient) {
	t.Helper()
	srv, _ := realNodes(t, n)
	ps := make([]*faultproxy.Proxy, n)
	cs := make([]redis.UniversalClient, n)
	for i, s := range srv {
		p, err := faultproxy.New(s.Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
	}
	loadScripts(t, cs)
	for _, rc := range cs {
		_, err := rc.Pipelined(t.Context(), func(p redis.Pipeliner) error { return p.Ping(t.Context()).Err() })
		require.NoError(t, err)
	}
	return srv, ps, cs
}

// TestReleaseByTokenResentByGoRedis: a release by token whose reply is
// lost on two of three nodes is sent again by go-redis on a new
// connection; the copy finds the key its first copy deleted. The hold was
// released on every node, and Unlock counts such a node as released
// (TestRetriedWritesAreRecognised); Release reports ErrNotHeld, "the token
// was not held", to a caller (redlock release) that did release it.
func TestReleaseByTokenResentByGoRedis(t *testing.T) {
	const key = "resent-release-by-token"
	srv, ps, cs := proxiedReal(t, 3)
	holder := realClients(t, srv, 1, WithTTL(time.Minute))[0]
	releaser := newClient(t, cs, WithTTL(time.Minute))
	ctx := context.Background()
	l, err := holder.TryLock(ctx, key)
	require.NoError(t, err)
	realEventually(t, srv, key, l.Token())

	drained(t, cs)
	ps[0].LoseNext(1)
	ps[1].LoseNext(1)
	err = releaser.Release(ctx, key, l.Token())
	realEventually(t, srv, key, "")
	lostReplies(t, ps[0], 1)
	lostReplies(t, ps[1], 1)
	if err != nil {
		// A copy that finds the key gone cannot tell whether the first
		// copy deleted it: unconfirmed, but never "not held".
		require.ErrorIs(t, err, ErrUnconfirmed, "the hold was released on every node: %v", err)
	}
}

// keepingObserver hands each attempt's Stats, a value it was given, to a
// goroutine of its own, as an Observer that must "return quickly" does
// with its metrics.
type keepingObserver struct {
	wg   sync.WaitGroup
	seen atomic.Int64
}

func (o *keepingObserver) Attempted(s Stats, err error) {
	o.wg.Go(func() {
		for _, v := range s.Nodes {
			if v.Holder != "" || v.Vote == VoteNo {
				o.seen.Add(1)
			}
		}
	})
}
func (o *keepingObserver) Extended(Stats, error) {}
func (o *keepingObserver) Lost(string, error)    {}
func (o *keepingObserver) Released(Stats, error) {}

// TestObserverStatsNotWrittenAfterAttempted: the Stats an Observer gets is
// a value, but its Nodes share their array with the call's error, whose
// votes nameWrongTypes writes (NodeVote.Holder) once the call gives up,
// after Attempted returned. An Observer that reads its Stats on another
// goroutine races with that write (go test -race).
func TestObserverStatsNotWrittenAfterAttempted(t *testing.T) {
	_, cs := realNodes(t, 3)
	holder := newClient(t, cs, WithLabel("backup"))
	l, err := holder.TryLock(t.Context(), "observed")
	require.NoError(t, err)
	defer func() { _ = l.Unlock(context.Background()) }()
	obs := &keepingObserver{}
	c := newClient(t, ownClients(t, cs), WithObserver(obs))
	_, err = c.TryLock(t.Context(), "observed")
	require.ErrorIs(t, err, ErrNotAcquired)
	obs.wg.Wait()
	require.Contains(t, err.Error(), `held by "backup"`)
}

// pauseBefore is a go-redis hook that pauses a server (SIGSTOP) before the
// first command that match accepts goes out: the node stops between two
// rounds of one attempt, and the command reaches a stopped server.
type pauseBefore struct {
	srv   *redistest.Server
	match func(redis.Cmder) bool
	once  sync.Once
}

func (h *pauseBefore) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pauseBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) {
			h.once.Do(h.srv.Pause)
		}
		return next(ctx, cmd)
	}
}
func (h *pauseBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.match(cmd) {
				h.once.Do(h.srv.Pause)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestFencedTryLockUnavailableWhenWriteBackTimesOut: every node says yes
// to a fenced TryLock's acquire, then two of three stop (SIGSTOP) as the
// fence write-back reaches them, and it times out there. Fewer than a quorum
// answered the attempt's last round, so the error must match
// ErrUnavailable; it reports the acquire round's three yes votes instead,
// which decided() takes for a quorum that answered.
func TestFencedTryLockUnavailableWhenWriteBackTimesOut(t *testing.T) {
	const key = "fence-write-back"
	srv, _ := realNodes(t, 3)
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		rc := s.NewClient(t)
		if i > 0 {
			rc.AddHook(&pauseBefore{srv: s, match: func(cmd redis.Cmder) bool { return isScript(cmd, scriptFence) }})
		}
		cs[i] = rc
	}
	loadScripts(t, cs[:1])
	c := newClient(t, cs, WithNodeTimeout(300*time.Millisecond), WithTTL(10*time.Second))
	t.Cleanup(func() {
		for _, s := range srv {
			s.Resume()
		}
	})
	_, err := c.TryLock(t.Context(), key, WithFencing(true))
	require.ErrorIs(t, err, ErrNotAcquired)
	require.True(t, srv[1].Paused() && srv[2].Paused(), "the hooks did not pause the nodes")
	t.Logf("%v", err)
	require.ErrorIs(t, err, ErrUnavailable, "two of three nodes did not answer the write-back: %v", err)
}

// flipObserver runs fn once, after the first attempt it is told of, on the
// calling goroutine, before the next attempt starts.
type flipObserver struct {
	once sync.Once
	fn   func()
	last Stats // the last attempt's; read once the call returned
}

func (o *flipObserver) Attempted(s Stats, _ error) {
	o.once.Do(o.fn)
	s.Nodes = slices.Clone(s.Nodes)
	o.last = s
}
func (o *flipObserver) Extended(Stats, error) {}
func (o *flipObserver) Lost(string, error)    {}
func (o *flipObserver) Released(Stats, error) {}

// TestCutAttemptAfterRecoveryIsNotAnOutage: a Lock's first attempt finds
// two of three nodes unreachable (an outage); they come back, and its last
// attempt, which the ctx cuts short, hears a no from node 0 (the key is
// held there) and a yes from node 1, while node 2 is slow. A quorum of
// nodes answered that attempt and the key is held elsewhere: contention,
// which must not match ErrUnavailable. judge returns the first attempt's
// verdict, and abandon its Stats, which say nodes 0 and 1 failed.
func TestCutAttemptAfterRecoveryIsNotAnOutage(t *testing.T) {
	const key = "recovered"
	srv, _ := realNodes(t, 3)
	ps := make([]*faultproxy.Proxy, len(srv))
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		p, err := faultproxy.New(s.Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
	}
	require.NoError(t, srv[0].NewClient(t).Set(t.Context(), key, "someone-else", time.Minute).Err())
	ps[0].SetMode(faultproxy.Reset)
	ps[1].SetMode(faultproxy.Reset)
	obs := &flipObserver{fn: func() {
		ps[0].SetMode(faultproxy.Pass)
		ps[1].SetMode(faultproxy.Pass)
		time.Sleep(300 * time.Millisecond) // node 2's first request and its rollback return
		ps[2].SetLatency(2500*time.Millisecond, 0)
	}}
	c := newClient(t, cs, WithNodeTimeout(3*time.Second), WithTTL(time.Minute), WithObserver(obs),
		WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
	t.Cleanup(func() { ps[2].SetLatency(0, 0) })
	ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, key)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("%v", err)
	last := obs.last
	require.Equal(t, []Vote{VoteNo, VoteYes, VoteNotWaited}, []Vote{last.Nodes[0].Vote, last.Nodes[1].Vote, last.Nodes[2].Vote},
		"the last attempt: %+v", last)
	require.NotErrorIs(t, err, ErrUnavailable, "the last attempt heard a no and a yes from 2 of 3 nodes: %v", err)
}

// TestUnlockTimeoutNamesTheNodeTimeout: an Unlock round waits for each
// node up to the TTL up to one second, longer than the node timeout
// (releaseTimeout). Its timed-out votes say "no answer within the node
// timeout of 1s" when the node timeout is 200ms: the message names a
// setting the user did not make.
func TestUnlockTimeoutNamesTheNodeTimeout(t *testing.T) {
	const key = "unlock-timeout"
	_, ps, cs := proxiedReal(t, 3)
	c := newClient(t, cs, WithNodeTimeout(200*time.Millisecond), WithTTL(10*time.Second))
	l, err := c.TryLock(t.Context(), key)
	require.NoError(t, err)
	drained(t, cs)
	ps[1].SetMode(faultproxy.Blackhole)
	ps[2].SetMode(faultproxy.Blackhole)
	t.Cleanup(func() {
		ps[1].SetMode(faultproxy.Pass)
		ps[2].SetMode(faultproxy.Pass)
	})
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, ErrUnconfirmed)
	t.Logf("%v", err)
	require.NotContains(t, err.Error(), "node timeout of 1s", "the node timeout is 200ms")
}

// TestCheckQuorumCountsNodesThatCannotVote: two of three nodes are
// replicas, which can never take a lock (Check's "role" finding is
// critical for each). The deployment-wide "quorum" finding still says
// "every node answered: 1 can fail before no lock can be taken", at
// SeverityOK, when no lock can be taken at all.
func TestCheckQuorumCountsNodesThatCannotVote(t *testing.T) {
	srv, cs := realNodes(t, 3)
	host, port, err := net.SplitHostPort(srv[0].Addr())
	require.NoError(t, err)
	for _, rc := range cs[1:] {
		require.NoError(t, rc.Do(t.Context(), "replicaof", host, port).Err())
	}
	c := newClient(t, cs)
	rep, err := c.Check(t.Context())
	require.NoError(t, err)
	for _, f := range rep.Findings {
		if f.Check == "role" || f.Check == "quorum" {
			t.Logf("%v %s node %d: %s", f.Severity, f.Check, f.Node, f.Message)
		}
	}
	for _, f := range rep.Findings {
		if f.Check == "quorum" {
			require.Equal(t, SeverityCritical, f.Severity, "two replicas of three nodes: %s", f.Message)
		}
	}
}

// TestShortCtxOnHealthyHeldNodesIsNotAnOutage: the key is held elsewhere
// on all three nodes, which are healthy: node 0 answers at once, nodes 1
// and 2 after 100ms, a tenth of the node timeout (a remote data center).
// A call whose ctx ends after 30ms hears node 0's no and nothing else
// yet. No node failed or timed out, and the key is held: the error must
// not match ErrUnavailable. judge() counts the two nodes that were given
// 30ms of their 1s as not answering.
func TestShortCtxOnHealthyHeldNodesIsNotAnOutage(t *testing.T) {
	const key = "short-ctx-held"
	srv, ps, cs := proxiedReal(t, 3)
	for _, s := range srv {
		require.NoError(t, s.NewClient(t).Set(t.Context(), key, "someone-else", time.Minute).Err())
	}
	ps[1].SetLatency(100*time.Millisecond, 0)
	ps[2].SetLatency(100*time.Millisecond, 0)
	c := newClient(t, cs, WithNodeTimeout(time.Second))
	for _, call := range []struct {
		name string
		fn   func(ctx context.Context) (*Lock, error)
	}{
		{"TryLock", func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, key) }},
		{"Lock", func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, key) }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		_, err := call.fn(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		t.Logf("%s: %v", call.name, err)
		require.NotErrorIs(t, err, ErrUnavailable, "%s: healthy nodes, the key held elsewhere: %v", call.name, err)
	}
}
