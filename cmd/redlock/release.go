package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redlockgo/redlock"
)

// releaseConfig is the configuration of one release, from its flags.
type releaseConfig struct {
	nodes       string
	key         string
	prefix      string
	token       string
	owner       string
	shared      bool
	permits     int
	nodeTimeout time.Duration
	quiet       bool
}

func defaultReleaseConfig() releaseConfig {
	return releaseConfig{nodeTimeout: time.Second}
}

func releaseFlags(cfg *releaseConfig, stdout, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("release", releaseHelp, stdout, stderr, nil)
	fs.StringVar(&cfg.nodes, "nodes", cfg.nodes, "comma-separated nodes: host:port or URLs (default $"+envNodes+")")
	fs.StringVar(&cfg.key, "key", cfg.key, "the lock's key (required)")
	fs.StringVar(&cfg.prefix, "prefix", cfg.prefix, "namespace: the Redis key is prefix+key, as the lock's -prefix")
	fs.StringVar(&cfg.token, "token", cfg.token, "the `token` of the hold to release, as redlock lock printed it in REDLOCK_TOKEN (default $REDLOCK_TOKEN)")
	fs.StringVar(&cfg.owner, "owner", cfg.owner, "the owner `id` of an -owner lock: releases one of its holds")
	fs.BoolVar(&cfg.shared, "shared", cfg.shared, "the hold is a shared (read) lock, taken with -shared")
	fs.BoolVar(&cfg.shared, "s", cfg.shared, "the same as -shared")
	fs.IntVar(&cfg.permits, "permits", cfg.permits, "the hold is one of `k` permits, taken with -permits k")
	durationVar(fs, &cfg.nodeTimeout, "node-timeout", "the longest `duration` of each request to a node")
	fs.BoolVar(&cfg.quiet, "quiet", cfg.quiet, "do not warn about fewer than 3 nodes")
	fs.BoolVar(&cfg.quiet, "q", cfg.quiet, "the same as -quiet")
	return fs
}

func releaseHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock release --nodes HOST:PORT,... --key KEY --token TOKEN [flags]

Release ends a hold that another process took, given its key and token:
the token that redlock lock printed in REDLOCK_TOKEN, or that a command of
redlock run found there. It deletes the hold on every node, as the holder's
own release would, and wakes the waiters. The holder, if it still runs,
finds its lock lost at its next renewal (redlock lock then exits %[1]d). A
wrong token releases nothing. Give the flags the lock was taken with:
-prefix, and -owner, -shared or -permits k.

  eval "$(redlock lock --key deploy --nodes ...)"   # REDLOCK_TOKEN=...
  ...
  redlock release --key deploy --nodes ...          # -token $REDLOCK_TOKEN

Exit status:
  0   a quorum of nodes released the hold
  1   the hold was not held: already released, expired, or another token
  %-3[2]d bad usage: a bad flag or node, no key or token
  %-3[3]d too few nodes answered to confirm the release (EX_UNAVAILABLE);
      what is left expires with the lock's TTL

%[4]s
Flags:
`, exitLockLost, exitUsage, exitUnavailable, nodesHelp)
	cfg := defaultReleaseConfig()
	releaseFlags(&cfg, w, w).PrintDefaults()
}

func releaseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultReleaseConfig()
	fs := releaseFlags(&cfg, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	permitsSet := false
	fs.Visit(func(f *flag.Flag) { permitsSet = permitsSet || f.Name == "permits" })
	specs, err := cfg.validate(fs.Args(), permitsSet)
	if err != nil {
		return usageError(stderr, "release", err)
	}
	if w := fewNodesWarning(len(specs)); w != "" && !cfg.quiet {
		fmt.Fprintf(stderr, "redlock release: %s\n", w)
	}
	client, done, code := connect("release", specs, cfg.nodeTimeout, stderr,
		redlock.WithNodeTimeout(cfg.nodeTimeout),
		redlock.WithTTL(max(redlock.DefaultTTL, 4*cfg.nodeTimeout)),
		redlock.WithKeyPrefix(cfg.prefix),
		redlock.WithPubSub(false))
	if client == nil {
		return code
	}
	defer done()

	switch {
	case cfg.shared:
		err = client.ReleaseRead(ctx, cfg.key, cfg.token)
	case cfg.permits > 0:
		s, serr := client.Semaphore(cfg.key, cfg.permits)
		if serr != nil {
			return usageError(stderr, "release", serr)
		}
		err = s.Release(ctx, cfg.token)
	default:
		err = client.Release(ctx, cfg.key, cfg.token, redlock.WithOwner(cfg.owner))
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, redlock.ErrInvalidOption):
		return usageError(stderr, "release", err)
	case errors.Is(err, redlock.ErrNotHeld):
		fmt.Fprintf(stderr, "redlock release: %q is not held by that token (already released, expired, or taken by another): %s; exiting %d\n",
			cfg.key, strings.TrimPrefix(err.Error(), "redlock: "), exitFail)
		return exitFail
	}
	fmt.Fprintf(stderr, "redlock release: too few nodes answered to confirm the release of %q: %s; exiting %d\n", cfg.key, strings.TrimPrefix(err.Error(), "redlock: "), exitUnavailable)
	return exitUnavailable
}

func (c *releaseConfig) validate(rest []string, permitsSet bool) ([]nodeSpec, error) {
	if c.token == "" {
		c.token = os.Getenv("REDLOCK_TOKEN")
	}
	switch {
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q", rest[0])
	case c.key == "":
		return nil, errors.New("-key is required")
	case c.token == "":
		return nil, errors.New("-token is required (or REDLOCK_TOKEN): the token that redlock lock printed")
	case c.nodeTimeout <= 0:
		return nil, fmt.Errorf("-node-timeout must be positive, got %v", c.nodeTimeout)
	case permitsSet && c.permits < 1:
		return nil, fmt.Errorf("-permits must be at least 1, got %d", c.permits)
	case c.shared && c.permits > 0:
		return nil, errors.New("-shared and -permits exclude each other")
	case (c.shared || c.permits > 0) && c.owner != "":
		return nil, errors.New("-owner works only with an exclusive lock")
	}
	return parseNodes(c.nodes)
}
