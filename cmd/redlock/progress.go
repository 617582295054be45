package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// When run and lock report on a wait for the lock. A wait that the nodes
// hold up, not a holder, is reported firstReport after it began (well
// within 5s, however the attempts fall), then every reportEvery. A test
// may shorten them; users cannot.
var (
	firstReport = 3 * time.Second
	reportEvery = 30 * time.Second
	reportPoll  = 250 * time.Millisecond // how often the watcher looks
)

// progress is run's Observer while it waits for the lock: it keeps what
// the attempts found on each node, so that a wait held up by an outage is
// never silent, and it reports each node's lasting misconfiguration (a
// wrong password, a missing database...) as soon as an attempt meets it.
// It is safe for concurrent use.
type progress struct {
	key     string
	permits int // a semaphore's permits; 0 for a lock
	verbose bool
	// once is set when run tries once: the message it exits with names
	// the failing nodes, so only a won attempt reports them here.
	once bool
	say  func(format string, args ...any)

	mu       sync.Mutex
	attempts int             // guarded by mu; the attempts that ended, but for those cut short
	quorum   int             // guarded by mu
	nodes    []nodeSeen      // guarded by mu; what the attempts found on each node
	last     attemptSummary  // guarded by mu; the last attempt the wait did not cut short
	since    time.Time       // guarded by mu; when the outage of last began
	told     map[string]bool // guarded by mu; "node/kind" of the lasting faults reported
	outage   bool            // guarded by mu; an outage was reported, and no recovery since
}

// nodeSeen is the last answer of one node, or its last failure. A round
// is decided as soon as a quorum is won or out of reach, and does not wait
// for the other nodes: the rounds before it may have heard from them.
type nodeSeen struct {
	addr   string
	seen   bool   // it answered, or failed
	failed bool   // its last request failed
	why    string // why it failed
}

// attemptSummary is what run reports of one failed attempt. It is worked
// out when the attempt ends: the error's text may change once Lock returns
// it.
type attemptSummary struct {
	unavailable bool   // too few nodes answered
	err         string // the attempt's error, without the library's prefix
}

func newProgress(cfg *runConfig, say func(string, ...any)) *progress {
	return &progress{key: cfg.key, permits: cfg.permits, verbose: cfg.verbose, once: cfg.tryOnce(), say: say, told: map[string]bool{}}
}

// options returns the options that make p the Client's Observer, and its
// logger: the library logs a lasting fault of a node once, even one that
// came after its round was decided, which the Observer never sees (a
// minority of misconfigured nodes under a lock that was won).
func (p *progress) options() []redlock.Option {
	return []redlock.Option{redlock.WithObserver(p), redlock.WithLogger(slog.New(logHandler{p}))}
}

// logHandler passes the library's warnings about a node on to progress:
// the lasting faults, reported once per node and kind as the Observer's
// are, and a read-only replica, which can never vote yes. The rest run
// reports itself (a lost lock), or is not for a command line.
type logHandler struct{ p *progress }

func (h logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h logHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h logHandler) WithGroup(string) slog.Handler                { return h }

func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	v := redlock.NodeVote{Index: -1, Vote: redlock.VoteFailed}
	kind := ""
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "node":
			v.Index = int(a.Value.Int64())
		case "addr":
			v.Addr = a.Value.String()
		case "kind":
			kind = a.Value.String()
		case "err":
			if err, ok := a.Value.Any().(error); ok {
				v.Err = err
			}
		}
		return true
	})
	switch {
	case v.Index < 0:
	case kind != "" && v.Err != nil:
		h.p.reportLasting([]redlock.NodeVote{v})
	case strings.Contains(r.Message, "read-only replica"):
		h.p.sayOnce(strconv.Itoa(v.Index)+"/replica", "warning: node %d %s is a read-only replica: it can never vote yes; give the masters", v.Index, v.Addr)
	}
	return nil
}

// sayOnce says a message once per id.
func (p *progress) sayOnce(id, format string, args ...any) {
	p.mu.Lock()
	told := p.told[id]
	p.told[id] = true
	p.mu.Unlock()
	if !told {
		p.say(format, args...)
	}
}

// Attempted records the attempt, and reports the lasting faults it met.
func (p *progress) Attempted(s redlock.Stats, err error) {
	if err == nil || !p.once {
		p.reportLasting(s.Nodes)
	}
	// Worked out before mu is taken: error texts are not quick to make.
	var sum attemptSummary
	cut := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	if err != nil && !cut {
		sum = attemptSummary{unavailable: errors.Is(err, redlock.ErrUnavailable), err: bare(err)}
	}
	whys := make([]string, len(s.Nodes))
	for i, v := range s.Nodes {
		if v.Vote == redlock.VoteFailed {
			whys[i] = classify(v.Err).text
		}
	}
	began := time.Now().Add(-s.Elapsed)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.quorum = s.Quorum
	for i, v := range s.Nodes {
		for v.Index >= len(p.nodes) {
			p.nodes = append(p.nodes, nodeSeen{})
		}
		n := &p.nodes[v.Index]
		n.addr = v.Addr
		switch {
		case v.Vote == redlock.VoteYes, v.Vote == redlock.VoteNo:
			*n = nodeSeen{addr: v.Addr, seen: true}
		case v.Vote != redlock.VoteFailed:
		case errors.Is(v.Err, redlock.ErrInFlight) && n.failed:
			// Still busy with the request that failed before.
		default:
			n.seen, n.failed, n.why = true, true, whys[i]
		}
	}
	if err == nil || cut {
		// Won, or cut short by the end of the wait: the votes of a round
		// cut short show only who had not answered yet.
		return
	}
	if sum.unavailable && (p.attempts == 0 || !p.last.unavailable) {
		p.since = began
	}
	p.attempts++
	p.last = sum
}

// unavailable says which nodes failed, and why, by what the attempts
// found: "3 of 5 nodes unavailable (quorum 3): node 0 host:port: connection
// refused; ...". It returns "" before the first attempt.
func (p *progress) unavailable() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.nodes) == 0 {
		return ""
	}
	n, failed, answered := len(p.nodes), 0, 0
	var ns, silent []nodeNote
	for i, s := range p.nodes {
		switch {
		case s.failed:
			failed++
			ns = append(ns, nodeNote{i, s.addr, s.why})
		case s.seen:
			answered++
		default:
			silent = append(silent, nodeNote{i, s.addr, "no answer yet"})
		}
	}
	head := fmt.Sprintf("%d of %d nodes unavailable (quorum %d)", failed, n, p.quorum)
	if p.permits > 1 {
		head = fmt.Sprintf("%d of %d nodes unavailable (a semaphore of %d permits needs %d of %d nodes)", failed, n, p.permits, p.quorum, n)
	}
	if failed <= n-p.quorum {
		// The failures alone leave a quorum: the nodes that have not
		// answered yet count.
		head = fmt.Sprintf("only %d of %d nodes answered (quorum %d)", answered, n, p.quorum)
		ns = append(ns, silent...)
	}
	return head + ": " + describeNodes(ns)
}

// Extended does nothing.
func (*progress) Extended(redlock.Stats, error) {}

// Lost does nothing: run reports a loss itself.
func (*progress) Lost(string, error) {}

// Released does nothing.
func (*progress) Released(redlock.Stats, error) {}

// reportLasting says which nodes failed with a fault that waiting will not
// mend, once for each node and kind.
func (p *progress) reportLasting(votes []redlock.NodeVote) {
	var fresh []redlock.NodeVote
	p.mu.Lock()
	for _, v := range votes {
		if v.Vote != redlock.VoteFailed {
			continue
		}
		f := classify(v.Err)
		id := strconv.Itoa(v.Index) + "/" + strconv.Itoa(int(f.kind))
		if f.lasting() && !p.told[id] {
			p.told[id] = true
			fresh = append(fresh, v)
		}
	}
	p.mu.Unlock()
	if len(fresh) > 0 {
		p.say("%s (waiting will not mend this)", describeNodes(notes(fresh, "")))
	}
}

// watch reports the wait, from start, until stop or done is closed: within
// firstReport of an outage's start, and then every reportEvery while it
// lasts; once when the nodes recover; and with -verbose, a wait for a
// holder too.
func (p *progress) watch(start time.Time, stop, done <-chan struct{}) {
	tick := time.NewTicker(reportPoll)
	defer tick.Stop()
	next := start.Add(firstReport) // when the next report is due
	// vague is set once a report said only that no attempt had ended: the
	// first attempt that ends as an outage is reported at once.
	vague := false
	for {
		select {
		case <-stop:
			return
		case <-done:
			return
		case now := <-tick.C:
			p.mu.Lock()
			attempts, last, since, outage := p.attempts, p.last, p.since, p.outage
			p.mu.Unlock()
			waited := now.Sub(start).Round(time.Second)
			switch {
			case attempts == 0:
				// Not one attempt has ended: the nodes are slow to answer,
				// or hung, under a long -node-timeout.
				if now.Before(next) {
					continue
				}
				p.say("waiting for %q (%v so far): no attempt has ended yet: the nodes are slow to answer, or hung", p.key, waited)
				p.setOutage(true)
				vague = true
			case last.unavailable:
				if !outage || vague {
					// A new outage: reported firstReport after it began.
					next, vague = since.Add(firstReport), false
				}
				if now.Before(next) {
					continue
				}
				p.say("waiting for %q (%v so far): %s", p.key, waited, p.unavailable())
				p.setOutage(true)
			case outage:
				p.say("waiting for %q (%v so far): the nodes answer again, and it is held elsewhere", p.key, waited)
				p.setOutage(false)
			case p.verbose && !now.Before(next):
				p.say("waiting for %q (%v so far): it is held elsewhere: %s", p.key, waited, last.err)
			default:
				continue
			}
			next = now.Add(reportEvery)
		}
	}
}

func (p *progress) setOutage(b bool) {
	p.mu.Lock()
	p.outage = b
	p.mu.Unlock()
}

// inOutage reports whether an outage was reported, and no recovery since.
func (p *progress) inOutage() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outage
}

// nodesDown reports whether the last attempt failed for want of nodes.
func (p *progress) nodesDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts > 0 && p.last.unavailable
}

// nodeNote is what happened on one node, for a message.
type nodeNote struct {
	index int
	addr  string
	why   string
}

// notes says what happened on each node that failed, or was not waited
// for (notWaited; "" leaves them out).
func notes(votes []redlock.NodeVote, notWaited string) []nodeNote {
	var ns []nodeNote
	for _, v := range votes {
		switch {
		case v.Vote == redlock.VoteFailed:
			ns = append(ns, nodeNote{v.Index, v.Addr, classify(v.Err).text})
		case v.Vote == redlock.VoteNotWaited && notWaited != "":
			ns = append(ns, nodeNote{v.Index, v.Addr, notWaited})
		}
	}
	return ns
}

// describeNodes says what happened on the nodes, grouping the nodes that
// failed alike: "node 0 host:port, node 1 host:port: connection refused;
// node 2 host:port: timed out".
func describeNodes(ns []nodeNote) string {
	var (
		order []string
		nodes = map[string][]string{}
	)
	for _, n := range ns {
		if _, ok := nodes[n.why]; !ok {
			order = append(order, n.why)
		}
		nodes[n.why] = append(nodes[n.why], "node "+strconv.Itoa(n.index)+" "+n.addr)
	}
	parts := make([]string, len(order))
	for i, why := range order {
		parts[i] = strings.Join(nodes[why], ", ") + ": " + why
	}
	return strings.Join(parts, "; ")
}

// faultKind is the kind of a node's failure.
type faultKind int

const (
	faultOther faultKind = iota
	faultRefused
	faultTimeout
	// The kinds from here on are lasting: waiting does not mend them.
	faultAuth
	faultACL
	faultDB
	faultHost
)

// fault is a node's failure, in the user's words.
type fault struct {
	kind faultKind
	text string
}

func (f fault) lasting() bool { return f.kind >= faultAuth }

// classify says what err, the failure of a node, was. The words are run's:
// the library's errors speak of its own workings ("no reply for the
// command"), go-redis's of the dial ("dial tcp 10.0.0.1:6379: connect:
// connection refused").
func classify(err error) fault {
	if err == nil {
		return fault{faultOther, "failed"}
	}
	msg := err.Error()
	var re redis.Error
	if errors.As(err, &re) {
		msg = re.Error()
	}
	reply := strings.TrimSuffix(strings.TrimSpace(msg), ".")
	var dns *net.DNSError
	var errno syscall.Errno
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "ERR invalid password"):
		return fault{faultAuth, "authentication failed: " + reply}
	case strings.Contains(msg, "NOAUTH"):
		return fault{faultAuth, "a password is required: " + reply}
	case strings.Contains(msg, "NOPERM"):
		return fault{faultACL, "denied by the ACL: " + reply}
	case strings.Contains(msg, "DB index is out of range"), strings.Contains(msg, "ERR invalid DB index"):
		return fault{faultDB, "no such database: " + reply}
	case errors.As(err, &dns) && dns.IsNotFound:
		return fault{faultHost, "no such host " + dns.Name}
	case errors.Is(err, syscall.ECONNREFUSED):
		return fault{faultRefused, "connection refused"}
	case errors.Is(err, redlock.ErrNodeTimeout):
		return fault{faultTimeout, bare(err)}
	case isTimeout(err):
		return fault{faultTimeout, "timed out"}
	case errors.As(err, &errno):
		return fault{faultOther, errno.Error()}
	case errors.Is(err, io.EOF):
		return fault{faultOther, "connection closed by the server"}
	}
	return fault{faultOther, bare(err)}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// bare returns err's message without the library's "redlock: " prefix,
// to be embedded in one of run's own messages, which have their prefix.
func bare(err error) string { return strings.TrimPrefix(err.Error(), "redlock: ") }

// lossReason says why a lock was lost, from its Err, without the
// library's prefix and "lock lost: ", which the message says already.
func lossReason(err error) string {
	return strings.TrimPrefix(bare(err), strings.TrimPrefix(redlock.ErrLockLost.Error(), "redlock: ")+": ")
}
