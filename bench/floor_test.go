package main

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock/internal/redistest"
)

// orderLog records, per node, the order in which a floor's commands were
// sent and answered, through a go-redis hook.
type orderLog struct {
	mu     sync.Mutex
	events []string
}

func (o *orderLog) add(e string) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

func (o *orderLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *orderLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		o.add(cmd.Name() + " sent")
		err := next(ctx, cmd)
		o.add(cmd.Name() + " answered")
		return err
	}
}

func (o *orderLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// releaseAheadOfSet reports whether the log shows a release sent before
// the SET was answered.
func (o *orderLog) releaseAheadOfSet() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	answered := false
	for _, e := range o.events {
		switch e {
		case "set answered":
			answered = true
		case "evalsha sent":
			if !answered {
				return true
			}
		}
	}
	return false
}

// TestOrderedFloorReleasesAfterTheSet runs one lock+unlock of the plain and
// the ordered floor while one of five real redis-servers is paused, so that
// its SET is still in flight when Unlock starts. The ordered floor sends
// that node's release only once the SET was answered, and the key is gone
// once the node resumed. The plain floor, the negative control, sends the
// release at once: the check sees it.
func TestOrderedFloorReleasesAfterTheSet(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.Options{})
	const paused = 4
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			ctx := t.Context()
			nodes := make([]redis.Cmdable, len(servers))
			logs := make([]*orderLog, len(servers))
			for i, s := range servers {
				rc := s.NewClient(t)
				logs[i] = &orderLog{}
				rc.AddHook(logs[i])
				nodes[i] = rc
			}
			f := newFloor(nodes)
			f.ordered = ordered
			// Load the release script everywhere first, so that every
			// release is one EVALSHA.
			for _, n := range nodes {
				if err := floorRelease.Load(ctx, n).Err(); err != nil {
					t.Fatalf("SCRIPT LOAD: %v", err)
				}
			}
			for _, l := range logs {
				l.events = nil
			}
			key := fmt.Sprintf("floor-order-%v", ordered)
			servers[paused].Pause()
			l, err := f.Lock(ctx, key)
			if err != nil {
				servers[paused].Resume()
				t.Fatalf("Lock with one node paused: %v", err)
			}
			err = l.Unlock(ctx)
			servers[paused].Resume()
			if err != nil {
				t.Fatalf("Unlock with one node paused: %v", err)
			}
			f.wg.Wait()
			ahead := logs[paused].releaseAheadOfSet()
			if ahead == ordered {
				t.Fatalf("release sent ahead of the SET's reply on the paused node: %v, want %v (log %v)", ahead, !ordered, logs[paused].events)
			}
			if !ordered {
				return
			}
			for i, s := range servers {
				n, err := s.NewClient(t).Exists(ctx, key).Result()
				if err != nil || n != 0 {
					t.Fatalf("node %d after the ordered floor's Unlock: EXISTS %s = %d, %v; want 0: its release must follow the SET", i, key, n, err)
				}
			}
		})
	}
}
