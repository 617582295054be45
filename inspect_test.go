package redlock

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
)

// The label tests show where the label lives on the wire and that every
// comparison of values still holds with it; the Inspect tests show what
// Inspect reads from each layout, and its verdict.

// labelled reports whether v is an attempt's name followed by the label.
func labelled(v, label string) bool {
	name, got, found := strings.Cut(v, labelSep)
	return found && got == label && isAttemptName(name)
}

func TestLabelIsStoredAfterTheToken(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithLabel("host-a pid 42"))

	l, err := c.TryLock(t.Context(), "lbl")
	require.NoError(t, err)
	require.True(t, labelled(l.Token(), "host-a pid 42"), "got token %q, want a UUID, a space and the label", l.Token())
	eventually(t, ms, "lbl", l.Token())
	require.NoError(t, l.Extend(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "lbl", "")

	// A call's label replaces the Client's. Each case has a key of its
	// own: Unlock returns at its quorum, so a slower node may still hold
	// the last case's value.
	l, err = c.TryLock(t.Context(), "lbl-call", WithLabel("job 7"))
	require.NoError(t, err)
	require.True(t, labelled(l.Token(), "job 7"), "got token %q, want the call's label", l.Token())
	eventually(t, ms, "lbl-call", l.Token())
	require.NoError(t, l.Unlock(t.Context()))

	// Without a label nothing follows the UUID: no separator either.
	plain := newClient(t, cs)
	l, err = plain.TryLock(t.Context(), "lbl-plain")
	require.NoError(t, err)
	require.NotContains(t, l.Token(), labelSep)
	require.True(t, isAttemptName(l.Token()), "got token %q, want a bare UUID", l.Token())
	eventually(t, ms, "lbl-plain", l.Token())
	require.NoError(t, l.Unlock(t.Context()))

	// An owner lock keeps the label in its hold's field, with the token.
	l, err = c.TryLock(t.Context(), "lbl-owner", WithOwner("w"))
	require.NoError(t, err)
	eventuallyCount(t, ms, "lbl-owner", 1)
	for i, m := range ms {
		require.Equal(t, "1", m.HGet("lbl-owner", "t:"+l.Token()), "node %d: got no field t:%s", i, l.Token())
	}
	require.NoError(t, l.Unlock(t.Context()))
	eventuallyCount(t, ms, "lbl-owner", 0)

	// Each key of a multi-key lock holds the labelled value.
	l, err = c.TryLockMulti(t.Context(), []string{"lbl-a", "lbl-b"})
	require.NoError(t, err)
	require.True(t, labelled(l.Token(), "host-a pid 42"))
	eventually(t, ms, "lbl-a", l.Token())
	eventually(t, ms, "lbl-b", l.Token())
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "lbl-a", "")
	eventually(t, ms, "lbl-b", "")
}

func TestLabelledLocksExtendFenceReenterAndUnlock(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithLabel("svc"), WithFencing(true))

	// Fencing: the write-back compares the labelled value.
	l, err := c.TryLock(t.Context(), "lbl-fence")
	require.NoError(t, err)
	require.NotZero(t, l.Fence())
	require.NoError(t, l.Extend(t.Context()))
	_, err = c.TryLock(t.Context(), "lbl-fence")
	require.ErrorIs(t, err, ErrNotAcquired, "a second labelled lock took a held key")
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "lbl-fence", "")

	// Reentrancy: two holds of one owner, each with its label; each
	// Unlock takes its own away.
	outer, err := c.TryLock(t.Context(), "lbl-re", WithOwner("w"), WithFencing(false))
	require.NoError(t, err)
	inner, err := c.TryLock(t.Context(), "lbl-re", WithOwner("w"), WithLabel("inner"), WithFencing(false))
	require.NoError(t, err)
	require.True(t, labelled(inner.Token(), "inner"))
	eventuallyCount(t, ms, "lbl-re", 2)
	require.NoError(t, inner.Extend(t.Context()))
	require.NoError(t, inner.Unlock(t.Context()))
	eventuallyCount(t, ms, "lbl-re", 1)
	for i, m := range ms {
		require.Equal(t, "1", m.HGet("lbl-re", "t:"+outer.Token()), "node %d: the inner Unlock took the outer hold", i)
	}
	require.NoError(t, outer.Unlock(t.Context()))
	eventuallyCount(t, ms, "lbl-re", 0)
}

func TestLabelledLaterAttemptTakesOverEarlierLeftovers(t *testing.T) {
	for _, owner := range []string{"", "w"} {
		t.Run("owner="+owner, func(t *testing.T) {
			ms, cs := minis(t, 5)
			c := newClient(t, cs)
			cfg := c.cfg
			cfg.label, cfg.owner = "job 7", owner
			tg := newTarget(plainFlavour.with(&cfg), []string{"lbl-left"}, "acq", owner, false, c.quorum)
			a := c.newAcquisition(&cfg, []string{"lbl-left"}, tg)
			a.made = 2 // the next attempt writes "acq.2 job 7"
			// Leftovers of attempts 0 and 1 on nodes 0 and 1, and a late
			// write of attempt 5 on node 2, all labelled. Without the label
			// left out of the comparison, nodes 0 and 1 say no, and the
			// attempt fails with two yes.
			set := func(m *miniredis.Miniredis, v string) {
				if owner == "" {
					require.NoError(t, m.Set("lbl-left", v))
					return
				}
				m.HSet("lbl-left", "owner", owner, "t:"+v, "1")
			}
			set(ms[0], "acq job 7")
			set(ms[1], "acq.1 job 7")
			set(ms[2], "acq.5 job 7")
			l, qerr := a.attempt(t.Context())
			require.Nil(t, qerr)
			require.Equal(t, "acq.2 job 7", l.Token())
			require.NotEqual(t, VoteYes, l.Stats().Nodes[2].Vote, "got yes on the node that holds a later attempt's value, want no")
			for _, i := range []int{0, 1, 3, 4} {
				require.Eventually(t, func() bool {
					if owner == "" {
						v, _ := ms[i].Get("lbl-left")
						return v == "acq.2 job 7"
					}
					keys, _ := ms[i].HKeys("lbl-left")
					return slices.Equal(keys, []string{"owner", "t:acq.2 job 7"})
				}, 5*time.Second, time.Millisecond, "node %d: the leftover was not taken over", i)
			}
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

func TestTokenEarlierIgnoresTheLabel(t *testing.T) {
	tk := attemptToken("acq", 2, "job 7")
	require.Equal(t, "acq.2 job 7", tk.value)
	cases := map[string]bool{
		"acq":           true,
		"acq job 7":     true,
		"acq.1 job 7":   true,
		"acq.1 other":   true,
		"acq.2 job 7":   false, // itself
		"acq.3 job 7":   false, // later
		"acqx job 7":    false,
		"other.1 job 7": false,
	}
	for v, want := range cases {
		require.Equal(t, want, tk.earlier(v), "earlier(%q)", v)
	}
	require.Equal(t, "acq", attemptToken("acq", 0, "").value)
}

func TestLabelOfReadsOnlyOurValues(t *testing.T) {
	const id = "0b0b8f4e-3d2a-4c5e-9f1a-2b3c4d5e6f70"
	cases := map[string]string{
		id:                         "",
		id + " host a":             "host a",
		id + ".3 host a":           "host a",
		id + ".3":                  "",
		id + ".03 x":               "", // never written: attempts count from 1
		id + ". x":                 "",
		"hello world":              "",
		"cmVkc3luYw== x":           "",
		strings.ToUpper(id) + " x": "",
	}
	for v, want := range cases {
		require.Equal(t, want, labelOf(v), "labelOf(%q)", v)
	}
}

func TestInspectFreeHeldAndUnlocked(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithLabel("host-a"))

	h, err := c.Inspect(t.Context(), "insp")
	require.NoError(t, err)
	require.False(t, h.Held, "got held on a free key")
	require.Equal(t, "insp", h.Key)
	require.Equal(t, 3, h.Quorum)
	require.Len(t, h.Nodes, 5)
	for i, nh := range h.Nodes {
		require.NoError(t, nh.Err)
		require.Equal(t, i, nh.Index)
		require.Equal(t, ms[i].Addr(), nh.Addr)
		require.Equal(t, "", nh.Layout, "node %d", i)
		require.False(t, nh.Held)
	}

	l, err := c.TryLock(t.Context(), "insp")
	require.NoError(t, err)
	eventually(t, ms, "insp", l.Token())
	h, err = c.Inspect(t.Context(), "insp")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)
	require.Equal(t, []string{l.Token()}, h.Tokens)
	require.Equal(t, "host-a", h.Label)
	require.Equal(t, int64(1), h.Count)
	require.Empty(t, h.Owner)
	require.False(t, h.NoExpiry)
	require.Greater(t, h.Remaining, time.Duration(0))
	require.LessOrEqual(t, h.Remaining, DefaultTTL-clockDrift(DefaultTTL, DefaultDriftFactor))
	for i, nh := range h.Nodes {
		require.NoError(t, nh.Err)
		require.Equal(t, "plain", nh.Layout, "node %d", i)
		require.True(t, nh.Held)
		require.Equal(t, l.Token(), nh.Value)
		require.Equal(t, l.Token(), nh.Token)
		require.Equal(t, "host-a", nh.Label)
		require.Equal(t, DefaultTTL, nh.PTTL)
	}

	// The PTTLs count: that of the quorum-th longest, less its drift.
	for i, m := range ms {
		m.FastForward(time.Duration(i+1) * time.Second) // 9s, 8s, 7s, 6s, 5s left
	}
	h, err = c.Inspect(t.Context(), "insp")
	require.NoError(t, err)
	require.True(t, h.Held)
	want := 7*time.Second - clockDrift(7*time.Second, DefaultDriftFactor)
	require.LessOrEqual(t, h.Remaining, want)
	require.Greater(t, h.Remaining, want-time.Second, "got remaining %v, want just under %v", h.Remaining, want)

	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "insp", "")
	h, err = c.Inspect(t.Context(), "insp")
	require.NoError(t, err)
	require.False(t, h.Held, "got held after Unlock")
	require.Empty(t, h.Token)
	require.Zero(t, h.Remaining)
}

func TestInspectOwnerHeldTwice(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	outer, err := c.TryLock(t.Context(), "insp-owner", WithOwner("worker-1"), WithLabel("outer"))
	require.NoError(t, err)
	inner, err := c.TryLock(t.Context(), "insp-owner", WithOwner("worker-1"))
	require.NoError(t, err)
	eventuallyCount(t, ms, "insp-owner", 2)

	h, err := c.Inspect(t.Context(), "insp-owner")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, "worker-1", h.Owner)
	require.Equal(t, int64(2), h.Count)
	tokens := []string{outer.Token(), inner.Token()}
	slices.Sort(tokens)
	require.Equal(t, tokens, h.Tokens)
	require.Equal(t, tokens[0], h.Token)
	wantLabel := ""
	if h.Token == outer.Token() {
		wantLabel = "outer"
	}
	require.Equal(t, wantLabel, h.Label)
	require.Greater(t, h.Remaining, time.Duration(0))
	for i, nh := range h.Nodes {
		require.Equal(t, "owner", nh.Layout, "node %d", i)
		require.Equal(t, "worker-1", nh.Owner)
		require.Equal(t, int64(2), nh.Count)
		require.Equal(t, tokens, nh.Tokens)
		require.Empty(t, nh.Value)
	}

	require.NoError(t, inner.Unlock(t.Context()))
	eventuallyCount(t, ms, "insp-owner", 1)
	h, err = c.Inspect(t.Context(), "insp-owner")
	require.NoError(t, err)
	require.Equal(t, int64(1), h.Count)
	require.Equal(t, outer.Token(), h.Token)
	require.Equal(t, "outer", h.Label)
	require.NoError(t, outer.Unlock(t.Context()))
}

func TestInspectMultiKeyLock(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLockMulti(t.Context(), []string{"insp-m1", "insp-m2"}, WithLabel("batch"))
	require.NoError(t, err)
	for _, k := range l.Keys() {
		eventually(t, ms, k, l.Token())
		h, err := c.Inspect(t.Context(), k)
		require.NoError(t, err)
		require.True(t, h.Held, "key %s", k)
		require.Equal(t, l.Token(), h.Token, "key %s", k)
		require.Equal(t, "batch", h.Label)
		require.Equal(t, "plain", h.Nodes[0].Layout)
	}
	require.NoError(t, l.Unlock(t.Context()))
}

func TestInspectForeignValues(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)

	// redsync's value: random bytes in base64, a plain string.
	const redsync = "dGhpcyBpcyByZWRzeW5jIQ=="
	for _, m := range ms {
		require.NoError(t, m.Set("insp-rs", redsync))
		m.SetTTL("insp-rs", 8*time.Second)
	}
	h, err := c.Inspect(t.Context(), "insp-rs")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, redsync, h.Token)
	require.Empty(t, h.Label)
	require.Greater(t, h.Remaining, 7*time.Second)
	require.Equal(t, "plain", h.Nodes[0].Layout)

	// A string with a space that we did not write has no label.
	for _, m := range ms {
		require.NoError(t, m.Set("insp-sp", "hello world"))
	}
	h, err = c.Inspect(t.Context(), "insp-sp")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, "hello world", h.Token)
	require.Empty(t, h.Label)
	require.True(t, h.NoExpiry, "got no NoExpiry on keys without a TTL")
	require.Zero(t, h.Remaining)
	require.Equal(t, time.Duration(-1), h.Nodes[0].PTTL)

	// A list, and a hash that is not an owner lock, are foreign.
	for _, m := range ms {
		_, err := m.Push("insp-list", "a", "b")
		require.NoError(t, err)
		m.HSet("insp-hash", "owner", "x", "other", "1")
	}
	for _, k := range []string{"insp-list", "insp-hash"} {
		h, err = c.Inspect(t.Context(), k)
		require.NoError(t, err)
		require.False(t, h.Held, "key %s", k)
		for i, nh := range h.Nodes {
			require.NoError(t, nh.Err, "key %s node %d", k, i)
			require.Equal(t, "foreign", nh.Layout, "key %s node %d", k, i)
			require.False(t, nh.Held)
		}
	}
}

func TestInspectMinorityIsNotHeld(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	for _, m := range ms[:2] {
		require.NoError(t, m.Set("insp-min", "mine"))
	}
	for _, m := range ms[2:4] {
		require.NoError(t, m.Set("insp-min", "theirs"))
	}
	h, err := c.Inspect(t.Context(), "insp-min")
	require.NoError(t, err)
	require.False(t, h.Held, "got held with 2 of 5")
	require.Empty(t, h.Token)
	require.Nil(t, h.Tokens)
	require.Zero(t, h.Remaining)
	held := 0
	for _, nh := range h.Nodes {
		if nh.Held {
			held++
		}
	}
	require.Equal(t, 4, held)

	// One more node for "mine" makes a quorum.
	require.NoError(t, ms[4].Set("insp-min", "mine"))
	h, err = c.Inspect(t.Context(), "insp-min")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, "mine", h.Token)
}

func TestInspectNodeDown(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "insp-down")
	require.NoError(t, err)
	eventually(t, ms, "insp-down", l.Token())
	ms[4].Close()
	h, err := c.Inspect(t.Context(), "insp-down")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)
	var ne *NodeError
	require.ErrorAs(t, h.Nodes[4].Err, &ne)
	require.Equal(t, 4, ne.Index)
	require.False(t, h.Nodes[4].Held)
	require.Empty(t, h.Nodes[4].Layout)
	for _, nh := range h.Nodes[:4] {
		require.NoError(t, nh.Err)
	}

	// Back up, the node answers again; go-redis stops redialing it.
	require.NoError(t, ms[4].Restart())
	require.Eventually(t, func() bool {
		h, err := c.Inspect(t.Context(), "insp-down")
		require.NoError(t, err)
		return h.Nodes[4].Err == nil
	}, 5*time.Second, 10*time.Millisecond, "the restarted node never answered")
	require.Eventually(t, func() bool { return !redialing() }, 5*time.Second, 10*time.Millisecond,
		"go-redis still redials the restarted node")
}

func TestInspectBoundsAHungNode(t *testing.T) {
	ms, cs, g := slowNodes(t, 1, "type")
	c := newClient(t, cs, WithTTL(200*time.Millisecond), WithNodeTimeout(20*time.Millisecond))
	t.Cleanup(g.release)
	for _, m := range ms {
		require.NoError(t, m.Set("insp-hung", "v"))
	}
	start := time.Now()
	h, err := c.Inspect(t.Context(), "insp-hung")
	took := time.Since(start)
	require.NoError(t, err)
	require.Less(t, took, 2*time.Second, "got an Inspect of %v, want it bounded by the node timeout", took)
	require.ErrorIs(t, h.Nodes[4].Err, ErrNodeTimeout)
	require.True(t, h.Held)
	require.Equal(t, "v", h.Token)

	// The caller's ctx ends the wait, and says so.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	h, err = c.Inspect(ctx, "insp-hung")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, h)
}

func TestInspectKeyPrefixValidationAndClose(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithKeyPrefix("app:"))
	for _, m := range ms {
		require.NoError(t, m.Set("app:k", "v"))
		require.NoError(t, m.Set("k", "other"))
	}
	h, err := c.Inspect(t.Context(), "k")
	require.NoError(t, err)
	require.Equal(t, "k", h.Key)
	require.Equal(t, "v", h.Token, "got the key without the prefix")

	_, err = c.Inspect(t.Context(), "")
	require.ErrorIs(t, err, ErrInvalidOption)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Inspect(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, c.Close())
	_, err = c.Inspect(t.Context(), "k")
	require.ErrorIs(t, err, ErrClosed)
}

func TestInspectVerdictArithmetic(t *testing.T) {
	plain := func(v string, pttl time.Duration) NodeHolding {
		return NodeHolding{Held: true, Layout: "plain", Value: v, Token: v, Tokens: []string{v}, Count: 1, PTTL: pttl}
	}
	owner := func(o string, pttl time.Duration, tokens ...string) NodeHolding {
		return NodeHolding{Held: true, Layout: "owner", Owner: o, Token: tokens[0], Tokens: tokens, Count: int64(len(tokens)), PTTL: pttl}
	}
	cases := []struct {
		name  string
		nodes []NodeHolding
		took  time.Duration
		want  Holding
	}{
		{
			name:  "quorum-th longest PTTL, less drift and time taken",
			nodes: []NodeHolding{plain("v", 9*time.Second), plain("v", time.Second), plain("v", 8*time.Second), plain("w", 20*time.Second), plain("v", 7*time.Second)},
			took:  100 * time.Millisecond,
			want:  Holding{Held: true, Token: "v", Tokens: []string{"v"}, Count: 1, Remaining: 7*time.Second - 72*time.Millisecond - 100*time.Millisecond},
		},
		{
			name:  "never negative",
			nodes: []NodeHolding{plain("v", 10*time.Millisecond), plain("v", 10*time.Millisecond), plain("v", 10*time.Millisecond), {}, {}},
			took:  time.Second,
			want:  Holding{Held: true, Token: "v", Tokens: []string{"v"}, Count: 1},
		},
		{
			name:  "no expiry on a quorum",
			nodes: []NodeHolding{plain("v", -1), plain("v", -1), plain("v", -1), plain("v", time.Second), {}},
			want:  Holding{Held: true, Token: "v", Tokens: []string{"v"}, Count: 1, NoExpiry: true},
		},
		{
			name:  "one node without expiry counts as the longest",
			nodes: []NodeHolding{plain("v", -1), plain("v", 2*time.Second), plain("v", time.Second), {}, {}},
			want:  Holding{Held: true, Token: "v", Tokens: []string{"v"}, Count: 1, Remaining: time.Second - 12*time.Millisecond},
		},
		{
			name: "owner: the count and tokens a quorum has",
			nodes: []NodeHolding{
				owner("o", time.Second, "a", "b", "c"), owner("o", time.Second, "a", "b"), owner("o", time.Second, "a", "b"),
				owner("o", time.Second, "a"), plain("o", time.Minute),
			},
			want: Holding{Held: true, Owner: "o", Token: "a", Tokens: []string{"a", "b"}, Count: 2, Remaining: time.Second - 12*time.Millisecond},
		},
		{
			name:  "a plain value and an owner of the same name are not one holder",
			nodes: []NodeHolding{owner("o", time.Second, "a"), owner("o", time.Second, "a"), plain("o", time.Second), plain("o", time.Second), {}},
			want:  Holding{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Holding{Quorum: 3, Nodes: tc.nodes}
			h.decide(DefaultDriftFactor, tc.took)
			tc.want.Quorum, tc.want.Nodes = 3, tc.nodes
			require.Equal(t, tc.want, *h)
		})
	}
}

func TestRealLabelAndInspect(t *testing.T) {
	srv, cs := realNodes(t, 5)
	c := newClient(t, cs, WithLabel("host-a pid 42"))
	ctx := t.Context()

	// The label is in the plain string each node keeps: GET shows it.
	l, err := c.TryLock(ctx, "real-insp")
	require.NoError(t, err)
	require.True(t, labelled(l.Token(), "host-a pid 42"), "got token %q", l.Token())
	realEventually(t, srv, "real-insp", l.Token())
	for i, s := range srv {
		got, err := s.NewClient(t).Get(ctx, "real-insp").Result()
		require.NoError(t, err)
		require.Equal(t, l.Token(), got, "node %d", i)
	}
	h, err := c.Inspect(ctx, "real-insp")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)
	require.Equal(t, "host-a pid 42", h.Label)
	require.Greater(t, h.Remaining, time.Duration(0))
	require.LessOrEqual(t, h.Remaining, DefaultTTL-clockDrift(DefaultTTL, DefaultDriftFactor))
	for i, nh := range h.Nodes {
		require.NoError(t, nh.Err, "node %d", i)
		require.Equal(t, "plain", nh.Layout)
		require.Greater(t, nh.PTTL, DefaultTTL/2, "node %d: got PTTL %v, want most of the TTL", i, nh.PTTL)
		require.LessOrEqual(t, nh.PTTL, DefaultTTL)
	}

	// An owner lock held twice, with the call's own label.
	outer, err := c.TryLock(ctx, "real-insp-owner", WithOwner("w"), WithLabel("outer"))
	require.NoError(t, err)
	inner, err := c.TryLock(ctx, "real-insp-owner", WithOwner("w"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := c.Inspect(ctx, "real-insp-owner")
		require.NoError(t, err)
		for _, nh := range h.Nodes {
			if nh.Count != 2 {
				return false
			}
		}
		return h.Held && h.Owner == "w" && h.Count == 2
	}, 5*time.Second, time.Millisecond, "never saw the owner lock held twice on every node")
	for i, s := range srv {
		n, err := s.NewClient(t).HExists(ctx, "real-insp-owner", "t:"+outer.Token()).Result()
		require.NoError(t, err)
		require.True(t, n, "node %d: got no field t:%s", i, outer.Token())
	}
	require.True(t, labelled(outer.Token(), "outer"))

	// A node down: its Err says so, and the quorum still holds.
	srv[4].Kill()
	h, err = c.Inspect(ctx, "real-insp")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)
	var ne *NodeError
	require.ErrorAs(t, h.Nodes[4].Err, &ne, "got no error from the killed node")
	require.Equal(t, 4, ne.Index)
	require.Equal(t, srv[4].Addr(), ne.Addr)

	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, inner.Unlock(ctx))
	require.NoError(t, outer.Unlock(ctx))
	realEventually(t, srv, "real-insp", "")
	h, err = c.Inspect(ctx, "real-insp")
	require.NoError(t, err)
	require.False(t, h.Held, "got held after Unlock")
	require.Error(t, h.Nodes[4].Err)
	h, err = c.Inspect(ctx, "real-insp-owner")
	require.NoError(t, err)
	require.False(t, h.Held, "got the owner lock held after both Unlocks")

	// Back up (empty: no persistence), the node answers again. This also
	// ends go-redis's background redial of it, which goleak would report.
	srv[4].Restart()
	require.Eventually(t, func() bool {
		h, err := c.Inspect(ctx, "real-insp")
		require.NoError(t, err)
		return h.Nodes[4].Err == nil && h.Nodes[4].Layout == ""
	}, 5*time.Second, 10*time.Millisecond, "the restarted node never answered")
	require.Eventually(t, func() bool { return !redialing() }, 5*time.Second, 10*time.Millisecond,
		"go-redis still redials the restarted node")
}

// redialing reports whether a go-redis pool is still redialing a node it
// lost, in the background.
func redialing() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pool.(*ConnPool).tryDial")
}

// TestDiagnosticsRaceRenewalsAndClose: Inspect and Check in a
// loop beside auto-extended locks, over one node whose replies come close
// to the round's timeout (some before, some after the decision), then
// Close while all of it runs. Run under -race: the per-node results
// (read[], checkRead, renewJob.votes) are written by late replies.
func TestDiagnosticsRaceRenewalsAndClose(t *testing.T) {
	ps, cs, _ := realProxied(t, 3)
	// Node 1's replies land around each kind of round's decision: the
	// renewals' (60ms), Inspect's (200ms, the release timeout) and
	// Check's (600ms: two round trips and the 100ms rate gap).
	ps[1].SetLatency(190*time.Millisecond, 60*time.Millisecond)
	ps[2].SetLatency(50*time.Millisecond, 20*time.Millisecond)
	c, err := New(cs, WithNodeTimeout(60*time.Millisecond), WithTTL(200*time.Millisecond))
	require.NoError(t, err)
	var locks []*Lock
	for i := range 20 {
		l, err := c.Lock(t.Context(), "diag-"+string(rune('a'+i)), WithTTL(300*time.Millisecond), WithAutoExtend(true))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if g == 0 {
					_, _ = c.Check(context.Background())
				} else {
					h, err := c.Inspect(context.Background(), "diag-a")
					if err == nil {
						for _, n := range h.Nodes {
							_ = n.Err
							_ = n.Token
						}
					}
				}
			}
		})
	}
	time.Sleep(4 * time.Second)
	for _, l := range locks {
		if err := l.Err(); err != nil {
			t.Logf("lock %s ended: %v", l.name(), err)
		}
	}
	require.NoError(t, c.Close())
	close(stop)
	wg.Wait()
	for _, l := range locks {
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("lock %s: Done open after Close", l.name())
		}
	}
}
