package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// Holding is what Inspect found about one lock key: each node's view, and
// the verdict of the quorum. It is a snapshot: the key may have changed
// hands by the time it is read.
type Holding struct {
	// Key is the lock key, as given to Inspect, without the key prefix.
	Key string
	// Quorum is the number of nodes that must hold one token for the lock
	// to be held: N/2+1, or for a semaphore the quorum of its permits
	// (see Semaphore.Quorum).
	Quorum int
	// Nodes holds what each node reported, in the order given to New.
	Nodes []NodeHolding
	// Held reports whether a quorum of nodes hold the key for one holder:
	// the same value at a plain key, or the same owner at an owner lock.
	Held bool
	// Token is the token a quorum holds, as Lock.Token returns it: the
	// whole plain string, label included; "" when Held is false. For an
	// owner lock held more than once it is the first of Tokens.
	Token string
	// Tokens holds, sorted, every token that a quorum of nodes hold: one
	// for a plain key, one per hold of an owner lock; nil when Held is
	// false.
	Tokens []string
	// Label is the label stored with Token (see WithLabel); "" when there
	// is none, or when the value was not written by this library.
	Label string
	// Owner is the owner id when the quorum's lock is an owner lock (see
	// WithOwner); Count is its hold count on a quorum: the quorum-th
	// largest of the counts of the nodes that hold it. Count is 1 for a
	// plain key, and 0 when Held is false.
	Owner string
	Count int64
	// Shared reports that the quorum's holds are readers (RLock): Tokens
	// then holds every reader a quorum of nodes hold, and Count their
	// number on a quorum, as for an owner lock.
	Shared bool
	// Permits is the number of permits when the key holds a semaphore
	// (see Client.Semaphore), and 0 otherwise. Quorum is then the
	// semaphore's, and Held reports that at least one permit is held on
	// Quorum nodes; Tokens lists the permits so held, and Count is their
	// number.
	Permits int
	// Remaining is how long a quorum is still guaranteed to hold the key:
	// the quorum-th longest PTTL among the nodes that hold it, less the
	// clock-drift allowance for that PTTL (drift factor × PTTL + 2 ms) and
	// the time Inspect took. Zero when Held is false, or NoExpiry is set;
	// negative never.
	Remaining time.Duration
	// NoExpiry reports that a quorum holds the key without an expiry: a
	// key no lock of this library writes (they all expire), set by hand
	// or by another program. It stays held until someone deletes it.
	NoExpiry bool
	// Waiters is the number of fair Lock calls (WithFair) queued for the
	// key: the calls whose live queue entry a quorum of nodes hold. Other
	// calls that wait for the key are not queued on the nodes, and are not
	// counted; an Observer hears of every wait (see WaitBeganObserver).
	Waiters int
}

// NodeHolding is what one node reported about a lock key.
type NodeHolding struct {
	// Index is the node's position in the slice given to New.
	Index int
	// Addr is the node's address.
	Addr string
	// Held reports whether the node holds the key: a plain string, or an
	// owner lock with at least one hold.
	Held bool
	// Layout is how the key is kept on the node: "plain" (a string, as
	// Lock, TryLock, LockMulti and redsync keep it: each key of a
	// LockMulti holds the lock's value, so any one of them reads as the
	// lock), "owner" (the hash of an owner lock), "foreign" (a list, a
	// set, a hash not laid out as an owner lock, or any other type no lock
	// of this library uses), "read" (the hash of RLock's readers, see
	// docs/RWLOCK.md), "semaphore" (the sorted set of a semaphore's
	// permits, see docs/SEMAPHORE.md), or "" when the key is free.
	Layout string
	// Value is the raw string stored at a plain key; "" for the other
	// layouts.
	Value string
	// Token is the token the node holds: Value at a plain key, the first
	// of Tokens at an owner lock. Tokens holds, sorted, every token the
	// node holds: Value at a plain key, one per hold of an owner lock, one
	// per live reader or permit (those whose expiry on the node's clock
	// has not passed).
	Token  string
	Tokens []string
	// Permits is the semaphore's number of permits as the node records
	// it, for the "semaphore" layout; 0 otherwise.
	Permits int
	// Label, Owner and Count describe the holder, as in Holding; Count is
	// the node's own hold count (1 at a plain key).
	Label string
	Owner string
	Count int64
	// PTTL is the key's remaining time to live on the node; -1 (one
	// nanosecond below zero, as go-redis reports it) for a key without
	// expiry, and 0 for a free key.
	PTTL time.Duration
	// Waiters holds the ids of the fair Lock calls queued for the key on
	// the node, first the next to take it: the entries of its queue whose
	// deadline on the node's clock has not passed (see docs/FAIRNESS.md).
	// A call's id is the start of the token it gets (see Lock.Token).
	Waiters []string
	// Err is why the node could not answer, as a *NodeError: a network or
	// Redis error (a refused AUTH or SELECT among them, in the server's
	// words), or ErrNodeTimeout. The other fields but Index and Addr are
	// then zero. A key of a foreign type is not an error.
	Err error
}

// Layouts of a lock key on one node, as NodeHolding.Layout names them.
const (
	layoutFree    = ""
	layoutPlain   = "plain"
	layoutOwner   = "owner"
	layoutRead    = "read"
	layoutSem     = "semaphore"
	layoutForeign = "foreign"
)

// Inspect reads what every node holds for key, without changing anything,
// and says whether a quorum holds it, for whom, and for how much longer. It
// reads plain keys (of Lock, TryLock, LockMulti, and of redsync or any other
// client that stores a plain string), owner locks, readers, semaphores, and
// tells a key of any other type apart as "foreign". The key is validated as
// TryLock does, and the Client's key prefix applies.
//
// Each node is read in one MULTI transaction (TYPE, PTTL, GET, HGETALL,
// ZRANGE, TIME), so that what it reports is one instant of that node; a
// foreign string, hash or sorted set is read whole. All nodes are read at once, and each is given the
// node timeout or, if longer, the TTL up to one second, as Unlock's
// releases are.
//
// The error is only for a bad key (it wraps ErrInvalidOption), a closed
// Client (ErrClosed), or a ctx that ended first (ctx.Err(); no Holding is
// returned then). A node that cannot answer in time is reported in its
// NodeHolding's Err, and the verdict is reached without it.
func (c *Client) Inspect(ctx context.Context, key string) (*Holding, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: key must not be empty", ErrInvalidOption)
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := keyspace.Check(c.cfg.keyPrefix + key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	start := c.now()
	nodes, err := c.readHoldings(ctx, c.cfg.keyPrefix+key, c.cfg.releaseTimeout())
	if err != nil {
		return nil, err
	}
	h := &Holding{Key: key, Quorum: c.quorum, Nodes: nodes}
	h.decide(c.cfg.driftFactor, c.now().Sub(start))
	return h, nil
}

// readHoldings reads rkey on every node at once, in one round (see
// fanout), and waits for every node up to timeout: go-redis ignores ctx
// deadlines on socket reads unless the client was built with
// ContextTimeoutEnabled, so the timeout is enforced by the round. A node
// that has not answered by then is reported with ErrNodeTimeout, and its
// read, owned by the Client's wait group, ends when go-redis gives up. It
// returns ctx.Err() when ctx ends first.
func (c *Client) readHoldings(ctx context.Context, rkey string, timeout time.Duration) ([]NodeHolding, error) {
	// A node's holding is read only when its answer was gathered, and so
	// written before it; a late read writes only its own.
	read := make([]NodeHolding, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op:          "inspect",
		quorum:      c.quorum,
		timeout:     timeout,
		waitAll:     true,
		waitStalled: true,
		diagnostic:  true,
		start: func(ctx context.Context, lg *leg) {
			lg.wait(ctx, func(rctx context.Context) {
				read[lg.n.index] = readHolding(rctx, lg.n, rkey)
				lg.deliver(1, nil)
			})
		},
	})
	o.finish(nil)
	// A node's read may have failed because ctx ended: say so, rather
	// than blame the node.
	if o.ctxErr != nil {
		return nil, o.ctxErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]NodeHolding, len(c.nodes))
	for i, n := range c.nodes {
		if o.got[i] {
			out[i] = read[i]
		} else {
			out[i] = NodeHolding{Index: i, Addr: n.addr, Err: &NodeError{Index: i, Addr: n.addr, Err: ErrNodeTimeout}}
		}
	}
	return out, nil
}

// readHolding reads rkey on one node, in one transaction.
func readHolding(ctx context.Context, n *node, rkey string) NodeHolding {
	nh := NodeHolding{Index: n.index, Addr: n.addr}
	var (
		typ  *redis.StatusCmd
		pttl *redis.DurationCmd
		get  *redis.StringCmd
		hash *redis.MapStringStringCmd
		zset *redis.ZSliceCmd
		now  *redis.TimeCmd
	)
	// GET, HGETALL and ZRANGE always fail on a key of another type: each
	// command's own error is read, and only a command without a reply
	// takes the transaction's (see execDiag).
	tx := n.client.TxPipeline()
	typ = tx.Type(ctx, rkey)
	pttl = tx.PTTL(ctx, rkey)
	get = tx.Get(ctx, rkey)
	hash = tx.HGetAll(ctx, rkey)
	zset = tx.ZRangeWithScores(ctx, rkey, 0, -1)
	queue := tx.ZRange(ctx, keyspace.Queue(rkey), 0, -1)
	deadlines := tx.ZRangeWithScores(ctx, keyspace.Deadline(rkey), 0, -1)
	now = tx.Time(ctx)
	n.execDiag(ctx, tx)
	fail := func(err error) NodeHolding {
		return NodeHolding{Index: n.index, Addr: n.addr, Err: &NodeError{Index: n.index, Addr: n.addr, Err: nodeErr(err)}}
	}
	if err := typ.Err(); err != nil {
		return fail(err)
	}
	if err := pttl.Err(); err != nil {
		return fail(err)
	}
	if err := now.Err(); err != nil {
		return fail(err)
	}
	nowMs := now.Val().UnixMilli()
	if err := queue.Err(); err != nil {
		return fail(err)
	}
	if err := deadlines.Err(); err != nil {
		return fail(err)
	}
	nh.Waiters = liveWaiters(queue.Val(), deadlines.Val(), nowMs)
	switch typ.Val() {
	case "none":
		return nh
	case "string":
		v, err := get.Result()
		if err != nil {
			return fail(err)
		}
		nh.Layout, nh.Held, nh.Value = layoutPlain, true, v
		nh.Token, nh.Tokens, nh.Label, nh.Count = v, []string{v}, labelOf(v), 1
	case "hash":
		fields, err := hash.Result()
		if err != nil {
			return fail(err)
		}
		if tokens, ok := readLayout(fields, nowMs); ok {
			nh.Layout, nh.Tokens, nh.Count = layoutRead, tokens, int64(len(tokens))
			if len(tokens) > 0 {
				nh.Held, nh.Token, nh.Label = true, tokens[0], labelOf(tokens[0])
			}
			break
		}
		owner, tokens, ok := ownerLayout(fields)
		if !ok {
			nh.Layout = layoutForeign
			break
		}
		nh.Layout, nh.Owner, nh.Tokens, nh.Count = layoutOwner, owner, tokens, int64(len(tokens))
		if len(tokens) > 0 {
			nh.Held, nh.Token, nh.Label = true, tokens[0], labelOf(tokens[0])
		}
	case "zset":
		members, err := zset.Result()
		if err != nil {
			return fail(err)
		}
		permits, tokens, ok := semLayout(members, nowMs)
		if !ok {
			nh.Layout = layoutForeign
			break
		}
		nh.Layout, nh.Permits, nh.Tokens, nh.Count = layoutSem, permits, tokens, int64(len(tokens))
		if len(tokens) > 0 {
			nh.Held, nh.Token, nh.Label = true, tokens[0], labelOf(tokens[0])
		}
	default:
		nh.Layout = layoutForeign
	}
	nh.PTTL = pttl.Val()
	return nh
}

// countWaiters counts the fair calls queued on at least quorum of nodes.
func countWaiters(nodes []NodeHolding, quorum int) int {
	seen := map[string]int{}
	n := 0
	for i := range nodes {
		for _, id := range nodes[i].Waiters {
			if seen[id]++; seen[id] == quorum {
				n++
			}
		}
	}
	return n
}

// liveWaiters returns the ids of queue whose deadline, in deadlines, is
// after now (node milliseconds), in queue order; nil when there are none.
func liveWaiters(queue []string, deadlines []redis.Z, now int64) []string {
	if len(queue) == 0 {
		return nil
	}
	live := make(map[string]bool, len(deadlines))
	for _, z := range deadlines {
		if m, ok := z.Member.(string); ok && z.Score > float64(now) {
			live[m] = true
		}
	}
	var out []string
	for _, id := range queue {
		if live[id] {
			out = append(out, id)
		}
	}
	return out
}

// errUnanswered is the error of a command of Inspect or Check that go-redis
// left with neither a reply nor an error.
var errUnanswered = errors.New("redlock: go-redis gave the command neither a reply nor an error")

// execDiag sends a pipeline (or a transaction) of Inspect or Check, and
// makes sure that every command ends with its reply or an error. When a new
// connection fails its setup (AUTH with a wrong password, SELECT of a DB the
// server does not have), go-redis (v9.22) returns the server's refusal from
// Exec but leaves each command's error nil, and its value zero: a TYPE of ""
// that would read as a foreign key, a TIME of year 1 that would put the
// node's clock 2562047h behind. Such a command gets the pipeline's error
// instead, which names the real cause. The lock path guards against the
// same in internal/transport (errNoReply).
func (n *node) execDiag(ctx context.Context, pl redis.Pipeliner) {
	cmds := pl.Cmds()
	for _, c := range cmds {
		c.SetErr(errUnanswered)
	}
	_, err := pl.Exec(ctx)
	if err == nil {
		err = errUnanswered
	} else {
		err = n.setupErr(err)
	}
	for _, c := range cmds {
		if errors.Is(c.Err(), errUnanswered) {
			c.SetErr(err)
		}
	}
}

// setupErr names the step of a connection's setup that err comes from,
// when its words tell: the login (AUTH) or the choice of DB (SELECT).
func (n *node) setupErr(err error) error {
	switch {
	case isAuthErr(err):
		return fmt.Errorf("AUTH: %w", err)
	case isDBErr(err):
		if rc, ok := n.client.(*redis.Client); ok {
			return fmt.Errorf("SELECT %d: %w", rc.Options().DB, err)
		}
		return fmt.Errorf("SELECT: %w", err)
	}
	return err
}

// isAuthErr reports a server's refusal of the client's credentials: WRONGPASS
// (a wrong password, an unknown or disabled user), NOAUTH (none given), or
// the words of Redis before 6 and of a server without a password.
func isAuthErr(err error) bool {
	if redis.IsAuthError(err) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR") && (strings.Contains(msg, "password") || strings.Contains(msg, "AUTH"))
}

// isDBErr reports a server's refusal of the client's DB: a DB index out of
// range, or any DB but 0 on a Redis Cluster node.
func isDBErr(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR") && (strings.Contains(msg, "DB index") || strings.Contains(msg, "SELECT"))
}

// ownerLayout reads the fields of a hash as an owner lock: a field "owner",
// and a field "t:<token>" per hold (see holds.lua). It returns the owner
// and the tokens, sorted, or ok false when the hash is laid out otherwise.
func ownerLayout(fields map[string]string) (owner string, tokens []string, ok bool) {
	owner, ok = fields["owner"]
	if !ok {
		return "", nil, false
	}
	for f := range fields {
		if f == "owner" {
			continue
		}
		tk, isToken := strings.CutPrefix(f, "t:")
		if !isToken {
			return "", nil, false
		}
		tokens = append(tokens, tk)
	}
	slices.Sort(tokens)
	return owner, tokens, true
}

// readLayout reads the fields of a hash as RLock's readers: "mode" is
// "read", and a field "r:<token>" per reader (see rlock.lua). It returns the
// tokens of the readers whose expiry (in milliseconds on the node's clock)
// is after now, sorted, or ok false when the hash is laid out otherwise.
func readLayout(fields map[string]string, now int64) (tokens []string, ok bool) {
	if fields["mode"] != "read" {
		return nil, false
	}
	for f, v := range fields {
		if f == "mode" {
			continue
		}
		tk, isToken := strings.CutPrefix(f, "r:")
		if !isToken {
			return nil, false
		}
		if e, err := strconv.ParseInt(v, 10, 64); err == nil && e <= now {
			continue // expired: no script has dropped it yet
		}
		tokens = append(tokens, tk)
	}
	slices.Sort(tokens)
	return tokens, true
}

// semLayout reads a sorted set as a semaphore's permits: the member
// '#permits' scored by minus the permits, and one member per holder scored
// by its expiry in milliseconds on the node's clock (see semacquire.lua).
// It returns the permits and the holders whose expiry is after now, sorted,
// or ok false when the set is laid out otherwise.
func semLayout(members []redis.Z, now int64) (permits int, tokens []string, ok bool) {
	for _, m := range members {
		name, _ := m.Member.(string)
		switch {
		case name == permitsMember:
			permits, ok = int(-m.Score), true
		case int64(m.Score) > now:
			tokens = append(tokens, name)
		}
	}
	if !ok || permits < 1 {
		return 0, nil, false
	}
	slices.Sort(tokens)
	return permits, tokens, true
}

// labelOf returns the label of a value this library wrote: what follows
// labelSep after a UUID and an optional attempt number. A value of another
// client, or without a label, has none.
func labelOf(v string) string {
	name, label, found := strings.Cut(v, labelSep)
	if !found || !isAttemptName(name) {
		return ""
	}
	return label
}

// isAttemptName reports whether s is an attempt's name, as attemptToken
// writes it: a UUID in its canonical form, then ".n" for attempt n > 0.
func isAttemptName(s string) bool {
	const uuidLen = 36
	if len(s) < uuidLen {
		return false
	}
	for i := range uuidLen {
		switch c := s[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		default:
			return false
		}
	}
	rest := s[uuidLen:]
	if rest == "" {
		return true
	}
	n, ok := strings.CutPrefix(rest, ".")
	if !ok || n == "" || n[0] == '0' {
		return false
	}
	for i := range len(n) {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

// semHeld reports whether a group of nodes holds a verdict: for a semaphore,
// when one of its permits is on q of the nodes; any other group that has
// q nodes holds one.
func semHeld(g []*NodeHolding, q int) bool {
	if g[0].Layout != layoutSem {
		return true
	}
	seen := make(map[string]int)
	for _, nh := range g {
		for _, tk := range nh.Tokens {
			if seen[tk]++; seen[tk] >= q {
				return true
			}
		}
	}
	return false
}

// forever stands for the PTTL of a key without expiry.
const forever = time.Duration(math.MaxInt64)

// decide reaches the verdict on the nodes' holdings: whether one holder (a
// plain value, or an owner) has a quorum, and for how long. took is how
// long Inspect took so far.
func (h *Holding) decide(driftFactor float64, took time.Duration) {
	h.Waiters = countWaiters(h.Nodes, h.Quorum)
	// A plain value and an owner never name the same holder: the key of
	// each group says which it is.
	groups := make(map[string][]*NodeHolding, len(h.Nodes))
	for i := range h.Nodes {
		nh := &h.Nodes[i]
		switch {
		case !nh.Held:
		case nh.Layout == layoutPlain:
			groups["v:"+nh.Value] = append(groups["v:"+nh.Value], nh)
		case nh.Layout == layoutOwner:
			groups["o:"+nh.Owner] = append(groups["o:"+nh.Owner], nh)
		case nh.Layout == layoutRead:
			groups["r"] = append(groups["r"], nh)
		case nh.Layout == layoutSem:
			k := "s:" + strconv.Itoa(nh.Permits)
			groups[k] = append(groups[k], nh)
		}
	}
	var holders []*NodeHolding
	quorum, largestSem := h.Quorum, 0
	for _, g := range groups {
		q := h.Quorum
		if g[0].Layout == layoutSem {
			q = semaphoreQuorum(len(h.Nodes), g[0].Permits)
			if len(g) > largestSem {
				// Unheld, the key is still a semaphore's: report its
				// permits and quorum.
				largestSem, h.Permits, h.Quorum = len(g), g[0].Permits, q
			}
		}
		// A quorum is at least a majority: at most one holder has one.
		if len(g) >= q && semHeld(g, q) {
			holders, quorum = g, q
		}
	}
	if holders == nil {
		return
	}
	// The verdict is the holder's: a semaphore's permits and quorum only
	// when the holder is that semaphore.
	h.Held, h.Quorum, h.Permits = true, quorum, 0
	first := holders[0]
	if first.Layout == layoutPlain {
		h.Token, h.Tokens, h.Label, h.Count = first.Value, []string{first.Value}, first.Label, 1
	} else {
		h.Owner, h.Shared = first.Owner, first.Layout == layoutRead
		h.Permits = first.Permits
		counts := make([]int64, len(holders))
		seen := make(map[string]int)
		for i, nh := range holders {
			counts[i] = nh.Count
			for _, tk := range nh.Tokens {
				seen[tk]++
			}
		}
		slices.Sort(counts)
		h.Count = counts[len(counts)-h.Quorum]
		for tk, k := range seen {
			if k >= h.Quorum {
				h.Tokens = append(h.Tokens, tk)
			}
		}
		slices.Sort(h.Tokens)
		if h.Permits > 0 {
			h.Count = int64(len(h.Tokens))
		}
		if len(h.Tokens) > 0 {
			h.Token, h.Label = h.Tokens[0], labelOf(h.Tokens[0])
		}
	}

	// The quorum-th longest PTTL: that many nodes hold the key at least
	// that long. A key without expiry lasts longer than any other.
	pttls := make([]time.Duration, len(holders))
	for i, nh := range holders {
		pttls[i] = nh.PTTL
		if nh.PTTL < 0 {
			pttls[i] = forever
		}
	}
	slices.Sort(pttls)
	p := pttls[len(pttls)-h.Quorum]
	if p == forever {
		h.NoExpiry = true
		return
	}
	// Each node counts its PTTL on its own clock, which may run fast: the
	// same allowance as a lock's validity. The PTTLs were read at some
	// instant of the call, so all of its time is taken off.
	h.Remaining = max(validity(p, took, clockDrift(p, driftFactor)), 0)
}
