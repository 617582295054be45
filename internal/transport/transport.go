// Package transport sends the requests that many concurrent callers have
// for one Redis node together: one Pipe per node, which puts the jobs
// queued while a batch is out into the next batch, in one write and one
// read. A job that finds the pipe idle goes out at once, with no batching
// delay; the jobs that come while a batch is out wait for it and go out
// together in the next one, so batches grow with the load and shrink back to
// one job when it falls.
//
// It uses go-redis's stable Pipeline API on the caller's own client, so that
// the client's options (TLS, ACL, pool, timeouts, hooks) still apply; a
// sender keeps one connection of the client's pool while it runs (see link).
// A pipe has one batch out at a time while replies come back promptly: Redis
// runs one command at a time anyway, and one batch in flight is what makes
// the next one fill up. When a batch stays out longer than StallAfter, the
// next job starts another sender on another connection. A pipe runs
// goroutines only while it has work. A node that hangs holds up its own pipe
// and nothing else: a job that waited in the queue past its deadline is
// failed unsent.
//
// The package knows nothing of locks: which commands a job sends and what
// their replies mean are the job's (see Job). It only sends batches, holds
// connections, sends a batch again where go-redis would have, and makes
// sure that a command go-redis gave up without a reply never looks
// answered.
package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxBatch bounds how many jobs go out in one batch. A job counts as one,
// whatever its number of commands.
const maxBatch = 256

// DefaultStallAfter is Config.StallAfter when it is zero.
const DefaultStallAfter = 20 * time.Millisecond

// maxSenders bounds the senders of one pipe, and so the connections it
// holds at once.
const maxSenders = 16

// lingerFor is how long a sender with nothing left to send waits for more
// before its goroutine ends. Starting a goroutine costs more than a round
// trip on loopback (its stack grows to go-redis's depth each time), and a
// lock is usually followed by its unlock, or another lock, within this
// time; an idle pipe still runs no goroutine once it has passed.
const lingerFor = 2 * time.Millisecond

// Job is one request to one node: the commands it sends in a batch, and
// what it does with their replies. A job may need more than one batch (EVAL
// after a NOSCRIPT reply, for example). Its methods are called from a
// sender's goroutine, one at a time, and must not block.
type Job interface {
	// Commands appends the commands of the job's next batch.
	Commands(cmds []redis.Cmder) []redis.Cmder
	// Deadline is when the job is no longer worth sending, on the real
	// clock (time.Now).
	Deadline() time.Time
	// Done reads the replies of the commands it appended; sent and recv
	// are when the batch went out and when its replies came, on
	// Config.Now, and zero unless a Timed job is in the batch. It returns
	// true when the job needs another batch.
	Done(sent, recv time.Time) (again bool)
	// Fail ends a job that was not sent, with Config.NotSent.
	Fail(err error)
}

// Acker is a job whose writes must reach the node's replicas before they
// count. A batch that holds one ends with a PUBLISH on a barrier channel and
// one WAIT, for the most replicas its jobs ask for, bounded by their
// earliest deadline; each is told the result before Done.
//
// The WAIT waits for the writes the server made up to the connection's
// last command that replicated something (Redis 7.2 and later; before, up
// to its last command of any kind). A job may succeed without writing: go-
// redis sent it twice, and the copy on another connection wrote first. The
// PUBLISH, which is replicated, moves the offset past that copy's write, so
// that the WAIT covers it on every version.
type Acker interface {
	// Replicas is how many replicas must acknowledge the job's writes; 0
	// needs no WAIT.
	Replicas() int
	// AckWithin bounds the WAIT, so that its reply still comes before the
	// job's caller stops waiting.
	AckWithin() time.Duration
	// Acked records how many replicas did, or the WAIT's error.
	Acked(n int64, err error)
	// Barrier is the channel to publish on before the WAIT. Nobody should
	// listen on it.
	Barrier() string
}

// FsyncAcker is a job whose writes must be fsynced to the node's
// append-only file before they count. A batch that holds one ends with a
// barrier write, SET <barrier> "" PX 1, and one WAITAOF 1 0, after the WAIT
// when an Acker asks for replicas too, bounded as the WAIT is; when both go
// out, each gets half of that bound, so that together they still end in
// time. Each FsyncAcker is told the result before Done.
//
// WAITAOF waits for the fsync of the connection's last command that was
// propagated. A job may succeed without writing: go-redis sent it twice,
// and the copy on another connection wrote first; on a connection that has
// written nothing, WAITAOF confirms at once. The barrier PUBLISH does not
// help here: it is propagated to replicas only, never to the append-only
// file, and not at all by a master without replicas or backlog. The SET
// always writes, so the server always propagates it, to the file too, and
// WAITAOF then waits for an fsync past the other copy's write. Its key
// expires within a millisecond.
type FsyncAcker interface {
	// Fsync reports whether the job needs the WAITAOF.
	Fsync() bool
	// AckWithin bounds the WAITAOF, as Acker's does the WAIT.
	AckWithin() time.Duration
	// FsyncAcked records the first element of WAITAOF's reply, 1 once the
	// node fsynced the batch's writes and 0 when it did not in time, or
	// the error of the WAITAOF or of the barrier SET before it.
	FsyncAcked(local int64, err error)
	// Barrier is the key to write before the WAITAOF: one the job's user
	// may write, that nothing else uses. An Acker's Barrier names the
	// channel of its PUBLISH; a job that is both names both with one name.
	Barrier() string
}

// Ordered is a job whose commands must reach a Redis Cluster node in the
// order it appended them. On a single node a batch keeps its order anyway;
// on a cluster, commands go out apart (see dispatchApart).
type Ordered interface {
	InOrder() bool
}

// Timed is a job that needs the times its batch went out and came back.
// They are read only for the batches that hold one.
type Timed interface {
	Timed() bool
}

// Config is what a Pipe needs of its node and of its owner.
type Config struct {
	// Client is the node's client. Only a *redis.Client makes senders
	// hold connections (a Sentinel failover client too); a cluster client's
	// batches go through its pool.
	Client redis.UniversalClient
	// Now is the clock of Done's sent and recv: the owner's, which tests
	// may step.
	Now func() time.Time
	// NotSent is the error a job still queued at its deadline fails with.
	NotSent error
	// WG counts the pipe's sender goroutines, for the owner to wait on.
	WG *sync.WaitGroup
	// StallAfter is how long a batch may be out before a new job starts
	// another sender, on another connection of the client's pool: one slow
	// or lost reply then holds up only the batch it belongs to. A hung
	// node holds up every sender. Zero means DefaultStallAfter.
	StallAfter time.Duration
}

// Pipe is one node's transport. It is safe for concurrent use, and must not
// be copied. Build it with New.
type Pipe struct {
	cfg     Config
	cluster *redis.ClusterClient // Client, when it is one
	// resends is whether the client sends a command again after a
	// connection failure (MaxRetries): a batch that failed on a sender's
	// link is then sent again through the pool (see link.send).
	resends bool
	// deadlines is set when the client reads ctx deadlines
	// (ContextTimeoutEnabled, or a client whose options we cannot read):
	// each batch then gets a context with the latest deadline of its jobs.
	// Otherwise go-redis would ignore it, and its ReadTimeout bounds a
	// batch.
	deadlines bool
	// pooled is set once the client answered a batch through its own
	// pool, so that it has set up a connection: a sender's link waits for
	// it (see link.open).
	pooled atomic.Bool

	mu      sync.Mutex
	queue   []Job           // guarded by mu
	senders int             // guarded by mu; sender goroutines running
	last    time.Time       // guarded by mu; when the last batch went out
	spare   []Job           // guarded by mu; a sender's last batch, for reuse
	cmds    []redis.Cmder   // guarded by mu; a sender's command buffer
	pl      redis.Pipeliner // guarded by mu; a sender's pipeline
	// idle is set while a sender lingers, waiting on kick for more work;
	// at most one does.
	idle bool // guarded by mu
	kick chan struct{}
}

// New returns the pipe of the node that cfg.Client reaches.
func New(cfg Config) *Pipe {
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	p := &Pipe{cfg: cfg, deadlines: true, kick: make(chan struct{}, 1)}
	switch c := cfg.Client.(type) {
	case *redis.Client:
		p.resends = c.Options().MaxRetries > 0 // -1 reads 0 once set up
		p.deadlines = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		p.cluster = c
		p.deadlines = c.Options().ContextTimeoutEnabled
	}
	return p
}

// Queued returns how many jobs wait for a sender.
func (p *Pipe) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Submit queues a job. It wakes the lingering sender if there is one, and
// otherwise starts a sender when none is running, or when the last batch
// has been out longer than StallAfter. It never blocks on the network.
func (p *Pipe) Submit(j Job) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	if p.idle {
		p.idle = false
		p.mu.Unlock()
		p.kick <- struct{}{} // buffered, and drained before idle is set
		return
	}
	if p.senders > 0 && (p.senders >= maxSenders || time.Since(p.last) < p.cfg.StallAfter) {
		p.mu.Unlock()
		return
	}
	p.senders++
	p.mu.Unlock()
	p.cfg.WG.Add(1)
	go p.send()
}

// send sends batches until the queue is empty.
func (p *Pipe) send() {
	defer p.cfg.WG.Done()
	p.mu.Lock()
	batch, cmds, pl := p.spare, p.cmds, p.pl
	p.spare, p.cmds, p.pl = nil, nil, nil
	if pl == nil {
		pl = p.cfg.Client.Pipeline()
	}
	var ln link
	defer ln.close()
	var linger *time.Timer // this sender's, made when it first lingers
	for len(p.queue) > 0 {
		p.last = time.Now()
		if len(p.queue) <= maxBatch {
			batch, p.queue = p.queue, batch[:0]
		} else {
			batch = append(batch[:0], p.queue[:maxBatch]...)
			rest := copy(p.queue, p.queue[maxBatch:])
			clear(p.queue[rest:])
			p.queue = p.queue[:rest]
		}
		p.mu.Unlock()
		cmds = p.run(batch, cmds, pl, &ln)
		clear(batch)
		p.mu.Lock()
		if len(p.queue) == 0 && !p.idle && p.lingered(&linger) {
			continue
		}
	}
	p.senders--
	p.spare, p.cmds, p.pl = batch[:0], cmds[:0], pl
	p.mu.Unlock()
}

// lingered waits up to lingerFor for more work, on the sender's timer, and
// reports whether some came. p.mu must be held; it is released while
// waiting.
func (p *Pipe) lingered(timer **time.Timer) bool {
	select {
	case <-p.kick: // a stale wake-up
	default:
	}
	p.idle = true
	p.mu.Unlock()
	if *timer == nil {
		*timer = time.NewTimer(lingerFor)
	} else {
		(*timer).Reset(lingerFor)
	}
	woken := false
	select {
	case <-p.kick:
		woken = true
	case <-(*timer).C:
	}
	(*timer).Stop()
	p.mu.Lock()
	if !woken && p.idle {
		p.idle = false
		return false
	}
	// Woken, or a Submit cleared idle as the timer fired: its kick is
	// drained the next time.
	return len(p.queue) > 0
}

// run sends one batch and hands each job its replies. It goes out on the
// sender's own connection (ln) when the node's client can give one, and
// through the client's pool (pl, or Process) otherwise. A batch of one
// command goes out on go-redis's single-command path, which costs less; a
// larger one as a pipeline. It returns the command buffer for reuse.
func (p *Pipe) run(batch []Job, cmds []redis.Cmder, pl redis.Pipeliner, ln *link) []redis.Cmder {
	now := time.Now()
	var last time.Time
	live := batch[:0]
	for _, j := range batch {
		d := j.Deadline()
		if !now.Before(d) {
			j.Fail(p.cfg.NotSent)
			continue
		}
		last = later(last, d)
		live = append(live, j)
	}
	if len(live) == 0 {
		return cmds
	}
	cmds = cmds[:0]
	var follows []bool // cluster nodes only: see dispatchApart
	timed := false
	for _, j := range live {
		start := len(cmds)
		cmds = j.Commands(cmds)
		if tj, ok := j.(Timed); ok && tj.Timed() {
			timed = true
		}
		if p.cluster != nil {
			oj, ok := j.(Ordered)
			ordered := ok && oj.InOrder()
			for i := start; i < len(cmds); i++ {
				follows = append(follows, ordered && i > start)
			}
		}
	}
	tail := waitCmds(live, now)
	cmds = tail.append(cmds)
	ctx := context.Background()
	if p.deadlines {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	var sent, recv time.Time
	if timed {
		sent = p.cfg.Now()
	}
	// Each command carries its own error.
	switch {
	case p.cluster != nil && len(cmds) > 1:
		dispatchApart(ctx, p.cluster, cmds, follows)
	case !ln.open(p):
		p.throughPool(ctx, cmds, pl)
	case ln.send(ctx, cmds) && p.resends:
		p.throughPool(ctx, cmds, pl)
	}
	if timed {
		recv = p.cfg.Now()
	}
	clear(cmds)
	var acks int64
	var ackErr error
	if tail.wait != nil {
		if acks, ackErr = tail.wait.Result(); ackErr != nil {
			ackErr = fmt.Errorf("WAIT failed: %w", ackErr)
		}
		if err := tail.publish.Err(); err != nil {
			// Without the barrier the WAIT may not cover a write that a
			// copy of the request made on another connection (Redis 7.2
			// and later): it proves nothing.
			acks, ackErr = 0, fmt.Errorf("the PUBLISH before WAIT failed: %w", err)
		}
	}
	var local int64
	var fsyncErr error
	if tail.waitAOF != nil {
		local, fsyncErr = aofResult(tail.waitAOF, tail.mark)
	}
	for _, j := range live {
		if tail.wait != nil {
			if a, ok := j.(Acker); ok && a.Replicas() > 0 {
				a.Acked(acks, ackErr)
			}
		}
		if tail.waitAOF != nil {
			if a, ok := j.(FsyncAcker); ok && a.Fsync() {
				a.FsyncAcked(local, fsyncErr)
			}
		}
		if j.Done(sent, recv) {
			p.mu.Lock()
			p.queue = append(p.queue, j)
			p.mu.Unlock()
		}
	}
	return cmds
}

// ackCmds are the commands that end a batch whose jobs need replicas to
// acknowledge their writes, or the node to fsync them, in the order they
// go out; each is nil when no job needs it.
type ackCmds struct {
	publish *redis.IntCmd      // the barrier PUBLISH, for the WAIT (see Acker)
	mark    *redis.StatusCmd   // the barrier SET, for the WAITAOF (see FsyncAcker)
	wait    *redis.IntCmd      // WAIT
	waitAOF *redis.IntSliceCmd // WAITAOF
}

// append appends the commands that are not nil.
func (a *ackCmds) append(cmds []redis.Cmder) []redis.Cmder {
	if a.publish != nil {
		cmds = append(cmds, a.publish)
	}
	if a.mark != nil {
		cmds = append(cmds, a.mark)
	}
	if a.wait != nil {
		cmds = append(cmds, a.wait)
	}
	if a.waitAOF != nil {
		cmds = append(cmds, a.waitAOF)
	}
	return cmds
}

// waitCmds returns the commands that end a batch whose jobs need replicas
// to acknowledge their writes, or the node to fsync them: a PUBLISH on the
// barrier channel and a SET of the barrier key, then the WAIT (see Acker)
// and the WAITAOF (see FsyncAcker). The barrier is the first such job's.
//
// The timeout is the shortest AckWithin of those jobs, cut to what is left
// until the earliest of their deadlines, halved when both the WAIT and the
// WAITAOF go out, and at least a millisecond: WAIT 0 would block for ever.
func waitCmds(live []Job, now time.Time) ackCmds {
	most := 0
	fsync := false
	var within time.Duration
	barrier := ""
	for _, j := range live {
		a, ok := j.(Acker)
		replicas := ok && a.Replicas() > 0
		f, ok := j.(FsyncAcker)
		fs := ok && f.Fsync()
		if !replicas && !fs {
			continue
		}
		var w time.Duration
		if replicas {
			most = max(most, a.Replicas())
			w = a.AckWithin()
		} else {
			w = f.AckWithin()
		}
		fsync = fsync || fs
		if barrier == "" {
			if replicas {
				barrier = a.Barrier()
			} else {
				barrier = f.Barrier()
			}
		}
		w = min(w, j.Deadline().Sub(now))
		if within == 0 || w < within {
			within = w
		}
	}
	var a ackCmds
	if most == 0 && !fsync {
		return a
	}
	if most > 0 && fsync {
		within /= 2
	}
	ms := max(within.Milliseconds(), 1)
	ctx := context.Background()
	if most > 0 {
		a.publish = redis.NewIntCmd(ctx, "publish", barrier, "redlock")
		a.wait = redis.NewIntCmd(ctx, "wait", most, ms)
	}
	if fsync {
		a.mark = redis.NewStatusCmd(ctx, "set", barrier, "", "px", 1)
		a.waitAOF = redis.NewIntSliceCmd(ctx, "waitaof", 1, 0, ms)
	}
	return a
}

// aofResult reads a batch's WAITAOF: the number of local fsyncs it
// confirmed, or why it confirms nothing.
func aofResult(waitAOF *redis.IntSliceCmd, mark *redis.StatusCmd) (int64, error) {
	if err := mark.Err(); err != nil {
		// Without the barrier the WAITAOF may not cover a write that a
		// copy of the request made on another connection.
		return 0, fmt.Errorf("the barrier SET before WAITAOF failed: %w", err)
	}
	v, err := waitAOF.Result()
	switch {
	case err != nil:
		return 0, fmt.Errorf("WAITAOF failed: %w", err)
	case len(v) == 0:
		return 0, errors.New("WAITAOF answered an empty array")
	}
	return v[0], nil
}

// processor sends one command: a go-redis client, or a Conn.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// dispatch sends a batch: one command on go-redis's single-command path
// (via), which costs less, more as a pipeline (pl). Each command carries
// its own error, errNoReply until go-redis reads its reply, with the
// pipeline's error as its cause when go-redis answered none of them.
func dispatch(ctx context.Context, via processor, pl redis.Pipeliner, cmds []redis.Cmder) {
	unanswered(cmds)
	if len(cmds) == 1 && !nilReply(cmds[0]) {
		_ = via.Process(ctx, cmds[0])
		return
	}
	_ = pl.BatchProcess(ctx, cmds...)
	_, err := pl.Exec(ctx)
	explainUnanswered(cmds, err)
}

// explainUnanswered gives the commands of a pipeline that go-redis answered
// none of the pipeline's error as their cause: go-redis (v9.22) returns the
// server's refusal of a new connection's setup (AUTH with a wrong password,
// SELECT of a DB the server does not have) from Exec, and leaves the
// commands' errors as they were. When a command did get a reply, Exec's
// error may be that command's own, and says nothing of the others.
func explainUnanswered(cmds []redis.Cmder, err error) {
	if err == nil || errors.Is(err, errNoReply) || errors.Is(err, redis.Nil) {
		return
	}
	for _, c := range cmds {
		if c.Err() != errNoReply {
			return
		}
	}
	nr := &noReply{cause: err}
	for _, c := range cmds {
		c.SetErr(nr)
	}
}

// dispatchApart sends each command of a batch to a Redis Cluster node in a
// request of its own, and waits for them: at once, except that a command
// whose follows is set goes after the one before it (an acquire after its
// waiting markers). A go-redis cluster pipeline (v9.22 and v9.23,
// osscluster.go pipelineReadCmds) queues a command for its next attempt
// twice when the batch's first command asks for a retry (TRYAGAIN: a
// script's keys half moved by a slot migration) and another command was
// redirected (ASK, MOVED); two goroutines then write its reply at once
// (TestClusterSlotMigration, under -race). Alone in its request, a command
// is queued once.
func dispatchApart(ctx context.Context, cc *redis.ClusterClient, cmds []redis.Cmder, follows []bool) {
	var wg sync.WaitGroup
	for i := 0; i < len(cmds); {
		end := i + 1
		for end < len(cmds) && follows[end] {
			end++
		}
		run := cmds[i:end]
		wg.Go(func() {
			for _, cmd := range run {
				dispatch(ctx, cc, cc.Pipeline(), []redis.Cmder{cmd})
			}
		})
		i = end
	}
	wg.Wait()
}

// throughPool sends a batch through the node's client and its pool.
func (p *Pipe) throughPool(ctx context.Context, cmds []redis.Cmder, pl redis.Pipeliner) {
	dispatch(ctx, p.cfg.Client, pl, cmds)
	if !p.pooled.Load() && answered(cmds) {
		p.pooled.Store(true)
	}
}

// link is a sender's own connection to a node: a go-redis Conn, which
// holds one connection of the client's pool from the sender's first batch
// until the sender ends (after lingerFor without work) or a batch fails on
// it. A batch sent through the pool takes a connection and gives it back
// each time, and the pool checks every connection it hands out with a
// syscall (go-redis's health check, a non-blocking read): some 10 µs of the
// client's CPU per lock+unlock on 5 nodes, on a machine whose CPU the
// client shares with the servers. A connection that the sender holds needs
// no check between its own batches; one that goes back to the pool gets it
// when it is next taken.
type link struct {
	conn *redis.Conn
	pl   redis.Pipeliner // conn's
}

// open makes sure the link has a connection, and reports whether it can
// have one. Only a *redis.Client (a Sentinel failover client too) makes a
// Conn; a Redis Cluster node's batches go through its pool.
//
// The first Conn waits until the node's client has answered through its
// own pool (Pipe.pooled). go-redis (v9.22) lets a Conn share its client's
// Options without sharing the mutex that guards them, and the setup of a
// client's first connection may write Options.MaintNotificationsConfig.Mode
// (to disabled, when Redis refuses CLIENT MAINT_NOTIFICATIONS) while the
// client reads it elsewhere (Subscribe clones the Options). Once the
// client set up a connection itself, the mode is settled, and a Conn's
// setup only reads it.
func (l *link) open(p *Pipe) bool {
	if l.conn != nil {
		return true
	}
	c, ok := p.cfg.Client.(*redis.Client)
	if !ok || !p.pooled.Load() {
		return false
	}
	l.conn = c.Conn()
	l.pl = l.conn.Pipeline()
	return true
}

// send sends a batch on the link's connection, and ends the link when a
// command failed on it with anything but a nil reply: a network error, a
// timeout, a reply that go-redis takes for a sign of a bad connection
// (READONLY), a closed client. go-redis marks such a Conn bad and fails
// every later command on it unsent, and a pipeline on it (v9.22) may even
// leave its commands without an error, which errNoReply guards against.
// Other error replies (NOSCRIPT, WRONGTYPE) leave the connection good, but
// they are rare, and a fresh link costs one checked connection of the
// pool.
//
// send reports whether go-redis, had the batch gone through its pool,
// would have sent it again on a new connection (see resendable): it does
// not for a Conn, whose retries go to the Conn it marked bad and fail
// there unsent, after their backoff. The caller then sends the batch again
// through the pool, when the client makes retries. A job that must know
// how often its write went out counts it itself (go-redis asks for a
// command's arguments each time it writes them), as it counts go-redis's
// own retries.
func (l *link) send(ctx context.Context, cmds []redis.Cmder) (resend bool) {
	dispatch(ctx, l.conn, l.pl, cmds)
	failed := false
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			failed = true
			resend = resend || resendable(err)
		}
	}
	if failed {
		l.close()
	}
	return resend
}

// resendable reports whether go-redis sends a command of its pool again
// after err: a failure of the connection (EOF, a reset), READONLY (which
// may come from a server that a failover demoted: the next connection may
// reach the new master), or errNoReply (go-redis did not send it). Not
// after a timeout or the end of the command's context, and not after
// another reply of Redis.
func resendable(err error) bool {
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, errNoReply):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &ne) && ne.Timeout():
		return false
	case redis.HasErrorPrefix(err, "READONLY"):
		return true
	}
	return !errors.As(err, &re)
}

// close gives the connection back to the client's pool, or drops it when
// go-redis found it broken.
func (l *link) close() {
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn, l.pl = nil, nil
	}
}

// errNoReply is a command's error until go-redis reads its reply. go-redis
// (v9.22) may give a pipeline up without setting its commands' errors (on
// a Conn it marked bad, when the error that marked it was a Redis reply; on
// a new connection whose AUTH or SELECT the server refused): such a command
// would otherwise look answered, with a zero value, and a SET that never
// ran would count as a yes. When go-redis says why, the command's error is
// a noReply with that cause instead.
var errNoReply = errors.New("redlock: the node gave no reply")

// noReply is errNoReply with its cause: the error go-redis returned for the
// pipeline, such as the server's refusal of the connection's AUTH. It reads
// as the cause, and matches both.
type noReply struct{ cause error }

func (e *noReply) Error() string   { return e.cause.Error() }
func (e *noReply) Unwrap() []error { return []error{errNoReply, e.cause} }

// Cause returns what go-redis said of a command that it left unanswered:
// the pipeline's error (a refused dial, AUTH or SELECT), for the caller to
// report as the node's failure. Any other error is returned as it is.
func Cause(err error) error {
	if nr, ok := err.(*noReply); ok {
		return nr.cause
	}
	return err
}

// unanswered sets errNoReply on the commands of a batch about to be sent.
func unanswered(cmds []redis.Cmder) {
	for _, c := range cmds {
		c.SetErr(errNoReply)
	}
}

// answered reports whether a batch reached Redis: a command got a reply,
// even an error reply.
func answered(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		var re redis.Error
		if err := c.Err(); err == nil || (!errors.Is(err, errNoReply) && errors.As(err, &re)) {
			return true
		}
	}
	return false
}

// nilReply reports a command that may well answer nil: GET, and SET with
// GET. go-redis's single-command path runs its retry classifier on every
// error reply, redis.Nil included, at some 17 allocations a reply; its
// pipeline path does not, so these go through a pipeline even alone.
func nilReply(cmd redis.Cmder) bool {
	args := cmd.Args()
	return args[0] == "get" || (args[0] == "set" && len(args) == 7)
}

// later returns the later of two times; a zero time is the earliest.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
