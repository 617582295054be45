package redlock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock/internal/keyspace"
	"github.com/stretchr/testify/require"
)

// TestScriptsSetExpiryOnlyThroughPrelude checks the expiry rule of
// scripts/holds.lua where it is enforced: no script file but the prelude
// writes an expiry, so that the prelude's functions, which never shorten one
// that holds our value, are the only way to write one.
func TestScriptsSetExpiryOnlyThroughPrelude(t *testing.T) {
	expiry := regexp.MustCompile(`(?i)'(P?EXPIRE(AT)?|PX|EX|EXAT|PXAT|PERSIST|GETEX|SETEX|PSETEX)'`)
	zadd := regexp.MustCompile(`(?i)'ZADD'`)
	hsetField := regexp.MustCompile(`(?i)'HSET'.*'r:'`)
	files := scriptSources(t)
	require.Contains(t, files, holdsLib)
	for name, src := range files {
		if name == holdsLib {
			continue
		}
		for i, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			if expiry.MatchString(code) || hsetField.MatchString(code) ||
				(zadd.MatchString(code) && !strings.Contains(code, "'#permits')") && !(name == queueLib && strings.Contains(code, "'ZADD', q, ticket, id)"))) {
				t.Errorf("scripts/%s:%d writes an expiry itself: %s\nuse holds.lua's expireAtLeast, setAtLeast, expireAtAtLeast, hsetAtLeast or zaddAtLeast (expireAtLatest and expireAtMost shorten, for a release)", name, i+1, strings.TrimSpace(line))
			}
		}
	}
	for _, fn := range []string{"expireAtLeast", "setAtLeast", "expireAtAtLeast", "expireAtLatest", "expireAtMost", "hsetAtLeast", "zaddAtLeast"} {
		require.Contains(t, files[holdsLib], "local function "+fn+"(", "the prelude defines %s", fn)
	}
}

// scriptSources returns the files of scripts/, by name.
func scriptSources(t *testing.T) map[string]string {
	t.Helper()
	entries, err := fs.ReadDir(scriptFiles, "scripts")
	require.NoError(t, err)
	files := make(map[string]string, len(entries))
	for _, e := range entries {
		b, err := scriptFiles.ReadFile("scripts/" + e.Name())
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	return files
}

// TestScriptsTableHoldsEveryFile checks the table against scripts/: each
// entry is a file there, composed after the library files it needs, and
// each file there is an entry or a library file.
func TestScriptsTableHoldsEveryFile(t *testing.T) {
	files := scriptSources(t)
	used := map[string]bool{holdsLib: true, rwholdsLib: true, queueLib: true}
	for id, s := range scripts {
		require.NotEmpty(t, s.name, "scripts[%d] has no entry", id)
		require.False(t, used[s.name], "%s is in the table twice, or is a library file", s.name)
		used[s.name] = true
		own, ok := files[s.name]
		require.True(t, ok, "%s is not in scripts/", s.name)
		require.True(t, strings.HasSuffix(s.src, own), "%s: the composed source ends with the file", s.name)
		lib := strings.TrimSuffix(s.src, own)
		require.Contains(t, []string{"", files[holdsLib], files[holdsLib] + files[rwholdsLib], files[holdsLib] + files[queueLib]}, lib,
			"%s: composed after no library file, holds.lua, holds.lua then rwholds.lua, or holds.lua then queue.lua", s.name)
		require.Equal(t, s.sha, s.shaArg)
		require.Equal(t, s.src, s.srcArg)
	}
	for name := range files {
		require.True(t, used[name], "scripts/%s is neither in the table nor a library file", name)
	}
}

// run runs the script with go-redis's Script: EVALSHA, then
// EVAL after NOSCRIPT.
func (s luaScript) run(ctx context.Context, rc redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return redis.NewScript(s.src).Run(ctx, rc, keys, args...)
}

// TestScriptsRunOnTheirOwn sends every script of the table as the jobs
// build it, with KEYS and ARGV from the same builders, on miniredis and on a
// real redis-server, and requires the reply its header promises: no Lua
// error. A script that calls a library function it is not composed with,
// or whose arguments no longer match what its builder sends, fails here.
func TestScriptsRunOnTheirOwn(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rc.Close() })
		runEveryScript(t, rc)
	})
	t.Run("redis-server", func(t *testing.T) {
		_, cs := realNodes(t, 1)
		runEveryScript(t, cs[0].(*redis.Client))
	})
}

func runEveryScript(t *testing.T, rc *redis.Client) {
	ctx := t.Context()
	for _, s := range scripts {
		sha, err := rc.ScriptLoad(ctx, s.src).Result()
		require.NoError(t, err, "%s: SCRIPT LOAD", s.name)
		require.Equal(t, s.sha, sha, "%s: the SHA that EVALSHA names", s.name)
	}
	// EVAL, with the composed source: each script must run on its own.
	require.NoError(t, rc.ScriptFlush(ctx).Err())
	ran := make(map[scriptID]bool)
	// do sends cmd, and requires a reply of want, or of at least 1 when
	// want is -2 (a fenced acquire answers its fence).
	do := func(t *testing.T, what string, cmd *redis.Cmd, want int64) {
		t.Helper()
		for id := range scripts {
			if isScript(cmd, scriptID(id)) {
				ran[scriptID(id)] = true
			}
		}
		_ = rc.Process(ctx, cmd)
		got, err := cmd.Int64()
		require.NoError(t, err, "%s", what)
		if want == -2 {
			require.Positive(t, got, "%s: got %d, want at least 1", what, got)
			return
		}
		require.Equal(t, want, got, "%s: got %d, want %d", what, got, want)
	}
	const ttl = 10 * time.Second
	ttlArg := any(ttl.Milliseconds())
	hooks := &testHooks{}
	for _, shardArg := range []any{"0", "1"} {
		n := &node{shardArg: shardArg} // not a cluster node: one plain key uses releaseplain.lua
		flavours := []struct {
			name    string
			fl      *flavour
			rkeys   []string
			owner   string
			fencing bool
			acq     int64 // the acquire's reply
		}{
			{"plain", plainFlavour, []string{"run:plain"}, "", false, 1},
			{"multi", plainFlavour, []string{"{run}a", "{run}b"}, "", false, 1},
			{"owner", ownerFlavour, []string{"run:owner"}, "o", false, 1},
			{"fenced", plainFlavour, []string{"run:fenced"}, "", true, -2},
			{"reader", readerFlavour, []string{"run:reader"}, "", false, 1},
			{"permit", permitFlavour(2), []string{"run:permit"}, "", false, 1},
			{"fair", fairFlavour, []string{"run:fair"}, "", false, 1},
			{"fair fenced", fairFlavour, []string{"run:fairfenced"}, "", true, -2},
		}
		for _, f := range flavours {
			t.Run(fmt.Sprintf("%s/sharded=%s", f.name, shardArg), func(t *testing.T) {
				tg := newTarget(f.fl, f.rkeys, "0b7e2f9c-5a61-4a3e-9d1b-2c4f6e8a0b1d", f.owner, f.fencing, 1)
				first, second := attemptToken(tg.id, 0, ""), attemptToken(tg.id, 1, "")
				// A waiter marked the keys, so that a release announces.
				for _, m := range tg.waiting {
					require.NoError(t, rc.Do(ctx, tg.fl.mark(m, ttlArg)...).Err())
				}
				ps := rc.Subscribe(ctx, tg.chans...)
				defer ps.Close()
				_, err := ps.Receive(ctx) // the subscription is in place
				require.NoError(t, err)

				if tg.fair != nil {
					// A ticket, a queue entry of another call, and its leave.
					tk := redis.NewCmd(ctx, withKeys(evalStart(nil, scriptTicket, true), tg.fair.ticket)...)
					do(t, "a ticket", tk, -2)
					other := attemptToken(fmt.Sprint("5d0c9a3e-0000-4000-8000-00000000000", shardArg), 0, "") // a new call each time: the last one left its tombstone
					other.ticket = strconv.FormatInt(tk.Val().(int64), 10)
					ot := newTarget(f.fl, f.rkeys, other.id, "", f.fencing, 1)
					do(t, "another call queues on a free key", ot.evalAcquire(true, other, ttl, ttlArg, hooks), f.acq)
					do(t, "which releases it", ot.evalRelease(nil, true, n, other.arg, false), 1)
					leave := redis.NewCmd(ctx, append(withKeys(evalStart(nil, scriptFairLeave, true), ot.fair.leave), ot.id, ttl.Milliseconds(), "", shardArg)...)
					do(t, "and leaves the queue", leave, 1)
				}
				do(t, "acquire", tg.evalAcquire(true, first, ttl, ttlArg, hooks), f.acq)
				do(t, "a late copy of the acquire", tg.evalAcquire(true, first, ttl, ttlArg, hooks), f.acq)
				do(t, "extend", tg.evalExtend(nil, true, first.arg, 2*ttl), 1)
				if tg.fence != nil {
					fence, err := rc.Get(ctx, tg.fence[0]).Int64()
					require.NoError(t, err)
					do(t, "fence write-back", tg.evalFence(true, first.value, fence+5), 1)
					require.Equal(t, strconv.FormatInt(fence+5, 10), rc.Get(ctx, tg.fence[0]).Val(), "the fence counter after the write-back")
					vf := redis.NewCmd(ctx, withKeys(evalStart(nil, scriptValidateFence, true), []any{tg.rkeys[0], tg.fence[0]})...)
					ran[scriptValidateFence] = true
					_ = rc.Process(ctx, vf)
					view, err := vf.Slice()
					require.NoError(t, err, "validatefence")
					require.Equal(t, []any{"plain", first.value, strconv.FormatInt(fence+5, 10)}, view, "validatefence: the node's view")
				}
				do(t, "rollback", tg.evalRelease(nil, true, n, first.arg, false), 1)
				do(t, "the next attempt's acquire", tg.evalAcquire(true, second, ttl, ttlArg, hooks), f.acq)
				if tg.fence != nil {
					// An election's term record, while the key holds the value (term.lua).
					w := &termWrite{keys: []any{tg.rkeys[0], keyspace.Term(tg.rkeys[0])}, token: second.value,
						term: "7", value: "v", elected: keyspace.Elected(tg.rkeys[0])}
					do(t, "an election's term record", redis.NewCmd(ctx, w.args(evalStart(nil, scriptTerm, true), n)...), 1)
				}
				do(t, "release", tg.evalRelease(nil, true, n, second.arg, true), 1)
				require.Zero(t, rc.Exists(ctx, tg.waiting...).Val(), "the waiting markers after an announced release")
				if shardArg == "0" {
					// Sharded, it goes by SPUBLISH where the server has it,
					// which a SUBSCRIBE does not hear.
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					msg, err := ps.ReceiveMessage(rctx)
					require.NoError(t, err, "the release's announcement")
					require.Equal(t, second.value, msg.Payload, "the release's announcement")
				}
				do(t, "a second release", tg.evalRelease(nil, true, n, second.arg, true), 0)
				do(t, "an extend after the release", tg.evalExtend(nil, true, second.arg, ttl), 0)
				require.Zero(t, rc.Exists(ctx, tg.rkeys...).Val(), "the keys after the release")
				if tg.fl.topUp {
					do(t, "a top-up of the free keys", tg.evalTopUp(nil, true, &second, ttl, 1<<40), 1)
					do(t, "a copy of the top-up", tg.evalTopUp(nil, true, &second, ttl, 1<<40), 1)
					do(t, "the top-up's release", tg.evalRelease(nil, true, n, second.arg, false), 1)
				}
				if !tg.fl.shared && tg.fl.permits == 0 {
					// WithMinHold's release: the keys stay, cut to the time
					// left, and a copy changes nothing.
					third := attemptToken(tg.id, 2, "")
					do(t, "an acquire to release later", tg.evalAcquire(true, third, ttl, ttlArg, hooks), f.acq)
					do(t, "a release before the end of the minimum hold", tg.evalReleaseLater(nil, true, third.arg, 5*time.Second, true), 1)
					pttls := make([]time.Duration, len(tg.rkeys))
					for i, k := range tg.rkeys {
						pttls[i] = rc.PTTL(ctx, k).Val()
						require.True(t, pttls[i] > 4*time.Second && pttls[i] <= 5*time.Second, "%s: PTTL %v after the release, want about 5s", k, pttls[i])
					}
					do(t, "a copy of the release", tg.evalReleaseLater(nil, true, third.arg, 5*time.Second, true), 1)
					for i, k := range tg.rkeys {
						got := rc.PTTL(ctx, k).Val()
						require.LessOrEqual(t, got, pttls[i], "%s: PTTL %v after a copy of the release, want at most %v", k, got, pttls[i])
					}
					do(t, "the release of the kept keys", tg.evalRelease(nil, true, n, third.arg, false), 1)
				}
			})
		}
	}
	for id, s := range scripts {
		require.True(t, ran[scriptID(id)], "%s never ran", s.name)
	}
}

// TestScriptsFallBackToEvalAfterFlush flushes the nodes' script caches
// before each request that runs a script, so that each job gets NOSCRIPT to
// its EVALSHA: the acquire (every flavour that runs a script), the fence
// write-back, Extend, a renewal batch, and Unlock. Each must send its script
// again as EVAL, and succeed.
func TestScriptsFallBackToEvalAfterFlush(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		_, cs := minis(t, 3)
		fallsBackToEval(t, cs)
	})
	t.Run("redis-server", func(t *testing.T) {
		_, cs := realNodes(t, 3)
		fallsBackToEval(t, cs)
	})
}

func fallsBackToEval(t *testing.T, cs []redis.UniversalClient) {
	ctx := t.Context()
	c := newClient(t, cs, WithTTL(10*time.Second))
	sem, err := c.Semaphore("eval-permit", 2)
	require.NoError(t, err)
	flush := func() {
		t.Helper()
		for _, rc := range cs {
			require.NoError(t, rc.ScriptFlush(ctx).Err())
		}
	}
	flavours := []struct {
		name string
		lock func() (*Lock, error)
	}{
		{"plain", func() (*Lock, error) { return c.TryLock(ctx, "eval-plain") }}, // SET, then releaseplain.lua
		{"multi", func() (*Lock, error) { return c.TryLockMulti(ctx, []string{"{eval}a", "{eval}b"}) }},
		{"owner", func() (*Lock, error) { return c.TryLock(ctx, "eval-owner", WithOwner("o")) }},
		{"fenced", func() (*Lock, error) { return c.TryLock(ctx, "eval-fenced", WithFencing(true)) }},
		{"reader", func() (*Lock, error) { return c.TryRLock(ctx, "eval-reader") }},
		{"permit", func() (*Lock, error) { return sem.TryAcquire(ctx) }},
	}
	locks := make([]*Lock, len(flavours))
	for i, f := range flavours {
		flush()
		l, err := f.lock()
		require.NoError(t, err, "%s: the acquire after a flush", f.name)
		settled(t, l)
		locks[i] = l
		flush()
		require.NoError(t, l.Extend(ctx), "%s: Extend after a flush", f.name)
	}
	// One renewal batch of every lock, on every node.
	flush()
	ttls := make([]time.Duration, len(locks))
	for i := range ttls {
		ttls[i] = 10 * time.Second
	}
	jobs := make([]renewJob, len(c.nodes))
	o := c.fanout(ctx, &spec{
		op: OpExtend, quorum: len(c.nodes), timeout: 5 * time.Second, waitAll: true, waitStalled: true,
		leg: func(i int) *leg { return &jobs[i].leg },
		start: func(_ context.Context, lg *leg) {
			j := &jobs[lg.n.index]
			j.locks, j.ttls = locks, ttls
			lg.n.pipe.Submit(j)
		},
	})
	o.finish(nil)
	for n := range c.nodes {
		require.True(t, o.got[n], "node %d: the renewal batch did not answer", n)
		require.Len(t, jobs[n].votes, len(locks), "node %d", n)
		for i, v := range jobs[n].votes {
			require.Equal(t, VoteYes, v, "node %d, %s: the renewal after a flush", n, flavours[i].name)
		}
	}
	for i, l := range locks {
		flush()
		require.NoError(t, l.Unlock(ctx), "%s: Unlock after a flush", flavours[i].name)
	}
}

// TestLateAcquireCopyNeverShortensAnExtend replays, after a longer Extend,
// the acquire request that won a lock, as go-redis does when it timed out a
// read and the first copy reaches the node last. The copy must leave the
// longer expiry alone on every node: otherwise the key expires under a
// holder that has most of its validity left, and a second client takes it.
func TestLateAcquireCopyNeverShortensAnExtend(t *testing.T) {
	_, cs := realNodes(t, 3)
	c := newClient(t, cs, WithTTL(time.Second))
	sem, err := c.Semaphore("late-sem", 2)
	require.NoError(t, err)
	ctx := t.Context()

	flavours := []struct {
		name   string
		lock   func() (*Lock, error)
		expiry func(t *testing.T, rc *redis.Client, l *Lock) time.Duration // the hold's own expiry left on a node
	}{
		{"fenced", func() (*Lock, error) { return c.TryLock(ctx, "late-fenced", WithFencing(true)) }, keyTTL},
		{"multi", func() (*Lock, error) { return c.TryLockMulti(ctx, []string{"{late}a", "{late}b"}) }, keyTTL},
		{"owner", func() (*Lock, error) { return c.TryLock(ctx, "late-owner", WithOwner("o")) }, keyTTL},
		{"reader", func() (*Lock, error) { return c.TryRLock(ctx, "late-reader") }, func(t *testing.T, rc *redis.Client, l *Lock) time.Duration {
			f, err := rc.HGet(ctx, l.t.rkeys[0], "r:"+l.att.value.value).Result()
			if errors.Is(err, redis.Nil) {
				return 0 // the reader's acquire has not landed here (yet)
			}
			require.NoError(t, err)
			e, _ := strconv.ParseInt(f, 10, 64)
			now, err := rc.Time(ctx).Result()
			require.NoError(t, err)
			return min(time.Duration(e-now.UnixMilli())*time.Millisecond, keyTTL(t, rc, l))
		}},
		{"permit", func() (*Lock, error) { return sem.TryAcquire(ctx) }, func(t *testing.T, rc *redis.Client, l *Lock) time.Duration {
			s, err := rc.ZScore(ctx, l.t.rkeys[0], l.att.value.value).Result()
			if errors.Is(err, redis.Nil) {
				return 0 // the permit's acquire has not landed here (yet)
			}
			require.NoError(t, err)
			now, err := rc.Time(ctx).Result()
			require.NoError(t, err)
			return min(time.Duration(int64(s)-now.UnixMilli())*time.Millisecond, keyTTL(t, rc, l))
		}},
	}
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			l, err := f.lock()
			require.NoError(t, err)
			defer func() { _ = l.Unlock(ctx) }()
			require.NoError(t, l.Extend(ctx, WithTTL(20*time.Second)))
			tested := 0
			for i, rc := range cs {
				rc := rc.(*redis.Client)
				// The Extend may land on a node after its quorum answered,
				// or, on a starved machine, not at all.
				deadline := time.Now().Add(3 * time.Second)
				for f.expiry(t, rc, l) <= 15*time.Second && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if f.expiry(t, rc, l) <= 15*time.Second {
					t.Logf("node %d: the Extend did not reach it; not tested", i)
					continue
				}
				tested++
				// The winning attempt's acquire, sent again as it first was.
				cmd := lateAcquireCopy(l)
				require.NoError(t, rc.Process(ctx, cmd), "node %d", i)
				require.NotZero(t, cmd.Val(), "node %d: the copy finds the hold its own", i)
				got := f.expiry(t, rc, l)
				require.Greater(t, got, 15*time.Second, "node %d: a late copy of the acquire cut the extended expiry to %v, want about 20s", i, got)
			}
			require.GreaterOrEqual(t, tested, 2, "the Extend reached a quorum of the 3 nodes")
		})
	}
}

// keyTTL is the TTL left on the lock's first key.
func keyTTL(_ *testing.T, rc *redis.Client, l *Lock) time.Duration {
	return rc.PTTL(context.Background(), l.t.rkeys[0]).Val()
}

// lateAcquireCopy rebuilds the acquire command of l's winning attempt, with
// the acquisition's TTL, as EVAL.
func lateAcquireCopy(l *Lock) *redis.Cmd {
	ttl := l.cfg.ttl
	return l.t.evalAcquire(true, l.att.value, ttl, ttl.Milliseconds(), &l.c.hooks)
}

// TestManyLapsedReadersBreakNoLiveOne leaves more lapsed readers in a read
// lock key than Lua's unpack takes at once (about 8000): RLock and a live
// reader's Unlock must still work, and prune them.
func TestManyLapsedReadersBreakNoLiveOne(t *testing.T) {
	_, cs := realNodes(t, 3)
	// Generous node timeouts: 20000 fields take a loaded server a while.
	c := newClient(t, cs, WithTTL(30*time.Second), WithNodeTimeout(5*time.Second))
	ctx := t.Context()
	const key, lapsed = "many-readers", 20000
	addLapsed := func() {
		for i, rc := range cs {
			fields := make([]any, 0, 2*lapsed)
			for j := range lapsed {
				fields = append(fields, fmt.Sprintf("r:lapsed-%d", j), "1")
			}
			require.NoError(t, rc.HSet(ctx, key, fields...).Err(), "node %d", i)
		}
	}
	live, err := c.TryRLock(ctx, key)
	require.NoError(t, err)
	addLapsed()
	r2, err := c.TryRLock(ctx, key)
	require.NoError(t, err, "a new reader beside %d lapsed ones", lapsed)
	addLapsed()
	require.NoError(t, live.Unlock(ctx), "a live reader's Unlock beside %d lapsed ones and another live one", lapsed)
	require.NoError(t, r2.Unlock(ctx))
	for i, rc := range cs {
		require.Eventually(t, func() bool { return rc.Exists(ctx, key).Val() == 0 }, 10*time.Second, 10*time.Millisecond,
			"node %d: the key outlived its last live reader", i)
	}
}
