package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// statusConfig is the configuration of one status, from its flags.
type statusConfig struct {
	nodes       string
	key         string
	prefix      string
	nodeTimeout time.Duration
	json        bool
}

func defaultStatusConfig() statusConfig {
	return statusConfig{nodeTimeout: 2 * time.Second}
}

// statusFlags returns the flag set of status, which fills cfg. -h prints
// the help on stdout, and a flag error goes to stderr.
func statusFlags(cfg *statusConfig, stdout, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("status", statusHelp, stdout, stderr, map[string]string{"timeout": nodeTimeoutHint})
	fs.StringVar(&cfg.nodes, "nodes", cfg.nodes, "comma-separated nodes: host:port or URLs (default $"+envNodes+")")
	fs.StringVar(&cfg.key, "key", cfg.key, "the lock's key (required)")
	fs.StringVar(&cfg.prefix, "prefix", cfg.prefix, "namespace: the Redis key is prefix+key")
	durationVar(fs, &cfg.nodeTimeout, "node-timeout", "the `duration` to wait for each node's answer")
	fs.BoolVar(&cfg.json, "json", cfg.json, "print JSON instead of a table")
	return fs
}

func statusHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock status --nodes HOST:PORT,... --key KEY [flags]

Status asks every node about the lock KEY and shows, for each, whether it
holds the key, the key's remaining TTL (PTTL), how the key is kept (LAYOUT:
plain, as run and redsync keep it; owner, for an -owner lock; foreign, for
a value that is not a lock), the holder's token and label, and for an
owner lock the owner and the node's hold count; or the node's error. The
table shows the token up to its label, and "(+N)" for N more holds of an
owner lock; -json shows the whole token, as REDLOCK_TOKEN has it. The last
line is the verdict: whether a quorum of nodes holds the key for one
holder, and for how much longer at least (the quorum's remaining TTL, less
the clock-drift allowance). Status only reads.

Exit status:
  0   a quorum of nodes answered, whether the key is held or free
  %-3[1]d bad usage: a bad flag or node, no key
  %-3[2]d fewer than a quorum of nodes answered (EX_UNAVAILABLE): nobody can
      take or keep the lock now

With -json it prints one object:
  key, quorum       the key, and the number of nodes a lock needs
  held              whether a quorum holds the key for one holder
  token, label      the holder's token, whole, and its label
  tokens            for an owner lock held more than once: every token
  owner, count      for an owner lock: the owner, and its hold count on a
                    quorum; count is 1 for a plain lock
  remaining_ms      how long a quorum still holds it, at least; 0 unless held
  no_expiry         set when a quorum holds the key without an expiry
  holder, held_on   the token of the holder the most nodes hold the key
                    for, and on how many
  answered          the number of nodes that answered
  nodes             one object per node: index, addr, state ("held",
                    "free", "foreign" or "error"), layout, token, tokens,
                    label, owner, count, pttl_ms (-1: no expiry), value
                    (the stored string, when it is not the token), error
Fields that are empty are left out, but for held, remaining_ms, held_on
and answered.

%[3]s
Flags:
`, exitUsage, exitUnavailable, nodesHelp)
	cfg := defaultStatusConfig()
	statusFlags(&cfg, w, w).PrintDefaults()
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultStatusConfig()
	fs := statusFlags(&cfg, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	specs, err := cfg.validate(fs.Args())
	if err != nil {
		return usageError(stderr, "status", err)
	}
	if w := fewNodesWarning(len(specs)); w != "" {
		// On stderr: -json's output stays one object.
		fmt.Fprintf(stderr, "redlock status: %s\n", w)
	}
	client, done, code := connect("status", specs, cfg.nodeTimeout, stderr, cfg.options()...)
	if client == nil {
		return code
	}
	defer done()

	// The ctx outlasts the node timeout, so that Inspect reports a node
	// that does not answer rather than giving up on them all.
	ictx, cancel := context.WithTimeout(ctx, 2*cfg.nodeTimeout)
	defer cancel()
	h, err := client.Inspect(ictx, cfg.key)
	if err != nil {
		if errors.Is(err, redlock.ErrInvalidOption) {
			fmt.Fprintf(stderr, "redlock status: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stderr, "redlock status: %v; exiting %d\n", err, exitUnavailable)
		return exitUnavailable
	}
	rep := newStatusReport(h, specs)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "redlock status: %v\n", err)
			return exitFail
		}
	} else {
		rep.print(stdout)
	}
	if rep.Answered < rep.Quorum {
		fmt.Fprintf(stderr, "redlock status: %d of %d nodes answered, fewer than the quorum of %d; exiting %d\n",
			rep.Answered, len(rep.Nodes), rep.Quorum, exitUnavailable)
		return exitUnavailable
	}
	return exitOK
}

func (c *statusConfig) validate(rest []string) ([]nodeSpec, error) {
	switch {
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q", rest[0])
	case c.key == "":
		return nil, errors.New("-key is required")
	case c.nodeTimeout <= 0:
		return nil, fmt.Errorf("-node-timeout must be positive, got %v", c.nodeTimeout)
	}
	return parseNodes(c.nodes)
}

// options returns the Client's options: -node-timeout bounds each request,
// and the TTL, which Inspect does not use, only has to leave room for it.
func (c *statusConfig) options() []redlock.Option {
	return []redlock.Option{
		redlock.WithNodeTimeout(c.nodeTimeout),
		redlock.WithTTL(max(redlock.DefaultTTL, 4*c.nodeTimeout)),
		redlock.WithKeyPrefix(c.prefix),
		redlock.WithPubSub(false),
	}
}

// universal returns rcs as the interface redlock.New takes.
// connect dials the nodes and builds a Client on them for the command cmd.
// done closes both. When New refuses the nodes (the same server given
// twice), it says why on stderr and returns a nil Client and the exit
// status.
func connect(cmd string, specs []nodeSpec, nodeTimeout time.Duration, stderr io.Writer, opts ...redlock.Option) (c *redlock.Client, done func(), code int) {
	rcs := dial(specs, nodeTimeout)
	c, err := redlock.New(universal(rcs), opts...)
	if err != nil {
		closeAll(rcs)
		fmt.Fprintf(stderr, "redlock %s: %s\n", cmd, bare(err))
		return nil, nil, exitUsage
	}
	return c, func() {
		_ = c.Close()
		closeAll(rcs)
	}, exitOK
}

func universal(rcs []*redis.Client) []redis.UniversalClient {
	conns := make([]redis.UniversalClient, len(rcs))
	for i, rc := range rcs {
		conns[i] = rc
	}
	return conns
}

// statusReport is what the nodes said about one key.
type statusReport struct {
	Key    string       `json:"key"`
	Quorum int          `json:"quorum"`
	Nodes  []nodeStatus `json:"nodes"`
	// Held is Inspect's verdict: a quorum holds Token (Tokens, for an
	// owner lock held more than once). Label, Owner and Count describe the
	// holder, and RemainingMS is how long a quorum holds it at least;
	// NoExpiry is set instead for a key without expiry.
	Held        bool     `json:"held"`
	Token       string   `json:"token,omitempty"`
	Tokens      []string `json:"tokens,omitempty"`
	Label       string   `json:"label,omitempty"`
	Owner       string   `json:"owner,omitempty"`
	Count       int64    `json:"count,omitempty"`
	Shared      bool     `json:"shared,omitempty"`  // readers hold it; Count is their number
	Permits     int      `json:"permits,omitempty"` // a semaphore's; Count is the permits held
	RemainingMS int64    `json:"remaining_ms"`
	NoExpiry    bool     `json:"no_expiry,omitempty"`
	// Holder is the token held by the most nodes, and HeldOn their count;
	// a lock is held when HeldOn reaches Quorum. The nodes of an owner
	// lock count together, whatever their tokens.
	Holder string `json:"holder,omitempty"`
	HeldOn int    `json:"held_on"`
	// Answered is the number of nodes that answered.
	Answered int `json:"answered"`
	// Waiters is the number of fair Lock calls (WithFair) queued for the
	// key on a quorum of nodes; other waiting calls are not queued on the
	// nodes.
	Waiters int `json:"waiters,omitempty"`
}

// nodeStatus is one node's answer.
type nodeStatus struct {
	Index   int      `json:"index"`
	Addr    string   `json:"addr"`
	State   string   `json:"state"`            // held, free, foreign or error
	Layout  string   `json:"layout,omitempty"` // plain, owner, read, semaphore or foreign
	Token   string   `json:"token,omitempty"`
	Tokens  []string `json:"tokens,omitempty"` // every hold of an owner lock, reader or permit
	Permits int      `json:"permits,omitempty"`
	Label   string   `json:"label,omitempty"`
	Owner   string   `json:"owner,omitempty"`
	Count   int64    `json:"count,omitempty"`
	PTTL    *int64   `json:"pttl_ms,omitempty"` // set when the key is there; -1: no expiry
	Value   string   `json:"value,omitempty"`   // the stored string, when it is not Token
	Error   string   `json:"error,omitempty"`
}

const (
	stateHeld    = "held"
	stateFree    = "free"
	stateForeign = "foreign"
	stateError   = "error"

	layoutOwner   = "owner"
	layoutRead    = "read"
	layoutSem     = "semaphore"
	layoutForeign = "foreign"
)

// newStatusReport turns what Inspect found into a report.
func newStatusReport(h *redlock.Holding, specs []nodeSpec) *statusReport {
	rep := &statusReport{
		Key: h.Key, Quorum: h.Quorum, Nodes: make([]nodeStatus, len(h.Nodes)),
		Held: h.Held, Token: h.Token, Label: h.Label, Owner: h.Owner, Count: h.Count,
		Shared: h.Shared, Permits: h.Permits, RemainingMS: h.Remaining.Milliseconds(), NoExpiry: h.NoExpiry,
		Waiters: h.Waiters,
	}
	if len(h.Tokens) > 1 {
		rep.Tokens = h.Tokens
	}
	for i, n := range h.Nodes {
		ns := nodeStatus{Index: n.Index, Addr: n.Addr}
		if n.Index >= 0 && n.Index < len(specs) {
			ns.Addr = nodeAddr(specs[n.Index])
		}
		switch {
		case n.Err != nil:
			ns.State, ns.Error = stateError, n.Err.Error()
		case n.Layout == layoutForeign:
			ns.State = stateForeign
		case n.Held:
			ns.State = stateHeld
		default:
			ns.State = stateFree
		}
		if ns.State == stateHeld || ns.State == stateForeign {
			ns.Layout, ns.Token, ns.Label, ns.Owner, ns.Count = n.Layout, n.Token, n.Label, n.Owner, n.Count
			ns.Permits = n.Permits
			if len(n.Tokens) > 1 {
				ns.Tokens = n.Tokens
			}
			ms := int64(-1) // no expiry
			if n.PTTL >= 0 {
				ms = n.PTTL.Milliseconds()
			}
			ns.PTTL = &ms
			if n.Value != n.Token {
				ns.Value = n.Value
			}
		}
		if ns.State != stateError {
			rep.Answered++
		}
		rep.Nodes[i] = ns
	}
	rep.Holder, rep.HeldOn = mostHeld(rep.Nodes)
	return rep
}

// holderKey groups the nodes that hold the key for one holder: one value
// at a plain key, one owner at an owner lock, the readers together, or a
// semaphore's permits together, as Inspect decides.
func holderKey(n nodeStatus) string {
	switch n.Layout {
	case layoutOwner:
		return "o:" + n.Owner
	case layoutRead:
		return "r"
	case layoutSem:
		return "s:" + strconv.Itoa(n.Permits)
	}
	return "v:" + n.Token
}

// mostHeld returns the token of the holder that the most nodes hold the
// key for, and their number. Ties go to the holder of the lowest node.
func mostHeld(nodes []nodeStatus) (string, int) {
	var (
		best   string
		most   int
		counts = map[string]int{}
	)
	for _, n := range nodes {
		if n.State == stateHeld {
			k := holderKey(n)
			counts[k]++
			if c := counts[k]; c > most {
				best, most = n.Token, c
			}
		}
	}
	return best, most
}

// nodeAddr names a node for the report: its address, and its database when
// it is not 0. It never shows a password.
func nodeAddr(s nodeSpec) string {
	if s.opts.DB != 0 {
		return s.opts.Addr + "/" + strconv.Itoa(s.opts.DB)
	}
	return s.opts.Addr
}

func (r *statusReport) print(w io.Writer) {
	fmt.Fprintf(w, "key %q on %d nodes (quorum %d)\n", r.Key, len(r.Nodes), r.Quorum)
	owners := slices.ContainsFunc(r.Nodes, func(n nodeStatus) bool { return n.Owner != "" })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if owners {
		fmt.Fprintln(tw, "  NODE\tADDRESS\tSTATE\tPTTL\tLAYOUT\tTOKEN\tLABEL\tOWNER\tCOUNT")
	} else {
		fmt.Fprintln(tw, "  NODE\tADDRESS\tSTATE\tPTTL\tLAYOUT\tTOKEN\tLABEL")
	}
	for _, n := range r.Nodes {
		if n.State == stateError {
			// The error is the last cell, so it does not widen the
			// columns it runs over.
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", n.Index, n.Addr, n.State, n.Error)
			continue
		}
		ttl := "-"
		if n.PTTL != nil {
			ttl = "no expiry"
			if *n.PTTL >= 0 {
				ttl = (time.Duration(*n.PTTL) * time.Millisecond).String()
			}
		}
		token := cell(shortToken(n.Token, n.Label))
		if len(n.Tokens) > 1 {
			token += fmt.Sprintf(" (+%d)", len(n.Tokens)-1)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s", n.Index, n.Addr, n.State, ttl, cell(n.Layout), token, cell(n.Label))
		if owners {
			count := "-"
			if n.Owner != "" {
				count = strconv.FormatInt(n.Count, 10)
			}
			fmt.Fprintf(tw, "\t%s\t%s", cell(n.Owner), count)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, r.verdict())
}

// cell is s for a table cell: printable, and "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// shortToken is token without its label, which the table shows apart: the
// random id of the acquisition, and its attempt.
func shortToken(token, label string) string {
	if label != "" {
		if t, ok := strings.CutSuffix(token, " "+label); ok {
			return t
		}
	}
	return token
}

// verdict sums the report up in one line.
func (r *statusReport) verdict() string {
	answered, foreign := 0, 0
	held := map[string]int{}     // by holderKey
	names := map[string]string{} // holderKey → how to name the holder
	for _, n := range r.Nodes {
		switch n.State {
		case stateHeld:
			k := holderKey(n)
			held[k]++
			if _, ok := names[k]; !ok {
				names[k] = holderName(n.Token, n.Label, n.Owner)
				switch n.Layout {
				case layoutRead:
					names[k] = "readers"
				case layoutSem:
					names[k] = fmt.Sprintf("permits of %d", n.Permits)
				}
			}
			answered++
		case stateForeign:
			foreign++
			answered++
		case stateFree:
			answered++
		}
	}
	var notes string
	if f := len(r.Nodes) - answered; f > 0 {
		notes = fmt.Sprintf("; %d of %d nodes did not answer", f, len(r.Nodes))
	}
	if foreign > 0 {
		notes += fmt.Sprintf("; %d of %d nodes hold a value at the key that is not a lock", foreign, len(r.Nodes))
	}
	if r.Waiters > 0 {
		notes += fmt.Sprintf("; %d fair %s queued", r.Waiters, plural(int64(r.Waiters), "call"))
	}
	switch {
	case r.Held:
		who := holderName(r.Token, r.Label, r.Owner)
		switch {
		case r.Owner != "":
			who += fmt.Sprintf(", count %d", r.Count)
		case r.Shared:
			who = fmt.Sprintf("%d %s, first %s", r.Count, plural(r.Count, "reader"), who)
		case r.Permits > 0:
			who = fmt.Sprintf("%d of %d permits, first %s", r.Count, r.Permits, who)
		}
		until := "for " + (time.Duration(r.RemainingMS) * time.Millisecond).String() + " more at least"
		if r.NoExpiry {
			until = "with no expiry"
		}
		return fmt.Sprintf("held by %s on %d of %d nodes (quorum %d), %s%s", who, r.HeldOn, len(r.Nodes), r.Quorum, until, notes)
	case len(held) > 0:
		var parts []string
		for k, n := range held {
			parts = append(parts, fmt.Sprintf("%s on %d", names[k], n))
		}
		slices.Sort(parts)
		return fmt.Sprintf("not held by a quorum (%d): %s of %d nodes%s", r.Quorum, strings.Join(parts, ", "), len(r.Nodes), notes)
	case answered == 0:
		return fmt.Sprintf("unknown: none of the %d nodes answered", len(r.Nodes))
	case answered < r.Quorum:
		return fmt.Sprintf("unknown: free on the %d of %d nodes that answered, fewer than the quorum of %d%s", answered, len(r.Nodes), r.Quorum, notes)
	}
	return fmt.Sprintf("free on every node that answered (%d of %d)%s", answered, len(r.Nodes), notes)
}

// plural is noun, with an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// holderName names a holder: its token up to the label, and the label when
// there is one; for an owner lock, the owner first.
func holderName(token, label, owner string) string {
	name := printable(shortToken(token, label))
	if label != "" {
		name += " (" + printable(label) + ")"
	}
	if owner != "" {
		name = "owner " + printable(owner) + ", token " + name
	}
	return name
}

// printable quotes a token that is not plain printable text, such as the
// random bytes some Redlock clients use.
func printable(s string) string {
	if s != "" && strconv.CanBackquote(s) && !strings.ContainsAny(s, " `\t") {
		return s
	}
	return strconv.Quote(s)
}
