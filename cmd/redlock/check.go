package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlockgo/redlock"
)

// checkConfig is the configuration of one check, from its flags.
type checkConfig struct {
	nodes       string
	nodeTimeout time.Duration
	ttl         time.Duration
	nodeGuard   bool
	fsyncAck    bool
	json        bool
	verbose     bool
}

func defaultCheckConfig() checkConfig {
	return checkConfig{nodeTimeout: 2 * time.Second, ttl: defaultRunConfig("run").ttl}
}

// checkFlags returns the flag set of check, which fills cfg. -h prints the
// help on stdout, and a flag error goes to stderr.
func checkFlags(cfg *checkConfig, stdout, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("check", checkHelp, stdout, stderr, map[string]string{"timeout": nodeTimeoutHint})
	fs.StringVar(&cfg.nodes, "nodes", cfg.nodes, "comma-separated nodes: host:port or URLs (default $"+envNodes+")")
	durationVar(fs, &cfg.nodeTimeout, "node-timeout", "the `duration` to wait for each node's answers (at least 500ms)")
	durationVar(fs, &cfg.ttl, "ttl", "the `duration` of the longest TTL your locks use: a node that restarts without its data must stay out that long, and the advice says so")
	fs.BoolVar(&cfg.nodeGuard, "node-guard", cfg.nodeGuard, "judge the nodes as for locks taken with -node-guard, which keeps a restarted node out for the TTL: a node without appendfsync always is then only info")
	fs.BoolVar(&cfg.fsyncAck, "fsync-ack", cfg.fsyncAck, "judge the nodes as for Clients with WithFsyncAck(true), whose votes count only once WAITAOF confirmed the node fsynced them: a node without WAITAOF (before Redis 7.2), or whose appendonly or appendfsync keep it from confirming, is then critical")
	fs.BoolVar(&cfg.json, "json", cfg.json, "print JSON instead of text")
	fs.BoolVar(&cfg.verbose, "verbose", cfg.verbose, "list the checks that passed too")
	fs.BoolVar(&cfg.verbose, "v", cfg.verbose, "the same as -verbose")
	return fs
}

func checkHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock check --nodes HOST:PORT,... [flags]

Check asks every node about what the algorithm assumes of it (see
docs/SAFETY.md): that the nodes are reachable, independent masters (no
replica, no server given twice), that they do not evict keys
(maxmemory-policy), that they persist what they acknowledge, that they run
scripts on a Redis or Valkey version the library supports (and, with
-fsync-ack, can confirm their fsyncs with WAITAOF), and that their clocks
run at our rate and agree; that the client's password, ACL and DB work on
each; that there are at least 3 nodes; and how many may still fail. It
changes nothing but probe keys of its own, which it deletes at once. It
prints a line per node, with its server (redis or valkey), its version and
which of WAITAOF, SET GET and SPUBLISH it has (the commands the library
uses when a node has them), then each finding, the worst first, with its
severity (critical, warning, info), the node, what was found and how to
fix it, then a summary.

Exit status:
  0   nothing worse than info
  %-3[1]d at least one warning, and nothing critical
  %-3[2]d bad usage: a bad flag or node
  %-3[3]d at least one critical finding: the algorithm's assumptions are
      broken now
  %-3[4]d fewer than a quorum of nodes could be checked (EX_UNAVAILABLE), or
      the check could not run at all

With -json it prints one object:
  quorum            the number of nodes a lock needs
  checked           the number of nodes that answered
  worst             the worst severity: "ok", "info", "warning", "critical"
  counts            the number of findings of each severity
  nodes             one object per node: index, addr, role, run_id,
                    server ("redis" or "valkey"), version (the server's
                    own: valkey_version on Valkey), features (of WAITAOF,
                    SET GET and SPUBLISH, those the node has; null when
                    its version is unknown), maxmemory_policy, appendonly,
                    appendfsync, clock_offset_ms (the node's clock less
                    ours) and error
  findings          every finding, passed checks included, the worst first:
                    severity, check, node (-1 for the whole deployment),
                    addr, message, fix

%[5]s
Flags:
`, exitCheckWarning, exitUsage, exitCheckCritical, exitUnavailable, nodesHelp)
	cfg := defaultCheckConfig()
	checkFlags(&cfg, w, w).PrintDefaults()
}

func checkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultCheckConfig()
	fs := checkFlags(&cfg, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	specs, err := cfg.validate(fs.Args())
	if err != nil {
		return usageError(stderr, "check", err)
	}
	client, done, code := connect("check", specs, cfg.nodeTimeout, stderr,
		redlock.WithNodeTimeout(cfg.nodeTimeout),
		redlock.WithTTL(cfg.ttl),
		redlock.WithNodeGuard(cfg.nodeGuard),
		redlock.WithFsyncAck(cfg.fsyncAck),
		redlock.WithPubSub(false))
	if client == nil {
		return code
	}
	defer done()

	// The ctx outlasts Check's own wait for the nodes (the node timeout,
	// at least 500ms, and 100ms between two clock samples), so that Check
	// reports a node that does not answer rather than giving up on all.
	cctx, cancel := context.WithTimeout(ctx, 2*cfg.nodeTimeout+time.Second)
	defer cancel()
	rep, err := client.Check(cctx)
	if err != nil {
		fmt.Fprintf(stderr, "redlock check: %v; exiting %d\n", err, exitUnavailable)
		return exitUnavailable
	}
	out := newCheckReport(rep, specs, client.Quorum())
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "redlock check: %v\n", err)
			return exitFail
		}
	} else {
		out.print(stdout, cfg.verbose)
	}
	code = out.exitCode()
	if code == exitUnavailable {
		fmt.Fprintf(stderr, "redlock check: %d of %d nodes answered, fewer than the quorum of %d; exiting %d\n",
			out.Checked, len(out.Nodes), out.Quorum, exitUnavailable)
	}
	return code
}

func (c *checkConfig) validate(rest []string) ([]nodeSpec, error) {
	switch {
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q", rest[0])
	case c.nodeTimeout <= 0:
		return nil, fmt.Errorf("-node-timeout must be positive, got %v", c.nodeTimeout)
	case c.ttl <= 2*c.nodeTimeout:
		return nil, fmt.Errorf("-ttl must be more than twice -node-timeout, got -ttl %v and -node-timeout %v", c.ttl, c.nodeTimeout)
	}
	return parseNodes(c.nodes)
}

// checkReport is a redlock.Report as check prints it.
type checkReport struct {
	Quorum   int            `json:"quorum"`
	Checked  int            `json:"checked"`
	Worst    string         `json:"worst"`
	Counts   map[string]int `json:"counts"`
	Nodes    []checkNode    `json:"nodes"`
	Findings []checkFinding `json:"findings"`

	worst redlock.Severity
}

// checkNode is a redlock.NodeInfo as check prints it.
type checkNode struct {
	Index           int      `json:"index"`
	Addr            string   `json:"addr"`
	Role            string   `json:"role,omitempty"`
	RunID           string   `json:"run_id,omitempty"`
	Server          string   `json:"server,omitempty"`
	Version         string   `json:"version,omitempty"`
	Features        []string `json:"features"`
	MaxmemoryPolicy string   `json:"maxmemory_policy,omitempty"`
	AppendOnly      bool     `json:"appendonly"`
	AppendFsync     string   `json:"appendfsync,omitempty"`
	ClockOffsetMS   float64  `json:"clock_offset_ms"`
	Error           string   `json:"error,omitempty"`
}

// checkFinding is a redlock.Finding as check prints it.
type checkFinding struct {
	Severity string `json:"severity"`
	Check    string `json:"check"`
	Node     int    `json:"node"`
	Addr     string `json:"addr,omitempty"`
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`

	severity redlock.Severity
}

// newCheckReport turns rep into what check prints.
func newCheckReport(rep *redlock.Report, specs []nodeSpec, quorum int) *checkReport {
	out := &checkReport{Quorum: quorum, Counts: map[string]int{}, Nodes: make([]checkNode, len(rep.Nodes))}
	for i, n := range rep.Nodes {
		cn := checkNode{
			Index: n.Index, Addr: n.Addr, Role: n.Role, RunID: n.RunID, Server: n.Server, Version: n.Version, Features: n.Features,
			MaxmemoryPolicy: n.MaxmemoryPolicy, AppendOnly: n.AppendOnly, AppendFsync: n.AppendFsync,
			ClockOffsetMS: float64(n.ClockOffset.Microseconds()) / 1000,
		}
		if n.Index >= 0 && n.Index < len(specs) {
			cn.Addr = nodeAddr(specs[n.Index])
		}
		if n.Err != nil {
			cn.Error = n.Err.Error()
		} else {
			out.Checked++
		}
		out.Nodes[i] = cn
	}
	findings := slices.Clone(rep.Findings)
	// The worst first, as Check orders them; stable, so that Check's order
	// stands within a severity.
	slices.SortStableFunc(findings, func(a, b redlock.Finding) int { return int(b.Severity) - int(a.Severity) })
	for _, sev := range []redlock.Severity{redlock.SeverityOK, redlock.SeverityInfo, redlock.SeverityWarning, redlock.SeverityCritical} {
		out.Counts[sev.String()] = 0
	}
	for _, f := range findings {
		out.Findings = append(out.Findings, checkFinding{
			Severity: f.Severity.String(), Check: f.Check, Node: f.Node, Addr: f.Addr,
			Message: f.Message, Fix: cliFix(f.Fix), severity: f.Severity,
		})
		out.Counts[f.Severity.String()]++
		out.worst = max(out.worst, f.Severity)
	}
	out.Worst = out.worst.String()
	return out
}

// cliFix is a finding's fix in the words of the command line: the library
// advises its option, which run and lock turn on with a flag.
func cliFix(fix string) string { return guardFix.Replace(fix) }

var guardFix = strings.NewReplacer(
	"WithNodeGuard(true) in every Client", "-node-guard in every redlock run and lock (WithNodeGuard(true) in every Client in Go)",
	"WithNodeGuard(true)", "-node-guard (WithNodeGuard(true) in Go)",
)

// exitCode is check's exit status for the report.
func (r *checkReport) exitCode() int {
	switch {
	case r.Checked < r.Quorum:
		return exitUnavailable
	case r.worst >= redlock.SeverityCritical:
		return exitCheckCritical
	case r.worst >= redlock.SeverityWarning:
		return exitCheckWarning
	}
	return exitOK
}

func (r *checkReport) print(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "%d nodes (quorum %d), %d answered\n", len(r.Nodes), r.Quorum, r.Checked)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tADDRESS\tROLE\tSERVER\tVERSION\tMAXMEMORY-POLICY\tAOF\tCLOCK\tFEATURES")
	for _, n := range r.Nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "  %d\t%s\terror: %s\n", n.Index, n.Addr, n.Error)
			continue
		}
		aof := "no"
		if n.AppendOnly {
			aof = "yes, fsync " + cell(n.AppendFsync)
		}
		offset := time.Duration(n.ClockOffsetMS * float64(time.Millisecond)).Round(10 * time.Microsecond)
		clock := offset.String()
		if offset > 0 {
			clock = "+" + clock
		}
		// The features are the library's own names, which cell would quote
		// for their spaces.
		features := "-"
		if len(n.Features) > 0 {
			features = strings.Join(n.Features, ", ")
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Index, n.Addr, cell(n.Role), cell(n.Server), cell(n.Version),
			cell(n.MaxmemoryPolicy), aof, clock, features)
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	shown := 0
	for _, f := range r.Findings {
		if f.severity == redlock.SeverityOK && !verbose {
			continue
		}
		if shown == 0 {
			fmt.Fprintln(w, "findings, the worst first:")
		}
		shown++
		where := "all nodes"
		if f.Node >= 0 {
			where = fmt.Sprintf("node %d", f.Node)
			if f.Node < len(r.Nodes) {
				where += " (" + r.Nodes[f.Node].Addr + ")"
			} else if f.Addr != "" {
				where += " (" + f.Addr + ")"
			}
		}
		fmt.Fprintf(w, "  %-8s  %s  %s: %s\n", strings.ToUpper(f.Severity), where, f.Check, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "  %-8s  fix: %s\n", "", f.Fix)
		}
	}
	if shown == 0 {
		fmt.Fprintln(w, "every check passed")
	}
	fmt.Fprintf(w, "\n%s: %d critical, %d warning, %d info, %d ok\n",
		r.Worst, r.Counts["critical"], r.Counts["warning"], r.Counts["info"], r.Counts["ok"])
}
