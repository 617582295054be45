package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// results holds every round of every measure of a run.
type results struct {
	settings settings
	quick    bool
	only     string
	machine  [][2]string
	command  string
	took     time.Duration

	seq          map[string][]latencies // (a), by contender, one per round
	seqErrs      map[string]*errCount
	seqCmds      map[string][]float64 // commands the servers processed per cycle
	seqReads     map[string][]float64 // read events on the servers per cycle
	seqSent      map[string][]float64 // commands the client sent per cycle (go-redis hooks)
	seqClientCPU map[string][]float64 // this process's CPU per cycle, µs (getrusage)
	seqServerCPU map[string][]float64 // the servers' CPU per cycle, µs (INFO cpu)
	ping1, pingQ []latencies

	par     map[int]map[string][]parResult // (b), by goroutines, then contender
	parErrs map[int]map[string]*errCount

	cont map[string][]contResult // (c)

	fair     map[string][]contResult // (i), by contender
	fairPing []latencies             // (i) PING fan-out to the quorum-th reply, one per round

	degHealthy, paused, slow map[string][]latencies // (d)
	pausedLock               map[string][]latencies // (d) the Lock call alone
	pausedErrs, slowErrs     map[string]*errCount

	allocs map[string][]allocResult // (e)

	scale     map[int]map[string][]latencies // (f), by node count
	scalePing map[int][]latencies            // (f) PING fan-out to the quorum-th reply

	renew *renewResult // (g)

	wan     map[string][]wanRound // (h), by contender, one per round
	wanErrs map[string]*errCount
	wanPing []latencies // (h) PING fan-out to the quorum-th reply
}

func p50s(ls []latencies) []float64 {
	return pick(ls, func(l latencies) time.Duration { return l.p50 })
}
func p99s(ls []latencies) []float64 {
	return pick(ls, func(l latencies) time.Duration { return l.p99 })
}

func pick[T any](xs []T, f func(T) time.Duration) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(f(x))
	}
	return out
}

func pickF[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// medDur is the median over rounds of one duration figure.
func medDur(ls []latencies, f func(latencies) time.Duration) time.Duration {
	return time.Duration(median(pick(ls, f)))
}

// target is one figure to reach, as issue 12 states it.
type target struct {
	measure string
	what    string
	limit   string
	got     string
	met     *bool // nil: not measured in this run
	note    string
}

// check compares the median x with the limit; below says whether smaller is
// better. It returns the verdict and by how much it was missed.
func check(x, limit float64, below, strict bool) (*bool, string) {
	if math.IsNaN(x) {
		return nil, ""
	}
	var ok bool
	switch {
	case below && strict:
		ok = x < limit
	case below:
		ok = x <= limit
	default:
		ok = x >= limit
	}
	if ok {
		return &ok, ""
	}
	if below {
		return &ok, fmt.Sprintf("over by %.0f%%", (x/limit-1)*100)
	}
	return &ok, fmt.Sprintf("short by %.0f%%", (1-x/limit)*100)
}

func (res *results) targets() []target {
	var ts []target
	add := func(measure, what, limit string, r ratios, lim float64, below bool) {
		t := target{measure: measure, what: what, limit: limit, got: r.String()}
		t.met, t.note = check(r.median(), lim, below, false)
		ts = append(ts, t)
	}
	reported := func(measure, what, got string) {
		ts = append(ts, target{measure: measure, what: what, limit: "reported", got: got})
	}
	if res.seq != nil {
		add("(a)", "redlock p50 / plain floor p50", "≤ 1.00×", ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameFloor])), 1.0, true)
		reported("(a)", "redlock p50 / ordered floor p50 (no release ahead of its SET's reply)", ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameOrderedFloor])).String())
		var per, sent []string
		for _, name := range seqNames {
			per = append(per, name+" "+fmtNum(median(res.seqCmds[name])))
			sent = append(sent, name+" "+fmtNum(median(res.seqSent[name])))
		}
		reported("(a)", "commands per uncontended lock+unlock, servers' INFO (script calls included)", strings.Join(per, ", "))
		reported("(a)", "commands per uncontended lock+unlock, sent by the client (go-redis hooks)", strings.Join(sent, ", "))
	}
	if res.par != nil {
		ops := func(p parResult) float64 { return p.perSec }
		p99 := func(p parResult) float64 { return float64(p.lat.p99) }
		for _, g := range targetLevels {
			ours := res.par[g][nameOurs]
			add("(b)", fmt.Sprintf("redlock ops/s / plain floor ops/s, %d goroutines", g), "≥ 3.00×", ratioOf(pickF(ours, ops), pickF(res.par[g][nameFloor], ops)), 3, false)
		}
		for _, g := range targetLevels {
			ours := res.par[g][nameOurs]
			add("(b)", fmt.Sprintf("redlock ops/s / pipelined floor ops/s, %d goroutines", g), "≥ 0.85×", ratioOf(pickF(ours, ops), pickF(res.par[g][namePipeFloor], ops)), 0.85, false)
		}
		for _, g := range targetLevels {
			ours := res.par[g][nameOurs]
			add("(b)", fmt.Sprintf("redlock p99 / plain floor p99, %d goroutines", g), "≤ 0.50×", ratioOf(pickF(ours, p99), pickF(res.par[g][nameFloor], p99)), 0.5, true)
		}
		n := 0
		for _, g := range parallelLevels {
			n += res.parErrs[g][nameOurs].unlocks()
		}
		t := target{measure: "(b)", what: "redlock Unlock errors, all goroutine counts", limit: "0", got: fmt.Sprint(n)}
		ok := n == 0
		t.met = &ok
		if !ok {
			t.note = fmt.Sprintf("%d errors", n)
		}
		ts = append(ts, t)
	}
	if res.cont != nil {
		ours := res.cont[nameOurs]
		wait := func(c contResult) time.Duration { return c.waitP99 }
		add("(c)", "redlock wait p99 / redsync wait p99", "≤ 0.20×", ratioOf(pick(ours, wait), pick(res.cont[nameRedsync], wait)), 0.20, true)
		gap := time.Duration(median(pick(ours, func(c contResult) time.Duration { return c.gapP50 })))
		t := target{measure: "(c)", what: "redlock handoff gap p50", limit: "< 1 ms", got: fmtDur(gap)}
		t.met, t.note = check(float64(gap), float64(time.Millisecond), true, true)
		ts = append(ts, t)
		cmds := median(pickF(ours, func(c contResult) float64 { return c.cmdsPerAcq }))
		t = target{measure: "(c)", what: "redlock Redis commands per acquisition, servers' INFO (script calls included)", limit: "≤ 30", got: fmtNum(cmds)}
		t.met, t.note = check(cmds, 30, true, false)
		ts = append(ts, t)
		reported("(c)", "redlock Redis commands per acquisition, sent by the client (issue 6's count)",
			fmtNum(median(pickF(ours, func(c contResult) float64 { return c.sentPerAcq }))))
		same := median(pickF(ours, func(c contResult) float64 { return c.sameShare }))
		t = target{measure: "(c)", what: "redlock same holder re-acquires (kept from issue 6)", limit: "< 50 %", got: fmt.Sprintf("%.0f %%", same*100)}
		t.met, t.note = check(same, 0.5, true, true)
		ts = append(ts, t)
	}
	if res.fair != nil {
		gap := func(c contResult) time.Duration { return c.gapP50 }
		ping := p50s(res.fairPing)
		fair := res.fair[nameOursFair]
		add("(i)", fmt.Sprintf("redlock fair handoff gap p50 / quorum fan-out PING p50, %d goroutines on one Client (issue 29)", contendG), "≤ 2.00×",
			ratioOf(pick(fair, gap), ping), 2, true)
		add("(i)", "redlock fair min / max acquisitions per goroutine, one Client (issue 29)", "≥ 0.90×", ratios(pickF(fair, evenness)), 0.9, false)
		for _, name := range []string{nameOurs, nameOursFairClients, nameOursClients} {
			rs := res.fair[name]
			reported("(i)", name+": handoff gap p50 / PING p50; min / max acquisitions per goroutine",
				ratioOf(pick(rs, gap), ping).String()+"; "+ratios(pickF(rs, evenness)).String())
		}
		var per []string
		for _, name := range fairNames {
			per = append(per, name+" "+fmtNum(median(pickF(res.fair[name], func(c contResult) float64 { return c.cmdsPerAcq }))))
		}
		reported("(i)", "Redis commands per acquisition, servers' INFO (script calls included)", strings.Join(per, ", "))
	}
	if res.paused != nil {
		add("(d)", "redlock p50, one node SIGSTOPped / healthy p50", "≤ 1.20×", ratioOf(p50s(res.paused[nameOurs]), p50s(res.degHealthy[nameOurs])), 1.2, true)
		for _, name := range []string{nameRedsync, nameRedsyncCtx} {
			reported("(d)", name+" p50, one node SIGSTOPped / healthy p50", ratioOf(p50s(res.paused[name]), p50s(res.degHealthy[name])).String())
		}
	}
	if res.allocs != nil {
		f := func(a allocResult) float64 { return a.allocs }
		add("(e)", "redlock allocations / redsync allocations", "≤ 0.80×", ratioOf(pickF(res.allocs[nameOurs], f), pickF(res.allocs[nameRedsync], f)), 0.8, true)
		ours := res.allocs[nameOurs]
		n := median(pickF(ours, f))
		t := target{measure: "(e)", what: "redlock allocations per lock+unlock (issue 26)", limit: "≤ 50", got: fmt.Sprintf("%.0f", n)}
		t.met, t.note = check(n, 50, true, false)
		ts = append(ts, t)
		kb := median(pickF(ours, func(a allocResult) float64 { return a.bytes })) / 1000
		t = target{measure: "(e)", what: "redlock bytes per lock+unlock (issue 26)", limit: "≤ 6.0 KB", got: fmt.Sprintf("%.1f KB", kb)}
		t.met, t.note = check(kb, 6, true, false)
		ts = append(ts, t)
		rf := res.allocs[nameRueidisFloor]
		reported("(e)", "rueidis floor allocations and bytes per lock+unlock (the library's commands on rueidis)", fmt.Sprintf("%.0f, %.1f KB",
			median(pickF(rf, f)), median(pickF(rf, func(a allocResult) float64 { return a.bytes }))/1000))
	}
	if res.scale != nil {
		ours := ratioOf(p50s(res.scale[9][nameOurs]), p50s(res.scale[3][nameOurs]))
		ping := ratioOf(p50s(res.scalePing[9]), p50s(res.scalePing[3]))
		add("(f)", "redlock (p50 at N = 9 / N = 3) / PING fan-out's (N = 9 / N = 3)", "≤ 1.10×", ratioOf(ours, ping), 1.1, true)
	}
	if r := res.renew; r != nil {
		reported("(g)", fmt.Sprintf("client CPU holding %d auto-extended locks", r.locks), fmt.Sprintf("%.1f %% of one core", r.cpu*100))
		reported("(g)", "pipelines (server read events) per second per node", fmtNum(median(r.reads)))
		reported("(g)", "commands per second per node", fmtNum(median(r.cmds)))
	}
	if res.wan != nil {
		q := wanQuorumRTT()
		lim := 1.1 * float64(q)
		ops := []struct {
			name string
			f    func(wanRound) time.Duration
		}{
			{"Lock", func(w wanRound) time.Duration { return w.lock.p50 }},
			{"Unlock", func(w wanRound) time.Duration { return w.unlock.p50 }},
		}
		for _, op := range ops {
			x := time.Duration(median(pick(res.wan[nameOurs], op.f)))
			t := target{measure: "(h)", what: fmt.Sprintf("redlock %s p50 on the WAN", op.name), limit: fmt.Sprintf("≤ %s (1.1 × %s)", fmtDur(time.Duration(lim)), fmtDur(q)), got: fmtDur(x)}
			t.met, t.note = check(float64(x), lim, true, false)
			ts = append(ts, t)
		}
		for _, op := range ops {
			reported("(h)", fmt.Sprintf("redsync %s p50 on the WAN (waits for every node)", op.name), fmtDur(time.Duration(median(pick(res.wan[nameRedsync], op.f)))))
		}
	}
	return ts
}

// writeReport writes the generated part of docs/PERFORMANCE.md. chartDir is
// where the charts were written ("" for none).
func writeReport(w io.Writer, res *results, chartDir string) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	s := res.settings

	p("\n_Generated by the harness in [`bench/`](../bench) in %v. Reproduce with:_\n\n", res.took.Round(time.Second))
	p("```sh\n%s\n```\n\n", res.command)
	if res.quick {
		p("> **Quick mode:** %d rounds of short measures. The figures are indicative only; the committed figures come from a full run.\n\n", s.rounds)
	}
	p("Each contender has its own go-redis v9 clients with default options (the rueidis floor has rueidis clients).\n")
	p("Contenders run in turn within each round (A, B, C, A, B, C, …): %d rounds for (a), (b), (e) and (f), %d for (c) and (i),\n", s.rounds, s.contRounds)
	p("%d for (d), %d for (h). A figure is\n", s.degradedRounds, s.wanRounds)
	p("the median over rounds; a comparison is the median of the per-round ratios, with the lowest and highest round\n")
	p("in brackets. Commands and batches are counted by the servers themselves (INFO stats and commandstats, the\n")
	p("harness's own INFO calls taken out), so the count does not depend on the client's transport.\n\n")
	p("- **redlock**: this library, defaults (`redlock.New(nodes)`; TTL 10 s, pub/sub wake-up on).\n")
	p("- **redsync**: go-redsync/redsync v4, defaults (`redsync.New(goredis.NewPool(c)...)`, `NewMutex(key)`; expiry 8 s, 32 tries, 50–250 ms between tries).\n")
	p("- **plain floor**: written in the harness ([`bench/floor.go`](../bench/floor.go)): `SET NX PX` to every node at once, decision at the\n")
	p("  quorum-th reply, release by EVALSHA compare-and-delete also decided at the quorum-th reply; no retries, no\n")
	p("  timeouts of its own. Each command takes a pooled connection of its own.\n")
	p("- **pipelined floor**: the same code, sending its commands through go-redis's `AutoPipeline()` (blocking face,\n")
	p("  default options; EXPERIMENTAL in go-redis v9.23), one per node: the commands that concurrent callers send to a\n")
	p("  node while a batch is in flight go out together as the next pipeline.\n")
	p("- **ordered floor**, in (a) only: the plain floor, except that `Unlock` sends no release to a node whose `SET`\n")
	p("  has not answered yet; that node's release goes out once it has. It keeps the one rule of issue 12 that\n")
	p("  decides when a request may be sent (a release never goes ahead of its own acquire), which the plain floor\n")
	p("  breaks: its release can overtake a `SET` still in flight on another connection and leave the key behind.\n")
	p("- **rueidis floor**: a floor, not a library, written in the harness ([`bench/rueidisfloor.go`](../bench/rueidisfloor.go))\n")
	p("  on [rueidis](https://github.com/redis/rueidis) instead of go-redis, one client per node (defaults, apart from\n")
	p("  `ForceSingleClient` and `DisableCache`): the library's own commands for an uncontended lock+unlock (`SET key value\n")
	p("  PX ttl NX`, then EVALSHA of the library's `releaseplain.lua` with the key's waiting marker and release channel),\n")
	p("  sent to every node at once and decided at the quorum-th reply, no release ahead of its node's `SET` reply; no\n")
	p("  retries, no timeouts of its own. It shows what those commands could cost a client in allocations.\n\n")

	p("## Targets\n\n")
	p("The targets of issue 12 (pipelined transport), the ones kept from issue 6, issue 26's allocations per\n")
	p("lock+unlock, and issue 29's fair handoff.\n\n")
	p("| | Target | Limit | Measured | Verdict |\n|---|---|---|---|---|\n")
	for _, t := range res.targets() {
		verdict := "not run"
		if t.limit == "reported" {
			verdict = "no target"
		}
		if t.met != nil {
			verdict = "**met**"
			if !*t.met {
				verdict = "**missed**, " + t.note
			}
		}
		p("| %s | %s | %s | %s | %s |\n", t.measure, t.what, t.limit, t.got, verdict)
	}
	p("\n")
	var ctxNotes []string
	if res.seq != nil {
		ctxNotes = append(ctxNotes, "(a) pipelined floor p50 / plain floor p50 "+ratioOf(p50s(res.seq[namePipeFloor]), p50s(res.seq[nameFloor])).String()+
			", redsync p50 / plain floor p50 "+ratioOf(p50s(res.seq[nameRedsync]), p50s(res.seq[nameFloor])).String())
	}
	if res.par != nil {
		ops := func(p parResult) float64 { return p.perSec }
		for _, g := range targetLevels {
			ctxNotes = append(ctxNotes, fmt.Sprintf("(b) pipelined floor ops/s / plain floor ops/s at %d goroutines %s", g,
				ratioOf(pickF(res.par[g][namePipeFloor], ops), pickF(res.par[g][nameFloor], ops))))
		}
	}
	if res.allocs != nil {
		f := func(a allocResult) float64 { return a.allocs }
		ctxNotes = append(ctxNotes, "(e) plain floor allocations / redsync allocations "+ratioOf(pickF(res.allocs[nameFloor], f), pickF(res.allocs[nameRedsync], f)).String()+
			", pipelined floor "+ratioOf(pickF(res.allocs[namePipeFloor], f), pickF(res.allocs[nameRedsync], f)).String()+
			", rueidis floor "+ratioOf(pickF(res.allocs[nameRueidisFloor], f), pickF(res.allocs[nameRedsync], f)).String())
	}
	if res.scale != nil {
		ctxNotes = append(ctxNotes, "(f) N = 9 / N = 3: redlock "+ratioOf(p50s(res.scale[9][nameOurs]), p50s(res.scale[3][nameOurs])).String()+
			", plain floor "+ratioOf(p50s(res.scale[9][nameFloor]), p50s(res.scale[3][nameFloor])).String()+
			", PING fan-out "+ratioOf(p50s(res.scalePing[9]), p50s(res.scalePing[3])).String())
	}
	if len(ctxNotes) > 0 {
		p("For context, the same ratios for the reference clients: %s.\n\n", strings.Join(ctxNotes, "; "))
	}

	if res.seq != nil {
		p("## (a) Sequential lock+unlock\n\n")
		p("One goroutine, a new key each time, %d cycles per contender per round, which the contenders run in turns of %d\n", s.seqOps, seqBlock)
		p("(A, B, C, …, A, B, C, …), so that a change of the machine's speed within a round falls on all of them alike.\n")
		p("Latency is Lock plus Unlock.\n")
		p("\"Round trips\" divide the p50 by the p50 of a single PING to one node, and by the p50 of a PING sent to\n")
		p("all %d nodes at once, counted at the quorum-th reply (what the floor pays twice per cycle), both measured in\n", mainNodes)
		p("the same rounds. *Commands* and *batches* per cycle are what all %d servers processed during the contender's\n", mainNodes)
		p("turn, divided by its cycles: `total_commands_processed` and `total_reads_processed` (one read event per\n")
		p("batch a client wrote) from INFO stats. Redis counts in `total_commands_processed` every command a script\n")
		p("runs as well (an EVALSHA of compare-and-delete that deletes counts 3: EVALSHA, GET, DEL), so *sent* gives\n")
		p("the commands the client sent, counted by a go-redis hook on its clients. *Client CPU* is this process's\n")
		p("user and system time over the turn (getrusage), and *servers' CPU* the %d servers' (`used_cpu_user` and\n", mainNodes)
		p("`used_cpu_sys` from INFO cpu), per cycle: on 2 cores that the client and the servers share, the CPU\n")
		p("a cycle costs either side is latency.\n\n")
		if chartDir != "" {
			p("![Sequential lock+unlock latency by contender](perf-latency.svg)\n\n")
		}
		p("| Contender | p50 | p90 | p99 | p50 in one-node PINGs | p50 in quorum fan-out PINGs | commands per cycle | sent per cycle | batches per cycle | client CPU per cycle | servers' CPU per cycle | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, name := range seqNames {
			ls := res.seq[name]
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s µs | %s µs | %s |\n", name,
				fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p90 })),
				fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p99 })),
				fmtNum(ratioOf(p50s(ls), p50s(res.ping1)).median()),
				fmtNum(ratioOf(p50s(ls), p50s(res.pingQ)).median()),
				fmtNum(median(res.seqCmds[name])),
				fmtNum(median(res.seqSent[name])),
				fmtNum(median(res.seqReads[name])),
				fmtNum(median(res.seqClientCPU[name])),
				fmtNum(median(res.seqServerCPU[name])),
				res.seqErrs[name])
		}
		for _, pg := range []struct {
			name string
			ls   []latencies
		}{{"PING, one node", res.ping1}, {fmt.Sprintf("PING, %d nodes, quorum-th reply", mainNodes), res.pingQ}} {
			p("| _%s_ | %s | %s | %s | | | | | | | | |\n", pg.name,
				fmtDur(medDur(pg.ls, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(pg.ls, func(l latencies) time.Duration { return l.p90 })),
				fmtDur(medDur(pg.ls, func(l latencies) time.Duration { return l.p99 })))
		}
		p("\nPer-round ratios of the p50: redlock / plain floor %s; redlock / pipelined floor %s; redlock / redsync %s;\n",
			ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameFloor])),
			ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[namePipeFloor])),
			ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameRedsync])))
		p("pipelined floor / plain floor %s; redsync / plain floor %s; redlock / rueidis floor %s; rueidis floor / plain floor %s.\n\n",
			ratioOf(p50s(res.seq[namePipeFloor]), p50s(res.seq[nameFloor])),
			ratioOf(p50s(res.seq[nameRedsync]), p50s(res.seq[nameFloor])),
			ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameRueidisFloor])),
			ratioOf(p50s(res.seq[nameRueidisFloor]), p50s(res.seq[nameFloor])))
		p("The ordered floor, which sends no release to a node ahead of its SET's reply (the rule the library keeps):\n")
		p("ordered floor / plain floor %s; redlock / ordered floor %s.\n\n",
			ratioOf(p50s(res.seq[nameOrderedFloor]), p50s(res.seq[nameFloor])),
			ratioOf(p50s(res.seq[nameOurs]), p50s(res.seq[nameOrderedFloor])))
		p("Per-round ratios of the p99: redlock / plain floor %s; redlock / redsync %s.\n\n",
			ratioOf(p99s(res.seq[nameOurs]), p99s(res.seq[nameFloor])),
			ratioOf(p99s(res.seq[nameOurs]), p99s(res.seq[nameRedsync])))
		errorSamples(p, "sequential", res.seqErrs)
	}

	if res.par != nil {
		p("## (b) Parallel lock+unlock\n\n")
		p("G goroutines, each on its own keys, for %v per contender per round. The go-redis pools keep their default\n", s.parDur)
		p("size (10 per CPU), the same for every contender. *Batches per lock+unlock* is the read events of all %d\n", mainNodes)
		p("servers (INFO `total_reads_processed`) in the contender's turn, divided by its cycles: %d when every command\n", 2*mainNodes)
		p("travels alone, fewer when they are pipelined.\n\n")
		if chartDir != "" {
			p("![Parallel lock+unlock throughput by goroutines](perf-parallel.svg)\n\n")
		}
		p("| Goroutines | Contender | ops/s | p50 | p99 | ops/s vs plain floor | ops/s vs pipelined floor | p99 vs plain floor | batches per lock+unlock | errors |\n")
		p("|---|---|---|---|---|---|---|---|---|---|\n")
		ops := func(p parResult) float64 { return p.perSec }
		p99 := func(p parResult) float64 { return float64(p.lat.p99) }
		for _, g := range parallelLevels {
			for _, name := range mainNames {
				rs := res.par[g][name]
				ls := make([]latencies, len(rs))
				for i, r := range rs {
					ls[i] = r.lat
				}
				p("| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", g, name, median(pickF(rs, ops)),
					fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p50 })),
					fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p99 })),
					ratioOf(pickF(rs, ops), pickF(res.par[g][nameFloor], ops)),
					ratioOf(pickF(rs, ops), pickF(res.par[g][namePipeFloor], ops)),
					ratioOf(pickF(rs, p99), pickF(res.par[g][nameFloor], p99)),
					fmtNum(median(pickF(rs, func(p parResult) float64 { return p.readsPerOp }))),
					res.parErrs[g][name])
			}
		}
		p("\n")
		for _, g := range parallelLevels {
			errorSamples(p, fmt.Sprintf("%d goroutines", g), res.parErrs[g])
		}
	}

	if res.cont != nil {
		p("## (c) Contended: %d goroutines on one key\n\n", contendG)
		p("Each goroutine asks for the lock, holds it for %v (a sleep), unlocks, and asks again at once, for a %v\n", contendHold, s.contDur)
		p("window per contender per round; a goroutine already waiting at the end of the window still gets its turn, so\n")
		p("that long waits are measured rather than cut off. *Wait* runs from the first Lock call to the acquisition\n")
		p("(across redsync's give-ups, which count as failed calls). *Gap* runs from the return of one holder's Unlock\n")
		p("to the next acquisition, only for handoffs to a different goroutine; it is negative when the next holder got\n")
		p("the lock before the releasing Unlock had returned. *Same holder* is the share of consecutive acquisitions by\n")
		p("the same goroutine. *Commands* are what the servers processed in the contender's turn (INFO\n")
		p("`total_commands_processed`: SUBSCRIBE, UNSUBSCRIBE and the commands scripts run included), divided by all its\n")
		p("acquisitions; by command from INFO commandstats. *Sent* counts the commands the client sent instead (go-redis\n")
		p("hooks, plus SUBSCRIBE and UNSUBSCRIBE from the servers), as issue 6 counted them. The floors sit out: they\n")
		p("have no wait policy. *redlock (polling)* is redlock with `WithPubSub(false)`.\n\n")
		if chartDir != "" {
			p("![Wait percentiles under contention](perf-contention.svg)\n\n")
		}
		p("| Contender | acquisitions/s | wait p50 | wait p99 | wait max | gap p50 | gap p99 | same holder | min / max per goroutine | commands / acquisition | sent / acquisition | failed Lock calls | overlaps |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, name := range contendedNames {
			rs := res.cont[name]
			d := func(f func(contResult) time.Duration) string { return fmtDur(time.Duration(median(pick(rs, f)))) }
			fl := func(f func(contResult) float64) float64 { return median(pickF(rs, f)) }
			failed, overlaps := 0, 0
			for _, r := range rs {
				failed += r.failedCalls
				overlaps += r.overlaps
			}
			p("| %s | %.0f | %s | %s | %s | %s | %s | %.0f %% | %.0f / %.0f | %s | %s | %d | %d |\n", name,
				fl(func(c contResult) float64 { return c.perSec }),
				d(func(c contResult) time.Duration { return c.waitP50 }),
				d(func(c contResult) time.Duration { return c.waitP99 }),
				d(func(c contResult) time.Duration { return c.waitMax }),
				d(func(c contResult) time.Duration { return c.gapP50 }),
				d(func(c contResult) time.Duration { return c.gapP99 }),
				100*fl(func(c contResult) float64 { return c.sameShare }),
				fl(func(c contResult) float64 { return float64(c.minPer) }),
				fl(func(c contResult) float64 { return float64(c.maxPer) }),
				fmtNum(fl(func(c contResult) float64 { return c.cmdsPerAcq })),
				fmtNum(fl(func(c contResult) float64 { return c.sentPerAcq })),
				failed, overlaps)
		}
		p("\nCommands the servers processed per acquisition, by command (median over rounds):\n\n")
		cmdBreakdown(p, contendedNames, res.cont)
		ours := res.cont[nameOurs]
		wait := func(c contResult) time.Duration { return c.waitP99 }
		p("\nPer-round ratios of the wait p99: redlock / redsync %s; redlock (polling) / redsync %s.\n\n",
			ratioOf(pick(ours, wait), pick(res.cont[nameRedsync], wait)),
			ratioOf(pick(res.cont[nameOursPolling], wait), pick(res.cont[nameRedsync], wait)))
	}

	if res.fair != nil {
		writeFair(p, res)
	}

	if res.paused != nil {
		p("## (d) Degraded nodes\n\n")
		p("Sequential lock+unlock as in (a), up to %d cycles or %v per contender per round (the first cycle always\n", s.degradedOps, s.degradedBudget)
		p("runs), %d rounds. In each round every contender runs a *healthy* turn, then node %d is stopped with SIGSTOP\n", s.degradedRounds, pausedNode)
		p("for its *paused* turn (the kernel still accepts connections, nothing answers), and resumed %v before the\n", settleAfterResume)
		p("next contender's turn, so that each ratio compares two turns run back to back, as (a)'s turns do.\n")
		p("*Slow node* then puts node %d behind the\n", pausedNode)
		p("fault proxy of `internal/faultproxy`, which adds %v to every request, on fresh clients. *%s* is redsync\n", addedDelay, nameRedsyncCtx)
		p("on go-redis clients built with `ContextTimeoutEnabled: true`: only then does go-redis apply redsync's 400 ms\n")
		p("attempt deadline to its socket reads; with the go-redis defaults a read from the paused node waits for\n")
		p("go-redis's read timeout instead. redsync waits for every node's reply in Lock and in Unlock.\n\n")
		if chartDir != "" {
			p("![Lock+unlock p50 with a degraded node](perf-degraded.svg)\n\n")
		}
		p("| Contender | healthy p50 | paused p50 | paused p99 | paused Lock p50 | paused cycles | paused / healthy p50 | slow p50 | slow p99 | slow / healthy p50 | errors, paused | errors, slow |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, name := range degradedNames {
			h, pz, sl := res.degHealthy[name], res.paused[name], res.slow[name]
			n := 0
			for _, l := range pz {
				n += l.n
			}
			p("| %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", name,
				fmtDur(medDur(h, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(pz, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(pz, func(l latencies) time.Duration { return l.p99 })),
				fmtDur(medDur(res.pausedLock[name], func(l latencies) time.Duration { return l.p50 })),
				n,
				ratioOf(p50s(pz), p50s(h)),
				fmtDur(medDur(sl, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(sl, func(l latencies) time.Duration { return l.p99 })),
				ratioOf(p50s(sl), p50s(h)),
				res.pausedErrs[name], res.slowErrs[name])
		}
		p("\n")
		errorSamples(p, "paused", res.pausedErrs)
		errorSamples(p, "slow node", res.slowErrs)
	}

	if res.allocs != nil {
		p("## (e) Allocations per lock+unlock\n\n")
		p("runtime.MemStats deltas over %d sequential cycles per contender per round, every goroutine of the process\n", s.allocOps)
		p("included (the requests' goroutines are part of the cost); keys are built beforehand. The rueidis floor sends\n")
		p("the library's own commands: the last two columns are what the library allocates over them. In `bench/`,\n")
		p("`go test -run '^$' -bench SequentialLockUnlock -benchmem` measures the same for redlock and the plain and\n")
		p("rueidis floors in a test binary, and its doc comment gives the `-memprofile` run that finds the sites.\n\n")
		p("| Contender | allocations | bytes | allocations vs redsync | allocations vs plain floor | allocations vs rueidis floor | bytes vs rueidis floor |\n")
		p("|---|---|---|---|---|---|---|\n")
		fa := func(a allocResult) float64 { return a.allocs }
		fb := func(a allocResult) float64 { return a.bytes }
		for _, name := range mainNames {
			as := res.allocs[name]
			p("| %s | %.0f | %.0f | %s | %s | %s | %s |\n", name, median(pickF(as, fa)), median(pickF(as, fb)),
				ratioOf(pickF(as, fa), pickF(res.allocs[nameRedsync], fa)),
				ratioOf(pickF(as, fa), pickF(res.allocs[nameFloor], fa)),
				ratioOf(pickF(as, fa), pickF(res.allocs[nameRueidisFloor], fa)),
				ratioOf(pickF(as, fb), pickF(res.allocs[nameRueidisFloor], fb)))
		}
		p("\n")
	}

	if res.scale != nil {
		p("## (f) Scaling with the number of nodes\n\n")
		p("The p50 of (a), %d cycles per contender per N per round, on the first N of 9 servers.\n\n", s.scaleOps)
		if chartDir != "" {
			p("![Sequential p50 by number of nodes](perf-scaling.svg)\n\n")
		}
		p("| Contender |")
		for _, n := range scaleNodes {
			p(" N = %d |", n)
		}
		p(" N = 9 / N = 3 | vs PING's N = 9 / N = 3 |\n|---|")
		for range scaleNodes {
			p("---|")
		}
		p("---|---|\n")
		ping := ratioOf(p50s(res.scalePing[9]), p50s(res.scalePing[3]))
		for _, name := range mainNames {
			p("| %s |", name)
			for _, n := range scaleNodes {
				p(" %s |", fmtDur(medDur(res.scale[n][name], func(l latencies) time.Duration { return l.p50 })))
			}
			r := ratioOf(p50s(res.scale[9][name]), p50s(res.scale[3][name]))
			p(" %s | %s |\n", r, ratioOf(r, ping))
		}
		p("| _PING, quorum-th reply_ |")
		for _, n := range scaleNodes {
			p(" %s |", fmtDur(medDur(res.scalePing[n], func(l latencies) time.Duration { return l.p50 })))
		}
		p(" %s | |\n\n", ping)
		p("The last column divides each round's N = 9 / N = 3 ratio by the PING fan-out's in the same round: how much\n")
		p("worse than the bare transport a contender scales, with the machine's own scaling taken out.\n\n")
	}

	if r := res.renew; r != nil {
		b0 := renewBefore
		p("## (g) Renewals\n\n")
		p("One redlock Client on %d nodes holds %d locks taken with `WithAutoExtend(true)` and TTL %v, so each is\n", mainNodes, r.locks, r.ttl)
		p("renewed every %v: %.0f extensions per second per node are due. Taking them took %v (%d goroutines).\n", r.ttl/3, float64(r.locks)/(r.ttl/3).Seconds(), r.acquire.Round(time.Millisecond), r.takers)
		p("Over a %v window: this process's CPU from getrusage; per node, the batches (pipelines or single commands)\n", r.window)
		p("and commands it processed, from INFO stats (`total_reads_processed`: one read event per batch the client\n")
		p("wrote; `total_commands_processed`), and its CPU from INFO cpu. *Before* is %s.\n\n", b0.source)
		p("| | this run, per second | before, per second |\n|---|---|---|\n")
		p("| client CPU, idle Client before the locks | %.1f ms | %s |\n", r.idleCPU*1000, orNA(b0.idleCPU*1000, "%.1f ms"))
		p("| client CPU, holding the locks | %.1f ms (%.1f %% of one core) | %s |\n", r.cpu*1000, r.cpu*100, orNA(b0.cpu*1000, "%.1f ms"))
		p("| pipelines (server read events) per node | %s | %s |\n", perNode(r.reads, "%.1f"), orNA(b0.reads, "%.1f"))
		p("| commands per node | %s | %s |\n", perNode(r.cmds, "%.0f"), orNA(b0.cmds, "%.0f"))
		p("| redis-server CPU per node | %s ms | %s |\n", perNode(scale(r.serverCPU, 1000), "%.1f"), orNA(b0.serverCPU*1000, "%.1f ms"))
		p("\nLocks lost during the window: %d of %d. Unlock errors afterwards (%d goroutines): %d.\n", r.lost, r.locks, r.takers, r.unlockErrs)
		if r.firstUnlockErr != "" {
			p("The first: `%s`.\n", r.firstUnlockErr)
		}
		p("\n")
	}

	if res.wan != nil {
		q := wanQuorumRTT()
		var rtts []string
		for _, d := range wanRTTs {
			rtts = append(rtts, fmtDur(d))
		}
		p("## (h) WAN\n\n")
		p("Each of the %d nodes sits behind a fault proxy (`internal/faultproxy`) that delays every request by its\n", mainNodes)
		p("node's round trip: %s. Sequential lock+unlock as in (a), %d cycles per contender per round, Lock and\n", strings.Join(rtts, ", "), s.wanOps)
		p("Unlock timed apart (an Unlock only after a Lock that succeeded). A client that decides at the quorum-th reply\n")
		p("pays the quorum-th round trip, %s, per call; redsync waits for every node's reply in Lock and in Unlock, so it\n", fmtDur(q))
		p("pays %s. The PING row is a PING to every node at once, timed to the quorum-th reply, through the same proxies.\n\n", fmtDur(slices.Max(wanRTTs)))
		if chartDir != "" {
			p("![Lock and Unlock p50 on the WAN](perf-wan.svg)\n\n")
		}
		p("| Contender | Lock p50 | Lock p99 | Unlock p50 | Unlock p99 | Lock p50 / %s | Unlock p50 / %s | errors |\n|---|---|---|---|---|---|---|---|\n", fmtDur(q), fmtDur(q))
		lock := func(w wanRound) latencies { return w.lock }
		unlock := func(w wanRound) latencies { return w.unlock }
		for _, name := range mainNames {
			ws := res.wan[name]
			ls, us := mapSlice(ws, lock), mapSlice(ws, unlock)
			qs := slices.Repeat([]float64{float64(q)}, len(ws))
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
				fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(ls, func(l latencies) time.Duration { return l.p99 })),
				fmtDur(medDur(us, func(l latencies) time.Duration { return l.p50 })),
				fmtDur(medDur(us, func(l latencies) time.Duration { return l.p99 })),
				ratioOf(p50s(ls), qs), ratioOf(p50s(us), qs), res.wanErrs[name])
		}
		p("| _PING, quorum-th reply_ | %s | %s | | | %s | | |\n\n",
			fmtDur(medDur(res.wanPing, func(l latencies) time.Duration { return l.p50 })),
			fmtDur(medDur(res.wanPing, func(l latencies) time.Duration { return l.p99 })),
			ratioOf(p50s(res.wanPing), slices.Repeat([]float64{float64(q)}, len(res.wanPing))))
		errorSamples(p, "WAN", res.wanErrs)
	}

	p("## Machine\n\n| | |\n|---|---|\n")
	for _, kv := range res.machine {
		p("| %s | %s |\n", kv[0], kv[1])
	}
	p("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFair writes the section of (i).
func writeFair(p func(string, ...any), res *results) {
	s := res.settings
	pingP50 := medDur(res.fairPing, func(l latencies) time.Duration { return l.p50 })
	p("## (i) Fair handoff: %d goroutines on one key\n\n", contendG)
	p("(c)'s loop and figures (hold %v, a %v window per contender per round, the same *wait*, *gap*, *same\n", contendHold, s.contDur)
	p("holder* and *commands*; *Unlock p50* is the median time an Unlock call took), for redlock with and without\n")
	p("`WithFair(true)`: first with the %d goroutines sharing one Client, as (c) runs them, then with one Client per\n", contendG)
	p("goroutine, each on go-redis clients of its own, so that the waiters are spread over Clients as they are over\n")
	p("processes: a Client's release wake-up goes to its own longest waiter, so with one Client per goroutine every\n")
	p("waiting Client's waiter is woken by every release. The yardstick is a PING sent to all %d nodes at once, timed\n", mainNodes)
	p("to the quorum-th reply, %d times after each round, on the idle servers (p50 %s over the rounds): *gap p50 /\n", s.seqOps, fmtDur(pingP50))
	p("PING p50* is the median of the per-round ratios. *Min / max* is the fewest acquisitions by one goroutine\n")
	p("within the window over the most, per round. Issue 29's targets are on the fair lock with one Client, the setup\n")
	p("the issue and (c) name; the other rows are for contrast.\n\n")
	p("| Contender | acquisitions/s | wait p50 | wait p99 | wait max | Unlock p50 | gap p50 | gap p99 | gap p50 / PING p50 | same holder | min / max per goroutine | min / max | commands / acquisition | sent / acquisition | failed Lock calls | overlaps |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range fairNames {
		rs := res.fair[name]
		d := func(f func(contResult) time.Duration) string { return fmtDur(time.Duration(median(pick(rs, f)))) }
		fl := func(f func(contResult) float64) float64 { return median(pickF(rs, f)) }
		failed, overlaps := 0, 0
		for _, r := range rs {
			failed += r.failedCalls
			overlaps += r.overlaps
		}
		p("| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %.0f %% | %.0f / %.0f | %s | %s | %s | %d | %d |\n", name,
			fl(func(c contResult) float64 { return c.perSec }),
			d(func(c contResult) time.Duration { return c.waitP50 }),
			d(func(c contResult) time.Duration { return c.waitP99 }),
			d(func(c contResult) time.Duration { return c.waitMax }),
			d(func(c contResult) time.Duration { return c.unlockReturns }),
			d(func(c contResult) time.Duration { return c.gapP50 }),
			d(func(c contResult) time.Duration { return c.gapP99 }),
			ratioOf(pick(rs, func(c contResult) time.Duration { return c.gapP50 }), p50s(res.fairPing)),
			100*fl(func(c contResult) float64 { return c.sameShare }),
			fl(func(c contResult) float64 { return float64(c.minPer) }),
			fl(func(c contResult) float64 { return float64(c.maxPer) }),
			ratios(pickF(rs, evenness)),
			fmtNum(fl(func(c contResult) float64 { return c.cmdsPerAcq })),
			fmtNum(fl(func(c contResult) float64 { return c.sentPerAcq })),
			failed, overlaps)
	}
	p("| _PING, %d nodes, quorum-th reply_ | | | | | | %s | %s | | | | | | | | |\n\n", mainNodes,
		fmtDur(pingP50), fmtDur(medDur(res.fairPing, func(l latencies) time.Duration { return l.p99 })))
	p("Commands the servers processed per acquisition, by command (median over rounds):\n\n")
	cmdBreakdown(p, fairNames, res.fair)
	p("\n")
}

// evenness is one round's fewest acquisitions by one goroutine over the
// most: 1 when every goroutine got as many turns.
func evenness(c contResult) float64 {
	if c.maxPer == 0 {
		return 0
	}
	return float64(c.minPer) / float64(c.maxPer)
}

// cmdBreakdown lists, for each contender, the commands the servers
// processed per acquisition, by command, as medians over rounds.
func cmdBreakdown(p func(string, ...any), names []string, byName map[string][]contResult) {
	for _, name := range names {
		rs := byName[name]
		cmds := map[string]bool{}
		for _, r := range rs {
			for k := range r.cmdBreakdown {
				cmds[k] = true
			}
		}
		var parts []string
		for _, k := range sortedKeys(cmds) {
			v := median(pickF(rs, func(c contResult) float64 { return c.cmdBreakdown[k] }))
			if v < 0.005 {
				continue // a few dials of new connections
			}
			parts = append(parts, fmt.Sprintf("%s %s", k, fmtNum(v)))
		}
		p("- %s: %s\n", name, strings.Join(parts, ", "))
	}
}

// errorSamples prints, per contender that had errors, the count of each
// kind of error (see errKind) and the first error of each call in full.
func errorSamples(p func(string, ...any), where string, errs map[string]*errCount) {
	any := false
	for _, name := range sortedKeys(errs) {
		e := errs[name]
		if e.total() == 0 {
			continue
		}
		any = true
		e.mu.Lock()
		for _, call := range []struct {
			name  string
			kinds map[string]int
			first string
		}{{"Lock", e.lockKinds, e.firstLock}, {"Unlock", e.unlKinds, e.firstUnl}} {
			if len(call.kinds) == 0 {
				continue
			}
			p("- %s, %s, %s errors by kind:\n", where, name, call.name)
			kinds := sortedKeys(call.kinds)
			slices.SortStableFunc(kinds, func(a, b string) int { return call.kinds[b] - call.kinds[a] })
			for _, k := range kinds {
				p("  - %d × `%s`\n", call.kinds[k], k)
			}
			p("  - the first in full: `%s`\n", call.first)
		}
		e.mu.Unlock()
	}
	if any {
		p("\n")
	}
}

// orNA formats x, or says n/a when it is zero (not measured).
func orNA(x float64, format string) string {
	if x == 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, x)
}

func mapSlice[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func scale(xs []float64, k float64) []float64 {
	out := slices.Clone(xs)
	for i := range out {
		out[i] *= k
	}
	return out
}

// perNode prints per-node figures: "12.0 (11.8–12.1)" as median and range.
func perNode(xs []float64, format string) string {
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf(format+" (nodes: "+format+"–"+format+")", median(xs), slices.Min(xs), slices.Max(xs))
}
