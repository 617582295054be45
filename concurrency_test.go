package redlock

// This file tests many goroutines of two Clients at once, on nodes that are
// slow, late, lose replies, hang and reset: mutual exclusion, Done and Err,
// bounded Unlock, and, under -race, the state a Lock and its Stats share
// between the caller's goroutines and the library's.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/faultproxy"
	"github.com/redlockgo/redlock/internal/redistest"
)

// nodesReader is an Observer that reads every report's per-node Stats, as
// a metrics exporter would, from the library's goroutines: the race
// detector then sees those reads beside the holders' own Stats calls.
type nodesReader struct{ n atomic.Int64 }

func (o *nodesReader) Attempted(s Stats, err error) {
	o.n.Add(int64(len(s.Nodes)))
	var qe *QuorumError
	if errors.As(err, &qe) {
		o.n.Add(int64(len(qe.Stats.Nodes)))
	}
}
func (o *nodesReader) Extended(s Stats, err error) { o.n.Add(int64(len(s.Nodes))) }
func (o *nodesReader) Lost(string, error)          {}
func (o *nodesReader) Released(s Stats, err error) { o.n.Add(int64(len(s.Nodes))) }

// liveHold is a hold the test knows of, on one key.
type liveHold struct {
	l      *Lock
	reader bool
}

// TestManyHoldersOnFaultyNodesStayExclusive: two Clients (one with the node
// guard), six goroutines each, take plain, fenced, auto-extended, capped,
// read, write, semaphore and multi-key holds of a few shared keys for three
// seconds, and extend, read Stats, watch Done and unlock them with ctxs that
// end at random, while their five nodes are slow, late, lose replies, and
// now and then hang or reset. No new hold may find a live one it excludes
// (by Err and Until), every Done channel must close with Err set, Done must
// hand out one channel per lock, and Unlock must return within its bound
// even with a hung node. Each of those is a contract a holder builds on,
// and the mix of faults and goroutines is where a reused reply channel, a
// timer or the lazily made Done and Stats.Nodes would race.
func TestManyHoldersOnFaultyNodesStayExclusive(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a few seconds of load on real servers")
	}
	const run = 3 * time.Second
	redistest.Require(t)
	srv := redistest.StartN(t, 5, redistest.Options{})
	obs := &nodesReader{}
	var clients []*Client
	var proxies [][]*faultproxy.Proxy
	for k := range 2 {
		cs := make([]redis.UniversalClient, len(srv))
		ps := make([]*faultproxy.Proxy, len(srv))
		for i, s := range srv {
			p, err := faultproxy.New(s.Addr(), uint64(100*(k+1)+i))
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			ps[i] = p
			rc := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { _ = rc.Close() })
			// The first connection, set up before any fault, settles
			// go-redis's MaintNotificationsConfig.Mode: a setup that a
			// late reply held past another connection's would write it
			// while the library's own connection reads it, a race in
			// go-redis (v9.22) that this test is not about.
			require.NoError(t, rc.Ping(t.Context()).Err())
			cs[i] = rc
		}
		ps[0].SetLatency(20*time.Millisecond, 60*time.Millisecond)
		ps[1].SetLate(0.25, 40*time.Millisecond, 400*time.Millisecond)
		ps[2].SetLoseReplies(0.15)
		ps[3].SetLatency(0, 30*time.Millisecond)
		// Every call sets its TTL; the Client's, a second, only bounds how
		// long the guard keeps the new servers out.
		c, err := New(cs, WithTTL(time.Second), WithNodeTimeout(60*time.Millisecond), WithObserver(obs), WithNodeGuard(k == 1))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
		proxies = append(proxies, ps)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Node 3 hangs now and then (a blackhole), node 4 resets now and then.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				for _, ps := range proxies {
					ps[3].SetMode(faultproxy.Pass)
					ps[4].SetMode(faultproxy.Pass)
				}
				return
			case <-time.After(time.Duration(50+rng.IntN(300)) * time.Millisecond):
			}
			for _, ps := range proxies {
				switch rng.IntN(4) {
				case 0:
					ps[3].SetMode(faultproxy.Blackhole)
				case 1:
					ps[4].SetMode(faultproxy.Reset)
				default:
					ps[3].SetMode(faultproxy.Pass)
					ps[4].SetMode(faultproxy.Pass)
				}
			}
		}
	})

	var mu sync.Mutex
	holds := map[string][]liveHold{} // guarded by mu
	var locked atomic.Int64
	keys := []string{"many-holders:a", "many-holders:b", "many-holders:c"}

	// take makes one acquisition of a kind drawn from rng, and returns the
	// lock, whether it is a reader, and how many holders its keys allow.
	take := func(c *Client, rng *rand.Rand) (*Lock, bool, int, error) {
		key, kind := keys[rng.IntN(len(keys))], rng.IntN(5)
		var opts []LockOption
		// Readers and semaphores refuse fencing.
		if kind != 1 && kind != 3 && rng.IntN(3) == 0 {
			opts = append(opts, WithFencing(true))
		}
		if rng.IntN(3) == 0 {
			opts = append(opts, WithAutoExtend(true))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, WithMaxHold(time.Duration(300+rng.IntN(500))*time.Millisecond))
		}
		opts = append(opts, WithTTL(time.Duration(200+rng.IntN(600))*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(400))*time.Millisecond)
		defer cancel()
		switch kind {
		case 1: // a reader beside the writers of many-holders:rw
			l, err := c.RLock(ctx, "many-holders:rw", opts...)
			return l, true, 1, err
		case 2:
			l, err := c.Lock(ctx, "many-holders:rw", opts...)
			return l, false, 1, err
		case 3:
			sem, err := c.Semaphore("many-holders:sem", 2)
			if err != nil {
				return nil, false, 0, err
			}
			l, err := sem.Acquire(ctx, opts...)
			return l, false, 2, err
		case 4: // two of the plain keys
			other := keys[(slices.Index(keys, key)+1+rng.IntN(2))%len(keys)]
			l, err := c.LockMulti(ctx, []string{key, other}, opts...)
			return l, false, 1, err
		}
		if rng.IntN(2) == 0 {
			l, err := c.TryLock(ctx, key, opts...)
			return l, false, 1, err
		}
		l, err := c.Lock(ctx, key, opts...)
		return l, false, 1, err
	}

	// hold checks l against the live holds of its keys and records it.
	hold := func(l *Lock, reader bool, capacity int) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		for _, k := range l.Keys() {
			live := 0
			for _, h := range holds[k] {
				if h.l.Err() == nil && now.Before(h.l.Until()) && !(reader && h.reader) {
					live++
				}
			}
			if live >= capacity {
				t.Errorf("overlap on %s: got %d live holds beside a new one (reader %v), want fewer than %d", k, live, reader, capacity)
			}
			holds[k] = append(holds[k], liveHold{l, reader})
		}
	}

	// forget removes l from the holds of its keys.
	forget := func(l *Lock) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range l.Keys() {
			holds[k] = slices.DeleteFunc(holds[k], func(h liveHold) bool { return h.l == l })
		}
	}

	worker := func(c *Client, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-stop:
				return
			default:
			}
			l, reader, capacity, err := take(c, rng)
			if err != nil {
				var qe *QuorumError
				if errors.As(err, &qe) {
					_ = len(qe.Stats.Nodes)
				}
				continue
			}
			locked.Add(1)
			hold(l, reader, capacity)

			// Done watchers, asking before the end or racing with it.
			var watchers sync.WaitGroup
			chans := make(chan (<-chan struct{}), 3)
			for range 1 + rng.IntN(3) {
				watchers.Go(func() {
					d := l.Done()
					chans <- d
					_ = l.Stats()
					select {
					case <-d:
						if l.Err() == nil {
							t.Errorf("Done closed with Err nil")
						}
					case <-time.After(10 * time.Second):
						t.Errorf("Done open 10s after asked, Until %v, Err %v", l.Until(), l.Err())
					}
				})
			}
			for deadline := time.Now().Add(time.Duration(rng.IntN(300)) * time.Millisecond); time.Now().Before(deadline); {
				switch rng.IntN(4) {
				case 0:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(200))*time.Millisecond)
					var eo []ExtendOption
					if rng.IntN(2) == 0 {
						eo = append(eo, WithTTL(time.Duration(100+rng.IntN(800))*time.Millisecond))
					}
					_ = l.Extend(ctx, eo...)
					cancel()
				case 1:
					_ = l.Stats()
				default:
					time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
				}
			}
			forget(l)

			// Unlock with a ctx already cancelled, cancelled during the
			// call, or never.
			ctx, cancel := context.WithCancel(context.Background())
			switch rng.IntN(3) {
			case 0:
				cancel()
			case 1:
				d := time.Duration(rng.IntN(20)) * time.Millisecond
				go func() { time.Sleep(d); cancel() }()
			}
			start := time.Now()
			_ = l.Unlock(ctx)
			cancel()
			// Unlock is bounded by about a second per node; ten leaves
			// room for a loaded machine and still catches a hang.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Unlock took %v, want it bounded", d)
			}
			select {
			case <-l.Done():
			default:
				t.Errorf("Done open after Unlock")
			}
			watchers.Wait()
			close(chans)
			first := l.Done()
			for d := range chans {
				if d != first && first != closedDone {
					t.Errorf("Done returned two channels")
				}
			}
			_ = l.Stats()
		}
	}
	for k, c := range clients {
		for w := range 6 {
			wg.Go(func() { worker(c, uint64(100*k+w)) })
		}
	}
	time.Sleep(run)
	close(stop)
	wg.Wait()
	require.Positive(t, locked.Load(), "no hold was taken: the test checked nothing")
	t.Logf("%d holds taken; the observer read %d node reports", locked.Load(), obs.n.Load())
	for _, c := range clients {
		require.NoError(t, c.Close())
	}
}
