package redlock

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/faultproxy"
)

// A chaosFault is one kind of failure. inject starts it and heal ends it;
// both run on the test goroutine, and heal is called once, after inject.
// Faults that cannot be undone (a kill, a clock jump) heal as a no-op. Every
// implementation is a pointer, so that a run can tell its active faults
// apart.
type chaosFault interface {
	String() string
	inject(r *chaosRun)
	heal(r *chaosRun)
}

// killFault SIGKILLs real nodes, or closes miniredis ones. They stay down:
// restartFault is the one that brings a node back.
type killFault struct{ nodes []int }

func (f *killFault) String() string { return fmt.Sprintf("kill nodes %v", f.nodes) }
func (f *killFault) inject(r *chaosRun) {
	for _, i := range f.nodes {
		r.cl.nodes[i].kill()
	}
}
func (*killFault) heal(*chaosRun) {}

// pauseFault stops a real node with SIGSTOP until heal sends SIGCONT: the
// server-side version of a GC pause. The kernel still accepts connections
// and buffers requests, which the node runs when it resumes, long after
// their senders gave up.
type pauseFault struct{ node int }

func (f *pauseFault) String() string { return fmt.Sprintf("pause node %d", f.node) }
func (f *pauseFault) inject(r *chaosRun) {
	n := r.cl.nodes[f.node]
	if n.srv == nil {
		r.t.Fatalf("pauseFault needs a real node")
	}
	n.srv.Pause()
}
func (f *pauseFault) heal(r *chaosRun) { r.cl.nodes[f.node].srv.Resume() }

// restartMode says how a restartFault brings its node back.
type restartMode uint8

const (
	// restartWithData restarts with every acknowledged write: a real node
	// needs persistence (appendfsync always) for that.
	restartWithData restartMode = iota
	// restartEmpty restarts at once with no data: a crash that lost what
	// was not fsynced. It breaks the model when the node held a live lock.
	restartEmpty
	// restartDelayed restarts with no data, but only once the maximum TTL
	// has passed since the kill: the spec's rule for restarting safely
	// without persistence.
	restartDelayed
)

func (m restartMode) String() string {
	switch m {
	case restartWithData:
		return "with data"
	case restartEmpty:
		return "empty"
	}
	return "empty, delayed"
}

// restartFault kills a node on inject and brings it back on heal. For
// restartDelayed, heal first waits until the delay has passed since the
// kill, however early it is called.
type restartFault struct {
	node   int
	mode   restartMode
	delay  time.Duration // restartDelayed only: more than the maximum TTL
	killed time.Time
}

func (f *restartFault) String() string {
	if f.mode == restartDelayed {
		return fmt.Sprintf("restart node %d (%v by %v)", f.node, f.mode, f.delay)
	}
	return fmt.Sprintf("restart node %d (%v)", f.node, f.mode)
}

func (f *restartFault) inject(r *chaosRun) {
	n := r.cl.nodes[f.node]
	if f.mode == restartWithData && n.srv != nil && !n.persistent && !slices.Contains(r.cl.opts.noAOF, f.node) {
		r.t.Fatalf("a restart with data of a real node needs persistence")
	}
	n.kill()
	f.killed = time.Now()
}

func (f *restartFault) heal(r *chaosRun) {
	if f.mode == restartDelayed {
		r.sleep(time.Until(f.killed.Add(f.delay)))
	}
	r.cl.nodes[f.node].start(f.mode == restartWithData)
}

// proxyFault sets a mode on the proxies between some Clients and some nodes:
// a blackhole, lost replies, or resets. With every Client it is a fault of
// the node's network; with one Client, a partition of that Client alone.
type proxyFault struct {
	mode    faultproxy.Mode
	nodes   []int
	clients []int // nil: every Client
}

func (f *proxyFault) String() string {
	if f.clients == nil {
		return fmt.Sprintf("%v nodes %v", f.mode, f.nodes)
	}
	return fmt.Sprintf("%v nodes %v for clients %v", f.mode, f.nodes, f.clients)
}
func (f *proxyFault) inject(r *chaosRun) {
	r.eachProxy(f.clients, f.nodes, func(p *faultproxy.Proxy) { p.SetMode(f.mode) })
}
func (f *proxyFault) heal(r *chaosRun) {
	r.eachProxy(f.clients, f.nodes, func(p *faultproxy.Proxy) { p.SetMode(faultproxy.Pass) })
}

// blackholeFault swallows every request to a node, from every Client.
func blackholeFault(node int) *proxyFault {
	return &proxyFault{mode: faultproxy.Blackhole, nodes: []int{node}}
}

// resetFault resets every connection to a node, and refuses new ones.
func resetFault(node int) *proxyFault {
	return &proxyFault{mode: faultproxy.Reset, nodes: []int{node}}
}

// cutFault partitions one Client from some nodes; the other Clients still
// reach them. mode is Blackhole (a silent partition) or Reset (a loud one).
func cutFault(client int, mode faultproxy.Mode, nodes ...int) *proxyFault {
	return &proxyFault{mode: mode, nodes: nodes, clients: []int{client}}
}

// latencyFault delays the requests every Client sends to some nodes by
// latency ± jitter.
type latencyFault struct {
	nodes           []int
	latency, jitter time.Duration
}

func (f *latencyFault) String() string {
	return fmt.Sprintf("latency %v±%v on nodes %v", f.latency, f.jitter, f.nodes)
}
func (f *latencyFault) inject(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLatency(f.latency, f.jitter) })
}
func (f *latencyFault) heal(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLatency(0, 0) })
}

// clockJumpFault moves the clocks of some nodes forward: every key's TTL
// shrinks by the jump, and those it takes to zero expire. A jump can't be
// undone, so heal does nothing.
type clockJumpFault struct {
	nodes []int
	by    time.Duration
}

func (f *clockJumpFault) String() string {
	return fmt.Sprintf("clock jump %v on nodes %v", f.by, f.nodes)
}
func (f *clockJumpFault) inject(r *chaosRun) {
	for _, i := range f.nodes {
		r.cl.nodes[i].jump(f.by)
	}
}
func (*clockJumpFault) heal(*chaosRun) {}

// clockStepFault steps the clock of a miniredis node forward for real (see
// chaosNode.stepClock): TIME moves on by the step, every TTL shrinks by it,
// and the clock keeps running from there. clockJumpFault only shrinks the
// TTLs, which no client can see; this one the node guard can. It can't be
// undone, so heal does nothing.
type clockStepFault struct {
	node int
	by   time.Duration
}

func (f *clockStepFault) String() string {
	return fmt.Sprintf("clock step %v on node %d", f.by, f.node)
}
func (f *clockStepFault) inject(r *chaosRun) { r.cl.nodes[f.node].stepClock(f.by) }
func (*clockStepFault) heal(*chaosRun)       {}

// nodeErrorFault makes a node answer every command with an error until
// healed: any error on miniredis, READONLY on a real node (which becomes a
// replica of a master that does not exist).
type nodeErrorFault struct {
	node int
	msg  string
}

func (f *nodeErrorFault) String() string     { return fmt.Sprintf("node %d answers %q", f.node, f.msg) }
func (f *nodeErrorFault) inject(r *chaosRun) { r.cl.nodes[f.node].setError(f.msg) }
func (f *nodeErrorFault) heal(r *chaosRun)   { r.cl.nodes[f.node].clearError() }

// noScriptFault flushes a node's script cache every period until healed, so
// that EVALSHA keeps meeting NOSCRIPT. go-redis's Script.Run falls back to
// EVAL, so this should cost nothing but a round trip.
type noScriptFault struct {
	node   int
	period time.Duration
	stop   func() // stops the flushing goroutine and waits for it
}

func (f *noScriptFault) String() string {
	return fmt.Sprintf("SCRIPT FLUSH on node %d every %v", f.node, f.period)
}

func (f *noScriptFault) inject(r *chaosRun) {
	n := r.cl.nodes[f.node]
	n.flushScripts()
	stop, done := make(chan struct{}), make(chan struct{})
	f.stop = sync.OnceFunc(func() { close(stop); <-done })
	// Also on a failed test, which may never heal.
	r.t.Cleanup(f.stop)
	go func() {
		defer close(done)
		t := time.NewTicker(f.period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				// Errors are a node that is down meanwhile; not ours to report.
				_ = n.admin.ScriptFlush(context.Background()).Err()
			}
		}
	}()
}

func (f *noScriptFault) heal(*chaosRun) { f.stop() }

// lateFault delivers requests late: each chunk a Client sends to the nodes
// is, with probability prob, held for a random while in [min, max] before
// it reaches the node, even after the Client gave up on it and closed its
// connection. Connections get independent delays, so requests reorder
// across them. A rollback or release can thus land after a later attempt
// was decided, which is what a value per attempt is for.
type lateFault struct {
	nodes    []int
	prob     float64
	min, max time.Duration
}

func (f *lateFault) String() string {
	return fmt.Sprintf("late delivery p=%.2f %v..%v on nodes %v", f.prob, f.min, f.max, f.nodes)
}
func (f *lateFault) inject(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLate(f.prob, f.min, f.max) })
}
func (f *lateFault) heal(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLate(0, 0, 0) })
}

// lostRepliesFault loses replies: the node runs the request, the reply is
// dropped and the connection reset. A write that already ran is then sent
// again on a new connection: by go-redis (MaxRetries 3 by default) for a
// command of its pool, and by the library's sender for a batch that failed
// on the connection it holds (see link.send in internal/transport), when the client makes
// retries. resendFault injects such second copies whatever the transport
// does with a failed connection.
type lostRepliesFault struct {
	nodes []int
	prob  float64
}

func (f *lostRepliesFault) String() string {
	return fmt.Sprintf("lost replies p=%.2f on nodes %v", f.prob, f.nodes)
}
func (f *lostRepliesFault) inject(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLoseReplies(f.prob) })
}
func (f *lostRepliesFault) heal(r *chaosRun) {
	r.eachProxy(nil, f.nodes, func(p *faultproxy.Proxy) { p.SetLoseReplies(0) })
}

// resendFault sends commands twice at random, on the nodes' go-redis
// clients of every Client (see resender).
type resendFault struct {
	nodes []int
	prob  float64
}

func (f *resendFault) String() string {
	return fmt.Sprintf("commands sent twice p=%.2f on nodes %v", f.prob, f.nodes)
}
func (f *resendFault) inject(r *chaosRun) { f.set(r, f.prob) }
func (f *resendFault) heal(r *chaosRun)   { f.set(r, 0) }
func (f *resendFault) set(r *chaosRun, p float64) {
	for _, cc := range r.cl.clients {
		for _, i := range f.nodes {
			cc.resenders[i].prob.Store(math.Float64bits(p))
		}
	}
}

// resender is a go-redis hook that sends a command, or a pipeline, twice
// at random: the node runs both, the first reply is dropped, and the
// caller gets the second. That is what go-redis does itself when a reply is
// lost on a connection of its pool, and what the library's sender does
// through the pool when a batch fails on the connection it holds (see
// link.send in internal/transport): the command goes out again on another connection. The hook
// injects such second copies without a failed connection, on every path
// the library sends by, so that recognising a write that ran twice does
// not rest on how the transport handles a connection failure. Every chaos
// client has one, at probability 0 until a resendFault sets it.
type resender struct {
	prob   atomic.Uint64 // math.Float64bits of the probability
	mu     sync.Mutex    // guards rng
	rng    *rand.Rand
	resent atomic.Int64 // commands and pipelines sent twice
}

func (h *resender) draw() bool {
	p := math.Float64frombits(h.prob.Load())
	if p == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.Float64() < p
}

func (h *resender) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resender) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.draw() {
			h.resent.Add(1)
			_ = next(ctx, cmd) // its reply is lost
		}
		return next(ctx, cmd)
	}
}

func (h *resender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.draw() {
			h.resent.Add(1)
			_ = next(ctx, cmds) // its replies are lost
		}
		return next(ctx, cmds)
	}
}

// loseRepliesAndResend is the lost-reply scenarios' fault: from 5% of the run to
// 95%, replies are lost at random (lostRepliesFault) and commands are sent
// twice (resendFault), on every node.
func loseRepliesAndResend(r *chaosRun) {
	all := []int{0, 1, 2, 3, 4}
	r.at(0.05)
	lost := &lostRepliesFault{nodes: all, prob: 0.05}
	twice := &resendFault{nodes: all, prob: 0.05}
	r.inject(lost)
	r.inject(twice)
	r.sleep(r.load.duration * 9 / 10)
	r.heal(twice)
	r.heal(lost)
}

// restartEmpty kills the nodes and restarts them empty, all at once, as a
// crash of several servers without persistence does.
func (r *chaosRun) restartEmpty(nodes []int) {
	fs := make([]chaosFault, 0, len(nodes))
	for _, n := range nodes {
		f := &restartFault{node: n, mode: restartEmpty}
		r.inject(f)
		fs = append(fs, f)
	}
	for _, f := range fs {
		r.heal(f)
	}
}
