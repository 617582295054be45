package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// This file is the transport: one pipe per node, which sends the requests
// that concurrent Lock, Unlock, Extend, rollback and renewal rounds have for
// that node together, in one write and one read. A request that finds the
// pipe idle goes out at once, with no batching delay; the requests that come
// while a batch is out wait for it and go out together in the next one, so
// batches grow with the load and shrink back to one request when it falls.
//
// It uses go-redis's stable Pipeline API on the user's own client, so that
// the client's options (TLS, ACL, pool, timeouts, hooks) still apply; a
// sender keeps one connection of the client's pool while it runs (see
// link). A pipe has one batch out at a time while replies come back
// promptly: Redis runs one command at a time anyway, and one batch in
// flight is what makes the next one fill up. When a batch stays out longer
// than stallAfter, the next request starts another sender on another
// connection. A pipe runs goroutines only while it has work. A node that
// hangs holds up its own pipe and nothing else: rounds decide at their node
// timeout, the node's replies go to the late handlers when they come, and a
// request that waited in the queue past its deadline is dropped unsent.

// maxBatch bounds how many jobs go out in one batch. A renewal job counts as
// one, whatever its number of commands.
const maxBatch = 256

// stallAfter is how long a pipe's batch may be out before a new job starts
// another sender, on another connection of the client's pool, up to
// maxSenders: one slow or lost reply then holds up only the batch it
// belongs to, not every request after it. A hung node holds up every
// sender, and the rounds decide without it.
var stallAfter = 20 * time.Millisecond

const maxSenders = 16

// errNotSent is the failure of a job that was still queued at its deadline:
// the node had not answered the batch before it. It was never sent.
var errNotSent = fmt.Errorf("%w: not sent, the node had not answered its previous batch", ErrNodeTimeout)

// job is one request to one node: the commands it sends in a batch, and what
// it does with their replies. A job may need more than one batch (EVAL after
// a NOSCRIPT reply, for example). Its methods are called from the pipe's
// goroutine, one at a time, and must not block.
type job interface {
	// commands appends the commands of the job's next batch.
	commands(cmds []redis.Cmder) []redis.Cmder
	// deadline is when the job is no longer worth sending, on the real
	// clock (time.Now, never the Client's now).
	deadline() time.Time
	// done reads the replies of the commands it appended; sent and recv
	// are when the batch went out and when its replies came. It returns
	// true when the job needs another batch.
	done(sent, recv time.Time) (again bool)
	// fail ends a job that was not sent.
	fail(err error)
}

// acker is a job whose writes must reach the node's replicas before its
// yes counts (WithReplicaAck). A batch that holds one ends with one WAIT,
// for the most replicas its jobs ask for, bounded by their earliest
// deadline; each is told the result before done.
type acker interface {
	// replicas is how many replicas must acknowledge the job's writes; 0
	// needs no WAIT.
	replicas() int
	// ackWithin bounds the WAIT: half the node timeout, so that its reply
	// still comes before the round decides without the node.
	ackWithin() time.Duration
	// acked records how many did, or the WAIT's error.
	acked(n int64, err error)
	// barrier is the channel to publish on before the WAIT (see
	// waitCmds).
	barrier() string
}

// pipe is one node's transport. It is safe for concurrent use.
type pipe struct {
	c *Client
	n *node

	mu      sync.Mutex
	queue   []job           // guarded by mu
	senders int             // guarded by mu; sender goroutines running
	last    time.Time       // guarded by mu; when the last batch went out
	spare   []job           // guarded by mu; a sender's last batch, for reuse
	cmds    []redis.Cmder   // guarded by mu; a sender's command buffer
	pl      redis.Pipeliner // guarded by mu; a sender's pipeline
	// idle is set while a sender lingers, waiting on kick for more work;
	// at most one does.
	idle bool // guarded by mu
	kick chan struct{}
	// deadlines is set when the client reads ctx deadlines
	// (ContextTimeoutEnabled, or a client whose options we cannot read):
	// each batch then gets a context with the latest deadline of its jobs.
	// Otherwise go-redis would ignore it, and its ReadTimeout bounds a
	// batch.
	deadlines bool
}

// lingerFor is how long a sender with nothing left to send waits for more
// before its goroutine ends. Starting a goroutine costs more than a round
// trip on loopback (its stack grows to go-redis's depth each time), and a
// Lock is usually followed by its Unlock, or another Lock, within this
// time; an idle Client still runs no goroutine once it has passed.
const lingerFor = 2 * time.Millisecond

// submit queues a job. It wakes the lingering sender if there is one, and
// otherwise starts a sender when none is running, or when the last batch
// has been out longer than stallAfter.
func (p *pipe) submit(j job) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	if p.idle {
		p.idle = false
		p.mu.Unlock()
		p.kick <- struct{}{} // buffered, and drained before idle is set
		return
	}
	if p.senders > 0 && (p.senders >= maxSenders || time.Since(p.last) < stallAfter) {
		p.mu.Unlock()
		return
	}
	p.senders++
	p.mu.Unlock()
	p.c.wg.Add(1)
	go p.send()
}

// send sends batches until the queue is empty.
func (p *pipe) send() {
	defer p.c.wg.Done()
	p.mu.Lock()
	batch, cmds, pl := p.spare, p.cmds, p.pl
	p.spare, p.cmds, p.pl = nil, nil, nil
	if pl == nil {
		pl = p.n.client.Pipeline()
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
func (p *pipe) lingered(timer **time.Timer) bool {
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
	// Woken, or a submit cleared idle as the timer fired: its kick is
	// drained the next time.
	return len(p.queue) > 0
}

// run sends one batch and hands each job its replies. It goes out on the
// sender's own connection (ln) when the node's client can give one, and
// through the client's pool (pl, or Process) otherwise. A batch of one
// command goes out on go-redis's single-command path, which costs less;
// a larger one as a pipeline. It returns the command buffer for reuse.
func (p *pipe) run(batch []job, cmds []redis.Cmder, pl redis.Pipeliner, ln *link) []redis.Cmder {
	now := time.Now()
	var last time.Time
	live := batch[:0]
	for _, j := range batch {
		d := j.deadline()
		if !now.Before(d) {
			j.fail(errNotSent)
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
	for _, j := range live {
		start := len(cmds)
		cmds = j.commands(cmds)
		if p.n.cluster != nil {
			// An acquire's waiting markers go before it, in order.
			aj, ordered := j.(*acquireJob)
			ordered = ordered && aj.sent.at.marks && len(aj.sent.at.a.t.waiting) > 0
			for i := start; i < len(cmds); i++ {
				follows = append(follows, ordered && i > start)
			}
		}
	}
	publish, wait := waitCmds(live, now)
	if wait != nil {
		cmds = append(cmds, publish, wait)
	}
	ctx := context.Background()
	if p.deadlines {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	// The times are read only for the guard, on the Client's clock: a
	// test's stepped clock counts its readings.
	timed := false
	for _, j := range live {
		if aj, ok := j.(*acquireJob); ok && aj.sent.at.a.cfg.guard {
			timed = true
		}
	}
	var sent, recv time.Time
	if timed {
		sent = p.c.now()
	}
	// Each command carries its own error.
	switch {
	case p.n.cluster != nil && len(cmds) > 1:
		dispatchApart(ctx, p.n.cluster, cmds, follows)
	case !ln.open(p.n):
		p.pooled(ctx, cmds, pl)
	case ln.send(ctx, cmds) && p.n.resends:
		p.pooled(ctx, cmds, pl)
	}
	if timed {
		recv = p.c.now()
	}
	clear(cmds)
	var acks int64
	var ackErr error
	if wait != nil {
		if acks, ackErr = wait.Result(); ackErr != nil {
			ackErr = fmt.Errorf("WAIT failed: %w", ackErr)
		}
		if err := publish.Err(); err != nil {
			// Without the barrier the WAIT may not cover a write that a
			// copy of the request made on another connection (Redis 7.2
			// and later): it proves nothing.
			acks, ackErr = 0, fmt.Errorf("the PUBLISH before WAIT failed: %w", err)
		}
	}
	for _, j := range live {
		if wait != nil {
			if a, ok := j.(acker); ok && a.replicas() > 0 {
				a.acked(acks, ackErr)
			}
		}
		if j.done(sent, recv) {
			p.mu.Lock()
			p.queue = append(p.queue, j)
			p.mu.Unlock()
		}
	}
	return cmds
}

// processor sends one command: a go-redis client, or a Conn.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// dispatch sends a batch: one command on go-redis's single-command path
// (via), which costs less, more as a pipeline (pl). Each command carries
// its own error, errNoReply until go-redis reads its reply.
func dispatch(ctx context.Context, via processor, pl redis.Pipeliner, cmds []redis.Cmder) {
	unanswered(cmds)
	if len(cmds) == 1 && !nilReply(cmds[0]) {
		_ = via.Process(ctx, cmds[0])
	} else {
		_ = pl.BatchProcess(ctx, cmds...)
		_, _ = pl.Exec(ctx)
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

// pooled sends a batch through the node's client and its pool.
func (p *pipe) pooled(ctx context.Context, cmds []redis.Cmder, pl redis.Pipeliner) {
	dispatch(ctx, p.n.client, pl, cmds)
	if !p.n.pooled.Load() && answered(cmds) {
		p.n.pooled.Store(true)
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
// own pool (node.pooled). go-redis (v9.22) lets a Conn share its client's
// Options without sharing the mutex that guards them, and the setup of a
// client's first connection may write Options.MaintNotificationsConfig.Mode
// (to disabled, when Redis refuses CLIENT MAINT_NOTIFICATIONS) while the
// client reads it elsewhere (Subscribe clones the Options). Once the
// client set up a connection itself, the mode is settled, and a Conn's
// setup only reads it.
func (l *link) open(n *node) bool {
	if l.conn != nil {
		return true
	}
	c, ok := n.client.(*redis.Client)
	if !ok || !n.pooled.Load() {
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
// through the pool, when the client makes retries. The commands count that
// write (sendCounter), as they count go-redis's own retries, so a write
// that runs twice is recognised as it is on the pool's path.
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
// a Conn it marked bad, when the error that marked it was a Redis reply):
// such a command would otherwise look answered, with a zero value, and a
// SET that never ran would count as a yes.
var errNoReply = errors.New("redlock: go-redis returned no reply for the command")

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
		if err := c.Err(); err == nil || errors.As(err, &re) {
			return true
		}
	}
	return false
}

// replicaWait is what a job needs for WithReplicaAck: how many replicas
// must acknowledge its writes, how long the batch's WAIT may take, and the
// WAIT's result. Embedded as a pointer, it makes the job an acker; a nil
// one, the job of a call without WithReplicaAck, needs no WAIT.
type replicaWait struct {
	want    int
	within  time.Duration // half the node timeout
	channel string        // the target's barrier channel
	acks    int64
	ackErr  error
}

func (r *replicaWait) replicas() int {
	if r == nil {
		return 0
	}
	return r.want
}
func (r *replicaWait) ackWithin() time.Duration { return r.within }
func (r *replicaWait) acked(n int64, err error) { r.acks, r.ackErr = n, err }
func (r *replicaWait) barrier() string          { return r.channel }

// counted turns a yes into a failure, ErrReplicaAck, when too few replicas
// acknowledged it: the node is then rolled back like any that failed.
func (r *replicaWait) counted(val int64, err error) (int64, error) {
	if val > 0 && err == nil && r.replicas() > 0 {
		if e := replicaAckErr(r.want, r.acks, r.ackErr); e != nil {
			return 0, e
		}
	}
	return val, err
}

// newReplicaWait is the replicaWait of a job of t under cfg: nil when cfg
// does not ask for replicas.
func newReplicaWait(cfg *config, t *target) *replicaWait {
	if cfg.replicaAck == 0 {
		return nil
	}
	return &replicaWait{want: cfg.replicaAck, within: cfg.nodeTimeout / 2, channel: keyspace.Barrier(t.rkeys[0])}
}

// waitCmds returns the commands that end a batch whose jobs need replicas
// to acknowledge their writes, or nil: a PUBLISH on a barrier channel, then
// the WAIT.
//
// The WAIT waits for the writes the server made up to the connection's
// last command that replicated something (Redis 7.2 and later; before, up
// to its last command of any kind). A job may vote yes without writing:
// go-redis sent its acquire twice, and the copy on another connection
// wrote the key first. The PUBLISH, which is replicated and which nobody
// hears (see keyspace.Barrier), moves the offset past that first copy's
// write, so that the WAIT covers it on every version
// (TestReplicaAckResentAcquire).
//
// The WAIT's timeout is the shortest ackWithin of those jobs, cut to what
// is left until the earliest of their deadlines, and at least a
// millisecond: WAIT 0 would block for ever.
func waitCmds(live []job, now time.Time) (publish, wait *redis.IntCmd) {
	most := 0
	var within time.Duration
	channel := ""
	for _, j := range live {
		a, ok := j.(acker)
		if !ok || a.replicas() == 0 {
			continue
		}
		if channel == "" {
			channel = a.barrier()
		}
		most = max(most, a.replicas())
		w := min(a.ackWithin(), j.deadline().Sub(now))
		if within == 0 || w < within {
			within = w
		}
	}
	if most == 0 {
		return nil, nil
	}
	ctx := context.Background()
	return redis.NewIntCmd(ctx, "publish", channel, "redlock"),
		redis.NewIntCmd(ctx, "wait", most, max(within.Milliseconds(), 1))
}

// replicaAckErr turns a WAIT's outcome into the error of a yes that does
// not count, or nil when at least want replicas acknowledged.
func replicaAckErr(want int, got int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrReplicaAck, err)
	case got < int64(want):
		return fmt.Errorf("%w: %d of %d within the node timeout", ErrReplicaAck, got, want)
	}
	return nil
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

// leg is one node's part of a round: where its reply goes. The round's
// deadline (end) is the leg's.
type leg struct {
	*round
	n *node
}

// deliver hands the node's reply to the round, or to the round's late
// handler once the round has been decided.
func (lg *leg) deliver(val int64, err error) {
	r, n, c := lg.round, lg.n, lg.n.pipe.c
	if err != nil && redis.HasErrorPrefix(err, "READONLY") && n.readOnly.CompareAndSwap(false, true) {
		c.log.Warn("redlock: node is a read-only replica: it can never vote yes; give New the masters (Client.Check reports it too)",
			"node", n.index, "addr", n.addr, "err", err)
	}
	rp := reply{i: n.index, val: val, err: nodeErr(err)}
	r.mu.Lock()
	if r.stalled[n.index] {
		n.stalled.Add(-1)
	}
	if !r.decided {
		// The latency is read only for the votes it goes into: a late
		// reply's is never shown.
		rp.lat = c.now().Sub(r.start)
		r.in.ch <- rp
		r.mu.Unlock()
		return
	}
	late := r.late
	r.mu.Unlock()
	if late != nil {
		late.lateReply(rp)
	}
}

// acquireJob is one attempt's acquire request to one node. The attempt
// (sent.at) holds what every node's request shares.
type acquireJob struct {
	leg
	// sent names the attempt, and counts the writes of cmdSet's value.
	sent sendCounter
	cmd  *redis.Cmd
	// guard is the node guard's sample, with WithNodeGuard.
	guard *guardCmds
	*replicaWait
	args         [7]any // SET's, the longest of the plain commands
	how          acquireCmd
	evalFallback // for cmdScript
}

// guardCmds is what the node guard reads of a node with an acquire
// reply: its INFO server section and its clock.
type guardCmds struct {
	info *redis.StringCmd
	tm   *redis.TimeCmd
}

func (j *acquireJob) deadline() time.Time { return j.end }
func (j *acquireJob) fail(err error)      { j.leg.deliver(0, err) }

func (j *acquireJob) commands(cmds []redis.Cmder) []redis.Cmder {
	at := j.sent.at
	a := at.a
	ctx, t, tk := context.Background(), a.t, &at.value
	// The markers go first: a release between them and the acquire
	// deletes the marker and is announced, and one before them leaves the
	// key free for the acquire. Either way the waiter hears of it.
	if at.marks {
		for _, m := range t.waiting {
			cmds = append(cmds, redis.NewCmd(ctx, t.fl.mark(m, a.ttlArg)...))
		}
	}
	args := j.args[:0]
	switch j.how {
	case cmdSet:
		j.sent.n.Store(0)
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], &j.sent, "px", a.ttlArg, "nx")...)
	case cmdCheck:
		j.cmd = redis.NewCmd(ctx, append(args, "get", t.kargs[0])...)
	case cmdSetGet:
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], tk.arg, "px", a.ttlArg, "nx", "get")...)
	case cmdSetNX:
		j.cmd = redis.NewCmd(ctx, append(args, "set", t.kargs[0], tk.arg, "px", a.ttlArg, "nx")...)
	default: // cmdScript
		j.cmd = t.evalAcquire(j.eval, *tk, a.ttl, a.ttlArg, &a.c.hooks)
	}
	cmds = append(cmds, j.cmd)
	if a.cfg.guard {
		// The guard's sample goes right after the vote, on the same
		// connection, so that it sees a restart or a clock jump that came
		// before the vote was counted.
		j.guard = &guardCmds{info: redis.NewStringCmd(ctx, "info", "server"), tm: redis.NewTimeCmd(ctx, "time")}
		cmds = append(cmds, j.guard.info, j.guard.tm)
	}
	return cmds
}

func (j *acquireJob) done(sent, recv time.Time) bool {
	n, a, tk := j.n, j.sent.at.a, &j.sent.at.value
	c := a.c
	var val int64
	err := j.cmd.Err()
	switch j.how {
	case cmdSet:
		switch {
		case err == nil:
			val = 1 // OK: the key was free, it is ours now
		case errors.Is(err, redis.Nil) && j.sent.n.Load() > 1:
			// Written more than once: the first copy may have set it.
			j.how = cmdCheck
			return true
		case errors.Is(err, redis.Nil):
			err = nil // a plain no
		}
	case cmdCheck:
		switch v, e := j.cmd.Text(); {
		case e == nil && v == tk.value:
			val, err = 1, nil
		case e == nil || errors.Is(e, redis.Nil):
			val, err = 0, nil // another holder, or gone: not ours
		}
	case cmdSetGet:
		switch old, e := j.cmd.Text(); {
		case errors.Is(e, redis.Nil):
			val, err = 1, nil // the key was free: it is ours now
		case redis.HasErrorPrefix(e, "ERR syntax error"):
			// Redis before 7.0 refuses NX with GET; nothing was set.
			n.oldSet.Store(true)
			j.how = cmdScript
			return true
		case redis.HasErrorPrefix(e, "WRONGTYPE"):
			// A hash: a read lock or an owner lock, which SET GET
			// cannot read. The script answers a plain no there.
			j.how = cmdScript
			return true
		case e != nil:
		case old == tk.value:
			val = 1 // our own write, sent again by go-redis
		case tk.earlier(old):
			// An earlier attempt's leftover: the script takes it over.
			j.how = cmdScript
			return true
		}
	case cmdSetNX:
		switch e := j.cmd.Err(); {
		case errors.Is(e, redis.Nil):
			err = nil // a plain no
		case e == nil:
			val = 1
		}
	default: // cmdScript
		if j.resendAsEval(j.cmd) {
			return true
		}
		val, err = j.cmd.Int64()
	}
	if err != nil {
		err = a.t.fl.acquireErr(a.t, err)
	}
	if a.cfg.guard {
		g := j.guard
		if qerr := n.guard.observe(n, g.info.Val(), g.info.Err(), g.tm.Val(), g.tm.Err(), sent, recv, c.maxTTL(), a.cfg.driftFactor, c.log); qerr != nil && err == nil && val > 0 {
			err = qerr
		}
	}
	j.leg.deliver(j.counted(val, err))
	return false
}

// releaseJob releases an attempt's value on one node. It reports to a
// round, or, for the release that a late reply triggers, frees the node in
// the acquisition.
type releaseJob struct {
	leg
	// sent names the attempt, and counts the writes of the release.
	sent sendCounter
	cmd  *redis.Cmd
	// extra moves the job's deadline past its round's (see
	// attempt.handleLate). Only the goroutine that sends the job writes
	// it, before it does.
	extra time.Duration
	args  [9]any
	// announce announces the release to waiters; false for a rollback.
	announce bool
	// unlock is set for Unlock's release of the attempt's Lock: a resent
	// release may count as done (see Lock.release).
	unlock bool
	// free is set for the release that a late reply triggers: it frees
	// the node in the acquisition, and its round (see attempt.rollbackOn)
	// hears nothing.
	free bool
	// resent is set when the EVALSHA before the EVAL was written more than
	// once: a NOSCRIPT reply to a copy says nothing of the first copy,
	// which may have run before the node lost its scripts.
	resent bool
	evalFallback
}

// deadline gives a release releaseGrace past its round's deadline: a
// release has no validity to protect, deletes only its own value, and one
// dropped unsent (a sender starved of CPU for its whole deadline) would
// leave the key for its TTL.
func (j *releaseJob) deadline() time.Time { return j.sendBy().Add(releaseGrace) }

// sendBy is the job's own deadline: its round's, and extra.
func (j *releaseJob) sendBy() time.Time { return j.end.Add(j.extra) }

// releaseGrace is how long past its round's deadline a queued release is
// still sent.
const releaseGrace = 5 * time.Second

func (j *releaseJob) fail(err error) { j.finish(0, false, err) }

func (j *releaseJob) commands(cmds []redis.Cmder) []redis.Cmder {
	// The count is of one command: a NOSCRIPT reply to an EVALSHA written
	// once means it did nothing, so the EVAL starts a new count.
	j.sent.n.Store(0)
	j.cmd = j.sent.at.a.t.evalRelease(j.args[:0], j.eval, j.n, &j.sent, j.announce)
	return append(cmds, j.cmd)
}

func (j *releaseJob) done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		j.resent = j.sent.n.Load() > 1
		return true
	}
	v, err := j.cmd.Int64()
	j.finish(v, j.resent || j.sent.n.Load() > 1, err)
	return false
}

func (j *releaseJob) finish(v int64, resent bool, err error) {
	at := j.sent.at
	if j.free {
		at.a.mu.Lock()
		at.a.busy[j.n.index]--
		at.a.mu.Unlock()
		return
	}
	if l := at.lock; j.unlock && err == nil && v <= 0 && resent && !l.c.hooks.unsafeRetries && l.heldValidOn(j.n.index) {
		// go-redis sent the release again after its connection failed,
		// and the last copy found the key gone, or already taken by the
		// next holder, on a node that held it while it was still valid:
		// in the model, only the first copy of this release can have
		// deleted it.
		v = 1
	}
	j.leg.deliver(max(v, 0), err)
}

// extendJob extends a lock on one node.
type extendJob struct {
	leg
	l    *Lock
	ttl  time.Duration
	cmd  *redis.Cmd
	args [9]any
	evalFallback
	*replicaWait
}

func (j *extendJob) deadline() time.Time { return j.end }
func (j *extendJob) fail(err error)      { j.leg.deliver(0, err) }

func (j *extendJob) commands(cmds []redis.Cmder) []redis.Cmder {
	l := j.l
	j.cmd = l.t.evalExtend(j.args[:0], j.eval, l.att.value.arg, j.ttl)
	return append(cmds, j.cmd)
}

func (j *extendJob) done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	v, err := j.cmd.Int64()
	if j.l.cfg.guard {
		v, err = j.n.guarded(j.n.pipe.c, v, err)
	}
	j.leg.deliver(j.counted(v, err))
	return false
}

// fenceJob writes an attempt's fence back on one node.
type fenceJob struct {
	leg
	t     *target
	value string
	fence int64
	cmd   *redis.Cmd
	evalFallback
	*replicaWait
}

func (j *fenceJob) deadline() time.Time { return j.end }
func (j *fenceJob) fail(err error)      { j.leg.deliver(0, err) }

func (j *fenceJob) commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmd = j.t.evalFence(j.eval, j.value, j.fence)
	return append(cmds, j.cmd)
}

func (j *fenceJob) done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	j.leg.deliver(j.counted(j.cmd.Int64()))
	return false
}

// markJob sets the waiting markers of a lock's keys on one node that an
// attempt did not ask (a request of the same call was still in flight
// there), so that the holder's release is announced there too. Nobody
// waits for its reply.
type markJob struct {
	t      *target
	keys   []string
	ttlArg any
	end    time.Time
}

func (j *markJob) deadline() time.Time { return j.end }
func (j *markJob) fail(error)          {}

func (j *markJob) commands(cmds []redis.Cmder) []redis.Cmder {
	for _, m := range j.keys {
		cmds = append(cmds, redis.NewCmd(context.Background(), j.t.fl.mark(m, j.ttlArg)...))
	}
	return cmds
}

func (j *markJob) done(time.Time, time.Time) bool { return false }

// unmarkSrc deletes a writer's waiting marker, and leaves a reader's. It is
// sent with EVAL, on the rare path of a writer that gave up: Redis caches
// it.
const unmarkSrc = `if redis.call('GET', KEYS[1]) == '1' then return redis.call('DEL', KEYS[1]) end return 0`

// unmarkJob deletes the writers' waiting markers of keys on one node.
type unmarkJob struct {
	keys []string
	end  time.Time
}

func (j *unmarkJob) deadline() time.Time { return j.end }
func (j *unmarkJob) fail(error)          {}

func (j *unmarkJob) commands(cmds []redis.Cmder) []redis.Cmder {
	for _, m := range j.keys {
		cmds = append(cmds, redis.NewCmd(context.Background(), "eval", unmarkSrc, 1, m))
	}
	return cmds
}

func (j *unmarkJob) done(time.Time, time.Time) bool { return false }
