package redlock

import (
	"context"
	"embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the library's table of Lua scripts, the argument builder of
// each, and the one place that sends a script again as EVAL after a
// NOSCRIPT reply. The sources are the files of scripts/: each opens with a
// comment that names its KEYS and ARGV.

// scriptFiles holds the scripts' sources.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// The shared library, which the scripts are composed from: a script's
// source is the library files it names, in order, then its own file.
const (
	// holdsLib is the prelude of every lock script: what holding a key
	// means, and the only functions that write an expiry, none of which
	// ever shortens the expiry of a hold of ours.
	holdsLib = "holds.lua"
	// rwholdsLib is the read locks' part, after holds.lua.
	rwholdsLib = "rwholds.lua"
	// queueLib is a fair lock's queue, after holds.lua.
	queueLib = "queue.lua"
)

// luaScript is one entry of the scripts table: a script composed from the
// library, as sent to the nodes. It is never changed once built.
type luaScript struct {
	name string // its own file in scripts/
	src  string // what EVAL sends: the library files it needs, then name
	sha  string // src's SHA1, which EVALSHA names
	// shaArg and srcArg are sha and src, boxed once for the commands'
	// arguments, so that building a command does not allocate them.
	shaArg, srcArg any
}

// compose builds the script of file name: the library files lib, in order,
// then name. It panics when a file is missing, which is a build mistake.
func compose(name string, lib ...string) luaScript {
	var src []byte
	for _, f := range append(lib, name) {
		b, err := scriptFiles.ReadFile("scripts/" + f)
		if err != nil {
			panic("redlock: " + err.Error())
		}
		src = append(src, b...)
	}
	s := luaScript{name: name, src: string(src), sha: redis.NewScript(string(src)).Hash()}
	s.shaArg, s.srcArg = s.sha, s.src
	return s
}

// scriptID names one script of the table.
type scriptID uint8

const (
	scriptAcquire scriptID = iota
	scriptRelease
	// scriptReleasePlain is scriptRelease for one plain key off a cluster.
	scriptReleasePlain
	scriptExtend
	scriptFence
	scriptSemAcquire
	scriptSemRelease
	scriptSemExtend
	scriptRLock
	scriptRUnlock
	scriptRExtend
	// scriptTopUp asks a node that did not vote yes to take the key
	// (WithTopUp).
	scriptTopUp
	// scriptValidateFence reads a node's view of a fence
	// (Client.ValidateFence).
	scriptValidateFence
	// scriptReleaseLater lets a hold expire at the end of its minimum hold
	// rather than delete it (WithMinHold).
	scriptReleaseLater
	// scriptTicket draws a fair waiter's ticket (WithFair).
	scriptTicket
	// scriptFairAcquire is a fair lock's attempt: it queues the call and
	// takes the key only for the head of the queue (WithFair).
	scriptFairAcquire
	// scriptFairLeave takes a fair call out of the queue.
	scriptFairLeave
	// scriptTerm writes an election's term record (Election.Campaign).
	scriptTerm
	numScripts
)

// scripts is every script the library sends, by scriptID.
var scripts = [numScripts]luaScript{
	scriptAcquire: compose("acquire.lua", holdsLib),
	scriptRelease: compose("release.lua", holdsLib),
	// Without the prelude, whose functions Redis would make anew on every
	// call: see the file's header.
	scriptReleasePlain:  compose("releaseplain.lua"),
	scriptExtend:        compose("extend.lua", holdsLib),
	scriptFence:         compose("fence.lua", holdsLib),
	scriptSemAcquire:    compose("semacquire.lua", holdsLib),
	scriptSemRelease:    compose("semrelease.lua", holdsLib),
	scriptSemExtend:     compose("semextend.lua", holdsLib),
	scriptRLock:         compose("rlock.lua", holdsLib, rwholdsLib),
	scriptRUnlock:       compose("runlock.lua", holdsLib, rwholdsLib),
	scriptRExtend:       compose("rextend.lua", holdsLib, rwholdsLib),
	scriptTopUp:         compose("topup.lua", holdsLib),
	scriptValidateFence: compose("validatefence.lua"),
	scriptReleaseLater:  compose("releaselater.lua", holdsLib),
	scriptTicket:        compose("ticket.lua", holdsLib, queueLib),
	scriptFairAcquire:   compose("fairacquire.lua", holdsLib, queueLib),
	scriptFairLeave:     compose("fairleave.lua", holdsLib, queueLib),
	scriptTerm:          compose("term.lua", holdsLib),
}

// evalStart starts the command of script id in dst's backing array, when
// it fits: EVALSHA and the script's SHA, or EVAL and its source when eval is
// set. The script's argument builder appends its KEYS and ARGV. A job keeps
// an array for its commands, so that the hot path does not allocate them.
func evalStart(dst []any, id scriptID, eval bool) []any {
	s := &scripts[id]
	if eval {
		return append(dst[:0], "eval", s.srcArg)
	}
	return append(dst[:0], "evalsha", s.shaArg)
}

// withKeys appends a script's KEYS: their number, then the keys.
func withKeys(dst, keys []any) []any {
	dst = append(dst, len(keys))
	return append(dst, keys...)
}

// evalFallback is how a job sends its scripts: as EVALSHA, which names a
// script by its SHA, until the node answers NOSCRIPT (it restarted, or its
// script cache was flushed), and from then on as EVAL, which carries the
// source and caches it again. Every job that runs a script embeds one, and
// builds its commands with eval. The zero value sends EVALSHA.
type evalFallback struct {
	eval bool // set after a NOSCRIPT reply
}

// resendAsEval reports whether the job must send its commands again as
// EVAL: one of cmds, sent as EVALSHA, was answered NOSCRIPT. It is true at
// most once; an EVAL is never answered NOSCRIPT.
//
// NOSCRIPT means that the copy of the command which got it did nothing. It
// says nothing of an earlier copy that go-redis wrote before a connection
// failed, which may have run before the node lost its scripts: a job whose
// outcome depends on that counts the copies itself (see releaseJob.resent).
func (f *evalFallback) resendAsEval(cmds ...*redis.Cmd) bool {
	if f.eval {
		return false
	}
	for _, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			f.eval = true
			return true
		}
	}
	return false
}

// isNoScript reports a NOSCRIPT reply: the node lost its script cache, and
// the EVALSHA did nothing.
func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// acquireScript, releaseScript and extendScript are the scripts of a
// flavour (see flavour.go): each a script of the table, and the builder that
// appends its KEYS and ARGV, as its header names them, to a command that
// evalStart began.
type (
	acquireScript struct {
		id scriptID
		// args builds them for attempt tk of t; ttl is the TTL the
		// validity counts from, and ttlArg what the nodes keep the keys
		// for: ttl plus the lock-delay (config.nodeTTL), in milliseconds,
		// boxed once for every node. The builders send ttlArg.
		args func(dst []any, t *target, tk token, ttl time.Duration, ttlArg any, h *testHooks) []any
	}
	releaseScript struct {
		id scriptID
		// args builds them for the release of t's hold with the given
		// value on node n; announce is false for a rollback, which leaves
		// the waiters' markers.
		args func(dst []any, t *target, n *node, value any, announce bool) []any
	}
	extendScript struct {
		id scriptID
		// args builds them for the extension of t's hold with the given
		// value to ttl.
		args func(dst []any, t *target, value any, ttl time.Duration) []any
	}
)

// evalAcquire builds the command of the flavour's acquire script for
// attempt tk of the target. ttlArg is what the nodes keep the keys for (ttl
// plus the lock-delay) in milliseconds, boxed once for every node.
func (t *target) evalAcquire(eval bool, tk token, ttl time.Duration, ttlArg any, h *testHooks) *redis.Cmd {
	s := &t.fl.acquire
	// Room for the longest: acquire.lua's 7 ARGV after the head and KEYS.
	dst := make([]any, 0, 10+len(t.skargs)+len(t.relKeys))
	return redis.NewCmd(context.Background(), s.args(evalStart(dst, s.id, eval), t, tk, ttl, ttlArg, h)...)
}

// evalRelease builds the command of the flavour's release script for the
// target's hold with the given value on node n, in dst's backing array when
// it fits: the flavour's releaseOne for one key without a fence counter off
// a Redis Cluster. A release that does not announce (a rollback) leaves the
// waiters' markers.
func (t *target) evalRelease(dst []any, eval bool, n *node, value any, announce bool) *redis.Cmd {
	s := &t.fl.release
	if len(t.rkeys) == 1 && t.fence == nil && n.cluster == nil {
		s = &t.fl.releaseOne
	}
	return redis.NewCmd(context.Background(), s.args(evalStart(dst, s.id, eval), t, n, value, announce)...)
}

// evalExtend builds the command of the flavour's extend script for the
// target's hold with the given value, in dst's backing array when it fits.
func (t *target) evalExtend(dst []any, eval bool, value any, ttl time.Duration) *redis.Cmd {
	s := &t.fl.extend
	return redis.NewCmd(context.Background(), s.args(evalStart(dst, s.id, eval), t, value, ttl)...)
}

// evalFence builds fence.lua's command, which writes fence back on the
// target's counters while the node holds value. Only the flavours that
// may be fenced, a plain or an owner lock, send it.
//
// KEYS: the lock keys, then their fence counters. ARGV: the value, the
// owner, the fence, the number of lock keys.
func (t *target) evalFence(eval bool, value string, fence int64) *redis.Cmd {
	dst := make([]any, 0, 7+len(t.skargs))
	args := append(withKeys(evalStart(dst, scriptFence, eval), t.skargs), value, t.ownerArg, fence, len(t.rkeys))
	return redis.NewCmd(context.Background(), args...)
}

// lockAcquireArgs builds acquire.lua's, for a plain or an owner lock.
// KEYS: the lock keys, then their fence counters with fencing. ARGV: the
// value, the owner ("" for a plain lock), the TTL the nodes keep the keys
// for, the number of lock keys, '1' with fencing, the acquisition's id, the
// attempt's number.
func lockAcquireArgs(dst []any, t *target, tk token, _ time.Duration, ttlArg any, _ *testHooks) []any {
	fence := "0"
	if t.fence != nil {
		fence = "1"
	}
	return append(withKeys(dst, t.skargs), tk.value, t.owner, ttlArg, len(t.rkeys), fence, tk.id, tk.n)
}

// semAcquireArgs builds semacquire.lua's, for a permit. KEYS: the
// semaphore key. ARGV: the value, the TTL the node keeps the permit for,
// the permits, the acquisition's id, the attempt's number.
func semAcquireArgs(dst []any, t *target, tk token, _ time.Duration, ttlArg any, _ *testHooks) []any {
	return append(withKeys(dst, t.skargs), tk.value, ttlArg, t.fl.permits, tk.id, tk.n)
}

// rlockArgs builds rlock.lua's, for a reader. KEYS: the lock key, its
// waiting marker. ARGV: the value, the TTL the node keeps the reader for,
// the acquisition's id, the attempt's number, '1' to ignore waiting writers
// (the noWriterPref test switch).
func rlockArgs(dst []any, t *target, tk token, _ time.Duration, ttlArg any, h *testHooks) []any {
	pref := "0"
	if h.noWriterPref {
		pref = "1"
	}
	return append(withKeys(dst, t.relKeys), tk.value, ttlArg, tk.id, tk.n, pref)
}

// lockReleaseArgs builds release.lua's, and semrelease.lua's, which takes
// the same. KEYS: the lock keys, then their waiting markers. ARGV: the
// value, the owner ("" but for an owner lock), '1' on a Redis Cluster node,
// then the keys' release channels, none for a rollback.
func lockReleaseArgs(dst []any, t *target, n *node, value any, announce bool) []any {
	dst = append(withKeys(dst, t.relKeys), value, t.ownerArg, n.shardArg)
	if announce {
		dst = append(dst, t.chanArgs...)
	}
	return dst
}

// releasePlainArgs builds releaseplain.lua's. KEYS: the lock key, its
// waiting marker. ARGV: the value, the key's release channel ("" for a
// rollback).
func releasePlainArgs(dst []any, t *target, _ *node, value any, announce bool) []any {
	return append(withKeys(dst, t.relKeys), value, t.channel(announce))
}

// runlockArgs builds runlock.lua's, for a reader. KEYS: the lock key, its
// waiting marker. ARGV: the value, the key's release channel ("" for a
// rollback), '1' on a Redis Cluster node.
func runlockArgs(dst []any, t *target, n *node, value any, announce bool) []any {
	return append(withKeys(dst, t.relKeys), value, t.channel(announce), n.shardArg)
}

// channel is the release channel argument of the scripts that release one
// key: the key's channel, or "" for a rollback, which announces nothing.
func (t *target) channel(announce bool) any {
	if announce {
		return t.chanArgs[0]
	}
	return ""
}

// lockExtendArgs builds extend.lua's, and semextend.lua's, which takes the
// same. KEYS: the lock keys. ARGV: the value, the owner ("" but for an
// owner lock), the TTL plus the target's lock-delay: what the nodes keep
// the keys for.
func lockExtendArgs(dst []any, t *target, value any, ttl time.Duration) []any {
	return append(withKeys(dst, t.kargs), value, t.ownerArg, (ttl + t.delay).Milliseconds())
}

// rextendArgs builds rextend.lua's, for a reader. KEYS: the lock key.
// ARGV: the value, the TTL plus the target's lock-delay.
func rextendArgs(dst []any, t *target, value any, ttl time.Duration) []any {
	return append(withKeys(dst, t.kargs), value, (ttl + t.delay).Milliseconds())
}

// writerMark is the command that sets a waiting writer's marker (or a
// permit's): a release script announces the release of a marked key, and
// deletes the marker with it. A writer's marker is "1", and overwrites a
// reader's; rlock.lua refuses new readers while it is there.
func writerMark(marker string, ttlArg any) []any {
	return []any{"set", marker, "1", "px", ttlArg}
}

// readerMark is the command that sets a waiting reader's marker: "r", set
// only where no marker is, so that it never hides a waiting writer.
func readerMark(marker string, ttlArg any) []any {
	return []any{"set", marker, "r", "px", ttlArg, "nx"}
}

// evalReleaseLater builds releaselater.lua's command, in dst's backing
// array when it fits: the release of the target's hold with the given
// value before the end of its minimum hold (WithMinHold), which lets the
// keys expire in left rather than delete them. cut says the keys outlive
// left on the nodes that hold the lock, so that the script shortens them;
// otherwise it only lengthens (see the script's ARGV[4]).
//
// KEYS: the lock keys. ARGV: the value, the owner ("" but for an owner
// lock), left in milliseconds, rounded up and at least 1, '1' to cut or
// '0'.
func (t *target) evalReleaseLater(dst []any, eval bool, value any, left time.Duration, cut bool) *redis.Cmd {
	ms := max(int64((left+time.Millisecond-1)/time.Millisecond), 1)
	mode := "0"
	if cut {
		mode = "1"
	}
	args := append(withKeys(evalStart(dst, scriptReleaseLater, eval), t.kargs), value, t.ownerArg, ms, mode)
	return redis.NewCmd(context.Background(), args...)
}
