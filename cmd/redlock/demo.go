package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
	"github.com/redlockgo/redlock/internal/history"
)

const (
	// demoNodes is how many Redis nodes the demo runs, and demoKills how
	// many of them it kills: 5 nodes keep a quorum of 3 with 2 dead.
	demoNodes = 5
	demoKills = 2
	// demoKey is the one key every holder contends for.
	demoKey = "redlock-demo"
	// clockTick is how often the nodes' TTL clocks are moved forward.
	clockTick = 5 * time.Millisecond
	// unlockTimeout bounds an Unlock. It runs on a context detached from the
	// run's, so that the last hold is released even after the run ended.
	unlockTimeout = time.Second
)

// demoConfig configures one run of the demo. The zero value is not usable:
// start from defaultDemoConfig.
type demoConfig struct {
	duration   time.Duration // how long the clients contend
	clients    int           // redlock Clients, each with its own go-redis client per node
	goroutines int           // goroutines per Client
	seed       uint64        // picks the killed nodes and the hold times; 0 picks one
	verbose    bool          // print every event, not a sample
	lines      int           // event lines printed when not verbose, kills aside
	// redisRetries keeps go-redis's default dial and command retries, which
	// make a request to a killed node last until its deadline.
	redisRetries bool

	ttl         time.Duration
	nodeTimeout time.Duration // 0: the library's default, a tenth of the TTL
	hold        time.Duration // longest hold; each is drawn from [hold/4, hold]
	retryMin    time.Duration // range of Lock's wait between two attempts
	retryMax    time.Duration
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		duration:   6 * time.Second,
		clients:    4,
		goroutines: 4,
		lines:      60,
		ttl:        500 * time.Millisecond,
		hold:       3 * time.Millisecond,
		retryMin:   2 * time.Millisecond,
		retryMax:   10 * time.Millisecond,
	}
}

// validate says what is wrong with a config, in terms of the flags.
func (c *demoConfig) validate() error {
	switch {
	case c.duration <= 0:
		return fmt.Errorf("-duration must be positive, got %v", c.duration)
	case c.clients < 1 || c.clients > 64:
		return fmt.Errorf("-clients must be in [1, 64], got %d", c.clients)
	case c.goroutines < 1 || c.goroutines > 64:
		return fmt.Errorf("-goroutines must be in [1, 64], got %d", c.goroutines)
	case c.lines < 0:
		return fmt.Errorf("lines must not be negative, got %d", c.lines)
	case c.hold <= 0 || c.hold >= c.ttl/2:
		return fmt.Errorf("hold must be in (0, ttl/2), got %v with ttl %v", c.hold, c.ttl)
	}
	return nil
}

// demoFlags returns the flag set of the demo command, which fills cfg. -h
// prints the help on stdout, and a flag error goes to stderr.
func demoFlags(cfg *demoConfig, stdout, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("demo", demoHelp, stdout, stderr, nil)
	durationVar(fs, &cfg.duration, "duration", "the `duration` of the contention; a node is killed at 1/3 and another at 2/3 of it")
	fs.IntVar(&cfg.clients, "clients", cfg.clients, "number of redlock Clients, each with its own connection to every node")
	fs.IntVar(&cfg.goroutines, "goroutines", cfg.goroutines, "number of goroutines per Client contending for the lock")
	fs.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed that picks the killed nodes and the hold times; 0 picks one and prints it")
	fs.BoolVar(&cfg.verbose, "v", cfg.verbose, "print every event instead of a sample")
	fs.BoolVar(&cfg.redisRetries, "redis-retries", cfg.redisRetries,
		"keep go-redis's default dial and command retries: a request to a killed node then fails only at the node timeout, not at once")
	return fs
}

func demoHelp(w io.Writer) {
	fmt.Fprint(w, `usage: redlock demo [flags]

Demo starts 5 Redis nodes in this process (miniredis), makes several redlock
Clients contend for one lock key, kills one node at 1/3 of the run and another
at 2/3, and prints each event as it happens. Every hold is recorded on the
monotonic clock; at the end a checker counts the holds that overlapped, and a
summary gives the lock latency and throughput with 5, 4 and 3 nodes up.

It exits 0 when there was at least one acquisition and no overlap, 1
otherwise.

`+durationsHelp+`
Flags:
`)
	cfg := defaultDemoConfig()
	fs := demoFlags(&cfg, w, w)
	fs.PrintDefaults()
}

func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultDemoConfig()
	fs := demoFlags(&cfg, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "demo", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err := cfg.validate(); err != nil {
		return usageError(stderr, "demo", err)
	}
	// Ctrl-C ends the demo early; it still stops its goroutines, closes its
	// clients and prints its summary.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := runDemo(ctx, stdout, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return exitFail
	}
	return rep.exitCode()
}

// runDemo runs the demo and prints its events and summary to w. It returns
// once every goroutine it started has stopped and every client and node has
// been closed. It fails only when the demo could not be set up; the verdict
// is in the report.
func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) (*demoReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	quietRedisLog()

	var (
		nodes   []*demoNode
		rcs     []*redis.Client
		clients []*redlock.Client
	)
	// Close what was opened, in order: the redlock Clients wait for their
	// requests in flight, which need the go-redis clients, which need the
	// nodes.
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
		for _, rc := range rcs {
			_ = rc.Close()
		}
		for _, n := range nodes {
			n.kill()
		}
	}()
	for i := range demoNodes {
		srv, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start node %d: %w", i, err)
		}
		nodes = append(nodes, &demoNode{index: i, srv: srv, addr: srv.Addr(), last: time.Now()})
	}
	for range cfg.clients {
		conns := make([]redis.UniversalClient, demoNodes)
		for i, n := range nodes {
			rc := redis.NewClient(redisOptions(n.addr, cfg.redisRetries))
			rcs = append(rcs, rc)
			conns[i] = rc
		}
		c, err := redlock.New(conns, redlock.WithTTL(cfg.ttl), redlock.WithNodeTimeout(cfg.nodeTimeout),
			redlock.WithRetryDelay(cfg.retryMin, cfg.retryMax))
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}

	rng := rand.New(rand.NewPCG(cfg.seed, 0))
	victims := rng.Perm(demoNodes)[:demoKills]

	fmt.Fprintf(w, "redlock demo: %d nodes (quorum %d), %d clients x %d goroutines, key %q, ttl %v, %v, seed %d\n",
		demoNodes, clients[0].Quorum(), cfg.clients, cfg.goroutines, demoKey, cfg.ttl, cfg.duration, cfg.seed)
	for _, n := range nodes {
		fmt.Fprintf(w, "  node %d at %s\n", n.index, n.addr)
	}
	var plan []string
	for k, v := range victims {
		at := cfg.duration * time.Duration(k+1) / time.Duration(len(victims)+1)
		plan = append(plan, fmt.Sprintf("node %d at %.3fs", v, at.Seconds()))
	}
	fmt.Fprintf(w, "kills: %s\n", strings.Join(plan, ", "))
	fmt.Fprint(w, "events: acquired (at the first attempt), waiter woke (acquired after waiting), released, node killed\n\n")

	t0 := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, t0.Add(cfg.duration))
	defer cancel()
	rec := newRecorder(w, t0, cfg)
	var wg sync.WaitGroup
	wg.Go(func() { tickClocks(runCtx, nodes) })
	wg.Go(func() { killNodes(runCtx, nodes, victims, t0, cfg.duration, rec) })
	for ci, c := range clients {
		for g := range cfg.goroutines {
			hr := rand.New(rand.NewPCG(cfg.seed, uint64(1+ci*cfg.goroutines+g)))
			wg.Go(func() { contend(runCtx, c, ci, g, hr, cfg, rec) })
		}
	}
	wg.Wait()
	end := time.Now()
	rec.flush()

	rep := rec.report(end)
	rep.interrupted = ctx.Err() != nil
	rep.print(w)
	return rep, nil
}

// redisOptions returns the go-redis options for one node. By default a
// request to a killed node fails at once, as the refused connection says: by
// default go-redis would retry the dial and the command until the request's
// deadline, so every request to a killed node would last the whole node
// timeout.
func redisOptions(addr string, retries bool) *redis.Options {
	o := &redis.Options{Addr: addr}
	if !retries {
		o.MaxRetries = -1
		o.DialerRetries = 1
	}
	return o
}

// quietRedisLog silences go-redis's own log, which would print a line to
// stderr for every failed dial to a killed node. The demo reports the kills
// itself.
var quietRedisLog = sync.OnceFunc(func() { redis.SetLogger(discardLogger{}) })

type discardLogger struct{}

// Printf drops the message.
func (discardLogger) Printf(context.Context, string, ...any) {}

// demoNode is one in-process Redis node. It is safe for concurrent use.
type demoNode struct {
	index int
	addr  string
	srv   *miniredis.Miniredis

	mu   sync.Mutex
	dead bool      // guarded by mu
	last time.Time // guarded by mu; when the TTL clock was last moved
}

// advance moves the node's TTL clock to now. miniredis counts TTLs down only
// when told to, so without this no key would ever expire.
func (n *demoNode) advance(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead || !now.After(n.last) {
		return
	}
	n.srv.FastForward(now.Sub(n.last))
	n.last = now
}

// kill stops the node: it closes the listener and every connection. It may
// be called more than once.
func (n *demoNode) kill() {
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
	n.srv.Close()
}

// tickClocks moves the TTL clocks of the live nodes with real time until ctx
// ends. A key expires at most one tick late, which errs on the safe side: a
// holder's Until is computed from the full TTL.
func tickClocks(ctx context.Context, nodes []*demoNode) {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, n := range nodes {
				n.advance(now)
			}
		}
	}
}

// killNodes kills the victims one by one, evenly spaced over the run: with
// two victims, at 1/3 and 2/3 of it.
func killNodes(ctx context.Context, nodes []*demoNode, victims []int, t0 time.Time, d time.Duration, rec *recorder) {
	for k, v := range victims {
		at := t0.Add(d * time.Duration(k+1) / time.Duration(len(victims)+1))
		t := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		nodes[v].kill()
		rec.killed(nodes[v], len(nodes)-k-1, time.Now())
	}
}

// contend is one holder: it locks, holds for a few milliseconds, unlocks,
// pauses, and again, until ctx ends. Each hold is recorded.
func contend(ctx context.Context, c *redlock.Client, client, g int, rng *rand.Rand, cfg demoConfig, rec *recorder) {
	for ctx.Err() == nil {
		start := time.Now()
		l, err := c.Lock(ctx, demoKey)
		acquired := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				rec.lockFailed(client, g, acquired, err)
			}
			return
		}
		st := l.Stats()
		h := hold{
			client:    client,
			goroutine: g,
			start:     start,
			acquired:  acquired,
			until:     l.Until(),
			round:     st.Elapsed,
			// Every retry waits at least retryMin, and a Lock that won
			// at once spends barely more than its round.
			waited: acquired.Sub(start)-st.Elapsed >= cfg.retryMin,
		}
		rec.acquired(h)

		pause(ctx, cfg.hold/4+time.Duration(rng.Int64N(int64(cfg.hold-cfg.hold/4)+1)))
		h.released = time.Now()
		rec.released(h)
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		if err := l.Unlock(uctx); err != nil {
			rec.unlockFailed(h, err)
		}
		ucancel()

		// Give the others a chance before trying again.
		pause(ctx, time.Duration(rng.Int64N(int64(cfg.hold))))
	}
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// hold is one acquisition of the lock, as the holder saw it on the
// monotonic clock.
type hold struct {
	client, goroutine int
	start             time.Time     // Lock was called
	acquired          time.Time     // Lock returned
	until             time.Time     // Lock.Until
	released          time.Time     // the holder stopped using the lock, before Unlock
	round             time.Duration // the winning round, from Lock.Stats
	waited            bool          // Lock had to try more than once
}

// history is the hold in the model of internal/history, which checks it.
func (h *hold) history() history.Hold {
	return history.Hold{Key: demoKey, Holder: fmt.Sprintf("client=%d goroutine=%d", h.client, h.goroutine),
		Acquired: h.acquired, Until: h.until, Released: h.released}
}

// end is when the hold stopped being exclusive: at release, or at Until if
// the holder overran its validity.
func (h *hold) end() time.Time { return h.history().End() }

// kill is one node killed during the run.
type kill struct {
	node int
	at   time.Time
}

// recorder records the history of a run and prints its events as they
// happen. It is safe for concurrent use.
type recorder struct {
	w        io.Writer
	t0       time.Time
	seed     uint64
	verbose  bool
	perPhase int // routine event lines printed per phase when not verbose

	mu         sync.Mutex
	holds      []hold // guarded by mu; the finished holds
	kills      []kill // guarded by mu
	lockErrs   int    // guarded by mu
	unlockErrs int    // guarded by mu
	shown      int    // guarded by mu; routine lines printed in this phase
	hidden     int    // guarded by mu; routine lines held back in this phase
}

func newRecorder(w io.Writer, t0 time.Time, cfg demoConfig) *recorder {
	return &recorder{w: w, t0: t0, seed: cfg.seed, verbose: cfg.verbose, perPhase: cfg.lines / (demoKills + 1)}
}

func (r *recorder) since(t time.Time) float64 { return t.Sub(r.t0).Seconds() }

// routine prints an acquire or release event unless this phase's share of
// lines is used up. The caller holds r.mu.
func (r *recorder) routine(at time.Time, what, format string, args ...any) {
	if !r.verbose && r.shown >= r.perPhase {
		r.hidden++
		return
	}
	r.shown++
	r.line(at, what, format, args...)
}

// line prints one event. The caller holds r.mu.
func (r *recorder) line(at time.Time, what, format string, args ...any) {
	fmt.Fprintf(r.w, "%8.3fs  %-12s %s\n", r.since(at), what, fmt.Sprintf(format, args...))
}

// flushLocked says how many routine lines were held back since the last one.
// The caller holds r.mu.
func (r *recorder) flushLocked() {
	if r.hidden > 0 {
		fmt.Fprintf(r.w, "%10s  ... %d more acquire/release events (-v prints every event)\n", "", r.hidden)
	}
	r.shown, r.hidden = 0, 0
}

func (r *recorder) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushLocked()
}

func (r *recorder) acquired(h hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.waited {
		r.routine(h.acquired, "waiter woke", "client=%d goroutine=%d waited=%s round=%s",
			h.client, h.goroutine, ms(h.acquired.Sub(h.start)), ms(h.round))
		return
	}
	r.routine(h.acquired, "acquired", "client=%d goroutine=%d latency=%s",
		h.client, h.goroutine, ms(h.acquired.Sub(h.start)))
}

// released records a finished hold. The holder calls it before Unlock: the
// hold ends when the holder stops using the lock.
func (r *recorder) released(h hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
	r.routine(h.released, "released", "client=%d goroutine=%d held=%s", h.client, h.goroutine, ms(h.released.Sub(h.acquired)))
}

func (r *recorder) unlockFailed(h hold, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlockErrs++
	if qe := (*redlock.QuorumError)(nil); !r.verbose && errors.As(err, &qe) && len(qe.Stats.Nodes) > 0 {
		// The usual cause is a node killed while the lock was held; say so
		// briefly, -v prints the whole error.
		st := qe.Stats
		r.line(time.Now(), "unlock error", "client=%d goroutine=%d: released on %d of %d nodes, short of the quorum of %d "+
			"(%d failed or too slow, %d no longer held the key); the rest expires with the TTL", h.client, h.goroutine, st.Yes, len(st.Nodes), st.Quorum, st.Failed+st.NotWaited, st.No)
		return
	}
	r.line(time.Now(), "unlock error", "client=%d goroutine=%d: %v", h.client, h.goroutine, err)
}

func (r *recorder) lockFailed(client, g int, at time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lockErrs++
	r.line(at, "lock error", "client=%d goroutine=%d gives up: %v", client, g, err)
}

func (r *recorder) killed(n *demoNode, up int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushLocked()
	r.kills = append(r.kills, kill{node: n.index, at: at})
	r.line(at, fmt.Sprintf("node %d killed", n.index), "(%s): %d of %d nodes up, quorum %d",
		n.addr, up, demoNodes, demoNodes/2+1)
}

// report reads the recorded history of a run that ended at end. Call it
// once every goroutine that records has stopped.
func (r *recorder) report(end time.Time) *demoReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &demoReport{
		seed:         r.seed,
		t0:           r.t0,
		end:          end,
		acquisitions: len(r.holds),
		overlaps:     findOverlaps(r.holds),
		lockErrs:     r.lockErrs,
		unlockErrs:   r.unlockErrs,
	}
	for _, h := range r.holds {
		if h.history().Overran() {
			rep.overran++
		}
	}

	// Phase k runs from the k-th kill (or the start) to the next one (or
	// the end). A hold belongs to the phase in which Lock returned.
	bounds := []time.Time{r.t0}
	for _, k := range r.kills {
		bounds = append(bounds, k.at)
	}
	bounds = append(bounds, end)
	all := phase{name: "all", from: r.t0, to: end}
	for i := range len(bounds) - 1 {
		p := phase{name: fmt.Sprintf("%d nodes up", demoNodes-i), from: bounds[i], to: bounds[i+1]}
		for _, h := range r.holds {
			if !h.acquired.Before(p.from) && (h.acquired.Before(p.to) || i == len(bounds)-2) {
				p.add(h)
			}
		}
		rep.phases = append(rep.phases, p)
	}
	for _, h := range r.holds {
		all.add(h)
	}
	rep.phases = append(rep.phases, all)
	return rep
}

// overlap is two holds that were exclusive at the same time: a
// history.Overlap with the demo's records of its holds.
type overlap struct{ a, b hold }

// findOverlaps returns each pair of holds whose windows [acquired, end)
// intersect, as history.Overlaps finds them, the earlier hold first. A hold
// whose Lock returned after its Until claims nothing.
func findOverlaps(holds []hold) []overlap {
	hs := make([]history.Hold, len(holds))
	for i := range holds {
		hs[i] = holds[i].history()
	}
	var out []overlap
	for _, o := range history.Overlaps(hs) {
		out = append(out, overlap{a: holds[o.A.Index], b: holds[o.B.Index]})
	}
	return out
}

// phase is a stretch of the run with the same number of live nodes.
type phase struct {
	name     string
	from, to time.Time
	lock     []time.Duration // Lock calls: waiting plus every attempt
	round    []time.Duration // the winning round of each Lock call
}

func (p *phase) add(h hold) {
	p.lock = append(p.lock, h.acquired.Sub(h.start))
	p.round = append(p.round, h.round)
}

func (p *phase) perSecond() float64 {
	d := p.to.Sub(p.from).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(len(p.lock)) / d
}

// demoReport is the verdict and the numbers of one run.
type demoReport struct {
	seed         uint64
	interrupted  bool // the caller's ctx ended the run early
	t0, end      time.Time
	acquisitions int
	overlaps     []overlap
	overran      int // holds released after their Until
	lockErrs     int
	unlockErrs   int
	phases       []phase // by number of live nodes, then "all"
}

// exitCode is exitOK when the lock was acquired and never held twice.
func (r *demoReport) exitCode() int {
	if r.acquisitions > 0 && len(r.overlaps) == 0 {
		return exitOK
	}
	return exitFail
}

func (r *demoReport) print(w io.Writer) {
	since := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(r.t0).Seconds()) }
	fmt.Fprintf(w, "\nsummary\n")
	if r.interrupted {
		fmt.Fprintf(w, "  interrupted at %s\n", since(r.end))
	}
	fmt.Fprintf(w, "  acquisitions        %d in %s (%.0f/s)\n", r.acquisitions, since(r.end), r.phases[len(r.phases)-1].perSecond())
	fmt.Fprintf(w, "  overlaps            %d\n", len(r.overlaps))
	for i, o := range r.overlaps {
		if i == 5 {
			fmt.Fprintf(w, "    ... %d more\n", len(r.overlaps)-i)
			break
		}
		fmt.Fprintf(w, "    client=%d goroutine=%d held until %s; client=%d goroutine=%d acquired at %s\n",
			o.a.client, o.a.goroutine, since(o.a.end()), o.b.client, o.b.goroutine, since(o.b.acquired))
	}
	fmt.Fprintf(w, "  holds past Until    %d\n", r.overran)
	fmt.Fprintf(w, "  lock errors         %d\n", r.lockErrs)
	fmt.Fprintf(w, "  unlock errors       %d", r.unlockErrs)
	if r.unlockErrs > 0 {
		fmt.Fprint(w, "   (a release that a quorum did not confirm: harmless, the key expires)")
	}
	fmt.Fprint(w, "\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  phase\tfrom\tto\tacquisitions\tper second\tlock p50\tlock p99\tround p50\tround p99\t")
	for _, p := range r.phases {
		lock, round := sorted(p.lock), sorted(p.round)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", p.name, since(p.from), since(p.to), len(p.lock),
			p.perSecond(), ms(percentile(lock, 0.50)), ms(percentile(lock, 0.99)),
			ms(percentile(round, 0.50)), ms(percentile(round, 0.99)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (lock: the whole Lock call, waiting included; round: the attempt that won)")

	if len(r.phases) > 2 {
		base := r.phases[0]
		fmt.Fprintf(w, "\n  effect of the kills, against %s:\n", base.name)
		for _, p := range r.phases[1 : len(r.phases)-1] {
			fmt.Fprintf(w, "    %-11s %s acquisitions/s, %s lock p50, %s round p50\n", p.name+":",
				change(p.perSecond(), base.perSecond()),
				change(float64(percentile(sorted(p.lock), 0.5)), float64(percentile(sorted(base.lock), 0.5))),
				change(float64(percentile(sorted(p.round), 0.5)), float64(percentile(sorted(base.round), 0.5))))
		}
	}

	fmt.Fprintln(w)
	switch {
	case r.acquisitions == 0:
		fmt.Fprintf(w, "FAIL: the lock was never acquired (seed %d)\n", r.seed)
	case len(r.overlaps) > 0:
		fmt.Fprintf(w, "FAIL: %d overlapping pairs of holds (seed %d)\n", len(r.overlaps), r.seed)
	default:
		fmt.Fprintf(w, "PASS: %d acquisitions, no two holders overlapped\n", r.acquisitions)
	}
}

// change formats v relative to base as a signed percentage.
func change(v, base float64) string {
	if base == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.0f%%", (v-base)/base*100)
}

func sorted(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// percentile returns the nearest-rank p-th percentile of sorted durations,
// or 0 when there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
