package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// envNodes is the environment variable that lists the nodes when --nodes is
// not given. Prefer it to --nodes for URLs that carry a password: the
// command line of a process is visible to every user of the machine.
const envNodes = "REDLOCK_NODES"

// nodesHelp describes the node URLs, for the help of the commands that take
// them. Each of those helps prints it just before the flags, so it ends with
// durationsHelp: the help then says once how every duration is written.
const nodesHelp = nodeURLsHelp + "\n" + durationsHelp

const nodeURLsHelp = `Nodes are independent Redis masters, usually 5 and at least 3, given as a
comma-separated list in --nodes or, when --nodes is not given, in
REDLOCK_NODES. Each is a URL, a bare address or a socket path:

  redis://[user:password@]host[:port][/db][?option=value...]
  rediss://...    the same over TLS
  unix://[user:password@]/path/to/redis.sock[?db=N...]
  host[:port]     the same as redis://host[:port]; the port defaults to 6379,
                  and an IPv6 address goes in brackets: [::1]:6379
  /path/to/redis.sock   the same as unix:///path/to/redis.sock

The options are go-redis's (dial_timeout=3s, skip_verify=true, ...). Prefer
REDLOCK_NODES to --nodes for URLs with a password: other users of the machine
can read a process's arguments. With fewer than 3 nodes the lock survives no
node failure: run, lock and status warn so on stderr, and check reports it.
`

// minNodes is the smallest number of nodes that tolerates the failure of
// one: with 1 or 2, the quorum is every node.
const minNodes = 3

// fewNodesWarning is the warning for fewer than minNodes nodes, or "".
func fewNodesWarning(n int) string {
	if n >= minNodes {
		return ""
	}
	s := "s"
	if n == 1 {
		s = ""
	}
	return fmt.Sprintf("warning: %d node%s: the lock survives no node failure, and without persistence a restart forgets it; "+
		"Redlock wants independent masters, at least %d (5 is usual)", n, s, minNodes)
}

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
		return nil, fmt.Errorf("no nodes: give --nodes host:port,... (or redis:// URLs), or set %s", envNodes)
	}
	var specs []nodeSpec
	for i, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return nil, fmt.Errorf("%s: URL %d is empty (a stray comma?)", from, i+1)
		}
		shown := maskPassword(raw)
		opts, err := redis.ParseURL(nodeURL(raw))
		if err == nil {
			err = checkHostPort(nodeURL(raw))
		}
		if err == nil && opts.DB < 0 {
			// go-redis selects no database for it: DB 0 under another name.
			err = fmt.Errorf("database %d is negative", opts.DB)
		}
		if err != nil {
			// url.Error quotes the whole URL, password included.
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				err = ue.Err
			}
			if strings.ContainsAny(password(raw), "/?#") {
				// The parser's error would quote the password up to there.
				err = errors.New("the password holds '/', '?' or '#', which end a URL's address: percent-encode them (%2F, %3F, %23)")
			}
			return nil, fmt.Errorf("%s: bad node URL %q: %v", from, shown, err)
		}
		specs = append(specs, nodeSpec{url: shown, opts: opts})
	}
	return specs, nil
}

// checkHostPort refuses the address of a redis:// or rediss:// URL that
// go-redis takes but no dial can reach: an empty port, which go-redis turns
// into 6379, a port out of range, or a host with a colon outside brackets
// ("notaurl::" is the host "notaurl:" to go-redis). Run would otherwise
// wait for such a node forever. The URL has been parsed once already.
func checkHostPort(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return err
	}
	host, port := u.Hostname(), u.Port()
	switch {
	case strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "["):
		return fmt.Errorf("the host %q has a colon: give host:port, with an IPv6 address in brackets ([::1]:6379)", host)
	case port == "" && strings.HasSuffix(u.Host, ":"):
		return errors.New("the port after the colon is empty: give host:port, or leave the colon out for 6379")
	case port != "":
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s is out of range: want 1 to 65535", port)
		}
	}
	return nil
}

// nodeURL turns a bare address into a redis:// URL, and a bare socket path
// into a unix:// one. A URL is returned as it is.
func nodeURL(raw string) string {
	switch {
	case strings.Contains(raw, "://"):
		return raw
	case strings.HasPrefix(raw, "/"):
		return "unix://" + raw
	}
	return "redis://" + raw
}

// maskPassword replaces the password in a URL, if it has one, with "xxxxx".
// It works on text that url.Parse rejects too, so that an error message
// never shows a password.
func maskPassword(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		// A bare address: user:password@host:port.
		if strings.HasPrefix(raw, "/") {
			return raw
		}
		return strings.TrimPrefix(maskPassword("redis://"+raw), "redis://")
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
func dial(specs []nodeSpec, nodeTimeout time.Duration) []*redis.Client {
	quietRedisLog()
	rcs := make([]*redis.Client, len(specs))
	for i, s := range specs {
		o := cliOptions(s.opts)
		// A hung node's connection setup and reads end with the node
		// timeout, not go-redis's 5s and 3s, which Close would wait out.
		if nodeTimeout > 0 {
			if o.DialTimeout == 0 {
				o.DialTimeout = min(nodeTimeout, 5*time.Second)
			}
			if o.ReadTimeout == 0 {
				o.ReadTimeout = min(nodeTimeout, 3*time.Second)
			}
			if o.WriteTimeout == 0 {
				o.WriteTimeout = min(nodeTimeout, 3*time.Second)
			}
		}
		rcs[i] = redis.NewClient(o)
	}
	return rcs
}

func closeAll(rcs []*redis.Client) {
	for _, rc := range rcs {
		_ = rc.Close()
	}
}

// password returns the password of a URL or bare address, as maskPassword
// finds it, or "".
func password(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		rest = raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}
