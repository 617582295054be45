package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redlockgo/redlock/internal/faultproxy"
)

// wanRTTs are the round trips of the 5 nodes in the WAN measure (h): node i
// sits behind a fault proxy that delays every request by wanRTTs[i] (the
// replies come back at once, so the proxy's delay is the round trip, give
// or take loopback). A client that decides at the quorum-th reply pays the
// third of them per round; one that waits for every node pays the last.
var wanRTTs = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond, 80 * time.Millisecond}

// wanQuorumRTT is the quorum-th smallest of wanRTTs: what one round of a
// client that decides at the quorum costs on this WAN.
func wanQuorumRTT() time.Duration {
	s := slices.Clone(wanRTTs)
	slices.Sort(s)
	return s[len(s)/2]
}

// wanRound is one round of the WAN measure for one contender: the Lock and
// the Unlock calls timed apart.
type wanRound struct {
	lock, unlock latencies
}

// wanOps runs lock+unlock on each key in turn from one goroutine and times
// Lock and Unlock apart; an Unlock is timed only after a Lock that
// succeeded, and counts as failed when it returns an error.
func wanOps(ctx context.Context, c *contender, keys []string, errs *errCount) wanRound {
	lockLat := make([]time.Duration, 0, len(keys))
	unlockLat := make([]time.Duration, 0, len(keys))
	for _, k := range keys {
		t0 := time.Now()
		h, err := c.lock(ctx, k)
		lockLat = append(lockLat, time.Since(t0))
		if err != nil {
			errs.lockFailed(err)
			continue
		}
		t1 := time.Now()
		if err := h.Unlock(ctx); err != nil {
			errs.unlockFailed(err)
		}
		unlockLat = append(unlockLat, time.Since(t1))
	}
	return wanRound{lock: summarise(lockLat), unlock: summarise(unlockLat)}
}

// (h) WAN: each of the 5 nodes behind a delay proxy with its own round trip.
func measureWAN(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	addrs := cl.addrs(mainNodes)
	for i, rtt := range wanRTTs {
		p, err := faultproxy.New(addrs[i], uint64(i+1))
		if err != nil {
			return err
		}
		defer p.Close()
		p.SetLatency(rtt, 0)
		addrs[i] = p.Addr()
	}
	cs, err := contenders(addrs, mainNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	pings := newClientSet(addrs)
	defer pings.close()
	// Few cycles: every dial pays a round trip, and the warm-up only needs
	// one connection per node and the scripts loaded.
	warm(ctx, cs, "h", 3)
	pingQuorum(ctx, pings.clients, 3)
	res.wan = map[string][]wanRound{}
	res.wanErrs = map[string]*errCount{}
	for r := range s.wanRounds {
		logf("(h) %s", roundName("WAN", r, s.wanRounds))
		for _, c := range cs {
			if res.wanErrs[c.name] == nil {
				res.wanErrs[c.name] = &errCount{}
			}
			keys := keysFor(fmt.Sprintf("h:%s:%d", c.name, r), s.wanOps)
			res.wan[c.name] = append(res.wan[c.name], wanOps(ctx, c, keys, res.wanErrs[c.name]))
		}
		res.wanPing = append(res.wanPing, summarise(pingQuorum(ctx, pings.clients, max(s.wanOps/2, 1))))
	}
	return nil
}
