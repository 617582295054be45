package redlock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestScriptsSetExpiryOnlyThroughPrelude checks the expiry rule of
// holds.lua where it is enforced: no script but the prelude writes an
// expiry, so that the prelude's functions, which never shorten one that
// holds our value, are the only way to write one.
func TestScriptsSetExpiryOnlyThroughPrelude(t *testing.T) {
	expiry := regexp.MustCompile(`(?i)'(P?EXPIRE(AT)?|PX|EX|EXAT|PXAT|PERSIST|GETEX|SETEX|PSETEX)'`)
	zadd := regexp.MustCompile(`(?i)'ZADD'`)
	hsetField := regexp.MustCompile(`(?i)'HSET'.*'r:'`)
	scripts := map[string]string{
		"acquire.lua": acquireLua, "release.lua": releaseLua, "releaseplain.lua": releasePlainSrc,
		"extend.lua": extendLua, "fence.lua": fenceLua, "semacquire.lua": semAcquireLua,
		"semrelease.lua": semReleaseLua, "semextend.lua": semExtendLua, "rwholds.lua": rwholdsLua,
		"rlock.lua": rlockLua, "runlock.lua": runlockLua, "rextend.lua": rextendLua,
	}
	for name, src := range scripts {
		for i, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			if expiry.MatchString(code) || hsetField.MatchString(code) ||
				(zadd.MatchString(code) && !strings.Contains(code, "'#permits')")) {
				t.Errorf("%s:%d writes an expiry itself: %s\nuse holds.lua's expireAtLeast, setAtLeast, expireAtAtLeast, hsetAtLeast or zaddAtLeast", name, i+1, strings.TrimSpace(line))
			}
		}
	}
	for _, fn := range []string{"expireAtLeast", "setAtLeast", "expireAtAtLeast", "expireAtLatest", "hsetAtLeast", "zaddAtLeast"} {
		require.Contains(t, holdsLua, "local function "+fn+"(", "the prelude defines %s", fn)
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
	t, tk, ttl := l.t, l.att.value, l.cfg.ttl
	switch {
	case t.reader:
		return evalCmd(nil, &luaRLock, true, t.relKeys, nil, rlockArgs(tk, ttl.Milliseconds(), l.cfg)...)
	case t.permits > 0:
		return evalCmd(nil, &luaSemAcquire, true, t.skargs, nil, semAcquireArgs(t, tk, ttl)...)
	}
	return evalCmd(nil, &luaAcquire, true, t.skargs, nil, acquireArgs(t, tk, ttl)...)
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
