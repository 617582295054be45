package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/history"
	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/redlockgo/redlock/internal/redistest"
)

var electionSeed = flag.Uint64("election.seed", 0, "seed of the election tests' schedules (0: from the clock)")

// electionRand returns the test's seeded generator, and logs the seed so
// that a failing run can be replayed.
func electionRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *electionSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed=%d (replay with -election.seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// electionOpts are the options of a test's Clients for elections of TTL
// ttl: a node timeout short enough for auto-extension at that TTL, and as
// patient as it allows.
func electionOpts(ttl time.Duration, more ...Option) []Option {
	return append([]Option{WithTTL(ttl), WithNodeTimeout(ttl * 3 / 10)}, more...)
}

// follower records what an Observe channel sends, on a goroutine of its
// own, until the channel closes.
type follower struct {
	mu     sync.Mutex
	got    []Leader // guarded by mu
	closed chan struct{}
}

func follow(ch <-chan Leader) *follower {
	f := &follower{closed: make(chan struct{})}
	go func() {
		defer close(f.closed)
		for ld := range ch {
			f.mu.Lock()
			f.got = append(f.got, ld)
			f.mu.Unlock()
		}
	}()
	return f
}

// values returns what was sent so far.
func (f *follower) values() []Leader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Leader(nil), f.got...)
}

// next waits, up to within, for a value at index from or later that want
// accepts, and returns its index.
func (f *follower) next(t *testing.T, from int, within time.Duration, what string, want func(Leader) bool) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := f.values()
		for i := from; i < len(got); i++ {
			if want(got[i]) {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Observe did not send %s within %v: got %v (from index %d)", what, within, got, from)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// last waits, up to within, until the latest value sent is one that want
// accepts.
func (f *follower) last(t *testing.T, within time.Duration, what string, want func(Leader) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		got := f.values()
		return len(got) > 0 && want(got[len(got)-1])
	}, within, 5*time.Millisecond, "Observe's latest value is not %s: got %v", what, f.values())
}

// isLeader accepts the Leader of value v.
func isLeader(v string) func(Leader) bool {
	return func(ld Leader) bool { return ld.Term != 0 && ld.Value == v }
}

// nobody accepts Leader{}.
func nobody(ld Leader) bool { return ld == Leader{} }

// streamRegressions describes where an Observe stream breaks its rule: its
// non-zero Terms never go down, and one repeats only after a Leader{}.
func streamRegressions(got []Leader) []string {
	var bad []string
	var newest uint64
	vacant := false
	for i, ld := range got {
		switch {
		case ld.Term == 0:
			vacant = true
			continue
		case ld.Term < newest, ld.Term == newest && !vacant:
			bad = append(bad, fmt.Sprintf("index %d: %+v after term %d", i, ld, newest))
		}
		newest, vacant = max(newest, ld.Term), false
	}
	return bad
}

// checkLeads checks that Leader names the leadership l of who while it
// lasts. A read that finds too few nodes answering in time (a loaded
// machine) is tried again; a leadership lost meanwhile is not checked.
// It may run on any goroutine of the test.
func checkLeads(t *testing.T, e *Election, who string, l *Lock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ld, err := e.Leader(t.Context())
		switch {
		case l.Err() != nil:
			t.Logf("%s lost its leadership before Leader could name it: %v", who, l.Err())
		case errors.Is(err, ErrUnavailable) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
			continue
		case err != nil || ld != (Leader{who, l.Fence()}):
			t.Errorf("%s leads with term %d: Leader says %+v, %v", who, l.Fence(), ld, err)
		}
		return
	}
}

// campaignHold is one leadership as a test records it.
func campaignHold(key, who string, l *Lock, acquired time.Time) history.Hold {
	return history.Hold{Key: key, Kind: history.Exclusive, Holder: who, Acquired: acquired, Fence: l.Fence()}
}

func TestElectionRefusals(t *testing.T) {
	_, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(100*time.Millisecond))
	for _, tc := range []struct {
		name string
		key  string
		opts []LockOption
	}{
		{"owner", "e", []LockOption{WithOwner("o")}},
		{"min hold", "e", []LockOption{WithMinHold(time.Second)}},
		{"empty key", "", nil},
		{"reserved key", "e" + keyspace.Reserved + "x", nil},
		{"ttl too short to auto-extend", "e", []LockOption{WithTTL(150 * time.Millisecond)}},
		{"bad label", "e", []LockOption{WithLabel("a\nb")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Election(tc.key, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			t.Log(err)
		})
	}

	// A Client default is refused too, and can be overridden.
	d := newClient(t, ownClients(t, cs), WithMinHold(time.Second), WithOwner("o"))
	_, err := d.Election("e")
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = d.Election("e", WithOwner(""))
	require.ErrorIs(t, err, ErrInvalidOption, "WithMinHold is still the default")
	_, err = d.Election("e", WithOwner(""), WithMinHold(0))
	require.NoError(t, err)

	// Fencing and auto-extension are forced on; WithFair is not refused.
	e, err := c.Election("forced", WithFencing(false), WithAutoExtend(false), WithTTL(time.Second))
	require.NoError(t, err)
	l, err := e.Campaign(t.Context(), "v")
	require.NoError(t, err)
	require.Positive(t, l.Fence(), "a leader is fenced")
	until := l.Until()
	require.Eventually(t, func() bool { return l.Until().After(until) }, 5*time.Second, 10*time.Millisecond, "a leader is auto-extended")
	require.NoError(t, l.Unlock(t.Context()))
	_, err = c.Election("fair", WithFair(true))
	require.NoError(t, err)

	// After Close.
	closed := newClient(t, ownClients(t, cs))
	e, err = closed.Election("closed")
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = e.Campaign(t.Context(), "v")
	require.ErrorIs(t, err, ErrClosed)
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, ErrClosed)
	_, open := <-e.Observe(t.Context())
	require.False(t, open, "Observe after Close sends nothing and closes")
}

func TestParseTermRecord(t *testing.T) {
	for _, tc := range []struct {
		in           string
		ok           bool
		term         uint64
		token, value string
	}{
		{"12\ntok\nval", true, 12, "tok", "val"},
		{"12\ntok en\nline1\nline2", true, 12, "tok en", "line1\nline2"},
		{"12\ntok\n", true, 12, "tok", ""},
		{"", false, 0, "", ""},
		{"12\ntok", false, 0, "", ""},
		{"0\ntok\nval", false, 0, "", ""},
		{"x\ntok\nval", false, 0, "", ""},
		{"-1\ntok\nval", false, 0, "", ""},
	} {
		term, token, value, ok := parseTermRecord(tc.in)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.term, term, "%q", tc.in)
		require.Equal(t, tc.token, token, "%q", tc.in)
		require.Equal(t, tc.value, value, "%q", tc.in)
	}
}

// TestLeaderVerdictEveryPattern tries every pattern of nodes that hold a
// leader's token, and of nodes that did not answer, on five nodes: Leader
// finds the leader exactly when its quorum answered, never says nobody
// leads when the leader may hold a quorum, and never names a leader that
// does not.
func TestLeaderVerdictEveryPattern(t *testing.T) {
	const n, quorum = 5, 3
	rec := "7\nT\nthe leader"
	for held := range 1 << n {
		for failed := range 1 << n {
			views := make([]*leaderView, n)
			holders, answeredHolders, unanswered := 0, 0, 0
			for i := range n {
				isHeld := held&(1<<i) != 0
				if isHeld {
					holders++
				}
				if failed&(1<<i) != 0 {
					unanswered++
					continue
				}
				v := &leaderView{}
				if isHeld {
					v.held, v.token, v.pttl, v.record = true, "T", time.Duration(i+1)*time.Second, rec
					answeredHolders++
				} else if i == 0 {
					// Another token, with its record, of a higher term.
					v.held, v.token, v.record = true, "old", "9\nold\nstale"
				} else if i == 2 {
					// The leader's record, on a node that lost its key.
					v.record = rec
				}
				views[i] = v
			}
			what := fmt.Sprintf("held %05b, failed %05b", held, failed)
			ld, left, best, found := decideLeader(views, quorum)
			require.Equal(t, answeredHolders >= quorum, found, what)
			if found {
				require.Equal(t, Leader{"the leader", 7}, ld, what)
				require.Positive(t, left, what)
				continue
			}
			unrecorded, unavailable := noLeader(best, unanswered, quorum)
			require.False(t, unrecorded, "%s: every holder has the record", what)
			// ErrNoLeader only when the leader cannot hold a quorum,
			// whatever the silent nodes hold.
			if !unavailable {
				require.Less(t, holders, quorum, "%s: ErrNoLeader while the leader may hold a quorum", what)
			}
		}
	}

	// A quorum of holders whose record no node has: a Campaign writing it.
	views := []*leaderView{{held: true, token: "T"}, {held: true, token: "T"}, {held: true, token: "T"}, nil, {}}
	_, _, best, found := decideLeader(views, quorum)
	require.False(t, found)
	unrecorded, unavailable := noLeader(best, 1, quorum)
	require.True(t, unrecorded)
	require.False(t, unavailable)
	// A record on one node is enough, and the quorum-th longest PTTL is
	// how long the leader is left.
	views[4] = &leaderView{record: "9\nT\nv"}
	views[0].pttl, views[1].pttl, views[2].pttl = 3*time.Second, time.Second, 2*time.Second
	ld, left, _, found := decideLeader(views, quorum)
	require.True(t, found)
	require.Equal(t, Leader{"v", 9}, ld)
	require.Equal(t, time.Second, left)
}

// TestTermScript checks term.lua's rules on one node: it writes only while
// the key holds the token, never replaces a higher term, announces a new
// record, and a copy of its request changes nothing.
func TestTermScript(t *testing.T) {
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := t.Context()
	const key = "elect"
	rec, ch := keyspace.Term(key), keyspace.Elected(key)
	ps := rc.Subscribe(ctx, ch)
	defer ps.Close()
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	write := func(token, term, value string) int64 {
		t.Helper()
		w := &termWrite{keys: []any{key, rec}, token: token, term: term, value: value, elected: ch}
		cmd := redis.NewCmd(ctx, w.args(evalStart(nil, scriptTerm, true), &node{shardArg: "0"})...)
		_ = rc.Process(ctx, cmd)
		v, err := cmd.Int64()
		require.NoError(t, err)
		return v
	}
	announced := func(want string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		require.NoError(t, err)
		require.Equal(t, want, msg.Payload)
	}
	record := func() string {
		t.Helper()
		v, err := m.Get(rec)
		require.NoError(t, err)
		return v
	}

	require.Zero(t, write("tok1", "100", "a"), "the key is free")
	require.False(t, m.Exists(rec))
	require.NoError(t, m.Set(key, "tok1"))
	require.EqualValues(t, 1, write("tok1", "100", "a"))
	require.Equal(t, "100\ntok1\na", record())
	announced("100")
	require.EqualValues(t, 1, write("tok1", "100", "a"), "a copy of the request")
	require.Zero(t, write("other", "100", "a"), "another token holds the key")

	// A newer leader's record stands against an older term's late copy.
	require.NoError(t, m.Set(key, "tok2"))
	require.EqualValues(t, 1, write("tok2", "1000", "b"))
	announced("1000")
	require.NoError(t, m.Set(key, "tok1"))
	require.EqualValues(t, -1, write("tok1", "999", "a"), "a lower term")
	require.Equal(t, "1000\ntok2\nb", record())
	require.EqualValues(t, 1, write("tok1", "1001", "a"), "a higher term")
	announced("1001")
	require.Zero(t, m.TTL(rec), "the record never expires")
}

// electionNodes starts five redis-servers; with -short the test is
// skipped.
func electionNodes(t *testing.T, opts redistest.Options) []*redistest.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("real servers")
	}
	redistest.Require(t)
	return redistest.StartN(t, 5, opts)
}

// TestElectionOneLeader has several Clients campaign on one key, each
// with several goroutines, and checks that their leaderships never
// overlap, and that Leader names each leader while it leads.
func TestElectionOneLeader(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	rng := electionRand(t)
	const key, want = "elect:one", 30
	clients := realClients(t, srv, 3, electionOpts(time.Second)...)
	var (
		mu    sync.Mutex
		holds []history.Hold
		taken atomic.Int64
		wg    sync.WaitGroup
	)
	for ci, c := range clients {
		e, err := c.Election(key)
		require.NoError(t, err)
		for g := range 2 {
			hold := time.Duration(rng.IntN(20)) * time.Millisecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; taken.Add(1) <= want; k++ {
					who := fmt.Sprintf("c%d/g%d/%d", ci, g, k)
					l, err := e.Campaign(t.Context(), who)
					if err != nil {
						t.Errorf("Campaign: %v", err)
						return
					}
					h := campaignHold(key, who, l, time.Now())
					checkLeads(t, e, who, l)
					time.Sleep(hold)
					h.Until, h.Released = l.Until(), time.Now()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("resign: %v", err)
					}
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, holds, want)
	require.Empty(t, overlaps(holds), "two leaders at once")
	require.Empty(t, history.FenceInversions(holds), "terms out of order")
}

// TestElectionTermsIncrease runs many successions: leaders resign, or
// their Clients close without resigning (a crash: the key is left to
// expire). Terms strictly increase in the order of leadership, Leader names
// each leader, and an Observe that runs throughout sends only leaders that
// were, with non-zero Terms that never go down.
func TestElectionTermsIncrease(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	rng := electionRand(t)
	const key, want = "elect:terms", 40
	opts := electionOpts(500 * time.Millisecond)
	watcher := realClients(t, srv, 1, opts...)[0]
	we, err := watcher.Election(key)
	require.NoError(t, err)
	stream := follow(we.Observe(t.Context()))

	var (
		mu     sync.Mutex
		holds  []history.Hold
		values = map[Leader]bool{}
		taken  atomic.Int64
		wg     sync.WaitGroup
	)
	crashes := make([]bool, want+8)
	sleeps := make([]time.Duration, want+8)
	for i := range crashes {
		crashes[i] = rng.IntN(4) == 0
		sleeps[i] = time.Duration(rng.IntN(30)) * time.Millisecond
	}
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				n := taken.Add(1)
				if n > want {
					return
				}
				// A Client of its own, as a process: a crash closes it.
				c := realClients(t, srv, 1, opts...)[0]
				e, err := c.Election(key)
				if err != nil {
					t.Errorf("Election: %v", err)
					return
				}
				who := fmt.Sprintf("w%d/%d", w, k)
				l, err := e.Campaign(t.Context(), who)
				if err != nil {
					t.Errorf("Campaign: %v", err)
					return
				}
				h := campaignHold(key, who, l, time.Now())
				checkLeads(t, e, who, l)
				mu.Lock()
				values[Leader{who, l.Fence()}] = true
				mu.Unlock()
				time.Sleep(sleeps[n])
				h.Until = l.Until()
				if crashes[n] {
					// Gone without a word: the key expires.
					_ = c.Close()
				} else {
					h.Released = time.Now()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("resign: %v", err)
					}
				}
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, holds, want)
	require.Empty(t, overlaps(holds), "two leaders at once")
	require.Empty(t, history.FenceInversions(holds), "terms out of order")

	// The last leader's end reaches the watcher too.
	stream.last(t, 10*time.Second, "the vacancy after the last leader", nobody)
	got := stream.values()
	require.Empty(t, streamRegressions(got), "Observe: %v", got)
	seen := 0
	for _, ld := range got {
		if ld.Term != 0 {
			require.True(t, values[ld], "Observe sent %+v, which never led", ld)
			seen++
		}
	}
	t.Logf("%d leaderships, %d of them crashed; Observe sent %d values, %d leaders", want, want-countReleased(holds), len(got), seen)
	require.Positive(t, seen)
}

// countReleased counts the holds that were released, not left to expire.
func countReleased(holds []history.Hold) int {
	n := 0
	for _, h := range holds {
		if !h.Released.IsZero() {
			n++
		}
	}
	return n
}

// TestElectionTermsAcrossRestarts: terms keep increasing across kills and
// restarts, within the model's persistence rule. The fence counters start
// level on every node, and each leader wins on a different quorum (the
// other nodes are held by someone else), the sequence of docs/FENCING.md
// that makes a counter without write-back go backwards; nodes are killed
// and restarted from their append-only files between leaderships, and at
// the end every node restarts empty after more than the TTL. Leader and
// Observe report each new leader. The negative control turns the fence
// write-back off: the third leader's term is then not above the second's.
func TestElectionTermsAcrossRestarts(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "write-back"
		if control {
			name = "negative control: no fence write-back"
		}
		t.Run(name, func(t *testing.T) {
			terms, leaders := termsAcrossRestarts(t, testHooks{noFenceWriteBack: control})
			t.Logf("terms %v", terms)
			if control {
				require.LessOrEqual(t, terms[2], terms[1], "without the write-back the third term is not above the second")
				return
			}
			for i := 1; i < len(terms); i++ {
				require.Greater(t, terms[i], terms[i-1], "term %d", i)
			}
			require.Equal(t, len(terms), leaders, "Observe saw every leader")
		})
	}
}

// termsAcrossRestarts runs the sequence of TestElectionTermsAcrossRestarts
// with the given hooks, and returns the leaders' terms and how many of them
// an Observe saw.
func termsAcrossRestarts(t *testing.T, hooks testHooks) ([]uint64, int) {
	srv := electionNodes(t, redistest.Options{Persistence: true})
	ctx := t.Context()
	const key, ttl = "elect:restarts", 2 * time.Second
	opts := electionOpts(ttl)
	clients := realClients(t, srv, 2, opts...)
	watcher := realClients(t, srv, 1, opts...)[0]
	raw := make([]*redis.Client, len(srv))
	for i, s := range srv {
		raw[i] = s.NewClient(t)
	}
	// Level counters: the highest node clock, in microseconds, as a
	// counter's first value would be.
	var level int64
	for _, rc := range raw {
		tm, err := rc.Time(ctx).Result()
		require.NoError(t, err)
		level = max(level, tm.UnixMicro())
	}
	for _, rc := range raw {
		require.NoError(t, rc.Set(ctx, keyspace.Fence(key), level, 0).Err())
	}
	we, err := watcher.Election(key)
	require.NoError(t, err)
	stream := follow(we.Observe(ctx))
	stream.next(t, 0, 10*time.Second, "nobody", nobody)

	var terms []uint64
	lead := func(c *Client, who string, blocked ...int) {
		t.Helper()
		setHooks(c, hooks)
		for _, i := range blocked {
			require.NoError(t, raw[i].Set(ctx, key, "someone-else", time.Minute).Err())
		}
		e, err := c.Election(key)
		require.NoError(t, err)
		l, err := e.Campaign(ctx, who)
		require.NoError(t, err)
		terms = append(terms, l.Fence())
		ld, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader{who, l.Fence()}, ld, "Leader names the new leader")
		stream.next(t, 0, 10*time.Second, who, isLeader(who))
		require.NoError(t, l.Unlock(ctx))
		for _, i := range blocked {
			require.NoError(t, raw[i].Del(ctx, key).Err())
		}
	}
	// Each leader on a quorum of its own; nodes killed and restarted from
	// their append-only files in between.
	lead(clients[0], "first", 3, 4)
	srv[0].Restart()
	srv[1].Restart()
	lead(clients[1], "second", 0, 1)
	srv[2].Restart()
	srv[3].Restart()
	lead(clients[0], "third", 2, 4)
	if hooks.noFenceWriteBack {
		return terms, 0
	}
	// Every node down, and back empty after more than the TTL.
	for _, s := range srv {
		s.Kill()
	}
	time.Sleep(ttl + 500*time.Millisecond)
	for _, s := range srv {
		s.RestartEmpty()
	}
	lead(clients[1], "fourth")
	leaders := 0
	for _, ld := range stream.values() {
		if ld.Term != 0 {
			leaders++
		}
	}
	require.Empty(t, streamRegressions(stream.values()))
	return terms, leaders
}

// TestLeaderNoLeader: Leader says nobody leads, with ErrNoLeader and not
// ErrUnavailable, when the key is free, held by a lock that is no
// Campaign's, held by a token on a minority only, or when the only
// records are stale; and it names the leader, ignoring a stale record of a
// higher term, while one leads.
func TestLeaderNoLeader(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	ctx := t.Context()
	const key = "elect:none"
	c := realClients(t, srv, 1)[0]
	raw := make([]*redis.Client, len(srv))
	for i, s := range srv {
		raw[i] = s.NewClient(t)
	}
	e, err := c.Election(key)
	require.NoError(t, err)
	nobodyLeads := func(what string) {
		t.Helper()
		ld, err := e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader, what)
		require.NotErrorIs(t, err, ErrUnavailable, what)
		require.Zero(t, ld, what)
		t.Logf("%s: %v", what, err)
	}
	nobodyLeads("a fresh key")

	plain, err := c.Lock(ctx, key, WithFencing(true))
	require.NoError(t, err)
	nobodyLeads("a plain lock holds the key")
	require.NoError(t, plain.Unlock(ctx))

	l, err := e.Campaign(ctx, "leader")
	require.NoError(t, err)
	// A stale record of a higher term, on a minority, names another token.
	for _, rc := range raw[:2] {
		require.NoError(t, rc.Set(ctx, keyspace.Term(key), strconv.FormatUint(l.Fence()+100, 10)+"\nsomeone\nstale", 0).Err())
	}
	ld, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{"leader", l.Fence()}, ld)
	require.NoError(t, l.Unlock(ctx))
	nobodyLeads("after the resign, with records of a token that no longer holds the key")

	// The leader's token and record, on a minority only.
	for _, rc := range raw {
		require.NoError(t, rc.Del(ctx, keyspace.Term(key)).Err())
	}
	for _, rc := range raw[:2] {
		require.NoError(t, rc.Set(ctx, key, l.Token(), time.Minute).Err())
		require.NoError(t, rc.Set(ctx, keyspace.Term(key), strconv.FormatUint(l.Fence(), 10)+"\n"+l.Token()+"\nleader", 0).Err())
	}
	nobodyLeads("the token on a minority")
	// On a quorum, with the record on one node only: a leader.
	require.NoError(t, raw[2].Set(ctx, key, l.Token(), time.Minute).Err())
	require.NoError(t, raw[1].Del(ctx, keyspace.Term(key)).Err())
	ld, err = e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{"leader", l.Fence()}, ld)
	// Without any record naming it: a Campaign between its win and its
	// record.
	require.NoError(t, raw[0].Del(ctx, keyspace.Term(key)).Err())
	nobodyLeads("a quorum holds the token, no record names it")
}

// TestLeaderUnavailable: when too few nodes answer to tell, Leader's error
// matches ErrUnavailable, not ErrNoLeader, and names the nodes that
// failed; two nodes down are not enough to hide a free key.
func TestLeaderUnavailable(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	ctx := t.Context()
	c := realClients(t, srv, 1, electionOpts(time.Second)...)[0]
	e, err := c.Election("elect:unavailable")
	require.NoError(t, err)
	l, err := e.Campaign(ctx, "leader")
	require.NoError(t, err)
	ld, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "leader", ld.Value)

	free, err := c.Election("elect:unavailable:free")
	require.NoError(t, err)
	srv[0].Kill()
	srv[1].Kill()
	_, err = free.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "two nodes down: three free keys say nobody leads")
	ld, err = e.Leader(ctx)
	require.NoError(t, err, "two nodes down: the leader still holds three")
	require.Equal(t, "leader", ld.Value)

	srv[2].Kill()
	for _, el := range []*Election{e, free} {
		ld, err = el.Leader(ctx)
		require.ErrorIs(t, err, ErrUnavailable)
		require.NotErrorIs(t, err, ErrNoLeader)
		require.Zero(t, ld)
		var ne *NodeError
		require.ErrorAs(t, err, &ne)
		require.Contains(t, []int{0, 1, 2}, ne.Index)
		t.Logf("%v", err)
	}
	_ = l.Unlock(ctx)
}

// TestLeaderMinorityDown: with two of five nodes down, from the start or
// during a leadership, campaigns, Leader, Observe and successions work as
// with all five, and a leadership outlives several TTLs.
func TestLeaderMinorityDown(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	// A campaign that cannot win fails the test rather than hang it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const ttl = 2 * time.Second
	cl := realClients(t, srv, 3, electionOpts(ttl)...)
	elect := func(c *Client) *Election {
		e, err := c.Election("elect:minority")
		require.NoError(t, err)
		return e
	}
	stream := follow(elect(cl[2]).Observe(ctx))
	stream.next(t, 0, 10*time.Second, "nobody", nobody)

	srv[3].Kill()
	srv[4].Kill()
	a := elect(cl[0])
	la, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	stream.next(t, 0, 10*time.Second, "a", isLeader("a"))
	ld, err := elect(cl[1]).Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{"a", la.Fence()}, ld)

	// b waits; a resigns; b leads, still on three nodes.
	b := elect(cl[1])
	got := make(chan *Lock, 1)
	go func() {
		l, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Errorf("Campaign: %v", err)
		}
		got <- l
	}()
	require.NoError(t, la.Unlock(ctx))
	lb := <-got
	require.NotNil(t, lb)
	require.Greater(t, lb.Fence(), la.Fence())
	stream.next(t, 0, 10*time.Second, "b", isLeader("b"))

	// All back; then two others go down under b's leadership.
	srv[3].Restart()
	srv[4].Restart()
	time.Sleep(ttl) // renewals, and top-ups to the nodes back
	srv[0].Kill()
	srv[1].Kill()
	time.Sleep(2 * ttl)
	require.NoError(t, lb.Err(), "b still leads")
	ld, err = elect(cl[0]).Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{"b", lb.Fence()}, ld)
	require.NoError(t, lb.Unlock(ctx))
	stream.last(t, 10*time.Second, "the vacancy", nobody)
	require.Empty(t, streamRegressions(stream.values()))
}

// TestObserveSeesResignAndCrash: Observe sends the vacancy and each new
// leader. With a TTL of a minute, its periodic reads come every 20s, so
// the changes it sees within a few seconds came by pub/sub: a new term's
// announcement, a resign's announcement. A leader that crashes (its Client
// closes without a resign) is seen gone once its key expires, with no
// message at all.
func TestObserveSeesResignAndCrash(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	ctx := t.Context()
	const soon = 5 * time.Second // far below the periodic read
	cl := realClients(t, srv, 3)
	watcher, a, b := cl[0], cl[1], cl[2]
	elect := func(c *Client, key string, ttl time.Duration) *Election {
		e, err := c.Election(key, WithTTL(ttl))
		require.NoError(t, err)
		return e
	}

	t.Run("pub/sub", func(t *testing.T) {
		const key, ttl = "elect:observe", time.Minute
		stream := follow(elect(watcher, key, ttl).Observe(ctx))
		stream.next(t, 0, soon, "nobody at first", nobody)
		// The first read has set the marker; wait for the subscriptions.
		require.Eventually(t, func() bool { return electedSubscribed(t, srv, key) }, soon, time.Millisecond)

		la, err := elect(a, key, ttl).Campaign(ctx, "a")
		require.NoError(t, err)
		i := stream.next(t, 0, soon, "a", isLeader("a"))
		require.NoError(t, la.Unlock(ctx))
		i = stream.next(t, i, soon, "the vacancy after a's resign", nobody)
		lb, err := elect(b, key, ttl).Campaign(ctx, "b")
		require.NoError(t, err)
		stream.next(t, i, soon, "b", isLeader("b"))
		require.NoError(t, lb.Unlock(ctx))
		require.Empty(t, streamRegressions(stream.values()))
	})

	t.Run("crash", func(t *testing.T) {
		const key, ttl = "elect:crash", time.Second
		crashed := realClients(t, srv, 1, electionOpts(ttl)...)[0]
		w := realClients(t, srv, 1, electionOpts(ttl)...)[0]
		stream := follow(elect(w, key, ttl).Observe(ctx))
		_, err := elect(crashed, key, ttl).Campaign(ctx, "c")
		require.NoError(t, err)
		i := stream.next(t, 0, soon, "c", isLeader("c"))
		require.NoError(t, crashed.Close())
		start := time.Now()
		stream.next(t, i, 5*ttl, "the vacancy after c's crash", nobody)
		t.Logf("the crash was seen %v after it", time.Since(start))
		require.Empty(t, streamRegressions(stream.values()))
	})
}

// electedSubscribed reports whether someone listens on the election's
// channel on every node.
func electedSubscribed(t *testing.T, srv []*redistest.Server, key string) bool {
	for _, s := range srv {
		ch := keyspace.Elected(key)
		n, err := s.NewClient(t).PubSubNumSub(t.Context(), ch).Result()
		if err != nil || n[ch] == 0 {
			return false
		}
	}
	return true
}

// TestObserveWithoutPubSub: with WithPubSub(false), Observe neither
// subscribes nor marks the key, and sees each change by its periodic reads.
func TestObserveWithoutPubSub(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	ctx := t.Context()
	const key, ttl = "elect:nopubsub", 900 * time.Millisecond
	cl := realClients(t, srv, 2, electionOpts(ttl, WithPubSub(false))...)
	we, err := cl[0].Election(key)
	require.NoError(t, err)
	stream := follow(we.Observe(ctx))
	i := stream.next(t, 0, 10*ttl, "nobody", nobody)
	e, err := cl[1].Election(key)
	require.NoError(t, err)
	for _, who := range []string{"a", "b"} {
		l, err := e.Campaign(ctx, who)
		require.NoError(t, err)
		i = stream.next(t, i, 10*ttl, who, isLeader(who))
		require.NoError(t, l.Unlock(ctx))
		i = stream.next(t, i, 10*ttl, "the vacancy after "+who, nobody)
	}
	require.False(t, electedSubscribed(t, srv, key), "subscribed without pub/sub")
	for _, s := range srv {
		require.Zero(t, s.NewClient(t).Exists(ctx, keyspace.Waiting(key)).Val(), "a marker without pub/sub")
	}
	require.Empty(t, streamRegressions(stream.values()))
}

// TestObserveClosesOnClose: the channel closes when ctx ends or the
// Client closes; a consumer that falls behind gets the latest value, and
// one that never reads holds up neither Observe nor Close; no goroutine of
// Observe is left.
func TestObserveClosesOnClose(t *testing.T) {
	srv := electionNodes(t, redistest.Options{})
	ctx := t.Context()
	const key = "elect:close"
	cl := realClients(t, srv, 2, electionOpts(time.Second)...)
	c, leader := cl[0], cl[1]
	e, err := c.Election(key)
	require.NoError(t, err)

	// ctx ends.
	octx, cancel := context.WithCancel(ctx)
	stream := follow(e.Observe(octx))
	stream.next(t, 0, 10*time.Second, "nobody", nobody)
	cancel()
	select {
	case <-stream.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the channel did not close when ctx ended")
	}

	// Leaders come and go while one consumer reads, one reads only at the
	// end, and one never reads.
	stream = follow(e.Observe(ctx))
	late, never := e.Observe(ctx), e.Observe(ctx)
	le, err := leader.Election(key)
	require.NoError(t, err)
	var first, newest Leader
	for _, who := range []string{"a", "b", "c"} {
		l, err := le.Campaign(ctx, who)
		require.NoError(t, err)
		stream.next(t, 0, 10*time.Second, who, isLeader(who))
		newest = Leader{who, l.Fence()}
		if who == "a" {
			first = newest
		}
		if who != "c" {
			require.NoError(t, l.Unlock(ctx))
		}
	}
	// The late consumer finds what was latest when it looked (c, or what
	// Observe had read last, which is c's predecessor at most), then c: it
	// missed the rest, and Observe was never held up by it, as it would
	// be with its first values still to hand over (Leader{}, then a).
	var lateGot []Leader
	require.Eventually(t, func() bool {
		select {
		case ld := <-late:
			lateGot = append(lateGot, ld)
		default:
		}
		return len(lateGot) > 0 && lateGot[len(lateGot)-1] == newest
	}, 10*time.Second, time.Millisecond)
	require.NotContains(t, lateGot, first, "the late consumer got %v, not the latest", lateGot)

	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case <-stream.closed:
	case <-time.After(time.Second):
		t.Fatal("the channel is still open after Close returned")
	}
	var neverGot []Leader
	for ld := range never {
		neverGot = append(neverGot, ld)
	}
	require.Len(t, neverGot, 1, "the channel holds one value")
	for range late {
	}
	require.Empty(t, observers(), "Observe goroutines left after Close")
}

// observers returns the stacks of the goroutines that run Observe.
func observers() []string {
	var out []string
	for _, g := range libraryGoroutines() {
		if strings.Contains(g, "redlock.(*Election).observe") {
			out = append(out, g)
		}
	}
	return out
}

// TestElectionOnClusterNodes runs an election on three Redlock nodes that
// are each a Redis Cluster of three masters: the term record and the
// election's channel live in the key's slot, and Observe hears the shard
// channels. With a TTL of a minute, what it sees within seconds came by
// pub/sub.
func TestElectionOnClusterNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	_, cs := clusterNodes(t, 3)
	ctx := t.Context()
	const key, soon = "elect:cluster", 10 * time.Second
	c := newClient(t, cs, WithTTL(time.Minute))
	e, err := c.Election(key)
	require.NoError(t, err)
	stream := follow(e.Observe(ctx))
	stream.next(t, 0, soon, "nobody", nobody)
	other := newClient(t, cs, WithTTL(time.Minute))
	oe, err := other.Election(key)
	require.NoError(t, err)
	i := 0
	var last uint64
	for _, who := range []string{"a", "b"} {
		l, err := oe.Campaign(ctx, who)
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last)
		last = l.Fence()
		ld, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader{who, l.Fence()}, ld)
		i = stream.next(t, i, soon, who, isLeader(who))
		require.NoError(t, l.Unlock(ctx))
		i = stream.next(t, i, soon, "the vacancy after "+who, nobody)
	}
	require.Empty(t, streamRegressions(stream.values()))
}
