package main

import (
	"fmt"
	"sync"
	"testing"

	"github.com/redlockgo/redlock/internal/redistest"
)

// BenchmarkSequentialLockUnlock runs sequential lock+unlock cycles, a new
// key each time, on five real redis-servers, for the library and the floors
// whose allocations (e) compares it with, and reports allocations and bytes
// per cycle. Like (e), the count is the whole process's, the goroutines that
// carry the requests included; unlike (e), the harness's own work is not
// in it. For the allocation sites, profile one contender:
//
//	go test -run '^$' -bench 'SequentialLockUnlock/redlock$' -benchtime 20000x \
//	    -memprofile /tmp/mem.pprof -memprofilerate 1
//	go tool pprof -sample_index=alloc_objects -top /tmp/mem.pprof
func BenchmarkSequentialLockUnlock(b *testing.B) {
	servers := redistest.StartN(b, mainNodes, redistest.Options{})
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	// Each contender is made at its first run, so that a -bench pattern
	// that picks one profiles no other's setup; b.Cleanup ends them.
	var (
		mu   sync.Mutex
		made = map[string]*contender{}
	)
	get := func(b *testing.B, name string) *contender {
		mu.Lock()
		defer mu.Unlock()
		if c := made[name]; c != nil {
			return c
		}
		c, err := newContender(name, addrs)
		if err != nil {
			b.Fatal(err)
		}
		warm(b.Context(), []*contender{c}, "bench", 300)
		made[name] = c
		return c
	}
	b.Cleanup(func() {
		for _, c := range made {
			c.close()
		}
	})
	for _, name := range []string{nameOurs, nameFloor, nameRueidisFloor} {
		runs := 0
		b.Run(name, func(b *testing.B) {
			c := get(b, name)
			ctx := b.Context()
			runs++
			keys := keysFor(fmt.Sprintf("bench:%s:%d", name, runs), b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for _, k := range keys {
				h, err := c.lock(ctx, k)
				if err != nil {
					b.Fatalf("%s Lock: %v", name, err)
				}
				if err := h.Unlock(ctx); err != nil {
					b.Fatalf("%s Unlock: %v", name, err)
				}
			}
		})
	}
}
