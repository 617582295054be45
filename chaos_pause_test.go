//go:build linux

package redlock

// The paused-holder scenario: the holder's whole process is stopped with
// SIGSTOP for longer than its lock's validity, as a long GC pause or a
// descheduled VM would stop it, and then continued. The holder runs in a
// child process (the test binary run again), so that the stop hits its
// timers, its renewals and its code alike. Run it alone with:
//
//	go test -race -count=1 -run 'TestChaosPausedHolder$' -v . -chaos.seed=1234
//
// What it shows: on resuming, the holder's first look finds Done closed and
// Err wrapping ErrLockLost, before any Extend could succeed; meanwhile
// another client took the lock, and the two holds do not overlap.
//
// The holder is stopped while it spins on one P (GOMAXPROCS=1), so that its
// first look after SIGCONT runs before the runtime fires the overdue expiry
// timer: Done must close from its own check of Until. With that check taken
// out of Done and Err, the test failed in 8 runs out of 8; with a loop that
// sleeps, in about one run in three, when the timer happened to run last.
//
// Times cross the process boundary as wall-clock Unix nanoseconds: a
// monotonic reading means nothing in another process. Both processes read
// the same machine's clock, so the windows compare fine; every time.Time the
// checker sees here is stripped of its monotonic reading, so that all
// comparisons use the wall clock.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

const (
	// pausedHolderName names the scenario in report lines and key prefixes.
	pausedHolderName = "paused-holder"
	// pausedHolderTTL is the holder's TTL: long enough that renewals every
	// third of it keep the lock under -race on a busy machine, short enough
	// that a pause of two to three TTLs keeps the test quick.
	pausedHolderTTL = time.Second
	// pausedParentTTL is the second client's TTL. It auto-extends too, so
	// that however slowly the holder reports, the second client still
	// holds the key when the holder tries to extend and unlock.
	pausedParentTTL = 3 * time.Second
	// pausedChildSafety is how long the child waits for a pause before it
	// gives up and exits, so that a parent that died cannot leave it behind.
	pausedChildSafety = 30 * time.Second
	// pausedLine starts every line the child prints for the parent; the
	// rest of the line is a pausedMsg in JSON.
	pausedLine = "pause-child: "
)

// The environment of the child process.
const (
	pausedEnvChild  = "REDLOCK_PAUSE_CHILD" // "1" in the child
	pausedEnvAddrs  = "REDLOCK_PAUSE_ADDRS" // node addresses, comma-separated
	pausedEnvKey    = "REDLOCK_PAUSE_KEY"
	pausedEnvPrefix = "REDLOCK_PAUSE_PREFIX"
	pausedEnvTTL    = "REDLOCK_PAUSE_TTL" // a time.ParseDuration string
	// pausedEnvTimerOnly is "1" in the control's child, whose Client
	// uses withTimerOnlyExpiry.
	pausedEnvTimerOnly = "REDLOCK_PAUSE_TIMER_ONLY"
)

// pausedMsg is one line from the child. Kind says which fields are set:
// "locked" (Token, Acquired, Until), "until" (Until, after a renewal moved
// it), "spinning" (Until: the child is ready to be stopped) or "report"
// (every field but Acquired). Times are wall-clock Unix nanoseconds.
type pausedMsg struct {
	Kind     string `json:"kind"`
	Token    string `json:"token,omitempty"`
	Acquired int64  `json:"acquired,omitempty"` // read once Lock returned
	Until    int64  `json:"until"`              // Lock.Until; in a report, after Extend
	// The report: what the holder saw when it noticed the pause, in the
	// order it looked.
	Resumed       int64         `json:"resumed,omitempty"` // when it noticed
	Gap           time.Duration `json:"gap,omitempty"`     // monotonic time its loop lost
	DoneClosed    bool          `json:"doneClosed"`
	Err           string        `json:"err"` // Lock.Err, "" for nil
	ErrLost       bool          `json:"errLost"`
	ExtendErr     string        `json:"extendErr"` // "" when Extend succeeded
	ExtendNotHeld bool          `json:"extendNotHeld"`
}

// TestChaosPausedHolderChild is the holder's process of TestChaosPausedHolder.
// It skips unless that test started it. It locks the key with auto-extension,
// then watches its own loop for a gap longer than the TTL: the sign that it
// was stopped. It then looks at Done and Err, without blocking, before it
// calls Extend once, and prints what it saw. It exits by itself when no
// pause comes within pausedChildSafety.
func TestChaosPausedHolderChild(t *testing.T) {
	if os.Getenv(pausedEnvChild) != "1" {
		t.Skip("the holder's process of TestChaosPausedHolder; it starts this test itself")
	}
	ttl, err := time.ParseDuration(os.Getenv(pausedEnvTTL))
	require.NoError(t, err)
	addrs := strings.Split(os.Getenv(pausedEnvAddrs), ",")
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a}) // defaults, as users have
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	c, err := New(cs, WithTTL(ttl), WithAutoExtend(true), WithKeyPrefix(os.Getenv(pausedEnvPrefix)))
	require.NoError(t, err)
	setHooks(c, testHooks{timerOnlyExpiry: os.Getenv(pausedEnvTimerOnly) == "1"})
	// Registered after the go-redis clients, so it runs before they close.
	t.Cleanup(func() { _ = c.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, os.Getenv(pausedEnvKey))
	acquired := time.Now()
	require.NoError(t, err, "child: Lock")
	until := l.Until()
	pausedEmit(t, pausedMsg{Kind: "locked", Token: l.Token(), Acquired: acquired.UnixNano(), Until: until.UnixNano()})

	// The parent closes our stdin when it is about to stop us.
	stopping := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stopping)
	}()
	safety := time.Now().Add(pausedChildSafety)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	prev := time.Now()
	for watching := true; watching; {
		select {
		case <-stopping:
			watching = false
		case <-tick.C:
		}
		now := time.Now()
		gap := now.Sub(prev) // monotonic: it counts the time we were stopped
		prev = now
		if gap > ttl {
			t.Fatalf("child: the loop lost %v before the parent said it would stop us, want less than %v: the machine is too busy for the test", gap, ttl)
		}
		if now.After(safety) {
			t.Fatalf("child: got no notice of a stop within %v, want one", pausedChildSafety)
		}
		// Before the pause the lock must stay held: a loss here would
		// be the machine's load, not the pause, and would void the test.
		select {
		case <-l.Done():
			t.Fatalf("child: lock lost before the pause: %v", l.Err())
		default:
		}
		if u := l.Until(); !u.Equal(until) {
			until = u
			pausedEmit(t, pausedMsg{Kind: "until", Until: u.UnixNano()})
		}
	}

	// Spin, without sleeping, until the loop loses more than a TTL. With
	// GOMAXPROCS=1 the spinning goroutine is almost always the one that
	// holds the only P when the SIGSTOP lands, so that after SIGCONT it
	// looks at the lock before the runtime has run the expired timers:
	// the hardest case for Done, which must then close from its own check
	// of Until rather than from the expiry timer. The spin lasts from the
	// parent's notice to its SIGSTOP, a few milliseconds.
	//
	// prev is read before the notice goes out: the parent stops us as
	// soon as it reads the notice, and a stop between the two would
	// otherwise fall outside every measured gap.
	prev = time.Now()
	pausedEmit(t, pausedMsg{Kind: "spinning", Until: until.UnixNano()})
	for {
		now := time.Now()
		gap := now.Sub(prev)
		prev = now
		if gap > ttl {
			// The first look, before anything else: every call made
			// before it gives the runtime a chance to run the expired
			// timers first. now may be torn (the stop can land between
			// its reads of the wall and the monotonic clocks), so the
			// wall clock is read again.
			closed, lockErr := pausedLook(l)
			pausedReportResume(t, l, closed, lockErr, time.Now(), gap)
			break
		}
		if now.After(safety) {
			t.Fatalf("child: got no pause longer than %v within %v, want one", ttl, pausedChildSafety)
		}
	}
	uctx, ucancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer ucancel()
	if err := l.Unlock(uctx); err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrUnconfirmed) {
		t.Errorf("child: Unlock: got %v, want nil, ErrNotHeld or ErrUnconfirmed", err)
	}
	require.NoError(t, c.Close())
}

// pausedLook looks at the lock without blocking: whether Done is closed,
// then what Err says.
func pausedLook(l *Lock) (closed bool, err error) {
	select {
	case <-l.Done():
		closed = true
	default:
	}
	return closed, l.Err()
}

// pausedReportResume is what the holder does once it has looked at the lock
// after the pause: call Extend once, and print all of it.
func pausedReportResume(t *testing.T, l *Lock, closed bool, lockErr error, resumed time.Time, gap time.Duration) {
	t.Helper()
	m := pausedMsg{Kind: "report", Resumed: resumed.UnixNano(), Gap: gap, DoneClosed: closed}
	if lockErr != nil {
		m.Err = lockErr.Error()
	}
	m.ErrLost = errors.Is(lockErr, ErrLockLost)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := l.Extend(ctx); err != nil {
		m.ExtendErr = err.Error()
		m.ExtendNotHeld = errors.Is(err, ErrNotHeld)
	}
	m.Until = l.Until().UnixNano()
	pausedEmit(t, m)
}

// pausedEmit prints m for the parent, on one line. A write to a pipe this
// short is atomic, so a SIGSTOP never splits a line.
func pausedEmit(t *testing.T, m pausedMsg) {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = fmt.Fprintf(os.Stdout, "%s%s\n", pausedLine, b)
	require.NoError(t, err)
}

// TestChaosPausedHolder stops the process of a holder that auto-extends for
// two to three TTLs, lets a second client take the lock meanwhile, and
// continues it. It checks that the holder's first look after the pause
// finds Done closed, Err wrapping ErrLockLost, and Extend refused with
// ErrNotHeld; that the two holds do not overlap; that the second client got
// the lock (liveness) and could still unlock it after the holder's late
// Extend and Unlock; and that no key is left once every TTL has run out.
//
// Its control, control-timer-only-expiry, runs the same scenario with a
// holder whose Done and Err leave the lock's end to the expiry timer
// (withTimerOnlyExpiry): its first look after the pause must find Done
// open at least once in a few tries, or the test could not see the defect
// it guards against.
func TestChaosPausedHolder(t *testing.T) {
	seed := chaosSeedOnce()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: scenario=%s seed=%d failed; replay with: go test -race -count=1 -run 'TestChaosPausedHolder$' -v . -chaos.seed=%d",
				pausedHolderName, seed, seed)
		}
	})
	r := runPausedHolder(t, seed, pausedHolderName, false)
	rep := r.rep

	// The pause must have outlasted the holder's validity, or the
	// scenario tested nothing.
	require.Greater(t, rep.Resumed, rep.Until, "the holder noticed the pause at %d, want after its Until %d", rep.Resumed, rep.Until)
	require.True(t, rep.DoneClosed, "holder's first look after the pause: got Done open, want closed")
	require.True(t, rep.ErrLost, "holder's Err after the pause: got %q, want one that wraps ErrLockLost", rep.Err)
	require.NotEmpty(t, rep.ExtendErr, "holder's Extend after the pause: got nil, want an error that matches ErrNotHeld")
	require.True(t, rep.ExtendNotHeld, "holder's Extend after the pause: got %q, want one that matches ErrNotHeld", rep.ExtendErr)
	require.Empty(t, r.overlaps, "overlapping holds: got %+v, want none", r.overlaps)
	require.Zero(t, r.residue, "lock keys left after every TTL: got %d, want 0", r.residue)

	// Negative control of the checker. A child that skips Done cannot be
	// made to extend past its Until without changing the library: Extend
	// checks Until on its own. What such a holder gets wrong is acting on
	// the resource when it resumes, so the control gives the checker the
	// claim it would make, a window that runs until it noticed the pause,
	// and asserts that the checker flags it against the second client.
	stale := r.holds[0]
	stale.until = time.Unix(0, rep.Resumed)
	require.True(t, r.acquired.Before(r.continued), "second client acquired at %v, want before the holder was continued at %v", r.acquired, r.continued)
	got := chaosOverlaps([]chaosHold{stale, r.holds[1]})
	require.Len(t, got, 1, "control, a holder that ignores Done: got overlaps %+v, want exactly 1", got)

	// Negative control of the holder's check: with Done and Err waiting
	// for the expiry timer, the holder's first look finds its lock still
	// held (the timer is overdue, not yet run). The spin on one P makes
	// that the usual case; a few tries allow for the runtime running the
	// timer first.
	t.Run("control-timer-only-expiry", func(t *testing.T) {
		const tries = 4
		for try := range tries {
			name := fmt.Sprintf("%s-control-%d", pausedHolderName, try)
			c := runPausedHolder(t, seed+int64(try)+1, name, true)
			if !c.rep.DoneClosed && !c.rep.ErrLost {
				t.Logf("control: try %d: the holder resumed %v past its Until and found Done open, Err %q: the test sees the defect",
					try+1, time.Duration(c.rep.Resumed-c.rep.Until).Round(time.Millisecond), c.rep.Err)
				return
			}
		}
		t.Fatalf("control: in %d tries the holder without its own Until check always found Done closed, want open at least once: the test cannot see that defect", tries)
	})
}

// pausedRunResult is what one run of the paused-holder scenario saw.
type pausedRunResult struct {
	rep       pausedMsg   // the holder's report after the pause
	holds     []chaosHold // the holder's, then the second client's
	overlaps  []chaosOverlap
	residue   int
	acquired  time.Time // when the second client got the lock
	continued time.Time // when the holder was continued
}

// runPausedHolder runs the paused-holder scenario once on 5 fresh
// redis-servers, and checks what every run must show: the second client
// got the lock while the holder was stopped, kept it through the holder's
// late Extend and Unlock, and could unlock it. With timerOnly, the
// holder's Client uses withTimerOnlyExpiry.
func runPausedHolder(t *testing.T, seed int64, name string, timerOnly bool) pausedRunResult {
	t.Helper()
	rng := pausedRand(seed, name)
	ttl := pausedHolderTTL
	prefix := "chaos:" + name + ":"
	const key = "k"
	srv, admins := realNodes(t, 5)

	holder := startPausedChild(t, srv, prefix, key, ttl, timerOnly)
	locked := holder.next(t, "locked", 20*time.Second)
	start := time.Now()
	// A random phase against the renewals, which run every third of the TTL.
	pausedSleep(pausedBetween(rng, 10*time.Millisecond, ttl+ttl/2))
	pause := pausedBetween(rng, 2*ttl, 3*ttl)
	stoppedAt := holder.stop(t)
	t.Logf("t=%v child stopped for at least %v", time.Since(start).Round(time.Millisecond), pause)

	// Past the child's Until, with a margin. A renewal still in flight at
	// the stop began before it, so the child's Until cannot pass
	// stoppedAt+ttl, whatever it printed last.
	childUntil := stoppedAt.Round(0).Add(ttl)
	if u := time.Unix(0, holder.latestUntil()); u.After(childUntil) {
		childUntil = u
	}
	pausedSleep(time.Until(childUntil.Add(50 * time.Millisecond)))

	second := realClients(t, srv, 1, WithTTL(pausedParentTTL), WithAutoExtend(true),
		WithKeyPrefix(prefix), WithRetryDelay(time.Millisecond, 5*time.Millisecond))[0]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	pl, err := second.Lock(ctx, key)
	cancel()
	acquired := time.Now().Round(0)
	require.NoError(t, err, "second client: Lock while the holder is stopped: got an error, want the lock (liveness)")
	t.Logf("t=%v second client acquired", time.Since(start).Round(time.Millisecond))

	// The child is continued only once the second client holds the key,
	// however long Lock took: the pause only grows, and the holder's late
	// Extend meets the new holder's token on the nodes.
	pausedSleep(time.Until(stoppedAt.Add(pause)))
	continued := time.Now().Round(0) // before SIGCONT: the child may run first
	holder.cont(t)
	rep := holder.next(t, "report", 20*time.Second)
	holder.wait(t, 20*time.Second)
	t.Logf("t=%v child resumed after a gap of %v and exited: done-closed=%t err=%q extend=%q",
		time.Since(start).Round(time.Millisecond), rep.Gap.Round(time.Millisecond), rep.DoneClosed, rep.Err, rep.ExtendErr)
	// Wall-clock times from the holder's acquisition, for the record.
	since := func(ns int64) time.Duration {
		return time.Duration(ns - locked.Acquired).Round(time.Millisecond)
	}
	t.Logf("chaos-detail: scenario=%s stopped=%v child-until-bound=%v second-acquired=%v continued=%v noticed=%v child-until=%v",
		name, since(stoppedAt.UnixNano()), since(childUntil.UnixNano()), since(acquired.UnixNano()),
		since(continued.UnixNano()), since(rep.Resumed), since(rep.Until))
	// A gap the holder noticed before it was continued was not our stop:
	// the machine starved it of CPU for a TTL, and the run shows nothing.
	require.GreaterOrEqual(t, rep.Resumed, continued.UnixNano(),
		"the holder noticed a gap of %v at %v, want after it was continued at %v", rep.Gap, since(rep.Resumed), since(continued.UnixNano()))

	// The holder's late Extend and Unlock must have left the new key alone.
	held := 0
	for _, a := range admins {
		if v, err := a.Get(t.Context(), prefix+key).Result(); err == nil && v == pl.Token() {
			held++
		}
	}
	require.GreaterOrEqual(t, held, len(admins)/2+1, "nodes holding the second client's token after the holder exited: got %d, want a quorum", held)
	released := time.Now().Round(0)
	plUntil := pl.Until().Round(0)
	uctx, ucancel := context.WithTimeout(t.Context(), 5*time.Second)
	err = pl.Unlock(uctx)
	ucancel()
	require.NoError(t, err, "second client: Unlock: got an error, want nil")
	require.NoError(t, second.Close())

	holds := []chaosHold{
		{key: key, client: 1, token: locked.Token, acquired: time.Unix(0, locked.Acquired), until: time.Unix(0, rep.Until)},
		{key: key, client: 0, token: pl.Token(), acquired: acquired, until: plUntil, released: released},
	}
	overlaps := chaosOverlaps(holds)
	residue := pausedResidue(t, admins, prefix)
	chaosPrint(t, fmt.Sprintf("chaos: scenario=%s seed=%d ttl=%v pause=%v acquisitions=%d overlaps=%d residue=%d done-closed=%t err-lost=%t extend-not-held=%t",
		name, seed, ttl, continued.Sub(stoppedAt.Round(0)).Round(time.Millisecond), len(holds), len(overlaps), residue,
		rep.DoneClosed, rep.ErrLost, rep.ExtendNotHeld))
	return pausedRunResult{rep: rep, holds: holds, overlaps: overlaps, residue: residue, acquired: acquired, continued: continued}
}

// pausedRand derives the scenario's generator from the run's seed and its
// name, as newChaosRun does, so that it replays with the same seed.
func pausedRand(seed int64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// pausedBetween draws a duration in [lo, hi].
func pausedBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// pausedSleep waits d, if it is positive.
func pausedSleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// pausedResidue waits until every TTL has run out and counts the keys under
// prefix left on the nodes, logging each.
func pausedResidue(t *testing.T, admins []redis.UniversalClient, prefix string) int {
	t.Helper()
	scan := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for i, a := range admins {
			keys, err := a.Keys(t.Context(), prefix+"*").Result()
			require.NoError(t, err, "node %d: KEYS", i)
			for _, k := range keys {
				pttl, err := a.PTTL(t.Context(), k).Result()
				require.NoError(t, err, "node %d: PTTL", i)
				out[fmt.Sprintf("node %d key %s", i, k)] = pttl
			}
		}
		return out
	}
	var wait time.Duration
	for _, pttl := range scan() {
		wait = max(wait, pttl)
	}
	// Redis expires in whole milliseconds; the margin covers that.
	pausedSleep(wait + 20*time.Millisecond)
	left := scan()
	for k, pttl := range left {
		t.Logf("residue: %s pttl %v", k, pttl)
	}
	return len(left)
}

// pausedChild is the holder's process as the parent sees it: started by
// startPausedChild, stopped and continued by the parent, and killed by a
// t.Cleanup whether it is stopped or not.
type pausedChild struct {
	cmd    *exec.Cmd
	stdin  io.Closer // closed to tell the child a stop is coming
	out    *pausedOutput
	stderr *pausedOutput
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's result; read after exited is closed
	seen   int           // messages next has gone past
}

// startPausedChild runs this test binary again as the holder, on the
// servers, in a process group of its own.
func startPausedChild(t *testing.T, srv []*redistest.Server, prefix, key string, ttl time.Duration, timerOnly bool) *pausedChild {
	t.Helper()
	addrs := make([]string, len(srv))
	for i, s := range srv {
		addrs[i] = s.Addr()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosPausedHolderChild$", "-test.count=1")
	// GOMAXPROCS=1: see the spin in TestChaosPausedHolderChild.
	cmd.Env = append(os.Environ(),
		"GOMAXPROCS=1",
		pausedEnvChild+"=1",
		pausedEnvAddrs+"="+strings.Join(addrs, ","),
		pausedEnvKey+"="+key,
		pausedEnvPrefix+"="+prefix,
		pausedEnvTTL+"="+ttl.String(),
	)
	if timerOnly {
		cmd.Env = append(cmd.Env, pausedEnvTimerOnly+"=1")
	}
	ch := &pausedChild{cmd: cmd, out: newPausedOutput(), stderr: newPausedOutput(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ch.out, ch.stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	ch.stdin = stdin
	// Its own group, so that a signal meant for the test binary's group
	// (a terminal's ^Z) leaves it alone; Pdeathsig kills it should the
	// parent die before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), "start the holder's process")
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-ch.exited:
			return
		default:
		}
		// SIGKILL ends a stopped process too.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-ch.exited
	})
	return ch
}

// next waits for the child's next message of the given kind, or fails.
func (ch *pausedChild) next(t *testing.T, kind string, timeout time.Duration) pausedMsg {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		msgs := ch.out.messages()
		for ; ch.seen < len(msgs); ch.seen++ {
			if msgs[ch.seen].Kind == kind {
				ch.seen++
				return msgs[ch.seen-1]
			}
		}
		select {
		case <-ch.out.notify:
		case <-ch.exited:
			// Wait returns after the output is copied: one last look.
			if msgs := ch.out.messages(); ch.seen < len(msgs) {
				continue
			}
			t.Fatalf("the holder's process exited (%v) before its %q line, want the line\n%s", ch.err, kind, ch.output())
		case <-deadline.C:
			// SIGQUIT makes the child print its goroutines, for the report.
			_ = syscall.Kill(ch.cmd.Process.Pid, syscall.SIGCONT)
			_ = syscall.Kill(ch.cmd.Process.Pid, syscall.SIGQUIT)
			select {
			case <-ch.exited:
			case <-time.After(5 * time.Second):
			}
			t.Fatalf("got no %q line from the holder's process within %v, want one\n%s", kind, timeout, ch.output())
		}
	}
}

// latestUntil returns the last Until the child printed, in Unix nanoseconds.
func (ch *pausedChild) latestUntil() int64 {
	var u int64
	for _, m := range ch.out.messages() {
		u = max(u, m.Until)
	}
	return u
}

// stop tells the child a stop is coming, waits until it spins, sends
// SIGSTOP and returns once the kernel shows the process stopped, with the
// time it saw that.
func (ch *pausedChild) stop(t *testing.T) time.Time {
	t.Helper()
	require.NoError(t, ch.stdin.Close(), "close the holder's stdin")
	ch.next(t, "spinning", 20*time.Second)
	require.NoError(t, syscall.Kill(ch.cmd.Process.Pid, syscall.SIGSTOP), "SIGSTOP the holder")
	path := fmt.Sprintf("/proc/%d/stat", ch.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(path)
		require.NoError(t, err, "read the holder's state")
		// "pid (comm) state ...": comm may hold spaces and parentheses,
		// so the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder's state after SIGSTOP: got %q, want T (stopped)", b)
		}
		time.Sleep(time.Millisecond)
	}
}

// cont sends SIGCONT.
func (ch *pausedChild) cont(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(ch.cmd.Process.Pid, syscall.SIGCONT), "SIGCONT the holder")
}

// wait waits for the child to exit, and fails unless it exits with status 0.
func (ch *pausedChild) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-ch.exited:
	case <-time.After(timeout):
		t.Fatalf("the holder's process still runs %v after its report, want it exited\n%s", timeout, ch.output())
	}
	require.NoError(t, ch.err, "the holder's process: got a failed exit, want status 0\n%s", ch.output())
}

// output is everything the child printed that was not a message, for
// failure reports.
func (ch *pausedChild) output() string {
	return "holder's stdout:\n" + ch.out.text() + "holder's stderr:\n" + ch.stderr.text()
}

// pausedOutput is an io.Writer that splits the child's output into lines,
// decoding the pausedLine ones into messages and keeping the rest as text.
// It is safe for concurrent use.
type pausedOutput struct {
	mu      sync.Mutex
	partial []byte          // guarded by mu; an unfinished line
	msgs    []pausedMsg     // guarded by mu
	other   strings.Builder // guarded by mu; lines that are not messages
	// notify gets a value, without blocking, after each write.
	notify chan struct{}
}

func newPausedOutput() *pausedOutput {
	return &pausedOutput{notify: make(chan struct{}, 1)}
}

func (o *pausedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		line := string(o.partial[:i])
		o.partial = o.partial[i+1:]
		var m pausedMsg
		if rest, ok := strings.CutPrefix(line, pausedLine); ok && json.Unmarshal([]byte(rest), &m) == nil {
			o.msgs = append(o.msgs, m)
		} else {
			o.other.WriteString(line + "\n")
		}
	}
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// messages returns the messages decoded so far.
func (o *pausedOutput) messages() []pausedMsg {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]pausedMsg(nil), o.msgs...)
}

// text returns the lines that were not messages, and any unfinished line.
func (o *pausedOutput) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.other.String() + string(o.partial)
}
