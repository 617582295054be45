package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// floor is the fastest honest Redlock client the harness can write, the
// reference the others are measured against: SET NX PX sent to every node at
// once, a decision as soon as a quorum said yes (or can no longer say yes),
// validity checked, and release by EVALSHA compare-and-delete, also decided
// at the quorum-th reply. It makes no retries and keeps no state beyond the
// token. What it leaves out, the library must pay for: per-node timeouts of
// its own (the floor relies on go-redis's ReadTimeout), rollback of a failed
// attempt, late-reply handling, diagnostics, lifecycle.
//
// The same code runs on two transports: the plain floor sends each command
// on a pooled connection of its own (*redis.Client), the pipelined floor
// sends it through go-redis's AutoPipeline, which batches the commands that
// concurrent callers send to one node into one pipeline.
//
// The ordered floor is the plain floor with the one rule of issue 12 that
// changes when a request may go out: a release is never sent to a node
// ahead of that node's reply to the lock's SET. The plain floor's Unlock
// sends to every node at once, so a release may overtake a SET still in
// flight on another connection, and leave the key behind for its TTL; the
// ordered floor sends it to a node still in flight once its SET replied.
// It shows what the rule itself costs a sequential caller.
type floor struct {
	nodes   []redis.Cmdable
	quorum  int
	ttl     time.Duration
	drift   time.Duration
	ordered bool
	wg      sync.WaitGroup // the requests in flight
}

var errFloorNotAcquired = errors.New("floor: not acquired")

// floorRelease deletes KEYS[1] only while it holds ARGV[1].
var floorRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

func newFloor(nodes []redis.Cmdable) *floor {
	const ttl = 10 * time.Second
	return &floor{nodes: nodes, quorum: len(nodes)/2 + 1, ttl: ttl, drift: ttl/100 + 2*time.Millisecond}
}

// newPipelinedFloor is the floor on go-redis's blocking AutoPipeline, one per
// node, with its default options (EXPERIMENTAL in go-redis v9.23: one batch
// in flight per node, no linger timer, so a lone command goes out at once and
// batches grow only while a batch is in flight). Closing the clients closes
// the AutoPipeliners.
func newPipelinedFloor(clients []*redis.Client) (*floor, error) {
	nodes := make([]redis.Cmdable, len(clients))
	for i, c := range clients {
		ap, err := c.AutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("bench: AutoPipeline of node %d: %w", i, err)
		}
		nodes[i] = ap
	}
	return newFloor(nodes), nil
}

type floorLock struct {
	f     *floor
	key   string
	token string
	// order is the ordered floor's: which nodes' SETs replied.
	order *floorOrder
}

// floorOrder tracks an ordered floor's lock: a node whose SET has not
// replied when Unlock starts gets its release from the SET's goroutine.
type floorOrder struct {
	mu       sync.Mutex
	answered []bool
	released chan bool // set by Unlock: where the releases' replies go
}

func (f *floor) Lock(ctx context.Context, key string) (*floorLock, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	l := &floorLock{f: f, key: key, token: hex.EncodeToString(b[:])}
	if f.ordered {
		l.order = &floorOrder{answered: make([]bool, len(f.nodes))}
	}
	start := time.Now()
	ch := make(chan bool, len(f.nodes))
	f.wg.Add(len(f.nodes))
	for i, n := range f.nodes {
		go func() {
			defer f.wg.Done()
			ok, err := n.SetNX(ctx, key, l.token, f.ttl).Result()
			if o := l.order; o != nil {
				o.mu.Lock()
				o.answered[i] = true
				released := o.released
				o.mu.Unlock()
				if released != nil {
					released <- l.release(ctx, n)
					return
				}
			}
			ch <- ok && err == nil
		}()
	}
	if f.gather(ch) && time.Since(start) < f.ttl-f.drift {
		return l, nil
	}
	_ = l.Unlock(context.WithoutCancel(ctx))
	return nil, errFloorNotAcquired
}

// gather reads replies until the quorum is reached or out of reach.
func (f *floor) gather(ch <-chan bool) bool { return quorumOf(ch, len(f.nodes), f.quorum) }

func (l *floorLock) Unlock(ctx context.Context) error {
	f := l.f
	ch := make(chan bool, len(f.nodes))
	var now []bool // the ordered floor's nodes to release from here
	if o := l.order; o != nil {
		now = make([]bool, len(f.nodes))
		o.mu.Lock()
		o.released = ch
		copy(now, o.answered)
		o.mu.Unlock()
	}
	for i, n := range f.nodes {
		if now != nil && !now[i] {
			continue // the SET's goroutine releases it once it replied
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			ch <- l.release(ctx, n)
		}()
	}
	if !f.gather(ch) {
		return errFloorNotAcquired
	}
	return nil
}

// release deletes the lock's key on one node if it still holds the token.
func (l *floorLock) release(ctx context.Context, n redis.Cmdable) bool {
	v, err := floorRelease.Run(ctx, n, []string{l.key}, l.token).Int64()
	return v == 1 && err == nil
}
