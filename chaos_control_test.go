package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// chaosControl is a deterministic two-holder experiment. Client 0 takes the
// key and holds it; breakModel then does something to the nodes; client 1
// tries the key while client 0 is still well within its Until. A negative
// control breaks the model on purpose: it passes when the checker reports
// the overlap. An in-model twin passes when it reports none.
type chaosControl struct {
	name    string
	backend chaosBackend
	inModel bool
	// prepare runs before client 0 locks; exactQuorum, when true, means it
	// left client 0 only nodes 0, 1 and 2.
	prepare     func(r *chaosRun)
	exactQuorum bool
	// lockOpts are client 0's options; afterLock, when set, runs once
	// client 0 holds its nodes, before breakModel.
	lockOpts   []LockOption
	afterLock  func(r *chaosRun, l *Lock)
	breakModel func(r *chaosRun)
	// refused marks an in-model twin in which client 1 must not get the
	// lock while client 0 holds it; the other twin's client 1 must.
	refused bool
}

// chaosControls are the negative controls, and an in-model twin that shows
// the rule that the controls break.
func chaosControls() []chaosControl {
	majority := []int{0, 1, 2}
	jumpMajority := func(r *chaosRun) { r.inject(&clockJumpFault{nodes: majority, by: r.load.ttl}) }
	restartMajority := func(mode restartMode) func(r *chaosRun) {
		return func(r *chaosRun) {
			var fs []chaosFault
			for _, n := range majority {
				f := &restartFault{node: n, mode: mode, delay: r.load.ttl + 100*time.Millisecond}
				r.inject(f)
				fs = append(fs, f)
			}
			for _, f := range fs {
				r.heal(f)
			}
		}
	}
	// Another client holds nodes 3 and 4 while client 0 locks, as in a split
	// vote, so that client 0 wins exactly nodes 0, 1 and 2.
	occupy := func(r *chaosRun) {
		for _, i := range []int{3, 4} {
			if err := r.cl.nodes[i].admin.Set(r.t.Context(), r.prefix+"k", "other", r.load.ttl).Err(); err != nil {
				r.t.Fatalf("node %d: %v", i, err)
			}
		}
	}
	release := func(r *chaosRun) {
		for _, i := range []int{3, 4} {
			if err := r.cl.nodes[i].admin.Del(r.t.Context(), r.prefix+"k").Err(); err != nil {
				r.t.Fatalf("node %d: %v", i, err)
			}
		}
	}
	jumpOne := func(r *chaosRun) { r.inject(&clockJumpFault{nodes: []int{0}, by: r.load.ttl}) }
	// The one node jumps, and the other client releases nodes 3 and 4.
	jumpOneThenRelease := func(r *chaosRun) {
		jumpOne(r)
		release(r)
	}
	// The other client releases nodes 3 and 4 first, and one renewal of
	// client 0's lock passes: with the top-up, it takes them (5 yes);
	// without, it extends nodes 0-2 alone (3 yes).
	releaseThenRenew := func(want int) func(r *chaosRun, l *Lock) {
		return func(r *chaosRun, l *Lock) {
			release(r)
			before := l.Until()
			deadline := time.Now().Add(r.load.ttl)
			for !l.Until().After(before) || l.Stats().Op != OpExtend || l.Stats().Yes != want {
				if time.Now().After(deadline) {
					r.t.Fatalf("client 0: no renewal with %d yes within a TTL: %+v", want, l.Stats())
				}
				r.sleep(5 * time.Millisecond)
			}
			r.logf("client 0 renewed on %d nodes", want)
		}
	}
	return []chaosControl{
		{name: "control-clock-jump-majority-mini", backend: miniBackend, breakModel: jumpMajority},
		{name: "control-clock-jump-majority-real", backend: realBackend, breakModel: jumpMajority},
		{name: "control-empty-restart-majority-mini", backend: miniBackend, breakModel: restartMajority(restartEmpty)},
		{name: "control-empty-restart-majority-real", backend: realBackend, breakModel: restartMajority(restartEmpty)},
		// Kleppmann's example: one node's clock jumps while the holder has
		// exactly a quorum. A minority fault that loses a key is outside
		// the model too; see docs/SAFETY.md.
		{name: "control-clock-jump-one-node-exact-quorum-mini", backend: miniBackend,
			prepare: occupy, exactQuorum: true, breakModel: jumpOneThenRelease},
		// The same window, once nodes 3 and 4 are free and one renewal of
		// client 0's auto-extended lock has passed: with the top-up (the
		// default) the lock is on every node and the jump takes one of
		// five, so client 1 must not get in; with WithTopUp(false) it is
		// still on exactly 0-2, and client 1 gets in (SAFETY.md, "What the
		// quorum top-up adds").
		{name: "topup-clock-jump-one-node-exact-quorum-mini", backend: miniBackend, inModel: true, refused: true,
			prepare: occupy, exactQuorum: true, lockOpts: []LockOption{WithAutoExtend(true)},
			afterLock: releaseThenRenew(5), breakModel: jumpOne},
		{name: "control-topup-off-clock-jump-one-node-exact-quorum-mini", backend: miniBackend,
			prepare: occupy, exactQuorum: true, lockOpts: []LockOption{WithAutoExtend(true), WithTopUp(false)},
			afterLock: releaseThenRenew(3), breakModel: jumpOne},
		// The twin: the same empty restart of a majority, delayed by more
		// than the TTL, is safe.
		{name: "delayed-empty-restart-majority-real", backend: realBackend, inModel: true, breakModel: restartMajority(restartDelayed)},
	}
}

// runChaosControl runs one control and reports it like a scenario. The
// negative controls are not counted in the summary; the in-model twin is.
func runChaosControl(t *testing.T, c chaosControl, sum *chaosSummary) {
	load := defaultChaosLoad()
	// Long enough that client 0 is still valid when client 1 tries, even
	// under -race on a slow machine.
	load.ttl = 3 * time.Second
	r := newChaosRun(t, c.name, load)
	r.cl = newChaosCluster(t, chaosClusterOpts{backend: c.backend, clients: 2}, r.rng, r.lockOptions(true, false)...)
	r.start = time.Now()
	if c.prepare != nil {
		c.prepare(r)
	}

	// Lock, not TryLock: a first dial that is slow under -race must not
	// decide the control. A second is far less than client 0's validity.
	lock := func(cc *chaosClient, opts ...LockOption) (*Lock, chaosHold, error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		called := time.Now()
		l, err := cc.c.Lock(ctx, "k", opts...)
		acquired := time.Now()
		r.rec.lockCall(err == nil, acquired.Sub(called))
		if err != nil {
			return nil, chaosHold{}, err
		}
		return l, chaosHold{key: "k", client: cc.index, token: l.Token(), acquired: acquired, until: l.Until(), nodes: yesNodes(l), fence: l.Fence()}, nil
	}
	a, ha, err := lock(r.cl.clients[0], c.lockOpts...)
	if err != nil {
		t.Fatalf("client 0: Lock: %v", err)
	}
	held := r.cl.nodes
	if c.exactQuorum {
		held = held[:3]
	}
	for _, n := range held {
		r.cl.waitHeldOn(n, r.prefix+"k", a.Token())
	}
	if c.afterLock != nil {
		c.afterLock(r, a)
	}
	c.breakModel(r)
	b, hb, errB := lock(r.cl.clients[1])
	// Both hold on a while, as holders that had no reason to stop would.
	r.sleep(20 * time.Millisecond)
	errA := a.Err()      // nil while client 0 still holds
	ha.until = a.Until() // renewed
	ha.released = time.Now()
	r.rec.hold(ha)
	_ = a.Unlock(t.Context())
	if errB == nil {
		hb.released = time.Now()
		r.rec.hold(hb)
		_ = b.Unlock(t.Context())
	}
	r.healAll()
	r.cl.closeClients()
	f := r.rec.figures()
	f.residue, _ = r.residue()
	chaosPrint(t, chaosLine(c.name, r.seed, f))
	r.logOverlaps(f.overlaps)
	// Would a store that checks fences have caught it? Only if client 1's
	// fence is the larger one.
	t.Logf("chaos-detail: scenario=%s fence-client0=%d fence-client1=%d fence-inversions=%d",
		c.name, ha.fence, hb.fence, f.inversions)

	if c.inModel {
		sum.add(f)
		if len(f.overlaps) > 0 || f.residue > 0 {
			t.Errorf("got %d overlaps and %d residue, want none", len(f.overlaps), f.residue)
		}
		switch {
		case c.refused && !errors.Is(errB, ErrNotAcquired):
			t.Errorf("client 1: Lock while client 0 holds: got %v, want ErrNotAcquired", errB)
		case c.refused && errA != nil:
			t.Errorf("client 0 lost its lock: %v", errA)
		case c.refused:
		case errB != nil:
			t.Errorf("client 1: Lock after the delay: %v", errB)
		}
		return
	}
	if errB != nil {
		t.Fatalf("the control did not break the model: client 1 could not lock: %v", errB)
	}
	if len(f.overlaps) == 0 {
		t.Errorf("the checker missed the overlap the control made: %s", fmt.Sprint(ha, hb))
	}
}
