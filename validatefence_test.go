package redlock

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// requireValid requires ValidateFence to pass for key at fence.
func requireValid(t *testing.T, c *Client, key string, fence uint64) {
	t.Helper()
	err := c.ValidateFence(t.Context(), key, fence)
	require.NoError(t, err, "ValidateFence(%q, %d): got %v, want nil", key, fence, err)
}

// requireStale requires ValidateFence to refuse key at fence as stale, with
// a verdict (not ErrUnavailable), and returns the error's message.
func requireStale(t *testing.T, c *Client, key string, fence uint64) string {
	t.Helper()
	err := c.ValidateFence(t.Context(), key, fence)
	require.ErrorIs(t, err, ErrStaleFence, "ValidateFence(%q, %d): got %v, want ErrStaleFence", key, fence, err)
	require.NotErrorIs(t, err, ErrUnavailable, "ValidateFence(%q, %d): every node answered, got %v", key, fence, err)
	return err.Error()
}

// counterOn reads key's fence counter on one node, as the client sees it
// (no prefix is added).
func counterOn(t *testing.T, rc redis.UniversalClient, rkey string) uint64 {
	t.Helper()
	v, err := rc.Get(t.Context(), keyspace.Fence(rkey)).Uint64()
	require.NoError(t, err)
	return v
}

// setCounters sets rkey's fence counter to v on the given nodes.
func setCounters(t *testing.T, cs []redis.UniversalClient, rkey string, v uint64) {
	t.Helper()
	for _, rc := range cs {
		require.NoError(t, rc.Set(t.Context(), keyspace.Fence(rkey), v, 0).Err())
	}
}

// keyGone waits until rkey is missing on every node of cs.
func keyGone(t *testing.T, cs []redis.UniversalClient, rkey string) {
	t.Helper()
	for i, rc := range cs {
		require.Eventually(t, func() bool {
			n, err := rc.Exists(context.Background(), rkey).Result()
			return err == nil && n == 0
		}, 10*time.Second, 5*time.Millisecond, "node %d: key %q still there", i, rkey)
	}
}

func TestValidateFenceWhileHeld(t *testing.T) {
	forEachBackend(t, "vf-held", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		l, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		f := l.Fence()
		// At once: the nodes whose acquire counted for the fence got the
		// write-back before this read, in the order of each node's pipe.
		requireValid(t, c, n.key, f)
		// Only the fence itself passes.
		requireStale(t, c, n.key, f-1)
		msg := requireStale(t, c, n.key, f+1)
		require.Contains(t, msg, "an older or no fence", "got %q", msg)
		// Another Client, as another process, agrees once the write-backs
		// have landed: it reads in no order with them.
		settled(t, l)
		requireValid(t, newClient(t, ownClients(t, n.clients)), n.key, f)
		require.NoError(t, l.Unlock(t.Context()))
	})
}

func TestValidateFenceAfterUnlock(t *testing.T) {
	forEachBackend(t, "vf-unlock", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		l, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		requireValid(t, c, n.key, l.Fence())
		require.NoError(t, l.Unlock(t.Context()))
		keyGone(t, n.clients, n.key)
		msg := requireStale(t, c, n.key, l.Fence())
		require.Contains(t, msg, "the key is free: nodes 0,1,2,3,4", "got %q", msg)
	})
}

func TestValidateFenceAfterExpiry(t *testing.T) {
	forEachBackend(t, "vf-expiry", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		// The holder never unlocks: it stalled past its TTL.
		l, err := c.TryLock(t.Context(), n.key, WithTTL(1500*time.Millisecond))
		require.NoError(t, err)
		requireValid(t, c, n.key, l.Fence())
		keyGone(t, n.clients, n.key)
		requireStale(t, c, n.key, l.Fence())
	})
}

func TestValidateFenceAfterNewerHolder(t *testing.T) {
	forEachBackend(t, "vf-newer", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		first, err := c.TryLock(t.Context(), n.key, WithTTL(1500*time.Millisecond))
		require.NoError(t, err)
		keyGone(t, n.clients, n.key)
		second, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		require.Greater(t, second.Fence(), first.Fence())
		requireValid(t, c, n.key, second.Fence())
		msg := requireStale(t, c, n.key, first.Fence())
		require.Contains(t, msg, "a newer fence", "got %q", msg)
		require.NoError(t, second.Unlock(t.Context()))
	})
}

func TestValidateFenceKeyPrefix(t *testing.T) {
	forEachBackend(t, "vf-prefix", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true), WithKeyPrefix("app:"))
		l, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		requireValid(t, c, n.key, l.Fence())
		// The prefix applies: without it, the key is another, and free.
		bare := newClient(t, n.clients)
		requireStale(t, bare, n.key, l.Fence())
		requireValid(t, bare, "app:"+n.key, l.Fence())
		require.NoError(t, l.Unlock(t.Context()))
		requireStale(t, c, n.key, l.Fence())
	})
}

// TestValidateFenceReadOnlyUser validates through a user that may only read
// keys under the Client's prefix: the script writes nothing, and touches
// nothing outside the prefix (the counter's name starts with the lock key).
func TestValidateFenceReadOnlyUser(t *testing.T) {
	srv, admin := realNodes(t, 3)
	addrs := make([]string, len(srv))
	for i, s := range srv {
		addrs[i] = s.Addr()
	}
	c := newClient(t, admin, WithFencing(true), WithKeyPrefix("lk:"))
	l, err := c.TryLock(t.Context(), "ro")
	require.NoError(t, err)
	ro := aclClients(t, admin, addrs, "reader", "+@read", "+@scripting", "+@connection", "-@write", "~lk:*")
	rc := newClient(t, ro, WithKeyPrefix("lk:"))
	requireValid(t, rc, "ro", l.Fence())
	require.NoError(t, l.Unlock(t.Context()))
	requireStale(t, rc, "ro", l.Fence())
	// The control: the same user cannot write, so a script that did
	// would have failed above.
	require.Error(t, ro[0].Set(t.Context(), "lk:x", "1", 0).Err(), "the reader may not write")
}

func TestValidateFenceOwnerLock(t *testing.T) {
	forEachBackend(t, "vf-owner", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true), WithOwner("worker-1"))
		first, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		requireValid(t, c, n.key, first.Fence())
		// A second hold of the same owner takes a newer fence: the first
		// one's is no longer the latest.
		second, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		require.Greater(t, second.Fence(), first.Fence())
		requireValid(t, c, n.key, second.Fence())
		requireStale(t, c, n.key, first.Fence())
		// The holder of an owner lock is its owner: while the first hold
		// keeps the key, the owner's latest fence stays the live one, as
		// a store that keeps the largest fence sees it.
		require.NoError(t, second.Unlock(t.Context()))
		requireValid(t, c, n.key, second.Fence())
		requireStale(t, c, n.key, first.Fence())
		// Another owner's hold is another holder.
		other, err := c.TryLock(t.Context(), n.key+":other", WithOwner("worker-2"))
		require.NoError(t, err)
		requireValid(t, c, n.key+":other", other.Fence())
		require.NoError(t, first.Unlock(t.Context()))
		keyGone(t, n.clients, n.key)
		requireStale(t, c, n.key, second.Fence())
	})
}

func TestValidateFenceMultiKey(t *testing.T) {
	forEachBackend(t, "vf-multi", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		a, b := "{vf-multi}a", "{vf-multi}b"
		// b's counters start far above a's (below 2^53, which the
		// scripts' Lua numbers hold exactly): the lock's fence, the max,
		// is b's, and the write-back raises a's to it.
		setCounters(t, n.clients, b, 1<<52)
		l, err := c.TryLockMulti(t.Context(), []string{a, b})
		require.NoError(t, err)
		require.Equal(t, uint64(1<<52+1), l.Fence())
		requireValid(t, c, a, l.Fence())
		requireValid(t, c, b, l.Fence())
		// A key the lock does not hold has no fence of it.
		requireStale(t, c, "{vf-multi}c", l.Fence())
		require.NoError(t, l.Unlock(t.Context()))
		keyGone(t, n.clients, a)
		requireStale(t, c, a, l.Fence())
		requireStale(t, c, b, l.Fence())

		// Each key answers for itself: a later lock of b alone is b's
		// fence, not a's.
		lb, err := c.TryLock(t.Context(), b)
		require.NoError(t, err)
		requireValid(t, c, b, lb.Fence())
		requireStale(t, c, a, lb.Fence())
		require.NoError(t, lb.Unlock(t.Context()))
	})
}

// TestValidateFenceNodesDown stops nodes while the lock is held. The
// counters start even, so that every node that holds the lock ends at its
// fence (see TestValidateFenceLiveHolderAboveItsFence for what happens
// otherwise).
func TestValidateFenceNodesDown(t *testing.T) {
	forEachBackend(t, "vf-down", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true), WithNodeTimeout(300*time.Millisecond))
		setCounters(t, n.clients, n.key, 1000)
		l, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		require.Equal(t, uint64(1001), l.Fence())
		for i, rc := range n.clients {
			require.Eventually(t, func() bool {
				v, err := rc.Get(context.Background(), keyspace.Fence(n.key)).Uint64()
				return err == nil && v == l.Fence()
			}, 5*time.Second, time.Millisecond, "node %d: the write-back never landed", i)
		}

		// A minority down: the others still make the holder's quorum.
		n.kill(3)
		n.kill(4)
		requireValid(t, c, n.key, l.Fence())
		// With two nodes down, one no leaves the verdict to them...
		setCounters(t, n.clients[:1], n.key, 5)
		err = c.ValidateFence(t.Context(), n.key, l.Fence())
		require.ErrorIs(t, err, ErrUnavailable, "nodes 1 and 2 with 3 and 4 could make the quorum: %v", err)
		// ...and three make it without them.
		setCounters(t, n.clients[:3], n.key, 5)
		requireStale(t, c, n.key, l.Fence())
		setCounters(t, n.clients[:3], n.key, l.Fence())
		requireValid(t, c, n.key, l.Fence())

		// A majority down: too few answer to tell. Stale, and
		// unavailable, and the error says which nodes failed.
		n.kill(0)
		err = c.ValidateFence(t.Context(), n.key, l.Fence())
		require.ErrorIs(t, err, ErrStaleFence)
		require.ErrorIs(t, err, ErrUnavailable)
		var ne *NodeError
		require.ErrorAs(t, err, &ne)
		for _, i := range []int{0, 3, 4} {
			require.Regexp(t, regexp.MustCompile(`node `+strconv.Itoa(i)+` \([^)]*\) failed`), err.Error())
		}
		require.Contains(t, err.Error(), "2/5 nodes hold it at that fence (quorum 3)")
	})
}

// TestValidateFenceCoincidence puts a counter at the fence, as by
// coincidence, on nodes where another holder holds the key: a node outside
// the fence's write-back whose counter was just below it when another
// holder took the key there.
func TestValidateFenceCoincidence(t *testing.T) {
	forEachBackend(t, "vf-coincidence", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients, WithFencing(true))
		t.Run("a minority, another holder on every node", func(t *testing.T) {
			setCounters(t, n.clients, n.key, 1000)
			first, err := c.TryLock(t.Context(), n.key)
			require.NoError(t, err)
			require.NoError(t, first.Unlock(t.Context()))
			second, err := c.TryLock(t.Context(), n.key)
			require.NoError(t, err)
			t.Cleanup(func() { _ = second.Unlock(context.Background()) })
			setCounters(t, n.clients[:2], n.key, first.Fence())
			requireStale(t, c, n.key, first.Fence())
		})
		t.Run("the old holder's minority makes a quorum with them", func(t *testing.T) {
			key := n.key + ":2"
			// Even counters: every node of the first lock ends at its
			// fence.
			setCounters(t, n.clients, key, 1000)
			first, err := c.TryLock(t.Context(), key)
			require.NoError(t, err)
			// The first holder loses the key on nodes 0-2 (they lost it,
			// or its Unlock reached only them), and keeps it on 3 and 4.
			settled(t, first)
			for _, rc := range n.clients[:3] {
				require.NoError(t, rc.Del(t.Context(), key).Err())
			}
			second, err := c.TryLock(t.Context(), key)
			require.NoError(t, err)
			t.Cleanup(func() { _ = second.Unlock(context.Background()) })
			requireValid(t, c, key, second.Fence())
			// Node 0, held by the second holder, shows the first fence:
			// with nodes 3 and 4, three nodes hold the key at that fence,
			// but for two holders.
			setCounters(t, n.clients[:1], key, first.Fence())
			msg := requireStale(t, c, key, first.Fence())
			require.Contains(t, msg, "at that fence for another holder: nodes 0", "got %q", msg)
		})
	})
}

// TestValidateFenceWithoutFencing: a lock taken without WithFencing has
// Fence 0, and no counter is ever 0 (a counter starts at a node's clock in
// microseconds), so it never passes, on a key that was never fenced (no
// counter at all) nor on one that was.
func TestValidateFenceWithoutFencing(t *testing.T) {
	forEachBackend(t, "vf-unfenced", func(t *testing.T, n *lifecycleNodes) {
		c := newClient(t, n.clients)
		l, err := c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		require.Zero(t, l.Fence())
		msg := requireStale(t, c, n.key, l.Fence())
		require.Contains(t, msg, "without WithFencing", "got %q", msg)
		require.NoError(t, l.Unlock(t.Context()))

		fenced, err := c.TryLock(t.Context(), n.key, WithFencing(true))
		require.NoError(t, err)
		require.NoError(t, fenced.Unlock(t.Context()))
		l, err = c.TryLock(t.Context(), n.key)
		require.NoError(t, err)
		requireStale(t, c, n.key, l.Fence())
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// TestValidateFenceOtherLayouts: readers and semaphores are never fenced,
// and a key of another type is no lock: none of them passes.
func TestValidateFenceOtherLayouts(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs)
	r, err := c.TryRLock(t.Context(), "vf-read")
	require.NoError(t, err)
	setCounters(t, cs, "vf-read", 7)
	msg := requireStale(t, c, "vf-read", 7)
	require.Contains(t, msg, "not a fenced lock at the key: nodes 0,1,2", "got %q", msg)
	require.NoError(t, r.Unlock(t.Context()))
	for _, rc := range cs {
		require.NoError(t, rc.RPush(t.Context(), "vf-list", "x").Err())
	}
	setCounters(t, cs, "vf-list", 7)
	requireStale(t, c, "vf-list", 7)
}

func TestValidateFenceArguments(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing(true))
	for _, key := range []string{"", "a" + keyspace.Reserved + "b"} {
		err := c.ValidateFence(t.Context(), key, 1)
		require.ErrorIs(t, err, ErrInvalidOption, "key %q", key)
		require.ErrorIs(t, err, ErrStaleFence, "key %q: every error matches ErrStaleFence", key)
	}
	l, err := c.TryLock(t.Context(), "vf-args")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = c.ValidateFence(ctx, "vf-args", l.Fence())
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrStaleFence)
	require.NoError(t, c.Close())
	err = c.ValidateFence(t.Context(), "vf-args", l.Fence())
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, err, ErrStaleFence)
}

// TestValidateFenceHungNode: a node that never answers costs one node
// timeout, and the verdict comes from the others.
func TestValidateFenceHungNode(t *testing.T) {
	ms, cs := minis(t, 4)
	hung := redis.NewClient(&redis.Options{Addr: hungServer(t), MaxRetries: -1})
	t.Cleanup(func() { _ = hung.Close() })
	cs = append(cs, hung)
	for _, m := range ms {
		m.Set(keyspace.Fence("vf-hung"), "41")
	}
	c := newClient(t, cs, WithFencing(true), WithNodeTimeout(200*time.Millisecond))
	// Taken on the four live nodes; the hung one never answers.
	l, err := c.TryLock(t.Context(), "vf-hung")
	require.NoError(t, err)
	require.Equal(t, uint64(42), l.Fence())
	requireValid(t, c, "vf-hung", l.Fence())
	for _, m := range ms[:2] {
		m.Del("vf-hung")
	}
	err = c.ValidateFence(t.Context(), "vf-hung", l.Fence())
	require.ErrorIs(t, err, ErrStaleFence)
	require.ErrorIs(t, err, ErrUnavailable, "the hung node could have made the quorum: %v", err)
	require.ErrorIs(t, err, ErrNodeTimeout)
}

// TestValidateFenceLiveHolderAboveItsFence shows a live holder's fence
// failing, the safe way: the nodes whose acquire reply came after the
// decision keep a counter above the fence (the write-back only raises), so
// only the nodes that counted for it are at it, and with one of those down
// the holder's quorum at its fence is gone. Fixing it takes a write-back
// whose quorum counts only nodes that end at exactly the fence (see
// docs/FENCING.md, "A live holder refused").
func TestValidateFenceLiveHolderAboveItsFence(t *testing.T) {
	t.Skip("known gap: a live holder's late nodes keep a counter above its fence; see docs/FENCING.md")
	g := newScriptGate(scriptAcquire)
	fast, fcs := minis(t, 3)
	_, scs := minis(t, 2, g)
	cs := append(fcs, scs...)
	loadScripts(t, cs)
	setCounters(t, fcs, "vf-late", 100)
	setCounters(t, scs, "vf-late", 200)
	c := newClient(t, cs, WithFencing(true))
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "vf-late", WithTTL(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, uint64(101), l.Fence())
	g.release()
	settled(t, l)
	require.Equal(t, uint64(201), counterOn(t, scs[0], "vf-late"))
	fast[0].Close()
	requireValid(t, c, "vf-late", l.Fence())
}

// TestValidateFenceScriptOnlyReads checks validatefence.lua's commands: it
// must stay a read, which a resource may run as often as it writes.
func TestValidateFenceScriptOnlyReads(t *testing.T) {
	src := scriptSources(t)["validatefence.lua"]
	calls := regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`).FindAllStringSubmatch(src, -1)
	require.NotEmpty(t, calls)
	reads := map[string]bool{"TYPE": true, "GET": true, "HGET": true, "HLEN": true}
	for _, m := range calls {
		require.True(t, reads[strings.ToUpper(m[1])], "validatefence.lua calls %s, which is not one of its reads", m[1])
	}
	require.Equal(t, "validatefence.lua", scripts[scriptValidateFence].name)
	require.Equal(t, scriptSources(t)["validatefence.lua"], scripts[scriptValidateFence].src, "composed from its own file alone")
}

// TestValidateFenceFallsBackToEval: a node that lost its scripts gets the
// source.
func TestValidateFenceFallsBackToEval(t *testing.T) {
	_, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing(true))
	l, err := c.TryLock(t.Context(), "vf-flush")
	require.NoError(t, err)
	requireValid(t, c, "vf-flush", l.Fence())
	for _, rc := range cs {
		require.NoError(t, rc.ScriptFlush(t.Context()).Err())
	}
	requireValid(t, c, "vf-flush", l.Fence())
}
