package main

import (
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/redistest"
)

// TestRedsyncMeetsReadersAndPermits runs the real go-redsync/redsync beside
// our readers and semaphore permits on the same keys of five real
// redis-servers. A redsync lock excludes readers and permits, and they
// exclude it; a redsync holder that overran its expiry cannot release or
// extend our holders' key (its scripts GET the key, which fails with
// WRONGTYPE on a hash or a sorted set), and nothing is named ErrWrongType.
func TestRedsyncMeetsReadersAndPermits(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.Options{})
	ctx := t.Context()
	clients := make([]redis.UniversalClient, len(servers))
	pools := make([]redsyncredis.Pool, len(servers))
	for i, s := range servers {
		rc := s.NewClient(t)
		clients[i], pools[i] = rc, goredis.NewPool(rc)
	}
	rl, err := redlock.New(clients, redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rl.Close() })
	rs := redsync.New(pools...)
	ours := map[string]func(key string) (*redlock.Lock, error){
		"reader": func(key string) (*redlock.Lock, error) { return rl.TryRLock(ctx, key) },
		"permit": func(key string) (*redlock.Lock, error) {
			s, err := rl.Semaphore(key, 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		},
	}

	for name, take := range ours {
		t.Run("redsync holds, "+name+" refused", func(t *testing.T) {
			key := "redsync-first-" + name
			m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(10*time.Second))
			if err := m.LockContext(ctx); err != nil {
				t.Fatalf("redsync Lock: %v", err)
			}
			_, err := take(key)
			if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrWrongType) {
				t.Fatalf("%s beside a redsync lock: got %v, want ErrNotAcquired and not ErrWrongType", name, err)
			}
			if ok, err := m.UnlockContext(ctx); !ok || err != nil {
				t.Fatalf("redsync Unlock: got %v, %v; want true, nil: our attempt must leave its key alone", ok, err)
			}
			l, err := take(key)
			if err != nil {
				t.Fatalf("%s once redsync released: %v", name, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})

		t.Run(name+" holds, redsync refused", func(t *testing.T) {
			key := "ours-first-" + name
			l, err := take(key)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			m := rs.NewMutex(key, redsync.WithTries(1))
			if err := m.LockContext(ctx); err == nil {
				t.Fatalf("redsync took a key that a %s holds", name)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%s Unlock after redsync's failed attempt: %v", name, err)
			}
		})

		t.Run("an overrun redsync holder cannot touch a "+name, func(t *testing.T) {
			key := "overrun-" + name
			m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(200*time.Millisecond))
			if err := m.LockContext(ctx); err != nil {
				t.Fatalf("redsync Lock: %v", err)
			}
			var l *redlock.Lock
			deadline := time.Now().Add(5 * time.Second)
			for l == nil {
				if l, err = take(key); err != nil && time.Now().After(deadline) {
					t.Fatalf("%s after redsync's expiry: %v", name, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if ok, err := m.ExtendContext(ctx); ok || err == nil {
				t.Fatalf("redsync Extend of a key a %s holds: got %v, %v; want false and an error", name, ok, err)
			}
			if ok, err := m.UnlockContext(ctx); ok || err == nil {
				t.Fatalf("redsync Unlock of a key a %s holds: got %v, %v; want false and an error", name, ok, err)
			}
			h, err := rl.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !h.Held {
				t.Fatalf("the %s's key is no longer held by a quorum after redsync's calls: %+v", name, h)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%s Unlock: %v", name, err)
			}
		})
	}
}
