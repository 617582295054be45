package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/redlockgo/redlock/internal/faultproxy"
)

// The contenders of each measure. The floors have no wait policy (they make
// no retries by definition), so they sit out the contended measure; our
// polling mode joins it instead.
var (
	mainNames = []string{nameOurs, nameRedsync, nameFloor, namePipeFloor, nameRueidisFloor}
	// seqNames adds, for (a) only, the floor that orders each release
	// after its node's SET reply.
	seqNames       = append(mainNames[:len(mainNames):len(mainNames)], nameOrderedFloor)
	contendedNames = []string{nameOurs, nameOursPolling, nameRedsync}
	// fairNames are (i)'s contenders: the plain lock for contrast, then
	// the fair one, first with the 16 goroutines on one Client, as (c)
	// runs them, then on one Client each.
	fairNames      = []string{nameOurs, nameOursFair, nameOursClients, nameOursFairClients}
	degradedNames  = []string{nameOurs, nameRedsync, nameRedsyncCtx, nameFloor, namePipeFloor, nameRueidisFloor}
	parallelLevels = []int{1, 8, 32, 128, 512}
	// targetLevels are the goroutine counts that (b)'s targets name.
	targetLevels = []int{32, 128}
	scaleNodes   = []int{3, 5, 7, 9}
)

const (
	// seqBlock is how many cycles of (a) a contender runs in one turn.
	seqBlock    = 100
	mainNodes   = 5
	contendG    = 16
	contendHold = time.Millisecond
	pausedNode  = 4
	addedDelay  = 20 * time.Millisecond
	// settleAfterResume is how long (d) waits after it resumed the paused
	// node: the requests queued for it are answered or dropped within the
	// library's 1 s request life, and their rollbacks follow.
	settleAfterResume = 1500 * time.Millisecond
)

// (a) Sequential lock+unlock, and the PINGs that turn it into round trips.
func measureSequential(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	cs, err := contenders(cl.addrs(mainNodes), seqNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	pings := newClientSet(cl.addrs(mainNodes))
	defer pings.close()
	warm(ctx, cs, "a", s.warmOps)
	pingQuorum(ctx, pings.clients, s.warmOps)
	res.seq = map[string][]latencies{}
	res.seqErrs = map[string]*errCount{}
	res.seqCmds = map[string][]float64{}
	res.seqReads = map[string][]float64{}
	res.seqSent = map[string][]float64{}
	res.seqClientCPU = map[string][]float64{}
	res.seqServerCPU = map[string][]float64{}
	for r := range s.rounds {
		logf("(a) %s", roundName("sequential", r, s.rounds))
		// The contenders take turns in blocks of seqBlock cycles, so that
		// a drift of the machine's speed within the round (another VM, a
		// frequency step) falls on all of them alike.
		lats := make([][]time.Duration, len(cs))
		keys := make([][]string, len(cs))
		cmds, reads, sent := make([]int64, len(cs)), make([]int64, len(cs)), make([]int64, len(cs))
		clientCPU, serverCPU := make([]time.Duration, len(cs)), make([]time.Duration, len(cs))
		for i, c := range cs {
			keys[i] = keysFor(fmt.Sprintf("a:%s:%d", c.name, r), s.seqOps)
			lats[i] = make([]time.Duration, s.seqOps)
			if res.seqErrs[c.name] == nil {
				res.seqErrs[c.name] = &errCount{}
			}
		}
		for from := 0; from < s.seqOps; from += seqBlock {
			to := min(from+seqBlock, s.seqOps)
			for i, c := range cs {
				// The servers' CPU is read outside the counts, whose
				// reads it would add to; it includes their INFO, the
				// same for every contender.
				srv0 := sumDur(cl.serverCPU(ctx, mainNodes))
				before := cl.counts(ctx, mainNodes)
				c.clients.countSent(true)
				n := c.clients.sentSoFar()
				cpu0 := processCPU()
				seqOps(ctx, c, keys[i][from:to], lats[i][from:to], nil, 0, res.seqErrs[c.name])
				time.Sleep(5 * time.Millisecond) // the last cycle's stragglers
				clientCPU[i] += processCPU() - cpu0
				sent[i] += c.clients.sentSoFar() - n
				c.clients.countSent(false)
				d := total(countsSince(cl.counts(ctx, mainNodes), before))
				serverCPU[i] += sumDur(cl.serverCPU(ctx, mainNodes)) - srv0
				cmds[i] += d.cmds
				reads[i] += d.reads
			}
		}
		for i, c := range cs {
			res.seq[c.name] = append(res.seq[c.name], summarise(lats[i]))
			res.seqCmds[c.name] = append(res.seqCmds[c.name], float64(cmds[i])/float64(s.seqOps))
			res.seqReads[c.name] = append(res.seqReads[c.name], float64(reads[i])/float64(s.seqOps))
			res.seqSent[c.name] = append(res.seqSent[c.name], float64(sent[i])/float64(s.seqOps))
			res.seqClientCPU[c.name] = append(res.seqClientCPU[c.name], us(clientCPU[i])/float64(s.seqOps))
			res.seqServerCPU[c.name] = append(res.seqServerCPU[c.name], us(serverCPU[i])/float64(s.seqOps))
		}
		res.ping1 = append(res.ping1, summarise(pingOne(ctx, pings.clients[0], s.seqOps)))
		res.pingQ = append(res.pingQ, summarise(pingQuorum(ctx, pings.clients, s.seqOps)))
	}
	return nil
}

// (e) Allocations per lock+unlock.
func measureAllocations(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	cs, err := contenders(cl.addrs(mainNodes), mainNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	warm(ctx, cs, "e", s.warmOps)
	res.allocs = map[string][]allocResult{}
	for r := range s.rounds {
		logf("(e) %s", roundName("allocations", r, s.rounds))
		for _, c := range cs {
			keys := keysFor(fmt.Sprintf("e:%s:%d", c.name, r), s.allocOps)
			res.allocs[c.name] = append(res.allocs[c.name], allocations(ctx, c, keys))
		}
	}
	return nil
}

// (b) Parallel lock+unlock on distinct keys.
func measureParallel(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	cs, err := contenders(cl.addrs(mainNodes), mainNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	warm(ctx, cs, "b", s.warmOps)
	res.par = map[int]map[string][]parResult{}
	res.parErrs = map[int]map[string]*errCount{}
	for _, g := range parallelLevels {
		res.par[g] = map[string][]parResult{}
		res.parErrs[g] = map[string]*errCount{}
		for _, c := range cs { // grow the pools to this level first
			parallel(ctx, c, g, s.parDur/4, fmt.Sprintf("b:warm:%s:%d", c.name, g), nil)
			res.parErrs[g][c.name] = &errCount{}
		}
		for r := range s.rounds {
			logf("(b) %s, %d goroutines", roundName("parallel", r, s.rounds), g)
			for _, c := range cs {
				before := cl.counts(ctx, mainNodes)
				pr := parallel(ctx, c, g, s.parDur, fmt.Sprintf("b:%s:%d:%d", c.name, g, r), res.parErrs[g][c.name])
				d := total(countsSince(cl.counts(ctx, mainNodes), before))
				if pr.ops > 0 {
					pr.readsPerOp = float64(d.reads) / float64(pr.ops)
				}
				res.par[g][c.name] = append(res.par[g][c.name], pr)
			}
		}
	}
	return nil
}

// (c) Contention: 16 goroutines on one key.
func measureContended(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	cs, err := contenders(cl.addrs(mainNodes), contendedNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	warm(ctx, cs, "c", s.warmOps)
	for _, c := range cs { // dial the connections 16 goroutines need
		parallel(ctx, c, contendG, 200*time.Millisecond, "c:warm:"+c.name, nil)
	}
	res.cont = map[string][]contResult{}
	for r := range s.contRounds {
		logf("(c) %s", roundName("contended", r, s.contRounds))
		for _, c := range cs {
			key := fmt.Sprintf("c:%s:%d", c.name, r)
			cr := contended(ctx, cl, mainNodes, c, contendG, contendHold, s.contDur, key)
			res.cont[c.name] = append(res.cont[c.name], cr)
		}
	}
	return nil
}

// (i) Fair handoff: (c)'s 16 goroutines on one key, fair and not, on one
// Client and on one Client per goroutine, with the quorum fan-out PING of
// each round as the yardstick of the handoff gap.
func measureFair(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	cs, err := contenders(cl.addrs(mainNodes), fairNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	pings := newClientSet(cl.addrs(mainNodes))
	defer pings.close()
	warm(ctx, cs, "i", s.warmOps)
	pingQuorum(ctx, pings.clients, s.warmOps)
	for _, c := range cs {
		// Dials the connections of every goroutine and every Client,
		// their subscriptions included.
		contended(ctx, cl, mainNodes, c, contendG, contendHold, 300*time.Millisecond, "i:warm:"+c.name)
	}
	res.fair = map[string][]contResult{}
	for r := range s.contRounds {
		logf("(i) %s", roundName("fair handoff", r, s.contRounds))
		for _, c := range cs {
			key := fmt.Sprintf("i:%s:%d", c.name, r)
			res.fair[c.name] = append(res.fair[c.name], contended(ctx, cl, mainNodes, c, contendG, contendHold, s.contDur, key))
		}
		res.fairPing = append(res.fairPing, summarise(pingQuorum(ctx, pings.clients, s.seqOps)))
	}
	return nil
}

// (d) Degraded: one node SIGSTOPped, then one node behind 20 ms of latency.
// Each contender's healthy turn, on the same clients just before its
// paused turn of the round, gives the baseline.
func measureDegraded(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	res.degHealthy = map[string][]latencies{}
	res.paused = map[string][]latencies{}
	res.pausedLock = map[string][]latencies{}
	res.pausedErrs = map[string]*errCount{}
	res.slow = map[string][]latencies{}
	res.slowErrs = map[string]*errCount{}

	// block runs one contender's turn of a round.
	block := func(tag string, r int, c *contender, into, lockInto map[string][]latencies, errs map[string]*errCount) {
		keys := keysFor(fmt.Sprintf("d:%s:%s:%d", tag, c.name, r), s.degradedOps)
		lat := make([]time.Duration, len(keys))
		lockLat := make([]time.Duration, len(keys))
		if errs[c.name] == nil {
			errs[c.name] = &errCount{}
		}
		n := seqOps(ctx, c, keys, lat, lockLat, s.degradedBudget, errs[c.name])
		into[c.name] = append(into[c.name], summarise(lat[:n]))
		if lockInto != nil {
			lockInto[c.name] = append(lockInto[c.name], summarise(lockLat[:n]))
		}
	}

	cs, err := contenders(cl.addrs(mainNodes), degradedNames...)
	if err != nil {
		return err
	}
	warm(ctx, cs, "d", s.warmOps)
	// Each contender's paused turn follows its healthy turn of the same
	// round at once, so that the ratio of the two compares the same moment
	// of the machine, as (a)'s turns do; node 4 is resumed after each
	// paused turn, and the next contender starts once the requests that
	// waited for it have been answered.
	srv := cl.servers[pausedNode]
	healthyErrs := map[string]*errCount{}
	for r := range s.degradedRounds {
		logf("(d) %s", roundName("healthy and paused", r, s.degradedRounds))
		for _, c := range cs {
			block("healthy", r, c, res.degHealthy, nil, healthyErrs)
			srv.Pause()
			block("paused", r, c, res.paused, res.pausedLock, res.pausedErrs)
			srv.Resume()
			time.Sleep(settleAfterResume)
		}
	}
	logf("(d) node %d resumed; waiting for the requests in flight", pausedNode)
	closeAll(cs)

	p, err := faultproxy.New(srv.Addr(), 1)
	if err != nil {
		return err
	}
	defer p.Close()
	p.SetLatency(addedDelay, 0)
	addrs := cl.addrs(mainNodes)
	addrs[pausedNode] = p.Addr()
	cs, err = contenders(addrs, degradedNames...)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	warm(ctx, cs, "d-slow", s.warmOps/4)
	for r := range s.degradedRounds {
		logf("(d) %s", roundName("slow node", r, s.degradedRounds))
		for _, c := range cs {
			block("slow node", r, c, res.slow, nil, res.slowErrs)
		}
	}
	return nil
}

// (f) Scaling: the sequential p50 with N = 3, 5, 7, 9 nodes.
func measureScaling(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	sets := map[int][]*contender{}
	pings := map[int]*clientSet{}
	for _, n := range scaleNodes {
		pings[n] = newClientSet(cl.addrs(n))
		defer pings[n].close()
		pingQuorum(ctx, pings[n].clients, s.warmOps/2)
		cs, err := contenders(cl.addrs(n), mainNames...)
		if err != nil {
			return err
		}
		defer closeAll(cs)
		warm(ctx, cs, fmt.Sprintf("f%d", n), s.warmOps/2)
		sets[n] = cs
	}
	res.scale = map[int]map[string][]latencies{}
	res.scalePing = map[int][]latencies{}
	for _, n := range scaleNodes {
		res.scale[n] = map[string][]latencies{}
	}
	for r := range s.rounds {
		logf("(f) %s", roundName("scaling", r, s.rounds))
		for _, n := range scaleNodes {
			for _, c := range sets[n] {
				keys := keysFor(fmt.Sprintf("f:%d:%s:%d", n, c.name, r), s.scaleOps)
				lat := make([]time.Duration, len(keys))
				seqOps(ctx, c, keys, lat, nil, 0, nil)
				res.scale[n][c.name] = append(res.scale[n][c.name], summarise(lat))
			}
			res.scalePing[n] = append(res.scalePing[n], summarise(pingQuorum(ctx, pings[n].clients, s.scaleOps)))
		}
	}
	return nil
}

// (g) Renewals: one Client holding many auto-extended locks.
func measureRenewals(ctx context.Context, cl *cluster, res *results) error {
	s := res.settings
	logf("(g) taking %d auto-extended locks (TTL %v)", s.renewLocks, s.renewTTL)
	r, err := renewals(ctx, cl, mainNodes, s.renewLocks, s.renewTTL, s.renewWindow, logf)
	if err != nil {
		return err
	}
	res.renew = r
	return nil
}

// profiles writes CPU profiles of the sequential and the 32-goroutine
// parallel measure, and allocation profiles of the sequential one, for
// redlock and the plain, pipelined and rueidis floors, so that `go tool
// pprof` shows where the library spends more than the floors.
func profiles(ctx context.Context, cl *cluster, s settings, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cs, err := contenders(cl.addrs(mainNodes), nameOurs, nameFloor, namePipeFloor, nameRueidisFloor)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	warm(ctx, cs, "p", s.warmOps)
	write := func(name string, f func(w io.Writer) error) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			_ = fh.Close()
			return err
		}
		return fh.Close()
	}
	cpu := func(run func()) func(w io.Writer) error {
		return func(w io.Writer) error {
			if err := pprof.StartCPUProfile(w); err != nil {
				return err
			}
			run()
			pprof.StopCPUProfile()
			return nil
		}
	}
	allocs := func(w io.Writer) error { return pprof.Lookup("allocs").WriteTo(w, 0) }
	for _, c := range cs {
		tag := strings.ReplaceAll(c.name, " ", "")
		logf("profiling %s", c.name)
		keys := keysFor("p:seq:"+tag, 4*s.seqOps)
		lat := make([]time.Duration, len(keys))
		if err := write(tag+"-seq.cpu.pprof", cpu(func() { seqOps(ctx, c, keys, lat, nil, 0, nil) })); err != nil {
			return err
		}
		if err := write(tag+"-par32.cpu.pprof", cpu(func() { parallel(ctx, c, 32, 4*s.parDur, "p:par:"+tag, nil) })); err != nil {
			return err
		}
		// Allocation sites: every allocation sampled, one profile before
		// and one after; compare them with pprof -diff_base.
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		runtime.GC()
		if err := write(tag+"-allocs-base.pprof", allocs); err != nil {
			return err
		}
		keys = keysFor("p:alloc:"+tag, s.allocOps)
		seqOps(ctx, c, keys, lat[:len(keys)], nil, 0, nil)
		time.Sleep(20 * time.Millisecond)
		runtime.GC()
		if err := write(tag+"-allocs.pprof", allocs); err != nil {
			return err
		}
		runtime.MemProfileRate = old
	}
	logf("profiles written to %s", dir)
	return nil
}

// machineNotes describes where the run happened.
func machineNotes(ctx context.Context, cl *cluster) [][2]string {
	notes := [][2]string{
		{"CPUs (nproc)", fmt.Sprint(runtime.NumCPU())},
		{"GOMAXPROCS", fmt.Sprint(runtime.GOMAXPROCS(0))},
		{"CPU", cpuModel()},
		{"kernel", readTrim("/proc/sys/kernel/osrelease")},
		{"Go", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
		{"redis-server", cl.redisVersion(ctx) + " (5 nodes; 3, 5, 7, 9 for scaling), all on 127.0.0.1, no persistence; (h) behind in-process delay proxies"},
		{"load average at start", readTrim("/proc/loadavg")},
		{"date", time.Now().UTC().Format("2006-01-02 15:04 UTC")},
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var mods []string
		for _, m := range bi.Deps {
			if m.Path == "github.com/redlockgo/redlock" && m.Replace != nil {
				notes = append(notes, [2]string{"redlock", libraryVersion(m.Replace.Path)})
			}
			switch m.Path {
			case "github.com/redis/go-redis/v9", "github.com/redis/rueidis", "github.com/go-redsync/redsync/v4", "gonum.org/v1/plot":
				mods = append(mods, m.Path+" "+m.Version)
			}
		}
		notes = append(notes, [2]string{"modules", strings.Join(mods, ", ")})
	}
	return notes
}

// libraryVersion names the library's commit, from the directory the bench
// module's replace points to, and says whether it had uncommitted changes.
func libraryVersion(dir string) string {
	head, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%h %s").Output()
	if err != nil {
		return "working tree at " + dir
	}
	v := "commit " + strings.TrimSpace(string(head))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench", ":!docs").Output(); err == nil && len(st) > 0 {
		v += ", plus the uncommitted changes of the working tree"
	}
	return v
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
