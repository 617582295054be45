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
	numScripts
)

// scripts is every script the library sends, by scriptID.
var scripts = [numScripts]luaScript{
	scriptAcquire: compose("acquire.lua", holdsLib),
	scriptRelease: compose("release.lua", holdsLib),
	// Without the prelude, whose functions Redis would make anew on every
	// call: see the file's header.
	scriptReleasePlain: compose("releaseplain.lua"),
	scriptExtend:       compose("extend.lua", holdsLib),
	scriptFence:        compose("fence.lua", holdsLib),
	scriptSemAcquire:   compose("semacquire.lua", holdsLib),
	scriptSemRelease:   compose("semrelease.lua", holdsLib),
	scriptSemExtend:    compose("semextend.lua", holdsLib),
	scriptRLock:        compose("rlock.lua", holdsLib, rwholdsLib),
	scriptRUnlock:      compose("runlock.lua", holdsLib, rwholdsLib),
	scriptRExtend:      compose("rextend.lua", holdsLib, rwholdsLib),
}

// evalCmd builds EVALSHA of a script, or EVAL when eval is set, with its
// KEYS, then args and tail as its ARGV, in dst's backing array when they
// fit: a job keeps one, so that the hot path does not allocate them.
func evalCmd(dst []any, id scriptID, eval bool, keys, tail []any, args ...any) *redis.Cmd {
	s := &scripts[id]
	dst = dst[:0]
	if eval {
		dst = append(dst, "eval", s.srcArg)
	} else {
		dst = append(dst, "evalsha", s.shaArg)
	}
	dst = append(dst, len(keys))
	dst = append(dst, keys...)
	dst = append(dst, args...)
	dst = append(dst, tail...)
	return redis.NewCmd(context.Background(), dst...)
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

// lua returns the lock's script, or sem for a semaphore's permit: both take
// the same KEYS and ARGV.
func (t *target) lua(lock, sem scriptID) scriptID {
	if t.permits > 0 {
		return sem
	}
	return lock
}

// evalAcquire builds the acquire script's command for attempt tk of the
// target: rlock.lua for a reader, semacquire.lua for a permit, and
// acquire.lua for a lock. ttlArg is ttl in milliseconds, boxed once for
// every node.
func (t *target) evalAcquire(eval bool, tk token, ttl time.Duration, ttlArg any, h *testHooks) *redis.Cmd {
	switch {
	case t.reader:
		return evalCmd(nil, scriptRLock, eval, t.relKeys, nil, rlockArgs(tk, ttlArg, h)...)
	case t.permits > 0:
		return evalCmd(nil, scriptSemAcquire, eval, t.skargs, nil, semAcquireArgs(t, tk, ttl)...)
	}
	return evalCmd(nil, scriptAcquire, eval, t.skargs, nil, acquireArgs(t, tk, ttl)...)
}

// acquireArgs are the ARGV of acquire.lua.
func acquireArgs(t *target, tk token, ttl time.Duration) []any {
	fence := "0"
	if t.fence != nil {
		fence = "1"
	}
	return []any{tk.value, t.owner, ttl.Milliseconds(), len(t.rkeys), fence, tk.id, tk.n}
}

// semAcquireArgs are the ARGV of semacquire.lua.
func semAcquireArgs(t *target, tk token, ttl time.Duration) []any {
	return []any{tk.value, ttl.Milliseconds(), t.permits, tk.id, tk.n}
}

// rlockArgs are the ARGV of rlock.lua.
func rlockArgs(tk token, ttlArg any, h *testHooks) []any {
	pref := "0"
	if h.noWriterPref {
		pref = "1"
	}
	return []any{tk.value, ttlArg, tk.id, tk.n, pref}
}

// markArgs are the arguments of the command that sets a waiting marker: a
// release script announces the release of a marked key, and deletes the
// marker with it. A writer's marker is "1", and overwrites a reader's; rlock.lua refuses
// new readers while it is there. A reader's is "r", set only where no
// marker is, so that it never hides a waiting writer.
func markArgs(t *target, marker string, ttlArg any) []any {
	if t.reader {
		return []any{"set", marker, "r", "px", ttlArg, "nx"}
	}
	return []any{"set", marker, "1", "px", ttlArg}
}

// evalRelease builds the release command of the target's hold with the
// given value on node n, in dst's backing array when it fits: runlock.lua
// for a reader, releaseplain.lua for one plain key off a cluster, and
// release.lua (semrelease.lua for a permit) otherwise. A release that does
// not announce (a rollback) leaves the waiters' markers.
func (t *target) evalRelease(dst []any, eval bool, n *node, value any, announce bool) *redis.Cmd {
	var chans []any // the release channels: none for a rollback
	var channel any = ""
	if announce {
		chans, channel = t.chanArgs, t.chanArgs[0]
	}
	switch {
	case t.reader:
		return evalCmd(dst, scriptRUnlock, eval, t.relKeys, nil, value, channel, n.shardArg)
	case t.plainSingle() && n.cluster == nil:
		return evalCmd(dst, scriptReleasePlain, eval, t.relKeys, nil, value, channel)
	}
	return evalCmd(dst, t.lua(scriptRelease, scriptSemRelease), eval, t.relKeys, chans, value, t.ownerArg, n.shardArg)
}

// evalExtend builds the extend command of the target's hold with the given
// value, in dst's backing array when it fits: extend.lua for a lock
// (semextend.lua for a permit), rextend.lua for a reader.
func (t *target) evalExtend(dst []any, eval bool, value any, ttl time.Duration) *redis.Cmd {
	if t.reader {
		return evalCmd(dst, scriptRExtend, eval, t.kargs, nil, value, ttl.Milliseconds())
	}
	return evalCmd(dst, t.lua(scriptExtend, scriptSemExtend), eval, t.kargs, nil, value, t.ownerArg, ttl.Milliseconds())
}

// evalFence builds fence.lua's command, which writes fence back on the
// target's counters while the node holds value.
func (t *target) evalFence(eval bool, value string, fence int64) *redis.Cmd {
	return evalCmd(nil, scriptFence, eval, t.skargs, nil, value, t.ownerArg, fence, len(t.rkeys))
}
