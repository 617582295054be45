package redlock

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// This file is what a Client remembers of its nodes' failures: the last
// one of each node, which names the cause of a later timeout, and the
// failures that retrying will not fix, which it logs once per node and
// kind, so that a wrong password or an unknown host is said at once rather
// than found in the error of a Lock that gave up.

// nodeFaults is a Client's memory of its nodes' failures. It is safe for
// concurrent use; its zero value remembers nothing until init.
type nodeFaults struct {
	c *Client
	// last holds, per node, its last failure that can explain why it does
	// not answer (a network error, a refused connection setup), until it
	// answers without one.
	last []atomic.Pointer[nodeFault]

	mu     sync.Mutex
	logged map[faultKey]struct{} // guarded by mu; the warnings given
}

// nodeFault is one failure of a node.
type nodeFault struct{ err error }

// faultKey names one warning: a node and a kind of failure.
type faultKey struct {
	node int
	kind string
}

// The kinds of failure that retrying will not fix.
const (
	faultAuth   = "auth"   // the server refused the credentials
	faultDB     = "db"     // the server refused the DB
	faultDNS    = "dns"    // the node's host name does not resolve
	faultNoPerm = "noperm" // the ACL user may not run a command we need
	// The node cannot confirm fsyncs (WithFsyncAck): it answers, so these
	// explain no silence.
	faultNoWAITAOF = "nowaitaof"  // the server has no WAITAOF
	faultAOFOff    = "appendonly" // appendonly is off
)

// faultHints says, per kind, what the operator should look at.
var faultHints = map[string]string{
	faultAuth:   "the server refused the credentials: check the password and ACL user of the node's go-redis options",
	faultDB:     "the server refused the DB: check the DB number of the node's go-redis options (only 0 on a Redis Cluster)",
	faultDNS:    "the node's host name does not resolve: check its address",
	faultNoPerm: "the ACL user may not run a command the library needs: see Client.Check",
	faultNoWAITAOF: "the server lacks WAITAOF, so WithFsyncAck counts none of its votes: " +
		"upgrade it to Redis 7.2+ or Valkey 7.2+, or turn WithFsyncAck off",
	faultAOFOff: "appendonly is off, so WithFsyncAck counts none of its votes: " +
		"CONFIG SET appendonly yes and appendfsync always (then CONFIG REWRITE), or turn WithFsyncAck off",
}

func (f *nodeFaults) init(c *Client) {
	f.c = c
	f.last = make([]atomic.Pointer[nodeFault], len(c.nodes))
}

// seen takes note of a node's reply: its failure, or that it answered.
func (f *nodeFaults) seen(rp reply) {
	if rp.err == nil {
		if f.last[rp.i].Load() != nil {
			f.last[rp.i].Store(nil)
		}
		return
	}
	f.failed(rp.i, rp.err)
}

// failed takes note of a node's failure: it keeps it when it can explain a
// later silence, and logs, once per node and kind, one that retrying will
// not fix. Any other answer of the node, an error reply or a refusal of
// ours, clears what was kept: the node is reachable.
func (f *nodeFaults) failed(i int, err error) {
	kind := persistentKind(err)
	switch {
	case kind == faultNoWAITAOF || kind == faultAOFOff:
		if f.last[i].Load() != nil {
			f.last[i].Store(nil) // the node answered
		}
	case kind != "" || connFailure(err):
		f.last[i].Store(&nodeFault{err: err})
	case errors.Is(err, ErrNodeTimeout) || errors.Is(err, ErrInFlight):
		return // no news of the node
	default:
		if f.last[i].Load() != nil {
			f.last[i].Store(nil)
		}
		return
	}
	if kind == "" {
		return
	}
	k := faultKey{node: i, kind: kind}
	f.mu.Lock()
	_, done := f.logged[k]
	if !done {
		if f.logged == nil {
			f.logged = make(map[faultKey]struct{})
		}
		f.logged[k] = struct{}{}
	}
	f.mu.Unlock()
	if done {
		return
	}
	n := f.c.nodes[i]
	f.c.log.Warn("redlock: node error that retrying will not fix: "+faultHints[kind],
		"node", i, "addr", n.addr, "kind", kind, "err", err)
}

// explain returns the error of a node's vote with the node's last failure,
// when the vote failed for want of an answer (a timeout, or busy with an
// earlier request) and a failure is known: likely the reason.
func (f *nodeFaults) explain(i int, err error) error {
	if err == nil || f.last == nil {
		return err
	}
	te, isTimeout := err.(*timeoutError)
	if !isTimeout && err != ErrInFlight && !errors.Is(err, ErrNodeTimeout) {
		return err
	}
	last := f.last[i].Load()
	if last == nil {
		return err
	}
	if isTimeout {
		// A round's timed-out votes share one error: copy it.
		cp := *te
		cp.last = last.err
		return &cp
	}
	return &withLast{err: err, last: last.err}
}

// persistentKind returns the kind of a failure that retrying will not fix,
// or "": the server refused the credentials (WRONGPASS, NOAUTH, a password
// the server does not have) or the DB, the host name does not resolve, the
// ACL user may not run a command (NOPERM), or, with WithFsyncAck, the
// server lacks WAITAOF or runs with appendonly off.
func persistentKind(err error) string {
	var dns *net.DNSError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return faultDNS
		}
		return ""
	case isAuthErr(err) || redis.HasErrorPrefix(err, "ERR Protocol error: unauthenticated"):
		// Redis closes an unauthenticated connection that sends a large
		// request (a script) with that error, rather than NOAUTH.
		return faultAuth
	case isDBErr(err):
		return faultDB
	case redis.IsPermissionError(err):
		return faultNoPerm
	case errors.Is(err, errNoWAITAOF):
		return faultNoWAITAOF
	case errors.Is(err, errAOFOff):
		return faultAOFOff
	}
	return ""
}

// connFailure reports a failure of the connection to a node, rather than
// of a command on it: a network error other than a timeout (refused, reset,
// unreachable), or the node closing the connection.
func connFailure(err error) bool {
	if errors.Is(err, ErrNodeTimeout) {
		return false // ours: a timeout explains nothing more
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return !ne.Timeout()
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
