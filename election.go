package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// This file is leader election (Client.Election): a Campaign is a fenced,
// auto-extended lock on the election's key, whose fence is the leader's
// term, followed by a term record on a quorum that names the leader's
// token and value (scripts/term.lua); Leader reads them back from a
// quorum, and Observe follows them. docs/ELECTION.md has the argument.

// ErrNoLeader is matched by the error of Election.Leader when a quorum of
// nodes answered and nobody leads: no token holds the election's key on a
// quorum of them with a term record that names it. That includes the
// moment between a Campaign's win and its term record, and a key held by a
// lock that is not a Campaign's.
var ErrNoLeader = errors.New("redlock: no leader")

// Leader is who leads an election, as Election.Leader and Election.Observe
// report it. Its zero value, Term 0, stands for nobody in Observe.
type Leader struct {
	Value string // what the leader passed to Campaign
	Term  uint64 // strictly increases with each new leadership: the leader's fence
}

// Election is a leader election on one key: at most one Campaign leads at
// a time, and each new leadership has a larger Term. Build it with
// Client.Election; the zero value is not usable. It is safe for concurrent
// use, and may be shared by many campaigners and observers of the Client.
// It holds no resource of its own, and needs no closing: its Client's Close
// ends what it started.
type Election struct {
	c   *Client
	key string  // as given
	cfg *config // the campaigns' settings; never changed

	// The Redis names of the election (see internal/keyspace): the lock
	// key, its term record, its waiting marker, and the channels Observe
	// listens on: the release channel, then the election's.
	rkey, term, marker string
	chans              []string
	// keys are the lock key and the term record, and elected the
	// election's channel, boxed once for the scripts' arguments.
	keys    []any
	elected any
	// markTTL is what Observe's waiting marker lives for, in milliseconds:
	// the campaigns' node TTL.
	markTTL any
}

// Election returns the leader election on key: Campaign to lead it, Leader
// to read who leads, Observe to follow. Campaigns on the same key and the
// same nodes elect one leader at a time, across Clients and processes.
//
// A leadership is a lock on key, taken with the options given here over
// the Client's defaults, always with WithFencing(true), whose fence is the
// Term, and WithAutoExtend(true), so that it lasts until Unlock (a resign)
// or its loss: Election sets both, whatever opts and the Client say. The
// other lock options work as they do for Lock: WithTTL, WithRetryDelay,
// WithLabel, WithTopUp, WithLockDelay (the key of a leader that crashed
// stays taken the delay past its TTL), WithMaxHold (a term limit), and
// WithFair (campaigners win in the order they began to wait).
//
// It refuses, with an error that wraps ErrInvalidOption, what a leadership
// cannot be: WithOwner (two campaigns of one owner would share the
// leadership) and WithMinHold (a resign must free the key at once), given
// here or as the Client's defaults; pass WithOwner("") or WithMinHold(0) to
// override a default. The key is checked as Lock checks it, and the error
// of a bad key or option wraps ErrInvalidOption too. Election sends
// nothing to the nodes.
func (c *Client) Election(key string, opts ...LockOption) (*Election, error) {
	forced := append(slices.Clip(opts), WithFencing(true), WithAutoExtend(true))
	cfg, err := c.config(forced)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.owner != "":
		return nil, fmt.Errorf("%w: WithOwner cannot be used with an Election: two campaigns of one owner would both lead; give WithOwner(\"\") to override a Client default", ErrInvalidOption)
	case cfg.minHold > 0:
		return nil, fmt.Errorf("%w: WithMinHold cannot be used with an Election: a resign must free the key at once; give WithMinHold(0) to override a Client default", ErrInvalidOption)
	}
	// The key and the options, checked as a Lock's: each Campaign builds
	// a target of its own, with its own id.
	t, err := c.target([]string{key}, cfg, plainFlavour)
	if err != nil {
		return nil, err
	}
	rkey := t.rkeys[0]
	e := &Election{
		c: c, key: key, cfg: cfg,
		rkey: rkey, term: keyspace.Term(rkey), marker: keyspace.Waiting(rkey),
		chans:   []string{releaseChannel(rkey), keyspace.Elected(rkey)},
		markTTL: cfg.nodeTTL(cfg.ttl).Milliseconds(),
	}
	e.keys, e.elected = []any{e.rkey, e.term}, e.chans[1]
	return e, nil
}

// Campaign blocks until this caller leads the election, or ctx is done. It
// returns the leader's Lock: auto-extended, fenced, with Fence() the
// leader's Term. Unlock resigns, and frees the key at once, so that the
// next campaigner takes over. Done closes when the leadership is lost (its
// renewals failed, or WithMaxHold's cap came), and Err says why; a leader
// must stop acting as one then, and should fence its writes with its Term
// all along (docs/ELECTION.md). Several goroutines may campaign at once.
//
// value is what Leader and Observe report as the leader's Value: any
// string, a host name or an address. A Campaign takes the lock on the key
// as Lock does (waiting for the release on pub/sub, and retrying), then
// writes the term record on every node that holds the lock (one more round
// trip) and returns once a quorum stored it: from then on Leader finds it.
// While the record is short of a quorum it retries at the retry delay, as
// long as the lock is held; when the lock is lost first it campaigns again,
// for a new term.
//
// On failure it holds nothing: a lock it took was released (resigned). The
// error matches ErrNotAcquired, and ctx.Err() when ctx ended the campaign,
// or ErrClosed after Close; while it waits for the lock it is Lock's
// error, a *QuorumError.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	c := e.c
	if err := c.enter(); err != nil {
		return nil, err
	}
	// The whole campaign is one call of the Client: Close waits for it,
	// and it can still resign once Close has begun.
	defer c.leave()
	keys := []string{e.key}
	for {
		t, err := c.target(keys, e.cfg, plainFlavour)
		if err != nil {
			return nil, err
		}
		t.election = true
		l, err := c.acquireTarget(ctx, e.cfg, keys, t, true)
		if err != nil {
			return nil, err
		}
		ended, err := e.proclaim(ctx, l, value)
		if err == nil {
			t.events.finish(l, nil)
			return l, nil
		}
		if ended {
			t.events.finish(nil, fmt.Errorf("%w: %w", ErrNotAcquired, err))
		} else {
			t.events.finish(nil, err)
		}
		e.resign(l)
		if !ended {
			return nil, err
		}
		// The leadership ended before its record reached a quorum:
		// campaign again, for a new term.
	}
}

// errLeadershipEnded is proclaim's error when the lock ended first.
var errLeadershipEnded = errors.New("redlock: the leadership ended before its term record reached a quorum")

// proclaim writes the term record of the leadership l, for value, until a
// quorum of nodes stored it. ended reports that the leadership ended first
// (the lock was lost, or a node holds the record of a higher term): the
// caller campaigns again. Otherwise err is why the campaign stops: ctx
// ended, or the Client closed.
func (e *Election) proclaim(ctx context.Context, l *Lock, value string) (ended bool, err error) {
	c := e.c
	w := &termWrite{keys: e.keys, token: l.Token(), term: strconv.FormatUint(l.Fence(), 10), value: value, elected: e.elected}
	stored := make([]bool, len(c.nodes))
	n := 0
	for {
		jobs := make([]termJob, len(c.nodes))
		o := c.fanout(ctx, &spec{
			op:      "term",
			quorum:  c.quorum - n,
			timeout: e.cfg.nodeTimeout,
			life:    e.cfg.releaseTimeout(),
			stop:    c.done,
			skip: func(i int) error {
				if stored[i] {
					return errNotAsked
				}
				return nil
			},
			leg: func(i int) *leg { return &jobs[i].leg },
			start: func(_ context.Context, lg *leg) {
				j := &jobs[lg.n.index]
				j.w = w
				lg.n.pipe.Submit(j)
			},
		})
		o.finish(nil)
		higher := false
		for i := range stored {
			switch {
			case !o.got[i]:
			case o.votes[i].v == VoteYes:
				stored[i] = true
				n++
			case o.vals[i] < 0:
				higher = true
			}
		}
		switch {
		case n >= c.quorum && l.Err() == nil:
			return false, nil
		case n >= c.quorum || higher:
			// Lost, or a newer leader has written: not ours to lead.
			return true, errLeadershipEnded
		case o.ctxErr != nil:
			return false, e.stopped(o.ctxErr, n)
		}
		delay := time.NewTimer(e.cfg.retryDelay())
		select {
		case <-delay.C:
		case <-l.Done():
			delay.Stop()
			return true, errLeadershipEnded
		case <-ctx.Done():
			delay.Stop()
			return false, e.stopped(ctx.Err(), n)
		case <-c.done:
			delay.Stop()
			return false, e.stopped(ErrClosed, n)
		}
	}
}

// stopped is Campaign's error when why (ctx's error, or ErrClosed) ended it
// while the term record was on n nodes.
func (e *Election) stopped(why error, n int) error {
	return fmt.Errorf("%w: election %q: the term record reached %d of %d nodes (quorum %d) when the campaign ended, and the leadership was resigned: %w",
		ErrNotAcquired, e.key, n, len(e.c.nodes), e.c.quorum, why)
}

// resign releases a leadership that Campaign will not hand out. It runs
// inside Campaign's call, so that it releases even once Close has begun,
// when Unlock would refuse.
func (e *Election) resign(l *Lock) {
	// The caller never got the lock: its end is no hold that ended.
	l.mu.Lock()
	l.handedOut = 0
	l.mu.Unlock()
	if err := l.Unlock(context.Background()); !errors.Is(err, ErrClosed) {
		return
	}
	l.mu.Lock()
	again := l.released
	l.released = true
	l.mu.Unlock()
	if !again {
		l.end(ErrUnlocked)
		_ = l.release(false)
	}
}

// Leader returns who leads the election now: the Value and Term of the
// leader whose token holds the key on a quorum of nodes, as its term record
// names them. It reads every node once (GET of the key and of the term
// record, PTTL of the key), writes nothing, and waits for every node that
// answers within the node timeout; a node already known to hang is not
// waited for. Like Inspect, it tells neither the Observer nor the logger.
// Its answer is a snapshot: the leadership may change as it returns.
//
// When a quorum answered and nobody leads, the error matches ErrNoLeader.
// When too few nodes answered to tell (those that did not could have made a
// leader's quorum), it matches ErrUnavailable instead, not ErrNoLeader,
// names the nodes that failed, and unwraps to a *NodeError for each. It
// matches ctx.Err() when ctx ended first, and ErrClosed after Close.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	ld, _, err := e.read(ctx, false)
	return ld, err
}

// read reads who leads (see Leader); left is how long a quorum of nodes
// keep the leader's key, at the read, for Observe's next check. With mark,
// each node also gets the key's waiting marker, so that a release there is
// announced (see Observe).
func (e *Election) read(ctx context.Context, mark bool) (ld Leader, left time.Duration, err error) {
	c := e.c
	if err := c.enter(); err != nil {
		return Leader{}, 0, err
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return Leader{}, 0, fmt.Errorf("redlock: leader of %q: %w", e.key, err)
	}
	r := &leaderRead{e: e, mark: mark}
	jobs := make([]leaderJob, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op:      "leader",
		quorum:  c.quorum,
		timeout: e.cfg.nodeTimeout,
		life:    e.cfg.releaseTimeout(),
		// A leader's quorum may be among the slower nodes.
		waitAll: true,
		stop:    c.done,
		leg:     func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.r = r
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)
	if o.ctxErr != nil {
		return Leader{}, 0, fmt.Errorf("redlock: leader of %q: %w", e.key, o.ctxErr)
	}
	// A node's view is read only when its answer was gathered, and so
	// written before it; a late answer writes only its own job.
	views := make([]*leaderView, len(c.nodes))
	for i := range jobs {
		if o.got[i] && o.votes[i].v != VoteFailed {
			views[i] = &jobs[i].view
		}
	}
	ld, left, best, found := decideLeader(views, c.quorum)
	if found {
		return ld, left, nil
	}
	le := &leaderError{key: e.key, quorum: c.quorum, best: best, votes: o.nodeVotes(c)}
	unanswered := 0
	for i := range le.votes {
		v := &le.votes[i]
		if v.Vote == VoteNotWaited {
			// The round waits for every node but those already hung.
			v.Vote, v.Err = VoteFailed, c.faults.explain(i, errHung)
		}
		if v.Vote == VoteFailed {
			unanswered++
		}
	}
	le.unrecorded, le.unavailable = noLeader(best, unanswered, c.quorum)
	return Leader{}, 0, le
}

// noLeader says why a read found no leader, from best, the nodes that hold
// the most common token, and the nodes that did not answer: unrecorded
// when a token holds a quorum but no record names it (nobody leads yet),
// unavailable when the silent nodes could have made a leader's quorum
// (unknown is not nobody). Neither: nobody leads.
func noLeader(best, unanswered, quorum int) (unrecorded, unavailable bool) {
	unrecorded = best >= quorum
	return unrecorded, !unrecorded && best+unanswered >= quorum
}

// decideLeader reaches the verdict on the nodes' views (nil: the node did
// not answer): the token that holds the key on at least quorum of them,
// and a term record on any of them that names it. found is false when
// there is none; best is how many nodes hold the most common token. left
// is the quorum-th longest PTTL of the leader's key, 0 when it has none.
func decideLeader(views []*leaderView, quorum int) (ld Leader, left time.Duration, best int, found bool) {
	count := make(map[string]int, len(views))
	token := ""
	for _, v := range views {
		if v != nil && v.held {
			if count[v.token]++; count[v.token] > best {
				token, best = v.token, count[v.token]
			}
		}
	}
	if best < quorum {
		return Leader{}, 0, best, false
	}
	// Every record that names the token was written by its Campaign, with
	// the same term and value: any one will do.
	for _, v := range views {
		if v == nil {
			continue
		}
		if term, tk, value, ok := parseTermRecord(v.record); ok && tk == token {
			ld, found = Leader{Value: value, Term: term}, true
			break
		}
	}
	if !found {
		return Leader{}, 0, best, false
	}
	var pttls []time.Duration
	for _, v := range views {
		if v != nil && v.held && v.token == token {
			pttls = append(pttls, v.pttl)
		}
	}
	slices.Sort(pttls)
	return ld, max(pttls[len(pttls)-quorum], 0), best, true
}

// parseTermRecord reads a term record, as term.lua writes it:
// "<term>\n<token>\n<value>". A token holds no newline (a label has no
// control character), and the value may.
func parseTermRecord(s string) (term uint64, token, value string, ok bool) {
	t, rest, ok1 := strings.Cut(s, "\n")
	token, value, ok2 := strings.Cut(rest, "\n")
	if !ok1 || !ok2 {
		return 0, "", "", false
	}
	term, err := strconv.ParseUint(t, 10, 64)
	if err != nil || term == 0 {
		return 0, "", "", false
	}
	return term, token, value, true
}

// leaderError is the error of a Leader that found nobody leading: it says
// what the nodes answered.
type leaderError struct {
	key    string // as the caller gave it
	quorum int
	best   int // the nodes that hold the most common token
	votes  []NodeVote
	// unrecorded is set when a token holds the key on a quorum, but no
	// node that answered has a term record naming it (a Campaign between
	// its win and its record, or a lock that is no Campaign's).
	unrecorded bool
	// unavailable is set when the nodes that did not answer could have
	// made a leader's quorum.
	unavailable bool
}

func (e *leaderError) Error() string {
	var b strings.Builder
	if e.unavailable {
		b.WriteString(ErrUnavailable.Error())
	} else {
		b.WriteString(ErrNoLeader.Error())
	}
	fmt.Fprintf(&b, ": election %q: %d/%d nodes hold the key for one token (quorum %d)", e.key, e.best, len(e.votes), e.quorum)
	if e.unrecorded {
		b.WriteString(", and no term record names it: a Campaign writing its record, or a lock that is not a Campaign's")
	}
	for _, v := range e.votes {
		if v.Vote == VoteFailed {
			fmt.Fprintf(&b, "; node %d (%s) failed: %s", v.Index, v.Addr, describe(v.Err))
		}
	}
	return b.String()
}

// Unwrap returns ErrNoLeader, or ErrUnavailable when too few nodes answered
// to tell, and a *NodeError for each node that failed.
func (e *leaderError) Unwrap() []error {
	errs := []error{ErrNoLeader}
	if e.unavailable {
		errs[0] = ErrUnavailable
	}
	for _, v := range e.votes {
		if v.Vote == VoteFailed {
			errs = append(errs, &NodeError{Index: v.Index, Addr: v.Addr, Err: v.Err})
		}
	}
	return errs
}

// Observe returns a channel that receives who leads the election: the
// leader at the call, then every change, until ctx is done or the Client
// closes; the channel is then closed. When nobody leads it receives Leader{}
// (Term 0), once per vacancy: at the start when nobody leads, and when a
// leader resigned or was lost before the next one won. The non-zero Terms it
// sends only increase: a read that shows an older term than one already
// sent is dropped. A leader is sent again, with the same Term, only after a
// Leader{} that a read showed in its place (a term record that a read did
// not find).
//
// The channel holds one value: a consumer that falls behind gets the latest
// one, not every change, and never holds up Observe or Close. Observe runs
// one goroutine of the Client, which ends with ctx or Close, and reads the
// nodes as Leader does; a read that finds too few nodes answering
// (ErrUnavailable) sends nothing.
//
// It reads again whenever pub/sub announces a change on the key (a new
// term, from term.lua; a release, which the key's waiting marker, set by
// each read, has announced), and at least every third of the TTL, sooner
// when the leader's key is due to expire: a new leader shows within one
// read of its record's announcement, a resign within one read of the
// release, and a leader that crashed without resigning once its key expires
// (at most one TTL after its last renewal, plus the lock-delay), each within
// a third of the TTL when messages are lost. The TTL is the Election's.
// With WithPubSub(false) on the Client it only reads at that interval, and
// sets no marker. A leader whose term lasts less than a read's interval, and
// whose announcements are all lost, may be missed.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader, 1)
	c := e.c
	if err := c.enter(); err != nil {
		close(ch)
		return ch
	}
	// Inside a call: Close waits for it, so the goroutine is counted
	// before Close waits for the Client's goroutines.
	defer c.leave()
	var w *watcher
	if c.cfg.pubsub {
		w = c.waitlist.watch(e.chans)
	}
	c.wg.Add(1)
	go e.observe(ctx, ch, w)
	return ch
}

// observe is Observe's goroutine: it reads who leads and sends what
// changed on ch, until ctx is done or the Client closes, then closes ch.
// w is nil without pub/sub.
func (e *Election) observe(ctx context.Context, ch chan Leader, w *watcher) {
	c := e.c
	defer c.wg.Done()
	defer close(ch)
	var wake <-chan struct{} // nil without pub/sub: never ready
	if w != nil {
		defer c.waitlist.unwatch(w)
		wake = w.wake
	}
	var (
		last   Leader // the last value sent
		sent   bool   // anything was sent
		newest uint64 // the largest Term sent
	)
	send := func(ld Leader) {
		if ctx.Err() != nil {
			return
		}
		last, sent, newest = ld, true, max(newest, ld.Term)
		select {
		case ch <- ld:
		default:
			// The consumer has not taken the last value: replace it.
			// Nothing else sends on ch, so the second send cannot block.
			select {
			case <-ch:
			default:
			}
			ch <- ld
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-wake:
		case <-timer.C:
		}
		ld, left, err := e.read(ctx, w != nil)
		switch {
		case err == nil && ld.Term >= newest && (!sent || ld != last):
			send(ld)
		case errors.Is(err, ErrNoLeader) && (!sent || last.Term != 0):
			send(Leader{})
		case err != nil && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrUnavailable):
			// ctx ended, or the Client closed.
			return
		}
		next := e.cfg.ttl / 3
		if err == nil && left > 0 {
			// Read again just after the leader's key expires, in case
			// its holder crashed: no message announces an expiry.
			next = min(next, left+observeSlack)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// observeSlack is how long after the leader's key is due to expire
// Observe reads again.
const observeSlack = 10 * time.Millisecond

// termWrite is what every node's term record request of one Campaign
// shares (see term.lua).
type termWrite struct {
	keys                        []any // the lock key and the term record
	token, term, value, elected any
}

// termJob writes a leader's term record on one node (term.lua): it answers
// 1 when the node stored it, 0 when the node does not hold the leader's
// token, -1 when it has the record of a higher term.
type termJob struct {
	leg
	w    *termWrite
	cmd  *redis.Cmd
	args [12]any
	evalFallback
}

func (j *termJob) Deadline() time.Time { return j.end }
func (j *termJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *termJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	j.cmd = redis.NewCmd(context.Background(), j.w.args(evalStart(j.args[:0], scriptTerm, j.eval), j.n)...)
	return append(cmds, j.cmd)
}

func (j *termJob) Done(time.Time, time.Time) bool {
	if j.resendAsEval(j.cmd) {
		return true
	}
	j.leg.deliver(j.cmd.Int64())
	return false
}

// args appends term.lua's KEYS and ARGV to a command that evalStart began,
// for node n. KEYS: the lock key, its term record. ARGV: the leader's
// token, the term, the value, the election's channel, '1' on a Redis
// Cluster node.
func (w *termWrite) args(dst []any, n *node) []any {
	return append(withKeys(dst, w.keys), w.token, w.term, w.value, w.elected, n.shardArg)
}

// leaderRead is what every node's request of one read of the leader
// shares.
type leaderRead struct {
	e    *Election
	mark bool // set the key's waiting marker (Observe)
}

// leaderView is what one node said of an election.
type leaderView struct {
	held   bool   // the key is a string: some lock's value
	token  string // the value, when held
	pttl   time.Duration
	record string // the term record, "" when there is none
}

// leaderJob reads one node's view of an election: GET and PTTL of the
// key, GET of its term record, in one batch. With mark, it first sets the
// key's waiting marker, so that the node announces the key's release; a
// refusal of the marker (an ACL that allows only reads) changes nothing
// else.
type leaderJob struct {
	leg
	r        *leaderRead
	get, rec *redis.StringCmd
	pttl     *redis.DurationCmd
	view     leaderView // written by Done before the answer is delivered
	markCmd  *redis.Cmd
}

func (j *leaderJob) Deadline() time.Time { return j.end }
func (j *leaderJob) Fail(err error)      { j.leg.deliver(0, err) }

func (j *leaderJob) Commands(cmds []redis.Cmder) []redis.Cmder {
	ctx, e := context.Background(), j.r.e
	if j.r.mark {
		j.markCmd = redis.NewCmd(ctx, writerMark(e.marker, e.markTTL)...)
		cmds = append(cmds, j.markCmd)
	}
	j.get = redis.NewStringCmd(ctx, "get", e.rkey)
	j.pttl = redis.NewDurationCmd(ctx, time.Millisecond, "pttl", e.rkey)
	j.rec = redis.NewStringCmd(ctx, "get", e.term)
	return append(cmds, j.get, j.pttl, j.rec)
}

func (j *leaderJob) Done(time.Time, time.Time) bool {
	j.leg.deliver(j.read())
	return false
}

// read parses the replies into the job's view, and returns the node's
// answer: 1, or the error that makes it a failed one.
func (j *leaderJob) read() (int64, error) {
	v := &j.view
	switch tk, err := j.get.Result(); {
	case err == nil:
		v.held, v.token = true, tk
	case errors.Is(err, redis.Nil), redis.HasErrorPrefix(err, "WRONGTYPE"):
		// Free, or some other type: no leader's token.
	default:
		return 0, err
	}
	pttl, err := j.pttl.Result()
	if err != nil {
		return 0, err
	}
	v.pttl = pttl
	switch rec, err := j.rec.Result(); {
	case err == nil:
		v.record = rec
	case errors.Is(err, redis.Nil), redis.HasErrorPrefix(err, "WRONGTYPE"):
	default:
		return 0, err
	}
	if j.r.e.cfg.guard {
		// A quarantined node (just restarted, or its clock jumped) may
		// have forgotten the leader: it does not count.
		return j.n.guarded(j.n.c, 1, nil)
	}
	return 1, nil
}
