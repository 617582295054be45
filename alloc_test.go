//go:build !race

// The race detector changes what allocates (sync.Pool drops a share of what
// it is given, for one), so the counts are checked only without it.

package redlock

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

// Allocations of one sequential Lock and Unlock on 5 nodes, go-redis's
// included (issue 26): BenchmarkSequentialLockUnlock in bench measures the
// same.
const (
	maxAllocsPerCycle = 50
	maxBytesPerCycle  = 6000
)

// TestAllocsPerLockUnlock checks that a sequential Lock and Unlock of a new
// key, on 5 real redis-servers, allocates no more than issue 26 allows. The
// count is of the whole process, as testing.AllocsPerRun's is; the best of a
// few trials is taken, so that a sender that a busy machine kept from its
// connection (a new go-redis Conn) does not count against the library.
func TestAllocsPerLockUnlock(t *testing.T) {
	srv := redistest.StartN(t, 5, redistest.Options{})
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.NewClient(t)
	}
	c := newClient(t, cs)
	ctx := context.Background()
	const cycles, trials = 200, 5
	keys := make([]string, (trials+1)*cycles)
	for i := range keys {
		keys[i] = "allocs:" + strconv.Itoa(i)
	}
	cycle := func(key string) {
		l, err := c.Lock(ctx, key)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	for _, k := range keys[:cycles] { // dial the pools, load the scripts
		cycle(k)
	}
	bestAllocs, bestBytes := ^uint64(0), ^uint64(0)
	for trial := 1; trial <= trials; trial++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, k := range keys[trial*cycles : (trial+1)*cycles] {
			cycle(k)
		}
		runtime.ReadMemStats(&after)
		bestAllocs = min(bestAllocs, (after.Mallocs-before.Mallocs)/cycles)
		bestBytes = min(bestBytes, (after.TotalAlloc-before.TotalAlloc)/cycles)
	}
	t.Logf("per Lock+Unlock: %d allocations, %d bytes (best of %d trials of %d)", bestAllocs, bestBytes, trials, cycles)
	require.LessOrEqual(t, bestAllocs, uint64(maxAllocsPerCycle), "got %d allocations per Lock+Unlock, want at most %d", bestAllocs, maxAllocsPerCycle)
	require.LessOrEqual(t, bestBytes, uint64(maxBytesPerCycle), "got %d bytes per Lock+Unlock, want at most %d", bestBytes, maxBytesPerCycle)
}
