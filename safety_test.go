package redlock

// Tests of the safety defects found by review: each one reproduces its
// defect deterministically, and most run a control, a test-only switch that
// brings the old behaviour back, to show that the test can fail.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
)

// isScript reports whether cmd runs the script id, by EVALSHA or EVAL.
func isScript(cmd redis.Cmder, id scriptID) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == scripts[id].sha
	case "eval":
		return args[1] == scripts[id].src
	}
	return false
}

// isRelease reports whether cmd is a release: release.lua, or
// releaseplain.lua, which a plain key uses.
func isRelease(cmd redis.Cmder) bool {
	return isScript(cmd, scriptRelease) || isScript(cmd, scriptReleasePlain)
}

// errGaveUp is the error of a request that its client gave up on: a
// timeout, which neither go-redis nor the library sends again.
var errGaveUp = fmt.Errorf("gave up waiting (test): %w", context.DeadlineExceeded)

// lateRelease is a go-redis hook that, once armed, takes the next release
// the client sends, reports an error at once, as go-redis does when it gives
// up on a request, and delivers the request to the node only after delay:
// a request that arrives after its sender moved on. It delivers it through
// a client of its own (via), as the network would, whatever became of the
// connection the request was sent on.
type lateRelease struct {
	via    redis.UniversalClient
	delay  time.Duration
	armed  atomic.Bool
	onHold func() // runs as the release is held; may be nil
	held   atomic.Int32
	wg     sync.WaitGroup
}

func (h *lateRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hold(cmd) {
			return errGaveUp
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook holds the release when it goes in a pipeline, as the
// Client sends it, and sends the rest of the pipeline on.
func (h *lateRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := make([]redis.Cmder, 0, len(cmds))
		for _, cmd := range cmds {
			if !h.hold(cmd) {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return errGaveUp
		}
		return next(ctx, rest)
	}
}

// hold holds cmd when it is the armed release: it fails it at once with
// errGaveUp, and sends a copy after the delay.
func (h *lateRelease) hold(cmd redis.Cmder) bool {
	if !isRelease(cmd) || !h.armed.CompareAndSwap(true, false) {
		return false
	}
	late := redis.NewCmd(context.Background(), cmd.Args()...)
	h.held.Add(1)
	h.wg.Go(func() {
		time.Sleep(h.delay)
		_ = h.via.Process(context.Background(), late)
	})
	if h.onHold != nil {
		h.onHold()
	}
	cmd.SetErr(errGaveUp)
	return true
}

// TestLateRollbackCannotDeleteALaterAttemptsKey reproduces, on 3 nodes, the
// overlap a late rollback caused when every attempt of a Lock call wrote the
// same token. B holds nodes 0 and 2. A's attempt 0 wins node 1 only and
// rolls back there; that rollback "times out" at once but lands 300ms later.
// B frees node 2, and A's attempt 1 wins nodes 1 and 2. Then the late
// rollback lands, B frees node 0, and C tries the key while A is well
// within its validity. With a value per attempt the late rollback deletes
// nothing of attempt 1, and C fails; the control, one shared value, lets C
// in.
func TestLateRollbackCannotDeleteALaterAttemptsKey(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "value-per-attempt"
		if control {
			name = "control-shared-value"
		}
		t.Run(name, func(t *testing.T) {
			const key = "late-rollback"
			ms, csC := minis(t, 3)
			// The late release is an EVALSHA: the script must be there.
			loadScripts(t, csC)
			late := &lateRelease{via: csC[1], delay: 300 * time.Millisecond}
			t.Cleanup(late.wg.Wait)
			csA := make([]redis.UniversalClient, 3)
			for i, m := range ms {
				rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
				if i == 1 {
					rc.AddHook(late)
				}
				t.Cleanup(func() { _ = rc.Close() })
				csA[i] = rc
			}
			opts := []Option{WithTTL(3 * time.Second), WithNodeTimeout(500 * time.Millisecond),
				WithRetryDelay(50*time.Millisecond, 50*time.Millisecond), WithPubSub(false)}
			a := setHooks(newClient(t, csA, opts...), testHooks{sharedValue: control})
			c := newClient(t, csC, WithTTL(3*time.Second), WithNodeTimeout(500*time.Millisecond))

			for _, i := range []int{0, 2} {
				require.NoError(t, ms[i].Set(key, "B"))
				ms[i].SetTTL(key, time.Minute)
			}
			late.onHold = func() { ms[2].Del(key) } // B frees node 2
			late.armed.Store(true)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			l, err := a.Lock(ctx, key)
			require.NoError(t, err)
			require.EqualValues(t, 1, late.held.Load(), "got %d held rollbacks, want 1", late.held.Load())
			late.wg.Wait() // the late rollback has landed
			ms[0].Del(key) // B frees node 0

			lc, errC := c.TryLock(t.Context(), key)
			require.True(t, time.Now().Before(l.Until()), "A's validity ended during the test")
			require.NoError(t, l.Err())
			if control {
				require.NoError(t, errC, "the control must let C in while A holds the lock")
				require.NoError(t, lc.Unlock(t.Context()))
				_ = l.Unlock(t.Context())
				return
			}
			require.ErrorIs(t, errC, ErrNotAcquired, "got C holding the lock while A holds it until %v", l.Until())
			for _, i := range []int{1, 2} {
				got, _ := ms[i].Get(key)
				require.Equal(t, l.Token(), got, "node %d", i)
			}
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

// newScriptGate holds the replies of the script id's commands.
func newScriptGate(id scriptID) *gate {
	return &gate{match: func(c redis.Cmder) bool { return isScript(c, id) }, open: make(chan struct{})}
}

// loadScripts loads every lock script on the nodes, so that the first
// EVALSHA of a test does not get NOSCRIPT.
func loadScripts(t *testing.T, cs []redis.UniversalClient) {
	t.Helper()
	for _, rc := range cs {
		for _, id := range []scriptID{scriptAcquire, scriptRelease, scriptReleasePlain, scriptExtend, scriptFence} {
			require.NoError(t, rc.ScriptLoad(t.Context(), scripts[id].src).Err())
		}
	}
}

// fencedNodes starts five miniredis nodes whose last slow ones hold the
// replies of the fence write-back until the gate opens, and a fencing Client
// on them.
func fencedNodes(t *testing.T, slow int) (fast, late []*miniredis.Miniredis, c *Client, g *gate) {
	t.Helper()
	g = newScriptGate(scriptFence)
	fast, fcs := minis(t, 5-slow)
	late, scs := minis(t, slow, g)
	cs := append(fcs, scs...)
	loadScripts(t, cs)
	c = newClient(t, cs, WithFencing(true), WithNodeTimeout(100*time.Millisecond))
	t.Cleanup(g.release)
	return fast, late, c, g
}

func TestLateFenceWriteBackIsReleased(t *testing.T) {
	t.Run("failed write-back", func(t *testing.T) {
		// Three of five nodes answer the write-back late: the attempt
		// fails, and their late answers must release what they hold.
		fast, slow, c, g := fencedNodes(t, 3)
		_, err := c.TryLock(t.Context(), "wb")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.Contains(t, err.Error(), "fence not written back")
		eventually(t, fast, "wb", "")
		for i, m := range slow {
			require.True(t, m.Exists("wb"), "slow node %d: the write-back has not answered, so it is not rolled back yet", i)
		}
		g.release()
		eventually(t, slow, "wb", "")
	})
	t.Run("unlock races the write-back", func(t *testing.T) {
		// Two nodes answer the write-back late; the lock is won on the
		// other three and unlocked at once.
		fast, slow, c, g := fencedNodes(t, 2)
		l, err := c.TryLock(t.Context(), "wb-unlock")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		eventually(t, fast, "wb-unlock", "")
		g.release()
		eventually(t, slow, "wb-unlock", "")
	})
}

// proxiedNodes starts n miniredis nodes, each behind a fault proxy, and a
// go-redis client with go-redis's default retries (3) through each proxy.
func proxiedNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []*faultproxy.Proxy, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	ps := make([]*faultproxy.Proxy, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		p, err := faultproxy.New(ms[i].Addr(), uint64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		// One connection, which loadScripts opens: the lost reply is
		// always the test's, never a new connection's handshake.
		rc := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		ps[i], cs[i] = p, rc
	}
	loadScripts(t, cs)
	for _, rc := range cs {
		// The Client sends through pipelines, which may take their
		// connection from a pool of their own: open it now too.
		_, err := rc.Pipelined(t.Context(), func(p redis.Pipeliner) error { return p.Ping(t.Context()).Err() })
		require.NoError(t, err)
	}
	return ms, ps, cs
}

// drained returns once every client's single connection is free again, so
// that no reply of an earlier request is still on its way through a proxy.
func drained(t *testing.T, cs []redis.UniversalClient) {
	t.Helper()
	for _, rc := range cs {
		require.NoError(t, rc.Ping(t.Context()).Err())
	}
}

// lostReplies waits until p has lost want replies: a round decides at
// quorum, so the reply of a node it did not need may still be on its way.
func lostReplies(t *testing.T, p *faultproxy.Proxy, want int64) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Stats().LostReplies >= want }, 5*time.Second, time.Millisecond)
	require.EqualValues(t, want, p.Stats().LostReplies)
}

// TestRetriedWritesAreRecognised loses one reply, so that go-redis sends the
// request again on a new connection after the node ran it. A retried SET
// finds our own value, and a retried release finds the key its first copy
// deleted: neither is a no. The control acquires with a plain SET NX and
// counts a release that finds the key gone as a no.
func TestRetriedWritesAreRecognised(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "recognised"
		if control {
			name = "control-unsafe-retries"
		}
		t.Run(name, func(t *testing.T) {
			ms, ps, cs := proxiedNodes(t, 3)
			c := setHooks(newClient(t, cs), testHooks{unsafeRetries: control})

			// Acquire: nodes 1 and 2 are taken, node 0 loses its reply.
			for _, m := range ms[1:] {
				require.NoError(t, m.Set("retried-set", "other"))
			}
			ps[0].LoseNext(1)
			_, err := c.TryLock(t.Context(), "retried-set")
			require.ErrorIs(t, err, ErrNotAcquired)
			// TryLock may decide on the two nos before node 0's reply
			// comes back to be lost.
			lostReplies(t, ps[0], 1)
			if control {
				require.True(t, ms[0].Exists("retried-set"), "the control must leave our key behind")
			} else {
				eventually(t, ms[:1], "retried-set", "")
			}

			// Release: the lock is held on every node, and two of them lose
			// the reply to the release.
			l, err := c.TryLock(t.Context(), "retried-release")
			require.NoError(t, err)
			eventually(t, ms, "retried-release", l.Token())
			// The key is on every node before the last node's reply has
			// passed its proxy: let those replies through before the next
			// one is lost.
			drained(t, cs)
			ps[0].LoseNext(1)
			ps[1].LoseNext(1)
			err = l.Unlock(t.Context())
			eventually(t, ms, "retried-release", "")
			if control {
				require.ErrorIs(t, err, ErrNotHeld, "the control must report the release that worked as not held")
				return
			}
			require.NoError(t, err)
		})
	}
}

// TestRetriedReleaseAfterScriptFlush: the release's EVALSHA deletes the key
// and its reply is lost; the node loses its script cache before go-redis
// sends the EVALSHA again, which gets NOSCRIPT. That NOSCRIPT says nothing
// of the first copy: the EVAL that follows finds the key gone, and the
// release must still count the node as released.
func TestRetriedReleaseAfterScriptFlush(t *testing.T) {
	ms, ps, cs := proxiedNodes(t, 3)
	c := newClient(t, cs)
	l, err := c.TryLock(t.Context(), "flushed-release")
	require.NoError(t, err)
	eventually(t, ms, "flushed-release", l.Token())
	drained(t, cs)
	for i := range 2 {
		direct := redis.NewClient(&redis.Options{Addr: ms[i].Addr()})
		t.Cleanup(func() { _ = direct.Close() })
		ps[i].OnLost(func() { _ = direct.ScriptFlush(context.Background()).Err() })
		ps[i].LoseNext(1)
	}
	err = l.Unlock(t.Context())
	eventually(t, ms, "flushed-release", "")
	lostReplies(t, ps[0], 1)
	lostReplies(t, ps[1], 1)
	require.NoError(t, err, "a release whose resent EVALSHA met NOSCRIPT must count as released")
}

func TestNewRejectsRing(t *testing.T) {
	_, cs := minis(t, 3)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := New([]redis.UniversalClient{cs[0], cs[1], ring})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "node 2 is a *redis.Ring")
}

func TestNodeDeadlineIsNotTheCallersDeadline(t *testing.T) {
	require.ErrorIs(t, nodeErr(context.DeadlineExceeded), ErrNodeTimeout)
	require.NotErrorIs(t, nodeErr(context.DeadlineExceeded), context.DeadlineExceeded)
	require.NotErrorIs(t, nodeErr(fmt.Errorf("dial: %w", context.Canceled)), context.Canceled)
	require.ErrorIs(t, nodeErr(&net.OpError{Op: "read", Err: timeoutErr{}}), ErrNodeTimeout)
	other := errors.New("ERR something")
	require.Equal(t, other, nodeErr(other))

	// One dead node, two taken: each attempt waits for the dead node until
	// the node timeout, and go-redis's retries (dial, back off, dial) end
	// on the request's deadline.
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithNodeTimeout(20*time.Millisecond), WithTTL(time.Second))
	ms[4].Close()
	for _, m := range ms[:2] {
		require.NoError(t, m.Set("dead", "other"))
	}
	for i := range 20 {
		_, err := c.TryLock(context.Background(), "dead")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "try %d: got %v, want no ctx error: the caller's ctx never ended", i, err)
		require.NotErrorIs(t, err, context.Canceled, "try %d", i)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestExtendCannotReviveAnEndedLock(t *testing.T) {
	g := newScriptGate(scriptExtend)
	ms, cs := minis(t, 5, g)
	loadScripts(t, cs)
	c := newClient(t, cs)
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "revive")
	require.NoError(t, err)
	// TryLock returns at its quorum: an acquire still out would share the
	// Extend's batch, and the gate would hold its reply too, so that the
	// Unlock would wait for it.
	settled(t, l)
	before := l.Until()
	done := make(chan error, 1)
	go func() { done <- l.Extend(context.Background()) }()
	// Every node has extended, and holds its answer.
	require.Eventually(t, func() bool { return g.waiting.Load() == 5 }, 5*time.Second, time.Millisecond)
	// Past stallAfter, the release goes out on another connection rather
	// than wait behind the held replies.
	time.Sleep(2 * stallAfter)
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "revive", "")
	g.release()
	err = <-done
	require.ErrorIs(t, err, ErrNotHeld, "got %v from an Extend that ended after Unlock, want ErrNotHeld", err)
	require.Equal(t, before, l.Until(), "Extend moved Until of an unlocked lock")
	require.ErrorIs(t, l.Err(), ErrUnlocked)
	require.ErrorIs(t, l.Extend(t.Context()), ErrNotHeld)
}

// A renewal in flight when Unlock ends the lock must not queue the lock
// again: the renewer would extend keys that belong to nobody, and keep its
// goroutine running. The gate holds the renewal's replies until Unlock has
// returned; the renewal then settles a yes from every node.
func TestRenewalCannotReviveAnUnlockedLock(t *testing.T) {
	g := newScriptGate(scriptExtend)
	ms, cs := minis(t, 5, g)
	loadScripts(t, cs)
	rec := &recorder{}
	c := newClient(t, cs, WithObserver(rec))
	t.Cleanup(g.release)
	// The first renewal comes at a third of the TTL, and may wait for its
	// replies up to the node timeout (1 s): time for the Unlock.
	const ttl = 3 * time.Second
	l, err := c.TryLock(t.Context(), "revive-renewal", WithTTL(ttl), WithAutoExtend(true))
	require.NoError(t, err)
	settled(t, l)
	require.Eventually(t, func() bool { return g.waiting.Load() == 5 }, 5*time.Second, time.Millisecond,
		"the first renewal did not reach every node")
	time.Sleep(2 * stallAfter) // the release goes out beside the held batch
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "revive-renewal", "")
	g.release()
	require.Eventually(t, func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return !c.renewer.running
	}, 5*time.Second, time.Millisecond, "the renewer still runs after the only lock was unlocked")
	// A lock queued again would be renewed within a third of the TTL.
	time.Sleep(ttl/3 + 200*time.Millisecond)
	require.EqualValues(t, 5, g.waiting.Load(), "extensions sent after Unlock: want only the first renewal's 5")
	_, extends, _, _ := rec.counts()
	require.Zero(t, extends, "the renewal that ended after Unlock was settled as an extension")
	require.ErrorIs(t, l.Err(), ErrUnlocked)
	for i, m := range ms {
		require.False(t, m.Exists("revive-renewal"), "node %d: the key came back", i)
	}
}

// settled waits until no acquire request of l's attempt is in flight on
// any node.
func settled(t *testing.T, l *Lock) {
	t.Helper()
	at := l.att
	require.Eventually(t, func() bool {
		at.a.mu.Lock()
		defer at.a.mu.Unlock()
		for _, n := range at.inflight {
			if n > 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "acquire requests still in flight")
}

// hungServer accepts connections and never answers, like a node stopped
// with SIGSTOP. Its connections close with the test.
func hungServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			_ = cn.Close()
		}
	})
	return ln.Addr().String()
}

func TestCloseIsBoundedWithAHungNode(t *testing.T) {
	ms, _ := minis(t, 4)
	cs := make([]redis.UniversalClient, 0, 5)
	for _, m := range ms {
		rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ReadTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rc.Close() })
		cs = append(cs, rc)
	}
	// Reads without a timeout: go-redis waits for the hung node forever.
	hung := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = hung.Close() })
	c, err := New(append(cs, hung), WithNodeTimeout(50*time.Millisecond))
	require.NoError(t, err)
	l, err := c.TryLock(t.Context(), "hung")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatalf("Close had not returned after 30s with a hung node and no read timeout")
	}
	// A second with reads that never time out; the margin is for a
	// loaded machine.
	require.Less(t, time.Since(start), 10*time.Second)
	require.ErrorIs(t, func() error { _, err := c.TryLock(t.Context(), "x"); return err }(), ErrClosed)
}

// countingHandler counts the log records it gets.
type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestNothingIsReportedAfterClose(t *testing.T) {
	_, cs := minis(t, 5)
	rec := &recorder{}
	logs := &countingHandler{}
	c, err := New(cs, WithObserver(rec), WithLogger(slog.New(logs)), WithTTL(200*time.Millisecond), WithNodeTimeout(20*time.Millisecond))
	require.NoError(t, err)
	l, err := c.TryLock(t.Context(), "after-close")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, _, lostBefore, _ := rec.counts()
	logsBefore := logs.n.Load()
	<-l.Done() // the expiry timer fires after Close
	require.ErrorIs(t, l.Err(), ErrLockLost)
	time.Sleep(10 * time.Millisecond) // the Observer is called before Done closes; margin for the logger
	_, _, lostAfter, _ := rec.counts()
	require.Equal(t, lostBefore, lostAfter, "got Observer.Lost after Close, want nothing")
	require.Equal(t, logsBefore, logs.n.Load(), "got log records after Close, want none")
	require.True(t, strings.Contains(l.Err().Error(), "validity ended"))
}

// TestUnlockReportsUnconfirmedRelease: three nodes hold the release's reply
// past the release's bounded wait. Too few nodes said no to say the lock was
// not held, so Unlock says the release is not confirmed, which is not
// ErrNotHeld; the release lands once the replies come.
func TestUnlockReportsUnconfirmedRelease(t *testing.T) {
	g := &gate{match: isRelease, open: make(chan struct{})}
	fast, fcs := minis(t, 2)
	slow, scs := minis(t, 3, g)
	cs := append(fcs, scs...)
	loadScripts(t, cs)
	c := newClient(t, cs, WithTTL(time.Second), WithNodeTimeout(50*time.Millisecond))
	t.Cleanup(g.release)
	l, err := c.TryLock(t.Context(), "unconfirmed")
	require.NoError(t, err)
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, ErrUnconfirmed)
	require.NotErrorIs(t, err, ErrNotHeld, "a release that may have landed is not a lock that was not held")
	require.Contains(t, err.Error(), "release not confirmed")
	eventually(t, fast, "unconfirmed", "")
	eventually(t, slow, "unconfirmed", "") // the scripts ran; only the replies wait
	g.release()

	// The control: a lock that expired everywhere is not held.
	l, err = c.TryLock(t.Context(), "expired")
	require.NoError(t, err)
	for _, m := range append(fast, slow...) {
		m.Del("expired")
	}
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
}
