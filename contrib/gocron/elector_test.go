package redlockgocron_test

import (
	"errors"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock"
	redlockgocron "github.com/redlockgo/redlock/contrib/gocron"
	"github.com/redlockgo/redlock/internal/redistest"
)

// elected is one scheduler of the Elector tests, in a process of its own:
// its Client, its Elector and its gocron scheduler.
type elected struct {
	who    string
	client *redlock.Client
	el     *redlockgocron.Elector
	stop   func() // shuts the scheduler down
}

// startElected starts a scheduler named who whose Elector campaigns on the
// election "tick-leader" of servers, with the tests' splay. Cleanups close
// the scheduler, then the Elector, then the Client.
func startElected(t *testing.T, servers []*redistest.Server, rec *ticks, who string) *elected {
	t.Helper()
	c := newClient(t, servers)
	e, err := c.Election("tick-leader")
	require.NoError(t, err)
	el, err := redlockgocron.NewElector(e, who, redlockgocron.WithSplay(splay))
	require.NoError(t, err)
	require.NoError(t, el.Start(t.Context()))
	t.Cleanup(func() { _ = el.Close() })
	stop := startScheduler(t, who, rec, gocron.WithDistributedElector(el))
	return &elected{who: who, client: c, el: el, stop: stop}
}

// testHandover runs two schedulers with Electors on 5 real servers until 4
// ticks ran, then ends the leader with end, which returns the time after
// which the old leader must run no tick. The other scheduler must take over
// within about one TTL, and no tick may run twice.
func testHandover(t *testing.T, end func(old *elected) (lastRun time.Time)) {
	servers := startServers(t)
	rec := newTicks()
	sides := map[string]*elected{}
	for _, who := range []string{"a", "b"} {
		sides[who] = startElected(t, servers, rec, who)
	}
	rec.waitFor(t, "", 4, time.Time{})
	_, lead := rec.last()
	old, next := sides["a"], sides["b"]
	if lead == "b" {
		old, next = next, old
	}

	rec.requireOnce(t)

	ended := time.Now()
	lastRun := end(old)
	rec.waitFor(t, next.who, 3, ended)
	for _, s := range sides {
		s.stop()
	}
	rec.requireOnce(t)
	t.Logf("runs: %s; %s ended at %s", rec, old.who, ended.Format("15:04:05.000"))

	// The new leader wins once the old one resigned, or once its validity
	// ended (a TTL at most), leads jobs a splay later, and runs the next
	// tick; the rest is slack for a busy machine.
	first, _ := rec.first(next.who, ended.Truncate(time.Second))
	bound := ended.Add(ttl + splay + time.Second + 3*time.Second)
	require.True(t, first.Before(bound), "%s took over at tick %s, want before %s (a TTL after %s ended at %s)",
		next.who, first.Format("15:04:05"), bound.Format("15:04:05.000"), old.who, ended.Format("15:04:05.000"))
	if last := rec.latest(old.who); last.After(lastRun) {
		t.Errorf("%s, no longer leading after %s, ran tick %s", old.who, lastRun.Format("15:04:05.000"), last.Format("15:04:05"))
	}
}

// TestElectorHandoverOnClose: the leader's Elector is closed (a clean
// shutdown, which resigns); the other scheduler takes over at once.
func TestElectorHandoverOnClose(t *testing.T) {
	t.Parallel()
	testHandover(t, func(old *elected) time.Time {
		require.NoError(t, old.el.Close(), "resign")
		err := old.el.IsLeader(t.Context())
		require.ErrorIs(t, err, redlockgocron.ErrNotLeader, "after Close: got %v", err)
		require.ErrorIs(t, err, redlockgocron.ErrClosed, "after Close: got %v", err)
		// Close resigned: the nodes no longer name it, before any TTL.
		e, err := old.client.Election("tick-leader")
		require.NoError(t, err)
		ld, err := e.Leader(t.Context())
		require.False(t, err == nil && ld.Value == old.who, "Leader after Close: got %+v, want the leadership resigned", ld)
		return time.Now()
	})
}

// TestElectorHandoverOnCrash: the leader's Client is closed under it,
// without a resign, so its leadership is no longer renewed, as when its
// process dies (its scheduler runs on, as a process cut off from the nodes
// would). It leads until its validity ends; the other takes over then.
func TestElectorHandoverOnCrash(t *testing.T) {
	t.Parallel()
	testHandover(t, func(old *elected) time.Time {
		// The last renewal began before now, so the validity ends
		// within a TTL of now.
		lastRun := time.Now().Add(ttl)
		require.NoError(t, old.client.Close())
		require.Eventually(t, func() bool {
			err := old.el.IsLeader(t.Context())
			return errors.Is(err, redlockgocron.ErrNotLeader) && errors.Is(err, redlock.ErrClosed)
		}, tickTimeout, 20*time.Millisecond, "IsLeader after the Client closed: want ErrNotLeader and redlock.ErrClosed")
		return lastRun
	})
}

// TestElectorSplay: a scheduler that won because the leader resigned leads
// jobs only a splay after its win, so that a tick the old leader ran just
// before it resigned is not run again by a scheduler whose trigger fired
// later.
func TestElectorSplay(t *testing.T) {
	t.Parallel()
	const splay = time.Second
	ms := startMinis(t)
	els := make([]*redlockgocron.Elector, 2)
	for i, who := range []string{"a", "b"} {
		e, err := newMiniClient(t, ms).Election("leader")
		require.NoError(t, err)
		els[i], err = redlockgocron.NewElector(e, who, redlockgocron.WithSplay(splay))
		require.NoError(t, err)
		require.NoError(t, els[i].Start(t.Context()))
		t.Cleanup(func() { _ = els[i].Close() })
	}
	var old, next *redlockgocron.Elector
	require.Eventually(t, func() bool {
		for i, el := range els {
			if el.IsLeader(t.Context()) == nil {
				old, next = el, els[1-i]
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "nobody leads")
	oldTerm, err := old.Term()
	require.NoError(t, err)

	// next cannot have won before now, when old still led (it checks its
	// validity): it must not lead jobs before a splay from now.
	resigned := time.Now()
	require.NoError(t, old.IsLeader(t.Context()), "old leader, just before Close")
	require.NoError(t, old.Close())
	for time.Since(resigned) < splay*9/10 {
		if err := next.IsLeader(t.Context()); err == nil {
			t.Fatalf("leads jobs %v after the resign, want not before the splay (%v)", time.Since(resigned), splay)
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return next.IsLeader(t.Context()) == nil }, 10*time.Second, 10*time.Millisecond,
		"the new leader never led jobs: %v", next.IsLeader(t.Context()))
	term, err := next.Term()
	require.NoError(t, err)
	require.Greater(t, term, oldTerm, "got term %d after %d, want larger", term, oldTerm)
}

// TestElectorMargin: a leader whose validity has no more than the margin
// left does not lead jobs, though it holds the leadership.
func TestElectorMargin(t *testing.T) {
	t.Parallel()
	ms := startMinis(t)
	e, err := newMiniClient(t, ms).Election("leader")
	require.NoError(t, err)
	el, err := redlockgocron.NewElector(e, "a", redlockgocron.WithMargin(ttl))
	require.NoError(t, err)
	require.NoError(t, el.Start(t.Context()))
	t.Cleanup(func() { _ = el.Close() })
	require.Eventually(t, func() bool {
		ld, err := e.Leader(t.Context())
		return err == nil && ld.Value == "a"
	}, 10*time.Second, 10*time.Millisecond, "a never won")
	err = el.IsLeader(t.Context())
	require.ErrorIs(t, err, redlockgocron.ErrNotLeader, "margin of a whole TTL: got %v", err)
	require.ErrorContains(t, err, "within the margin")
	_, err = el.Term()
	require.ErrorIs(t, err, redlockgocron.ErrNotLeader, "Term: got %v", err)
}

// TestElectorLifecycle checks Start and Close, and what IsLeader says
// before, between and after.
func TestElectorLifecycle(t *testing.T) {
	t.Parallel()
	ms := startMinis(t)
	c := newMiniClient(t, ms)
	e, err := c.Election("leader")
	require.NoError(t, err)

	el, err := redlockgocron.NewElector(e, "a")
	require.NoError(t, err)
	err = el.IsLeader(t.Context())
	require.ErrorIs(t, err, redlockgocron.ErrNotLeader, "before Start: got %v", err)
	require.ErrorContains(t, err, "not started")
	require.NoError(t, el.Start(t.Context()))
	require.Error(t, el.Start(t.Context()), "second Start")
	require.Eventually(t, func() bool { return el.IsLeader(t.Context()) == nil }, 10*time.Second, 10*time.Millisecond,
		"never led: %v", el.IsLeader(t.Context()))
	require.NoError(t, el.Close())
	require.NoError(t, el.Close(), "second Close")
	err = el.IsLeader(t.Context())
	require.ErrorIs(t, err, redlockgocron.ErrClosed, "after Close: got %v", err)
	require.ErrorIs(t, el.Start(t.Context()), redlockgocron.ErrClosed, "Start after Close")
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, redlock.ErrNoLeader, "after Close: got %v, want the leadership resigned", err)

	// Closed before it started: Close does nothing else.
	idle, err := redlockgocron.NewElector(e, "b")
	require.NoError(t, err)
	require.NoError(t, idle.Close())
	require.ErrorIs(t, idle.IsLeader(t.Context()), redlockgocron.ErrClosed)

	// A Client closed under a campaign is not campaigned on again.
	gone, err := redlockgocron.NewElector(e, "c")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, gone.Start(t.Context()))
	require.Eventually(t, func() bool { return errors.Is(gone.IsLeader(t.Context()), redlock.ErrClosed) }, 10*time.Second, 10*time.Millisecond,
		"campaign on a closed Client: got %v, want redlock.ErrClosed", gone.IsLeader(t.Context()))
	require.NoError(t, gone.Close())
}

func TestNewElectorRefuses(t *testing.T) {
	t.Parallel()
	e, err := newMiniClient(t, startMinis(t)).Election("leader")
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		e    *redlock.Election
		opts []redlockgocron.ElectorOption
		want string
	}{
		"nil Election":    {want: "nil Election"},
		"nil option":      {e: e, opts: []redlockgocron.ElectorOption{nil}, want: "nil ElectorOption"},
		"negative splay":  {e: e, opts: []redlockgocron.ElectorOption{redlockgocron.WithSplay(-time.Second)}, want: "splay must not be negative, got -1s"},
		"negative margin": {e: e, opts: []redlockgocron.ElectorOption{redlockgocron.WithMargin(-time.Second)}, want: "margin must not be negative, got -1s"},
		"zero backoff":    {e: e, opts: []redlockgocron.ElectorOption{redlockgocron.WithBackoff(0, time.Second)}, want: "backoff min must be positive, got 0s"},
		"backoff max<min": {e: e, opts: []redlockgocron.ElectorOption{redlockgocron.WithBackoff(time.Second, time.Millisecond)}, want: "backoff max must be at least min"},
	} {
		_, err := redlockgocron.NewElector(tc.e, "a", tc.opts...)
		require.ErrorIs(t, err, redlock.ErrInvalidOption, "%s: got %v", name, err)
		require.ErrorContains(t, err, tc.want, name)
	}
}
