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
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// statusConfig is the configuration of one status, from its flags.
type statusConfig struct {
	nodes   string
	key     string
	prefix  string
	timeout time.Duration
	json    bool
}

func defaultStatusConfig() statusConfig {
	return statusConfig{timeout: 2 * time.Second}
}

func statusFlags(cfg *statusConfig, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("redlock status", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.nodes, "nodes", cfg.nodes, "comma-separated node URLs (default $"+envNodes+")")
	fs.StringVar(&cfg.key, "key", cfg.key, "the lock's key (required)")
	fs.StringVar(&cfg.prefix, "prefix", cfg.prefix, "namespace: the Redis key is prefix+key")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "how long to wait for the nodes' answers")
	fs.BoolVar(&cfg.json, "json", cfg.json, "print JSON instead of a table")
	fs.Usage = func() { statusHelp(fs.Output()) }
	return fs
}

func statusHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock status --nodes URL,... --key KEY [flags]

Status asks every node about the lock KEY and shows, for each, whether it
holds the key, for which token, and the key's remaining TTL (PTTL), or the
node's error. The last line says whether a quorum of nodes holds one token.
It only reads, and exits 0 unless the flags are bad (%d).

With -json it prints one object: {"key", "quorum", "nodes": [{"index",
"addr", "state": "held"|"free"|"error", "token", "pttl_ms", "error"}],
"holder", "held_on"}; pttl_ms is -1 for a key without expiry.

%s
Flags:
`, exitUsage, nodesHelp)
	cfg := defaultStatusConfig()
	statusFlags(&cfg, w).PrintDefaults()
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultStatusConfig()
	fs := statusFlags(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	specs, err := cfg.validate(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n(redlock help status prints the flags)\n", err)
		return exitUsage
	}
	rcs := dial(specs)
	defer closeAll(rcs)
	rep := queryStatus(ctx, rcs, specs, cfg)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "redlock status: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	rep.print(stdout)
	return exitOK
}

func (c *statusConfig) validate(rest []string) ([]nodeSpec, error) {
	switch {
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q", rest[0])
	case c.key == "":
		return nil, errors.New("-key is required")
	case c.timeout <= 0:
		return nil, fmt.Errorf("-timeout must be positive, got %v", c.timeout)
	}
	return parseNodes(c.nodes)
}

// statusReport is what the nodes said about one key.
type statusReport struct {
	Key    string       `json:"key"`
	Quorum int          `json:"quorum"`
	Nodes  []nodeStatus `json:"nodes"`
	// Holder is the token held by the most nodes, and HeldOn their count;
	// a lock is held when HeldOn reaches Quorum.
	Holder string `json:"holder,omitempty"`
	HeldOn int    `json:"held_on"`
}

// nodeStatus is one node's answer.
type nodeStatus struct {
	Index int    `json:"index"`
	Addr  string `json:"addr"`
	State string `json:"state"` // held, free or error
	Token string `json:"token,omitempty"`
	PTTL  *int64 `json:"pttl_ms,omitempty"` // set when held; -1: no expiry
	Error string `json:"error,omitempty"`
}

const (
	stateHeld  = "held"
	stateFree  = "free"
	stateError = "error"
)

// queryStatus asks every node at once, each for at most cfg.timeout.
func queryStatus(ctx context.Context, rcs []*redis.Client, specs []nodeSpec, cfg statusConfig) *statusReport {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rkey := cfg.prefix + cfg.key
	rep := &statusReport{Key: cfg.key, Quorum: len(rcs)/2 + 1, Nodes: make([]nodeStatus, len(rcs))}
	var wg sync.WaitGroup
	for i, rc := range rcs {
		wg.Go(func() {
			rep.Nodes[i] = queryNode(ctx, rc, rkey)
			rep.Nodes[i].Index = i
			rep.Nodes[i].Addr = nodeAddr(specs[i])
		})
	}
	wg.Wait()

	counts := map[string]int{}
	for _, n := range rep.Nodes {
		if n.State == stateHeld {
			counts[n.Token]++
			if c := counts[n.Token]; c > rep.HeldOn {
				rep.Holder, rep.HeldOn = n.Token, c
			}
		}
	}
	return rep
}

// queryNode reads the key and its PTTL in one transaction, so that both
// describe the same moment.
func queryNode(ctx context.Context, rc *redis.Client, rkey string) nodeStatus {
	var (
		get  *redis.StringCmd
		pttl *redis.DurationCmd
	)
	_, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, rkey)
		pttl = p.PTTL(ctx, rkey)
		return nil
	})
	if errors.Is(err, redis.Nil) { // from GET: the key is not there
		return nodeStatus{State: stateFree}
	}
	if err != nil {
		return nodeStatus{State: stateError, Error: err.Error()}
	}
	ms := int64(-1) // PTTL says -1 for a key without expiry
	if d := pttl.Val(); d >= 0 {
		ms = d.Milliseconds()
	}
	return nodeStatus{State: stateHeld, Token: get.Val(), PTTL: &ms}
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
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tADDRESS\tSTATE\tPTTL\tTOKEN OR ERROR")
	for _, n := range r.Nodes {
		switch n.State {
		case stateHeld:
			ttl := "no expiry"
			if *n.PTTL >= 0 {
				ttl = (time.Duration(*n.PTTL) * time.Millisecond).String()
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", n.Index, n.Addr, n.State, ttl, printable(n.Token))
		case stateFree:
			fmt.Fprintf(tw, "  %d\t%s\t%s\t-\t-\n", n.Index, n.Addr, n.State)
		default:
			// The error takes the token's place; the last cell does not
			// widen its column.
			fmt.Fprintf(tw, "  %d\t%s\t%s\t-\t%s\n", n.Index, n.Addr, n.State, n.Error)
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, r.verdict())
}

// verdict sums the report up in one line.
func (r *statusReport) verdict() string {
	answered, held := 0, map[string]int{}
	for _, n := range r.Nodes {
		switch n.State {
		case stateHeld:
			held[n.Token]++
			answered++
		case stateFree:
			answered++
		}
	}
	failed := ""
	if f := len(r.Nodes) - answered; f > 0 {
		failed = fmt.Sprintf("; %d of %d nodes did not answer", f, len(r.Nodes))
	}
	switch {
	case r.HeldOn >= r.Quorum:
		return fmt.Sprintf("held by %s on %d of %d nodes (quorum %d)%s", printable(r.Holder), r.HeldOn, len(r.Nodes), r.Quorum, failed)
	case len(held) > 0:
		var parts []string
		for tok, n := range held {
			parts = append(parts, fmt.Sprintf("%s on %d", printable(tok), n))
		}
		slices.Sort(parts)
		return fmt.Sprintf("not held by a quorum (%d): %s of %d nodes%s", r.Quorum, strings.Join(parts, ", "), len(r.Nodes), failed)
	case answered == 0:
		return fmt.Sprintf("unknown: none of the %d nodes answered", len(r.Nodes))
	}
	return fmt.Sprintf("free on every node that answered (%d of %d)%s", answered, len(r.Nodes), failed)
}

// printable quotes a token that is not plain printable text, such as the
// random bytes some Redlock clients use.
func printable(s string) string {
	if s != "" && strconv.CanBackquote(s) && !strings.ContainsAny(s, " `\t") {
		return s
	}
	return strconv.Quote(s)
}
