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
type floor struct {
	nodes  []redis.Cmdable
	quorum int
	ttl    time.Duration
	drift  time.Duration
	wg     sync.WaitGroup // the requests in flight
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
}

func (f *floor) Lock(ctx context.Context, key string) (*floorLock, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	start := time.Now()
	ch := make(chan bool, len(f.nodes))
	f.wg.Add(len(f.nodes))
	for _, n := range f.nodes {
		go func() {
			defer f.wg.Done()
			ok, err := n.SetNX(ctx, key, token, f.ttl).Result()
			ch <- ok && err == nil
		}()
	}
	if f.gather(ch) && time.Since(start) < f.ttl-f.drift {
		return &floorLock{f: f, key: key, token: token}, nil
	}
	l := floorLock{f: f, key: key, token: token}
	_ = l.Unlock(context.WithoutCancel(ctx))
	return nil, errFloorNotAcquired
}

// gather reads replies until the quorum is reached or out of reach.
func (f *floor) gather(ch <-chan bool) bool {
	yes, no := 0, 0
	for yes < f.quorum && no <= len(f.nodes)-f.quorum {
		if <-ch {
			yes++
		} else {
			no++
		}
	}
	return yes >= f.quorum
}

func (l *floorLock) Unlock(ctx context.Context) error {
	f := l.f
	ch := make(chan bool, len(f.nodes))
	f.wg.Add(len(f.nodes))
	for _, n := range f.nodes {
		go func() {
			defer f.wg.Done()
			v, err := floorRelease.Run(ctx, n, []string{l.key}, l.token).Int64()
			ch <- v == 1 && err == nil
		}()
	}
	if !f.gather(ch) {
		return errFloorNotAcquired
	}
	return nil
}
