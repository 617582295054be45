package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// envNodes is the environment variable that lists the nodes when --nodes is
// not given. Prefer it to --nodes for URLs that carry a password: the
// command line of a process is visible to every user of the machine.
const envNodes = "REDLOCK_NODES"

// nodesHelp describes the node URLs, for the help of the commands that take
// them.
const nodesHelp = `Nodes are independent Redis masters, usually 5, given as a comma-separated
list of URLs in --nodes or, when --nodes is not given, in REDLOCK_NODES:

  redis://[user:password@]host[:port][/db][?option=value...]
  rediss://...    the same over TLS
  unix://[user:password@]/path/to/redis.sock[?db=N...]

The options are go-redis's (dial_timeout=3s, skip_verify=true, ...). Prefer
REDLOCK_NODES to --nodes for URLs with a password: other users of the machine
can read a process's arguments.
`

// nodeSpec is one node given on the command line.
type nodeSpec struct {
	url  string // as given, with the password masked: safe to print
	opts *redis.Options
}

// parseNodes parses a comma-separated list of node URLs; an empty list falls
// back to REDLOCK_NODES. The error names the bad URL, with its password
// masked, and says what a good one looks like.
func parseNodes(list string) ([]nodeSpec, error) {
	from := "--nodes"
	if strings.TrimSpace(list) == "" {
		list, from = os.Getenv(envNodes), envNodes
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no nodes: give --nodes redis://host:port,... or set %s", envNodes)
	}
	var specs []nodeSpec
	for i, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return nil, fmt.Errorf("%s: URL %d is empty (a stray comma?)", from, i+1)
		}
		shown := maskPassword(raw)
		if !strings.Contains(raw, "://") {
			return nil, fmt.Errorf("%s: bad node URL %q: want redis://host:port, rediss://host:port or unix:///path", from, shown)
		}
		opts, err := redis.ParseURL(raw)
		if err != nil {
			// url.Error quotes the whole URL, password included.
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("%s: bad node URL %q: %v", from, shown, err)
		}
		specs = append(specs, nodeSpec{url: shown, opts: opts})
	}
	return specs, nil
}

// maskPassword replaces the password in a URL, if it has one, with "xxxxx".
// It works on text that url.Parse rejects too, so that an error message
// never shows a password.
func maskPassword(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return raw
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// cliOptions adapts a node's go-redis options to a command-line tool that
// makes a few requests and exits.
func cliOptions(given *redis.Options) *redis.Options {
	o := *given
	// A Redlock round does its own retrying, across nodes and attempts. A
	// go-redis retry or re-dial would only stretch a request to a dead node
	// until the node timeout and hide the failure: with these, a refused
	// connection fails the node's vote at once. A URL's max_retries wins.
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	o.DialerRetries = 1
	// Let a request end at its context's deadline, the node timeout, rather
	// than at go-redis's 3s read timeout, so that exiting is not held up by
	// a hung node.
	o.ContextTimeoutEnabled = true
	// Name the connections, for CLIENT LIST on the nodes.
	if o.ClientName == "" {
		o.ClientName = "redlock-cli"
	}
	return &o
}

// dial returns a go-redis client per node, built with cliOptions. The
// caller closes them.
func dial(specs []nodeSpec) []*redis.Client {
	quietRedisLog()
	rcs := make([]*redis.Client, len(specs))
	for i, s := range specs {
		rcs[i] = redis.NewClient(cliOptions(s.opts))
	}
	return rcs
}

func closeAll(rcs []*redis.Client) {
	for _, rc := range rcs {
		_ = rc.Close()
	}
}
