package redlock

// This file tests what every kind of hold (plain, multi-key, owner, fenced,
// reader, semaphore permit) must do alike, on real redis-servers behind
// fault proxies: a request whose reply is lost and that go-redis resends
// after the node lost its scripts, and renewals batched across kinds.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// realProxied starts n redis-servers, each behind a fault proxy, with one
// go-redis client of one pooled connection through each proxy (go-redis's
// default 3 retries), and a direct admin client to each server. It is
// proxiedNodes on real servers, whose script cache a test can flush.
func realProxied(t *testing.T, n int) ([]*faultproxy.Proxy, []redis.UniversalClient, []*redis.Client) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.StartN(t, n, redistest.Options{})
	ps := make([]*faultproxy.Proxy, n)
	cs := make([]redis.UniversalClient, n)
	admin := make([]*redis.Client, n)
	for i, s := range srv {
		admin[i] = s.NewClient(t)
		p, err := faultproxy.New(s.Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		// One connection, opened now, so that a lost reply is always the
		// test's, never a new connection's handshake.
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
		require.NoError(t, rc.Ping(t.Context()).Err())
		// The Client sends through pipelines, which may take their
		// connection from a pool of their own: open it now too.
		_, err = rc.Pipelined(t.Context(), func(p redis.Pipeliner) error { return p.Ping(t.Context()).Err() })
		require.NoError(t, err)
	}
	return ps, cs, admin
}

// loadEveryScript loads every script of the library on the servers, so that
// the next EVALSHA runs its script rather than being answered NOSCRIPT:
// the flush a test then makes is the node's first loss of its scripts.
func loadEveryScript(t *testing.T, admin []*redis.Client) {
	t.Helper()
	for _, a := range admin {
		for _, s := range scripts {
			require.NoError(t, a.ScriptLoad(t.Context(), s.src).Err())
		}
	}
}

// flavourCall is one acquisition of one kind of hold.
type flavourCall struct {
	name string
	lock func(ctx context.Context) (*Lock, error)
	keys []string // the Redis keys it holds
}

// flavourCalls is one acquisition of every kind, on keys named after tag:
// sem1 and sem2 are semaphores of one and of two permits.
func flavourCalls(c *Client, sem1, sem2 *Semaphore, tag string) []flavourCall {
	multi := []string{"{" + tag + "}a", "{" + tag + "}b"}
	multiFenced := []string{"{" + tag + "f}a", "{" + tag + "f}b"}
	return []flavourCall{
		{"plain", func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, tag+"-plain") }, []string{tag + "-plain"}},
		{"multi", func(ctx context.Context) (*Lock, error) { return c.TryLockMulti(ctx, multi) }, multi},
		{"multi-fenced", func(ctx context.Context) (*Lock, error) {
			return c.TryLockMulti(ctx, multiFenced, WithFencing(true))
		}, multiFenced},
		{"owner", func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, tag+"-owner", WithOwner("o")) }, []string{tag + "-owner"}},
		{"owner-fenced", func(ctx context.Context) (*Lock, error) {
			return c.TryLock(ctx, tag+"-ownerf", WithOwner("o"), WithFencing(true))
		}, []string{tag + "-ownerf"}},
		{"fenced", func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, tag+"-fenced", WithFencing(true)) }, []string{tag + "-fenced"}},
		{"reader", func(ctx context.Context) (*Lock, error) { return c.TryRLock(ctx, tag+"-reader") }, []string{tag + "-reader"}},
		{"permit1", func(ctx context.Context) (*Lock, error) { return sem1.TryAcquire(ctx) }, []string{sem1.Key()}},
		{"permit2", func(ctx context.Context) (*Lock, error) { return sem2.TryAcquire(ctx) }, []string{sem2.Key()}},
	}
}

// everyFlavour makes a Client on cs with the given options, and returns
// one acquisition of every kind on it, on keys named after tag.
func everyFlavour(t *testing.T, cs []redis.UniversalClient, tag string, opts ...Option) []flavourCall {
	t.Helper()
	c := newClient(t, cs, opts...)
	sem1, err := c.Semaphore(tag+"-sem1", 1)
	require.NoError(t, err)
	sem2, err := c.Semaphore(tag+"-sem2", 2)
	require.NoError(t, err)
	return flavourCalls(c, sem1, sem2, tag)
}

// keysGone waits until none of keys exists on any server.
func keysGone(t *testing.T, admin []*redis.Client, keys []string, what string) {
	t.Helper()
	for i, a := range admin {
		require.Eventually(t, func() bool {
			n, err := a.Exists(context.Background(), keys...).Result()
			return err == nil && n == 0
		}, 5*time.Second, time.Millisecond, "%s: node %d still has %v", what, i, keys)
	}
}

// flushOnLost makes nodes 0 and 1 lose their script cache each time their
// proxy loses a reply, before go-redis resends the request; the cleanup
// stops it.
func flushOnLost(t *testing.T, ps []*faultproxy.Proxy, admin []*redis.Client) {
	for i := range 2 {
		a := admin[i]
		ps[i].OnLost(func() { _ = a.ScriptFlush(context.Background()).Err() })
		t.Cleanup(func() { ps[i].OnLost(nil) })
	}
}

// loseOneAndFlush loads every script on the servers, then makes nodes 0
// and 1 lose their next reply, and their script cache with it, before
// go-redis resends the request: the copy meets NOSCRIPT although the first
// one ran. It returns a wait until both nodes have lost that reply.
func loseOneAndFlush(t *testing.T, ps []*faultproxy.Proxy, admin []*redis.Client) (waitLost func()) {
	t.Helper()
	loadEveryScript(t, admin)
	flushOnLost(t, ps, admin)
	lost := make([]int64, 2)
	for i := range 2 {
		lost[i] = ps[i].Stats().LostReplies
		ps[i].LoseNext(1)
	}
	return func() {
		t.Helper()
		for i := range 2 {
			lostReplies(t, ps[i], lost[i]+1)
		}
	}
}

// TestResentReleaseAfterScriptFlushCountsForEveryFlavour: for every kind of
// hold, the release's EVALSHA runs on two of three nodes and its reply is
// lost; each node loses its script cache before go-redis sends the EVALSHA
// again, which gets NOSCRIPT, and the EVAL that follows finds the hold
// gone. Unlock must count those nodes as released, and leave no key. The
// NOSCRIPT says nothing of the first copy, which did the release: a kind
// whose release job took the EVAL's "not mine" at its word would report a
// release that worked as ErrNotHeld, on a mere restart or SCRIPT FLUSH.
func TestResentReleaseAfterScriptFlushCountsForEveryFlavour(t *testing.T) {
	ps, cs, admin := realProxied(t, 3)
	calls := everyFlavour(t, cs, "resent-release", WithTTL(10*time.Second))
	for _, f := range calls {
		t.Run(f.name, func(t *testing.T) {
			l, err := f.lock(t.Context())
			require.NoError(t, err)
			settled(t, l)
			drained(t, cs)
			waitLost := loseOneAndFlush(t, ps, admin)
			err = l.Unlock(t.Context())
			keysGone(t, admin, f.keys, f.name)
			waitLost()
			require.NoError(t, err, "%s: a release whose resent EVALSHA met NOSCRIPT must count as released", f.name)
		})
	}
}

// TestResentAcquireAfterScriptFlushWinsForEveryFlavour: for every kind of
// hold, the acquire's EVALSHA (or SET) runs on two of three nodes and its
// reply is lost; the script cache is flushed before go-redis's copy, which
// gets NOSCRIPT, and the EVAL then finds the attempt's own value. The
// acquisition must win with those nodes, the holds must be the lock's (it
// extends, and a fenced one has its fence), and Unlock must leave nothing.
// A kind that read its own earlier write as someone else's would lose a
// lock it holds, and leave the keys to expire.
func TestResentAcquireAfterScriptFlushWinsForEveryFlavour(t *testing.T) {
	ps, cs, admin := realProxied(t, 3)
	calls := everyFlavour(t, cs, "resent-acquire", WithTTL(10*time.Second))
	for _, f := range calls {
		t.Run(f.name, func(t *testing.T) {
			drained(t, cs)
			waitLost := loseOneAndFlush(t, ps, admin)
			l, err := f.lock(t.Context())
			require.NoError(t, err, "%s: an acquire resent after a flush must recognise its own write", f.name)
			settled(t, l)
			waitLost()
			require.NoError(t, l.Extend(t.Context()), "%s", f.name)
			if l.t.fence != nil {
				require.Positive(t, l.Fence(), "%s", f.name)
			}
			drained(t, cs)
			require.NoError(t, l.Unlock(t.Context()), "%s", f.name)
			keysGone(t, admin, f.keys, f.name)
		})
	}
}

// TestRenewalsSurviveLostRepliesAndScriptFlushes: one Client holds an
// auto-extended hold of every kind, with a short TTL, so that the renewer
// sends them in one batch per node; for three seconds, nodes 0 and 1 lose
// a renewal batch's reply now and then, and lose their scripts before
// go-redis resends it. No hold may be lost, and each Unlock must leave
// nothing. A batch mixes every kind's extend script, so a resent batch
// answered NOSCRIPT, then EVAL, must be read per hold the way a single
// Extend is: one kind misread would drop its hold while its keys live on.
func TestRenewalsSurviveLostRepliesAndScriptFlushes(t *testing.T) {
	ps, cs, admin := realProxied(t, 3)
	calls := everyFlavour(t, cs, "flushed-renewal",
		WithTTL(1500*time.Millisecond), WithNodeTimeout(time.Second/2), WithAutoExtend(true))
	locks := make([]*Lock, len(calls))
	for i, f := range calls {
		l, err := f.lock(t.Context())
		require.NoError(t, err, f.name)
		settled(t, l)
		locks[i] = l
	}
	loadEveryScript(t, admin)
	flushOnLost(t, ps, admin)
	lost := make([]int64, 2)
	for i := range 2 {
		lost[i] = ps[i].Stats().LostReplies
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		for i := range 2 {
			ps[i].LoseNext(1)
		}
		time.Sleep(600 * time.Millisecond)
		for i, l := range locks {
			require.NoError(t, l.Err(), "%s lost during flushed renewals", calls[i].name)
		}
	}
	for i := range 2 {
		ps[i].OnLost(nil)
		ps[i].LoseNext(0)
		require.Greater(t, ps[i].Stats().LostReplies, lost[i], "node %d lost no reply", i)
	}
	drained(t, cs)
	for i, l := range locks {
		require.NoError(t, l.Err(), calls[i].name)
		require.NoError(t, l.Unlock(t.Context()), calls[i].name)
		keysGone(t, admin, calls[i].keys, calls[i].name)
	}
}

// TestOwnerReleaseOfOneHoldKeepsTheOther: an owner takes the same key twice
// (a reentrant lock) on non-cluster nodes; the release of one hold leaves
// the other's field and the key on every node, so the key stays blocked to
// others, the other hold still extends, and its release frees the key. An
// owner hold released like a plain key (releaseplain.lua deletes the key)
// would free a lock its owner still holds.
func TestOwnerReleaseOfOneHoldKeepsTheOther(t *testing.T) {
	srv, cs := realNodes(t, 3)
	ctx := t.Context()
	const key = "owner-release-one"
	c := newClient(t, cs, WithTTL(10*time.Second))
	a, err := c.TryLock(ctx, key, WithOwner("o"))
	require.NoError(t, err)
	b, err := c.TryLock(ctx, key, WithOwner("o"))
	require.NoError(t, err)
	settled(t, a)
	settled(t, b)
	require.NoError(t, a.Unlock(ctx))
	for i, s := range srv {
		ok, err := s.NewClient(t).HExists(ctx, key, "t:"+b.Token()).Result()
		require.NoError(t, err)
		require.True(t, ok, "node %d lost the other hold", i)
	}
	_, err = c.TryLock(ctx, key)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, b.Extend(ctx))
	require.NoError(t, b.Unlock(ctx))
	l, err := c.TryLock(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

// TestSemaphoreSharedByGoroutinesNeverExceedsPermits: one Semaphore of k
// permits, used by eight goroutines of one Client at once, each acquiring
// and releasing ten times with per-call options (WithTTL, WithLabel): every
// acquisition succeeds in time, and at most k hold at any moment. A
// Semaphore is documented safe for concurrent use, per-call options
// included: the race detector checks that its calls share nothing they
// write, and the count that its quorum keeps the permits' bound.
func TestSemaphoreSharedByGoroutinesNeverExceedsPermits(t *testing.T) {
	for _, k := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			_, cs := realNodes(t, 3)
			c := newClient(t, cs, WithTTL(5*time.Second), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
			sem, err := c.Semaphore(fmt.Sprintf("shared-sem-%d", k), k, WithTTL(4*time.Second))
			require.NoError(t, err)
			var mu sync.Mutex
			holders, most := 0, 0
			errs := make(chan error, 8)
			for g := range 8 {
				go func() {
					var err error
					defer func() { errs <- err }()
					for i := range 10 {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						var p *Lock
						p, err = sem.Acquire(ctx, WithTTL(3*time.Second), WithLabel(fmt.Sprintf("g%d-%d", g, i)))
						cancel()
						if err != nil {
							return
						}
						mu.Lock()
						holders++
						most = max(most, holders)
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						mu.Lock()
						holders--
						mu.Unlock()
						if err = p.Unlock(context.Background()); err != nil {
							return
						}
					}
				}()
			}
			for range 8 {
				require.NoError(t, <-errs)
			}
			require.LessOrEqual(t, most, k, "got %d holders at once, want at most %d", most, k)
		})
	}
}
