package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on the pipe's goroutines: generous, as the
// machine may be busy; a test that passes never comes near it.
const waitFor = 10 * time.Second

// errNotSent is the Config.NotSent of every test pipe.
var errNotSent = errors.New("transport test: not sent")

// fakeJob sends INCR key, perBatch times a batch, for rounds batches, and
// records what it saw. Its fields are written by the sender and read by the
// test after done is closed.
type fakeJob struct {
	key      string
	deadline time.Time
	perBatch int // commands a batch; 0 means 1
	rounds   int // batches it asks for; 0 means 1

	cmds    []*redis.Cmd // the commands of its current batch
	batches []batchSeen  // one per Done
	events  []string     // "acked", "done", "fail", in the order they came
	failed  error        // what Fail got
	done    chan struct{}
}

// batchSeen is what Done saw of one batch.
type batchSeen struct {
	sent, recv time.Time
	errs       []error
	vals       []any
}

func newJob(key string) *fakeJob {
	return &fakeJob{key: key, deadline: time.Now().Add(time.Minute), done: make(chan struct{})}
}

func (j *fakeJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmds = j.cmds[:0]
	for range max(j.perBatch, 1) {
		cmd := redis.NewCmd(context.Background(), "incr", j.key)
		j.cmds = append(j.cmds, cmd)
		cmds = append(cmds, cmd)
	}
	return cmds
}

func (j *fakeJob) Deadline() time.Time { return j.deadline }

func (j *fakeJob) Done(sent, recv time.Time) bool {
	b := batchSeen{sent: sent, recv: recv}
	for _, c := range j.cmds {
		b.errs = append(b.errs, c.Err())
		b.vals = append(b.vals, c.Val())
	}
	j.batches = append(j.batches, b)
	j.events = append(j.events, "done")
	if len(j.batches) < max(j.rounds, 1) {
		return true
	}
	close(j.done)
	return false
}

func (j *fakeJob) Fail(err error) {
	j.failed = err
	j.events = append(j.events, "fail")
	close(j.done)
}

// wait returns once the job has ended, or fails the test.
func (j *fakeJob) wait(t *testing.T) {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(waitFor):
		t.Fatalf("job %s: not ended after %v", j.key, waitFor)
	}
}

// timedJob is a fakeJob that is Timed when timed is set.
type timedJob struct {
	*fakeJob
	timed bool
}

func (j timedJob) Timed() bool { return j.timed }

// ackJob is a fakeJob that is an Acker.
type ackJob struct {
	*fakeJob
	replicas int
	within   time.Duration
	barrier  string

	acks   int64 // what Acked got
	ackErr error
}

func (j *ackJob) Replicas() int            { return j.replicas }
func (j *ackJob) AckWithin() time.Duration { return j.within }
func (j *ackJob) Barrier() string          { return j.barrier }
func (j *ackJob) Acked(n int64, err error) {
	j.acks, j.ackErr = n, err
	j.events = append(j.events, "acked")
}

// newPipe returns a pipe on rc whose senders a cleanup waits for; cfg's
// Client, WG, and unset Now and NotSent are filled in.
func newPipe(t *testing.T, rc redis.UniversalClient, cfg Config) (*Pipe, *sync.WaitGroup) {
	t.Helper()
	wg := new(sync.WaitGroup)
	cfg.Client, cfg.WG = rc, wg
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NotSent == nil {
		cfg.NotSent = errNotSent
	}
	t.Cleanup(func() {
		if !waited(wg) {
			t.Errorf("the pipe's senders still run %v after the test", waitFor)
		}
	})
	return New(cfg), wg
}

// waited reports whether wg reached zero within waitFor.
func waited(wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(waitFor):
		return false
	}
}

// mini starts a miniredis and a go-redis client on it, with default
// options unless opts changes them.
func mini(t *testing.T, opts ...func(*redis.Options)) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	o := &redis.Options{Addr: m.Addr()}
	for _, f := range opts {
		f(o)
	}
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	return m, rc
}

// noRetries makes a client give a failed command up at once.
func noRetries(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 }

// ours reports a command that a test job, the WAIT or the WAITAOF and their
// barriers send,
// not one of go-redis's own (HELLO, CLIENT SETINFO).
func ours(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "incr", "publish", "set", "wait", "waitaof":
		return true
	}
	return false
}

// gate is a go-redis hook that records each batch with a command of ours,
// as "name arg ..." lines, and, when hold is set, holds the first one
// before it is sent until release.
type gate struct {
	hold bool
	open chan struct{}
	once sync.Once

	mu      sync.Mutex
	batches [][]string // guarded by mu
	holding bool       // guarded by mu
}

// newGate adds a gate to rc. Add it after newPipe: its cleanup then runs
// first, and the held sender can end.
func newGate(t *testing.T, rc *redis.Client, hold bool) *gate {
	g := &gate{hold: hold, open: make(chan struct{})}
	rc.AddHook(g)
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.pass([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.pass(cmds)
		return next(ctx, cmds)
	}
}

func (g *gate) pass(cmds []redis.Cmder) {
	var lines []string
	for _, c := range cmds {
		if ours(c) {
			lines = append(lines, argLine(c))
		}
	}
	if lines == nil {
		return
	}
	g.mu.Lock()
	g.batches = append(g.batches, lines)
	first := len(g.batches) == 1
	g.holding = g.hold && first
	g.mu.Unlock()
	if g.hold && first {
		<-g.open
	}
}

func (g *gate) held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

func (g *gate) seen() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.batches...)
}

// Jobs submitted while a batch is out all leave together in the next batch.
func TestQueuedJobsShareTheNextBatch(t *testing.T) {
	_, rc := mini(t)
	p, _ := newPipe(t, rc, Config{StallAfter: time.Minute}) // no second sender
	g := newGate(t, rc, true)

	first := newJob("share-0")
	p.Submit(first)
	require.Eventually(t, g.held, waitFor, time.Millisecond, "the first job was not sent")
	const n = 5
	jobs := make([]*fakeJob, n)
	for i := range jobs {
		jobs[i] = newJob(fmt.Sprintf("share-%d", i+1))
		p.Submit(jobs[i])
	}
	require.Eventually(t, func() bool { return p.Queued() == n }, waitFor, time.Millisecond,
		"the %d jobs did not queue behind the batch out", n)
	p.mu.Lock()
	senders := p.senders
	p.mu.Unlock()
	require.Equal(t, 1, senders, "senders: got %d, want the one whose batch is out", senders)
	g.release()
	first.wait(t)
	for _, j := range jobs {
		j.wait(t)
		require.Equal(t, []error{nil}, j.batches[0].errs, "job %s", j.key)
	}
	b := g.seen()
	require.Len(t, b, 2, "batches: got %q, want the first job's, then one of %d", b, n)
	require.Equal(t, []string{"incr share-0"}, b[0])
	require.Len(t, b[1], n, "second batch: got %q, want %d INCRs", b[1], n)
}

// A job still queued at its deadline fails with NotSent, and its commands never reach the node.
func TestJobPastDeadlineFailsUnsent(t *testing.T) {
	m, rc := mini(t)
	p, _ := newPipe(t, rc, Config{StallAfter: time.Minute})
	g := newGate(t, rc, true)

	first := newJob("deadline-first")
	p.Submit(first)
	require.Eventually(t, g.held, waitFor, time.Millisecond, "the first job was not sent")
	late, live := newJob("deadline-late"), newJob("deadline-live")
	late.deadline = time.Now().Add(50 * time.Millisecond)
	p.Submit(late)
	p.Submit(live)
	require.Eventually(t, func() bool { return p.Queued() == 2 }, waitFor, time.Millisecond,
		"the 2 jobs did not queue behind the batch out")
	time.Sleep(time.Until(late.deadline) + time.Millisecond)
	g.release()
	for _, j := range []*fakeJob{first, late, live} {
		j.wait(t)
	}
	require.ErrorIs(t, late.failed, errNotSent)
	require.Equal(t, []string{"fail"}, late.events, "the late job: got %v, want only Fail", late.events)
	require.False(t, m.Exists(late.key), "the late job's INCR reached the node")
	require.Equal(t, []string{"done"}, live.events, "the job in time was not sent with the late one")
	m.CheckGet(t, live.key, "1")
}

// A job whose Done asks again goes out again in a later batch, until it stops asking.
func TestDoneAgainSendsTheJobAgain(t *testing.T) {
	m, rc := mini(t)
	p, _ := newPipe(t, rc, Config{})
	g := newGate(t, rc, false)

	j := newJob("again")
	j.rounds = 2
	p.Submit(j)
	j.wait(t)
	require.Len(t, j.batches, 2, "Done calls: got %d, want 2", len(j.batches))
	require.Equal(t, []any{int64(1)}, j.batches[0].vals)
	require.Equal(t, []any{int64(2)}, j.batches[1].vals)
	m.CheckGet(t, "again", "2")
	require.Equal(t, [][]string{{"incr again"}, {"incr again"}}, g.seen())
}

// dropBatches is a go-redis hook that gives up every pipeline with an INCR
// unsent, without setting its commands' errors: what go-redis does on a
// Conn it marked bad (see errNoReply).
type dropBatches struct{}

var errDropped = errors.New("transport test: batch dropped")

func (dropBatches) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (dropBatches) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dropBatches) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if ours(c) {
				return errDropped
			}
		}
		return next(ctx, cmds)
	}
}

// A command whose reply go-redis never read never looks answered: Done sees an error on each.
func TestUnreadReplyNeverLooksAnswered(t *testing.T) {
	// check sends a job of each size, one command (go-redis's
	// single-command path) or more (a pipeline), and requires an error
	// on each command.
	check := func(t *testing.T, rc *redis.Client, sizes ...int) []error {
		t.Helper()
		p, _ := newPipe(t, rc, Config{})
		var errs []error
		for _, n := range sizes {
			j := newJob(fmt.Sprintf("noreply-%d", n))
			j.perBatch = n
			p.Submit(j)
			j.wait(t)
			for i, err := range j.batches[0].errs {
				require.Error(t, err, "job of %d, command %d: got no error, value %v", n, i, j.batches[0].vals[i])
				errs = append(errs, err)
			}
		}
		return errs
	}
	t.Run("closed client", func(t *testing.T) {
		_, rc := mini(t)
		require.NoError(t, rc.Close())
		check(t, rc, 1, 2)
	})
	t.Run("closed server", func(t *testing.T) {
		m, rc := mini(t, noRetries)
		m.Close()
		check(t, rc, 1, 2)
	})
	t.Run("batch given up", func(t *testing.T) {
		m, rc := mini(t)
		rc.AddHook(dropBatches{})
		for _, err := range check(t, rc, 2) {
			require.ErrorIs(t, err, errNoReply)
		}
		require.False(t, m.Exists("noreply-2"), "the given-up batch reached the node")
	})
}

// A batch that go-redis answered none of, because the server refused the
// new connection's setup (a wrong password, a DB it does not have), fails
// with the server's words, not with errNoReply's, and still matches
// errNoReply; Cause gives the server's error. It does not count as
// answered. A single command (go-redis's own path) gets the server's words
// too.
func TestUnansweredBatchSaysWhy(t *testing.T) {
	s := redistest.Start(t, redistest.Options{}) // skipped with -short
	admin := s.NewClient(t)
	require.NoError(t, admin.ConfigSet(t.Context(), "requirepass", "secret").Err())
	for _, tc := range []struct {
		name string
		opts redis.Options
		want string
	}{
		{"wrong password", redis.Options{Password: "wrong"}, "WRONGPASS"},
		{"bad DB", redis.Options{Password: "secret", DB: 99}, "DB index is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Addr = s.Addr()
			rc := redis.NewClient(&o)
			t.Cleanup(func() { _ = rc.Close() })
			p, _ := newPipe(t, rc, Config{})
			// The pipeline first, on a fresh pipe, so that no single
			// command's reply (which go-redis gives as any other) has made
			// the pipe take the client for set up.
			for _, n := range []int{2, 1} {
				j := newJob(fmt.Sprintf("why-%d", n))
				j.perBatch = n
				p.Submit(j)
				j.wait(t)
				for i, err := range j.batches[0].errs {
					require.ErrorContains(t, err, tc.want, "job of %d, command %d", n, i)
					require.NotContains(t, err.Error(), "no reply", "job of %d, command %d", n, i)
					var re redis.Error
					require.ErrorAs(t, Cause(err), &re, "job of %d, command %d: the server's reply", n, i)
					if n > 1 {
						require.ErrorIs(t, err, errNoReply, "a pipeline's command")
						require.False(t, p.pooled.Load(), "a refused batch counted as answered")
					}
				}
			}
		})
	}
	require.Zero(t, admin.Exists(t.Context(), "why-1", "why-2").Val(), "a refused connection ran a command")
	// Another error is its own cause.
	require.Equal(t, errNotSent, Cause(errNotSent))
}

// Done gets sent and recv from Config.Now only for a batch that holds a Timed job, and zero times otherwise.
func TestTimedJobsGetTheBatchTimes(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var calls atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(calls.Add(1)) * time.Second) }
	_, rc := mini(t)
	p, _ := newPipe(t, rc, Config{Now: now})

	for _, j := range []Job{newJob("untimed"), timedJob{newJob("timed-false"), false}} {
		p.Submit(j)
		fj := jobOf(j)
		fj.wait(t)
		b := fj.batches[0]
		require.True(t, b.sent.IsZero() && b.recv.IsZero(), "job %s: got sent %v, recv %v, want zero", fj.key, b.sent, b.recv)
		require.Zero(t, calls.Load(), "job %s: Now was called", fj.key)
	}
	j := timedJob{newJob("timed"), true}
	p.Submit(j)
	j.wait(t)
	b := j.batches[0]
	require.Equal(t, base.Add(time.Second), b.sent, "sent: got %v, want Now's first time", b.sent)
	require.Equal(t, base.Add(2*time.Second), b.recv, "recv: got %v, want Now's second time", b.recv)
	require.Equal(t, []any{int64(1)}, b.vals)
}

func jobOf(j Job) *fakeJob {
	switch j := j.(type) {
	case *fakeJob:
		return j
	case timedJob:
		return j.fakeJob
	}
	panic(fmt.Sprintf("not a test job: %T", j))
}

// resendable says yes after a connection failure, READONLY or errNoReply, and no after a timeout or another reply.
func TestResendable(t *testing.T) {
	m, rc := mini(t, noRetries)
	require.NoError(t, rc.Ping(t.Context()).Err()) // connect before the node fails
	replyErr := func(msg string) error {
		t.Helper()
		m.SetError(msg)
		defer m.SetError("")
		err := rc.Ping(t.Context()).Err()
		var re redis.Error
		require.ErrorAs(t, err, &re, "PING with the node failing with %q", msg)
		return err
	}
	errERR := replyErr("ERR x")
	errREADONLY := replyErr("READONLY You can't write against a read only replica.")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"EOF", io.EOF, true},
		{"wrapped EOF", fmt.Errorf("read: %w", io.EOF), true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"READONLY reply", errREADONLY, true},
		{"errNoReply", errNoReply, true},
		{"errNoReply with a reply as its cause", &noReply{cause: errERR}, true},
		{"ctx deadline", context.DeadlineExceeded, false},
		{"ctx canceled", context.Canceled, false},
		{"net timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{"ERR reply", errERR, false},
	} {
		require.Equal(t, tc.want, resendable(tc.err), "%s (%v): got %v, want %v", tc.name, tc.err, !tc.want, tc.want)
	}
}

// waitCmds ends a batch with PUBLISH on the first Acker's barrier and WAIT for the most replicas, bounded by the least time any Acker allows, at least 1 ms.
func TestWaitCmds(t *testing.T) {
	now := time.Now()
	acker := func(replicas int, within, left time.Duration, barrier string) *ackJob {
		j := &ackJob{fakeJob: newJob("wait-" + barrier), replicas: replicas, within: within, barrier: barrier}
		j.deadline = now.Add(left)
		return j
	}
	for _, tc := range []struct {
		name          string
		jobs          []Job
		publish, wait string // "" for no commands
	}{
		{"no Acker", []Job{newJob("plain")}, "", ""},
		{"no replicas", []Job{acker(0, time.Second, time.Minute, "a")}, "", ""},
		{"AckWithin", []Job{acker(1, 50*time.Millisecond, time.Minute, "a")}, "publish a redlock", "wait 1 50"},
		{"deadline first", []Job{acker(2, time.Second, 30*time.Millisecond, "a")}, "publish a redlock", "wait 2 30"},
		{"at least 1ms", []Job{acker(1, time.Second, 100*time.Microsecond, "a")}, "publish a redlock", "wait 1 1"},
		{"most and least", []Job{
			newJob("plain"),
			acker(0, time.Millisecond, time.Minute, "none"),
			acker(1, 80*time.Millisecond, time.Minute, "a"),
			acker(3, time.Second, 70*time.Millisecond, "b"),
			acker(2, 90*time.Millisecond, time.Minute, "c"),
		}, "publish a redlock", "wait 3 70"},
	} {
		a := waitCmds(tc.jobs, now)
		require.Nil(t, a.waitAOF, tc.name)
		require.Nil(t, a.mark, tc.name)
		if tc.wait == "" {
			require.Nil(t, a.publish, tc.name)
			require.Nil(t, a.wait, tc.name)
			continue
		}
		require.Equal(t, tc.publish, strings.TrimSpace(fmt.Sprintln(a.publish.Args()...)), tc.name)
		require.Equal(t, tc.wait, strings.TrimSpace(fmt.Sprintln(a.wait.Args()...)), tc.name)
	}
}

// On a real master without replicas, an Acker's batch ends with PUBLISH and a bounded WAIT, and Acked gets (0, nil) before Done.
func TestAckerWaitsOnRealServer(t *testing.T) {
	s := redistest.Start(t, redistest.Options{}) // skipped with -short
	rc := s.NewClient(t)
	p, _ := newPipe(t, rc, Config{})
	g := newGate(t, rc, false)

	j := &ackJob{fakeJob: newJob("acker"), replicas: 1, within: 50 * time.Millisecond, barrier: "transport-test:barrier"}
	p.Submit(j)
	// Unbounded (WAIT 1 0), the WAIT would hold the batch past the
	// client's read timeout (5 s), and then its retries.
	j.wait(t)
	require.NoError(t, j.ackErr)
	require.Zero(t, j.acks, "acks: got %d, want 0 from a master without replicas", j.acks)
	require.Equal(t, []string{"acked", "done"}, j.events)
	require.Equal(t, []any{int64(1)}, j.batches[0].vals)
	require.Equal(t, [][]string{{"incr acker", "publish transport-test:barrier redlock", "wait 1 50"}}, g.seen())
}

// Once every job is done and the senders have lingered, no sender goroutine is left.
func TestSendersEndWhenIdle(t *testing.T) {
	_, rc := mini(t)
	p, wg := newPipe(t, rc, Config{})

	jobs := make([]*fakeJob, 20)
	var submit sync.WaitGroup
	for i := range jobs {
		jobs[i] = newJob(fmt.Sprintf("idle-%d", i%4))
		submit.Go(func() { p.Submit(jobs[i]) })
	}
	submit.Wait()
	for _, j := range jobs {
		j.wait(t)
	}
	require.True(t, waited(wg), "the pipe's senders still run %v after its last job", waitFor)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Zero(t, p.senders, "senders: got %d, want 0", p.senders)
	require.Empty(t, p.queue)
}
