package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// batchHook records the number of SETs (acquires) of each batch with one
// that a node's client sends, and holds the replies of the first one until
// release. Other commands may share a batch: a release that Unlock parked
// is queued as soon as the acquire reply before it comes.
type batchHook struct {
	mu      sync.Mutex
	sizes   []int
	holding bool
	open    chan struct{}
}

func newBatchHook() *batchHook { return &batchHook{open: make(chan struct{})} }

func (h *batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sees a batch of one command: the pipe sends it on go-redis's
// single-command path.
func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record([]redis.Cmder{cmd})
		return err
	}
}

func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.record(cmds)
		return err
	}
}

// record notes a batch with a SET, and holds the first one's replies.
// Other batches are a connection's set-up (CLIENT SETINFO) or releases.
func (h *batchHook) record(cmds []redis.Cmder) {
	sets := 0
	for _, c := range cmds {
		if c.Name() == "set" {
			sets++
		}
	}
	if sets == 0 {
		return
	}
	h.mu.Lock()
	h.sizes = append(h.sizes, sets)
	first := len(h.sizes) == 1
	h.holding = first
	h.mu.Unlock()
	if first {
		<-h.open
	}
}

func (h *batchHook) held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holding
}

func (h *batchHook) batches() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// Requests that concurrent calls have for a node go out together: while a
// batch is out, the requests that come wait and leave in the next one, in
// one write. The first request found the pipe idle and went out alone, at
// once.
func TestConcurrentRequestsShareABatch(t *testing.T) {
	// No second sender for a batch held this long: this test holds one.
	old := stallAfter
	stallAfter = time.Minute
	t.Cleanup(func() { stallAfter = old })
	_, cs := minis(t, 3)
	hooks := make([]*batchHook, len(cs))
	for i, rc := range cs {
		hooks[i] = newBatchHook()
		rc.AddHook(hooks[i])
		t.Cleanup(func() {
			select {
			case <-hooks[i].open:
			default:
				close(hooks[i].open)
			}
		})
	}
	c := newClient(t, cs)

	const waiting = 7
	errs := make(chan error, waiting+1)
	lockUnlock := func(key string) {
		l, err := c.TryLock(context.Background(), key)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		errs <- err
	}
	go lockUnlock("batch-0")
	for i, h := range hooks {
		require.Eventually(t, h.held, 5*time.Second, time.Millisecond, "node %d: the first request was not sent alone", i)
	}
	for k := range waiting {
		go lockUnlock(fmt.Sprintf("batch-%d", k+1))
	}
	for i, n := range c.nodes {
		require.Eventually(t, func() bool {
			return n.pipe.Queued() == waiting
		}, 5*time.Second, time.Millisecond, "node %d: the requests did not queue behind the batch out", i)
	}
	for _, h := range hooks {
		close(h.open)
	}
	for range waiting + 1 {
		require.NoError(t, <-errs)
	}
	for i, h := range hooks {
		b := h.batches()
		require.GreaterOrEqual(t, len(b), 2, "node %d: batches %v", i, b)
		require.Equal(t, 1, b[0], "node %d: the first request went out with company: batches %v", i, b)
		require.Equal(t, waiting, b[1], "node %d: the queued acquires did not go out together: batches %v", i, b)
	}
}

// lateSets delays every SET it sees, then counts it once the server has
// answered.
type lateSets struct {
	delay time.Duration
	done  atomic.Int32
}

func (h *lateSets) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateSets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}
func (h *lateSets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *lateSets) around(cmds []redis.Cmder, send func() error) error {
	sets := int32(0)
	for _, cmd := range cmds {
		if cmd.Name() == "set" {
			sets++
		}
	}
	if sets > 0 {
		time.Sleep(h.delay)
	}
	err := send()
	h.done.Add(sets)
	return err
}

// A release to a node is never sent ahead of the acquire it undoes: node 4
// gets its acquire 300 ms late, after TryLock has returned at its quorum
// and Unlock has begun, past the time a new request to a stalled node gets
// a sender of its own. Sent ahead, on another connection, the release
// would find nothing, and the late SET would leave the key behind (miniredis
// keys do not expire here).
func TestReleaseIsNeverSentAheadOfItsAcquire(t *testing.T) {
	ms, cs := minis(t, 5)
	late := &lateSets{delay: 300 * time.Millisecond}
	cs[4].AddHook(late)
	c := newClient(t, cs)
	for round := range 3 {
		l, err := c.TryLock(t.Context(), "ahead")
		require.NoError(t, err)
		// Past stallAfter, a request to node 4 would start another
		// sender rather than queue behind the held SET.
		time.Sleep(2 * stallAfter)
		require.NoError(t, l.Unlock(t.Context()))
		require.Eventually(t, func() bool { return late.done.Load() >= int32(round+1) }, 5*time.Second, time.Millisecond,
			"node 4 did not get its late SET: %d SETs", late.done.Load())
		require.Eventually(t, func() bool { return !ms[4].Exists("ahead") }, 5*time.Second, time.Millisecond,
			"round %d: node 4 kept the key: a release went out before its acquire", round)
		eventually(t, ms, "ahead", "")
	}
}

// An acquire reply that comes after Unlock's round, and after the grace a
// queued release gets past it (releaseGrace), still lets the release that
// Unlock parked for its node go out: the release gets a fresh deadline
// when the reply frees the node, and is not dropped unsent.
func TestParkedReleaseOutlivesItsRound(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs) // TTL 10 s: the release round lasts 1 s
	late := &lateSets{delay: time.Second + releaseGrace + time.Second}
	cs[4].AddHook(late)
	l, err := c.TryLock(t.Context(), "parked")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()), "a quorum of 4 released")
	require.Eventually(t, func() bool { return late.done.Load() == 1 }, 2*late.delay, time.Millisecond,
		"node 4 did not get its late SET")
	// Well inside the 10 s TTL: only the release can have deleted it.
	require.Eventually(t, func() bool { return !ms[4].Exists("parked") }, time.Second, time.Millisecond,
		"node 4 kept the key: the parked release was dropped")
	eventually(t, ms, "parked", "")
}

// connErrors counts the requests (a command, or a pipeline) that a client's
// connection failed, rather than Redis refused. A hook sees the error that
// go-redis returns; the command gets it only after the hooks.
type connErrors struct{ n atomic.Int32 }

func connFailed(err error) bool {
	var re redis.Error
	return err != nil && !errors.As(err, &re)
}

func (h *connErrors) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *connErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if connFailed(err) {
			h.n.Add(1)
		}
		return err
	}
}
func (h *connErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		failed := connFailed(err)
		for _, cmd := range cmds {
			failed = failed || connFailed(cmd.Err())
		}
		if failed {
			h.n.Add(1)
		}
		return err
	}
}

// killUntilABatchFails drops the node's client connections (CLIENT KILL
// through admin) right after a cycle, while its sender lingers on the
// connection it holds, until errs counts a batch that failed on one. A
// sender that stopped lingering before the kill gave its connection back to
// the pool, whose check finds it dead unused, so the kill is tried again.
func killUntilABatchFails(t *testing.T, admin *redis.Client, errs *connErrors, cycle func()) {
	t.Helper()
	for try := 0; errs.n.Load() == 0; try++ {
		require.Less(t, try, 200, "no batch went out on a killed connection: the test injected nothing")
		cycle()
		require.NoError(t, admin.Do(t.Context(), "client", "kill", "type", "normal", "skipme", "yes").Err())
		cycle()
	}
}

// TestBrokenConnectionIsDropped: a sender keeps its connection between
// batches (see link). When the server drops it (CLIENT KILL on node 0,
// right after a cycle, while the sender lingers), the next batch finds it
// broken and fails, and the sender gives the connection up: node 0's later
// batches go out on fresh ones, and none fails again. Node 0's client
// makes no retries, so that the failure comes at once and the same sender
// carries the next batches: kept, the broken connection would fail every
// one of them (see killUntilABatchFails).
func TestBrokenConnectionIsDropped(t *testing.T) {
	srv, cs := realNodes(t, 5)
	cs[0] = redis.NewClient(&redis.Options{Addr: srv[0].Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = cs[0].Close() })
	errs := &connErrors{}
	cs[0].AddHook(errs)
	c := newClient(t, cs)
	admin := srv[0].NewClient(t)
	ctx := t.Context()
	i := 0
	cycle := func() {
		l, err := c.Lock(ctx, fmt.Sprintf("broken:%d", i))
		require.NoError(t, err, "cycle %d: 4 of 5 nodes are up", i)
		require.NoError(t, l.Unlock(ctx), "cycle %d", i)
		i++
	}
	for range 10 {
		cycle()
	}
	require.Zero(t, errs.n.Load(), "failed commands before the kill")
	killUntilABatchFails(t, admin, errs, cycle)
	// A loaded machine may have had a second sender lingering on a
	// connection of its own when the kill came: it finds its connection
	// broken once too, in the next cycles. Each broken connection fails
	// one batch, and then never again.
	for range 20 {
		cycle()
	}
	failed := errs.n.Load()
	require.LessOrEqual(t, failed, int32(4), "batches failed right after the kill: more than the senders that could hold a killed connection")
	for range 300 {
		cycle()
	}
	require.Equal(t, failed, errs.n.Load(), "batches failed after the broken connections were found")
}

// TestFailedLinkBatchIsResentThroughThePool: with go-redis's default
// retries, a batch that fails on the connection its sender holds is sent
// again through the client's pool, as go-redis itself would send a
// command of its pool again. The server drops the sender's connection
// (CLIENT KILL while it lingers) until a batch fails on it; every TryLock
// must still win. One node, so that each round waits for it, and a node
// timeout that outlasts go-redis's retry backoff on the broken Conn.
func TestFailedLinkBatchIsResentThroughThePool(t *testing.T) {
	srv, cs := realNodes(t, 1)
	rc := cs[0].(*redis.Client)
	require.Positive(t, rc.Options().MaxRetries, "the node's client must make retries")
	errs := &connErrors{}
	rc.AddHook(errs)
	c := newClient(t, cs, WithTTL(10*time.Second), WithNodeTimeout(time.Second))
	admin := srv[0].NewClient(t)
	ctx := t.Context()
	i := 0
	cycle := func() {
		l, err := c.TryLock(ctx, fmt.Sprintf("resent:%d", i))
		require.NoError(t, err, "cycle %d: a batch that failed on the held connection was not sent again", i)
		require.NoError(t, l.Unlock(ctx), "cycle %d", i)
		i++
	}
	for range 10 {
		cycle()
	}
	killUntilABatchFails(t, admin, errs, cycle)
	for range 20 {
		cycle()
	}
}

// TestReadOnlyNodeNeverVotesYes: a node that turns into a replica while
// the senders hold connections to it answers every write READONLY, and
// never counts as a yes. go-redis takes READONLY for a sign of a bad
// connection: it marks the sender's Conn bad and fails every later command
// on it unsent, and a pipeline on such a Conn (v9.22) returns with its
// commands' errors unset, which would read as an OK from Redis. Eight
// goroutines lock at once, so that node 0 gets pipelines as well as
// single commands. Node 0's client makes no retries, so that a sender goes
// on at once after the READONLY that marked its Conn bad (with retries it
// sleeps through them, and its next rounds are mostly decided by the time
// it sends).
func TestReadOnlyNodeNeverVotesYes(t *testing.T) {
	srv, cs := realNodes(t, 5)
	cs[0] = redis.NewClient(&redis.Options{Addr: srv[0].Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = cs[0].Close() })
	c := newClient(t, cs)
	ctx := t.Context()
	cycles := func(phase string, n int) (yes0 int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range n {
					l, err := c.Lock(ctx, fmt.Sprintf("ro:%s:%d:%d", phase, g, i))
					require.NoError(t, err, "%s: 4 of 5 nodes are masters", phase)
					if l.Stats().Nodes[0].Vote == VoteYes {
						mu.Lock()
						yes0++
						mu.Unlock()
					}
					_ = l.Unlock(ctx)
				}
			})
		}
		wg.Wait()
		return yes0
	}
	require.Positive(t, cycles("master", 20), "node 0 never voted yes while a master")
	admin := srv[0].NewClient(t)
	// Port 1 has no listener: the replica never syncs.
	require.NoError(t, admin.ReplicaOf(ctx, "127.0.0.1", "1").Err())
	t.Cleanup(func() { _ = admin.ReplicaOf(context.Background(), "NO", "ONE").Err() })
	require.Zero(t, cycles("replica", 60), "node 0 is a replica, yet votes yes")
}

// TestReadOnlyNodeIsLoggedOnce: a replica given as a node answers READONLY
// to every write; the Client logs it once at Warn.
func TestReadOnlyNodeIsLoggedOnce(t *testing.T) {
	redistest.Require(t)
	srv := redistest.StartN(t, 4, redistest.Options{})
	replica := srv[3].NewClient(t)
	host, port, _ := strings.Cut(srv[0].Addr(), ":")
	require.NoError(t, replica.Do(t.Context(), "replicaof", host, port).Err())
	cs := []redis.UniversalClient{srv[0].NewClient(t), srv[1].NewClient(t), replica}
	logs := &syncBuffer{}
	c := newClient(t, cs, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	for i := range 5 {
		l, err := c.TryLock(t.Context(), "ro")
		if err != nil {
			require.ErrorIs(t, err, ErrNotAcquired, "attempt %d", i)
			continue
		}
		st := l.Stats()
		if st.Nodes[2].Vote == VoteFailed {
			require.Contains(t, st.Nodes[2].Err.Error(), "READONLY", "attempt %d", i)
		}
		require.NoError(t, l.Unlock(t.Context()))
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "read-only replica") }, 5*time.Second, time.Millisecond, "log: %s", logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), "read-only replica"), "logged once: %s", logs.String())
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "read-only replica") {
			require.Contains(t, line, "level=WARN", "logged at Warn, not above or below: %s", line)
		}
	}
}
