package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/redlockgo/redlock"
)

const (
	// maxNodeTimeout caps the node timeout run derives from the TTL. It is
	// ten times the library's cap: a CLI often talks to distant nodes, and
	// its first request to each pays for the dial and the TLS handshake.
	maxNodeTimeout = time.Second
	// releaseTimeout bounds the release once the command has exited.
	releaseTimeout = 5 * time.Second
)

// runConfig is the configuration of one run, from its flags.
type runConfig struct {
	name         string // "run" or "lock", for messages
	nodes        string
	key          string
	prefix       string
	ttl          time.Duration
	wait         waitFlag // not set: as long as it takes; 0: try once
	noWait       bool
	conflictCode int    // the status when the lock is held elsewhere
	shell        string // -c: a command line for the shell
	exclusive    bool   // -x: as flock(1); the default, unless -shared or -permits
	grace        time.Duration
	maxHold      time.Duration // 0: no cap
	nodeTimeout  time.Duration // 0: derived from ttl
	nodeGuard    bool          // -node-guard: redlock.WithNodeGuard
	foreground   bool
	verbose      bool
	quiet        bool
	fencing      bool
	owner        string
	shared       bool // -shared: a read lock
	permits      int  // -permits: one of k permits; 0 for a lock
	permitsSet   bool // -permits was given
	label        string
	labelSet     bool     // -label was given, maybe as ""
	argv         []string // the command; none for lock without one
}

func defaultRunConfig(name string) runConfig {
	return runConfig{name: name, ttl: 30 * time.Second, conflictCode: exitNotAcquired}
}

// runFlags returns the flag set of run, or of lock, which fills cfg. Flag
// errors go to output; -h prints the help on os.Stdout, the stdout of the
// process, since the caller hands runFlags only output.
func runFlags(cfg *runConfig, output io.Writer) *flag.FlagSet {
	help := runHelp
	if cfg.name == "lock" {
		help = lockHelp
	}
	fs := newFlagSet(cfg.name, help, os.Stdout, output, nil)
	fs.StringVar(&cfg.nodes, "nodes", cfg.nodes, "comma-separated nodes: host:port or URLs (default $"+envNodes+")")
	fs.StringVar(&cfg.key, "key", cfg.key, "the lock's key (required)")
	fs.StringVar(&cfg.prefix, "prefix", cfg.prefix, "namespace: the Redis key is prefix+key")
	durationVar(fs, &cfg.ttl, "ttl", "the `duration` the lock lives on the nodes unless extended; it is extended every ttl/3, and it outlives a killed redlock by at most this")
	fs.Var(&cfg.wait, "wait", "the longest `duration` to wait for the lock; 0 tries once, as -no-wait does (default: as long as it takes)")
	fs.Var(&cfg.wait, "timeout", "the `duration` to wait: the same as -wait, as in flock(1); the per-node timeout is -node-timeout")
	fs.Var(&cfg.wait, "w", "the `duration` to wait: the same as -wait, as in flock(1)")
	fs.BoolVar(&cfg.noWait, "no-wait", cfg.noWait, "try to acquire the lock once, and do not wait")
	fs.BoolVar(&cfg.noWait, "n", cfg.noWait, "the same as -no-wait, as in flock(1)")
	fs.BoolVar(&cfg.noWait, "nonblock", cfg.noWait, "the same as -no-wait, as in flock(1)")
	fs.BoolVar(&cfg.noWait, "nb", cfg.noWait, "the same as -no-wait, as in flock(1)")
	fs.IntVar(&cfg.conflictCode, "conflict-exit-code", cfg.conflictCode, "the exit `status` when the lock is held elsewhere (-no-wait, or -wait ran out), as flock(1) -E has it; not when too few nodes answer, which is "+strconv.Itoa(exitUnavailable))
	fs.IntVar(&cfg.conflictCode, "E", cfg.conflictCode, "the exit `status` when the lock is held elsewhere: the same as -conflict-exit-code")
	fs.StringVar(&cfg.shell, "command", cfg.shell, "run this `command line` with $SHELL -c (/bin/sh -c without $SHELL), as flock(1) -c does, instead of a command after the flags")
	fs.StringVar(&cfg.shell, "c", cfg.shell, "the `command line` to run: the same as -command")
	fs.BoolVar(&cfg.exclusive, "exclusive", cfg.exclusive, "take an exclusive (write) lock, as flock(1) -x does: the default")
	fs.BoolVar(&cfg.exclusive, "x", cfg.exclusive, "the same as -exclusive")
	fs.BoolVar(&cfg.exclusive, "e", cfg.exclusive, "the same as -exclusive")
	fs.BoolVar(&cfg.shared, "shared", cfg.shared, "take a shared (read) lock, as flock(1) -s does: any number of shared holders at once, and none while an exclusive one holds; a waiting exclusive run goes first")
	fs.BoolVar(&cfg.shared, "s", cfg.shared, "the same as -shared")
	fs.IntVar(&cfg.permits, "permits", cfg.permits, "take one of `k` permits of a counting semaphore on the key: at most k holders at once; every run on the key must give the same k. It needs more nodes than a lock once k > 1: floor(k*N/(k+1))+1 of N")
	durationVar(fs, &cfg.grace, "grace", "the `duration` the command has to exit after SIGTERM before SIGKILL. When renewals fail, SIGTERM comes -grace before the lock's validity ends, so that the command is gone by then. At most half of -ttl (or of a shorter -max-hold), and short enough that a renewal, due a third of -ttl in, has two -node-timeouts to land before it; 0 means a fifth of -ttl (or of -max-hold)")
	durationVar(fs, &cfg.maxHold, "max-hold", "stop the command, as if the lock were lost, once it has held the lock for this `duration`; 0 means no limit")
	durationVar(fs, &cfg.nodeTimeout, "node-timeout", "the longest `duration` of each request to a node; 0 means ttl/10, at most "+maxNodeTimeout.String())
	fs.BoolVar(&cfg.nodeGuard, "node-guard", cfg.nodeGuard, "quarantine a node that restarted less than the TTL ago, or whose clock jumped: its vote does not count until the TTL has passed (redlock.WithNodeGuard). Turn it on when the nodes run without appendfsync always, or their clocks are not trusted; the first run after a node starts then waits for the TTL")
	fs.BoolVar(&cfg.fencing, "fencing", cfg.fencing, "get a fencing token with the lock, and pass it to the command in REDLOCK_FENCE: a number larger than that of every earlier holder of the key")
	fs.StringVar(&cfg.owner, "owner", cfg.owner, "take the lock for this owner `id`: reentrant, so that runs with the same -owner share it, with a hold count")
	fs.StringVar(&cfg.label, "label", cfg.label, "store this `label`, a description of the holder, with the lock, for redlock status; \"\" stores none (default host:pid)")
	fs.BoolVar(&cfg.foreground, "foreground", cfg.foreground, "keep the command in redlock's process group, so that it can read from the terminal; only the command itself is then signalled (default: on in the foreground of a terminal, on Linux)")
	fs.BoolVar(&cfg.verbose, "verbose", cfg.verbose, "say on stderr what happens: acquisition, release, signals")
	fs.BoolVar(&cfg.verbose, "v", cfg.verbose, "the same as -verbose")
	fs.BoolVar(&cfg.quiet, "quiet", cfg.quiet, "do not warn about fewer than 3 nodes")
	fs.BoolVar(&cfg.quiet, "q", cfg.quiet, "the same as -quiet")
	return fs
}

// runExitHelp is the table of the exit statuses of run, or of lock, for
// their help.
func runExitHelp(name string) string {
	hold := ""
	if name == "lock" {
		hold = `
  0              without a command: the lock was held until a signal ended
                 the hold, and released`
	}
	return fmt.Sprintf(`Exit status:
  the command's  its exit status, or 128+N when signal N killed it`+hold+`
  %-3[1]d            bad usage: a bad flag or node, no key, no command (run)
  %-3[2]d            too few nodes answered for a quorum: they are down or
                 unreachable (EX_UNAVAILABLE)
  %-3[3]d            the lock is held elsewhere: -no-wait, or -wait ran out
                 (EX_TEMPFAIL); -conflict-exit-code (-E) changes it
  %-3[4]d            the lock was lost, or about to end without renewals, or
                 the command's supervisor was killed: the command was
                 stopped, whatever its own status; lock without a command
                 exits with it when the lock was lost
  %-3[5]d            the command could not be started
  %-3[6]d            the command was not found
  128+N          signal N ended the wait for the lock
Whenever the status is redlock's own rather than the command's, redlock
says why on stderr. Scripts can tell an outage (%[2]d) from a lock that
someone else holds (%[3]d): the first needs attention, the second only a
later try.
`, exitUsage, exitUnavailable, exitNotAcquired, exitLockLost, exitCannotRun, exitNotFound)
}

func runHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock run --nodes HOST:PORT,... --key KEY [flags] [--] command [args...]
       redlock run --nodes HOST:PORT,... --key KEY [flags] -c 'command line'

Run is a distributed flock(1). It acquires the lock KEY on a quorum of the
nodes, runs the command, keeps the lock alive while the command runs, and
releases it when the command exits.

  - It waits for the lock up to -wait, by default as long as it takes, or
    not at all with -no-wait or -wait 0. flock(1)'s -w, -n, -E, -c, -x
    and -s mean what they mean there; its -u, -o and -F have no
    counterpart.
  - -shared (-s) takes a read lock: runs with -shared hold the key
    together, and exclude an exclusive run, which waits for them all to
    end; while it waits, new -shared runs wait behind it. -permits k takes
    one of k permits of a counting semaphore: up to k runs at once.
  - It extends the lock every third of -ttl. A killed redlock extends
    nothing: the lock expires within -ttl. On Linux the command runs under
    a small supervisor process (rl-supervise) that outlives redlock: when
    redlock dies (SIGKILL, the OOM killer, a kill of its process group),
    the supervisor kills the command and everything it started at once,
    even what left its process group. When the supervisor alone is
    killed, redlock does the same and exits %[1]d. Only a kill of both at
    once, by a signal to each, leaves what the command started running.
    Elsewhere, and on Linux without /proc, a killed redlock leaves the
    command running.
  - It passes SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 on to
    the command, with a SIGCONT after SIGTERM and SIGHUP so that a stopped
    command can act on them. Any of the first four ends a wait for the lock.
  - When renewals have not extended the lock -grace before its validity
    ends (or -max-hold is that close), it sends the command SIGTERM, and
    SIGKILL to its whole tree just before the validity ends: it is gone
    before another client can take the lock. -grace is a fifth of
    -ttl (or of a shorter -max-hold) by default. If the lock is lost
    before that (a quorum of nodes lost the key), it sends SIGTERM at
    once, and SIGKILL -grace later. Either way it exits %[1]d, and kills
    what is left of the command's tree.
  - The command runs in a process group of its own, and every signal goes
    to the whole group, so that what a script started stops with it.
    -foreground keeps the command in redlock's group instead, so that it
    can read from the terminal; only the command is then signalled. On
    Linux, -foreground is the default when redlock runs in the foreground
    of a terminal (an interactive shell); -foreground=false overrides it.
    The terminal's Ctrl-C then reaches the command directly, and run
    passes no SIGINT or SIGQUIT on: a kill -INT of redlock's pid alone
    does not reach the command (signal the process group, or use SIGTERM).
  - Do not suspend redlock (Ctrl-Z, SIGSTOP): nothing extends the lock
    meanwhile, and it is lost.
  - The lock carries a label, host:pid of redlock by default, that redlock
    status shows; -label changes it.

The command's environment has:
  REDLOCK_KEY    the key
  REDLOCK_TOKEN  the value that marks this acquisition on the nodes, as
                 redlock status -json shows it: a random id, then a space
                 and the label when there is one
  REDLOCK_FENCE  with -fencing: the fencing token, a number larger than
                 that of every earlier holder of the key; pass it to the
                 store the lock protects, so that it can refuse the writes
                 of a holder that lost the lock without knowing it

Redlock lock holds a lock without a command.

%[2]s
%[3]s
Flags:
`, exitLockLost, runExitHelp("run"), nodesHelp)
	cfg := defaultRunConfig("run")
	runFlags(&cfg, w).PrintDefaults()
}

// validate checks the flags and parses the nodes.
func (c *runConfig) validate() ([]nodeSpec, error) {
	switch {
	case c.key == "":
		return nil, errors.New("-key is required")
	case c.shell != "" && len(c.argv) > 0:
		return nil, fmt.Errorf("-command (-c) and a command after the flags exclude each other, got %q", c.argv[0])
	case c.name == "run" && c.shell == "" && len(c.argv) == 0:
		return nil, errors.New("no command given: redlock run [flags] -- command [args...]; redlock lock holds a lock without one")
	case c.ttl <= 0:
		return nil, fmt.Errorf("-ttl must be positive, got %v", c.ttl)
	case c.noWait && c.wait.d > 0:
		return nil, errors.New("-wait and -no-wait exclude each other")
	case c.conflictCode < 0 || c.conflictCode > 255:
		return nil, fmt.Errorf("-conflict-exit-code must be in [0, 255], got %d", c.conflictCode)
	case c.grace < 0:
		return nil, fmt.Errorf("-grace must not be negative, got %v", c.grace)
	case c.maxHold < 0:
		return nil, fmt.Errorf("-max-hold must not be negative, got %v", c.maxHold)
	case c.nodeTimeout < 0:
		return nil, fmt.Errorf("-node-timeout must not be negative, got %v", c.nodeTimeout)
	case c.permitsSet && c.permits < 1:
		return nil, fmt.Errorf("-permits must be at least 1, got %d", c.permits)
	case c.shared && c.exclusive:
		return nil, errors.New("-shared and -exclusive exclude each other")
	case c.exclusive && c.permits > 0:
		return nil, errors.New("-exclusive and -permits exclude each other: a permit is neither shared nor exclusive")
	case c.shared && c.permits > 0:
		return nil, errors.New("-shared and -permits exclude each other: a permit is neither shared nor exclusive")
	case (c.shared || c.permits > 0) && c.fencing:
		return nil, fmt.Errorf("-fencing works only with an exclusive lock, not with %s", c.mode())
	case (c.shared || c.permits > 0) && c.owner != "":
		return nil, fmt.Errorf("-owner works only with an exclusive lock, not with %s", c.mode())
	}
	if c.shell != "" {
		sh := os.Getenv("SHELL")
		if sh == "" {
			sh = "/bin/sh"
		}
		c.argv = []string{sh, "-c", c.shell}
	}
	if err := c.checkGrace(); err != nil {
		return nil, err
	}
	if !c.labelSet {
		c.label = defaultLabel()
	}
	return parseNodes(c.nodes)
}

// checkGrace sets -grace when it was not given, and checks it. The command
// gets SIGTERM -grace before the lock's validity ends unless a renewal has
// moved it by then: a renewal starts a third of -ttl in and may take up to
// the node timeout to settle, and -grace must leave it that time, or a
// healthy run is stopped. With -max-hold the lock's time is the shorter.
func (c *runConfig) checkGrace() error {
	span, of := c.ttl, "-ttl"
	if c.maxHold > 0 && c.maxHold < c.ttl {
		span, of = c.maxHold, "-max-hold"
	}
	most := min(span/2, 2*c.ttl/3-2*c.effectiveNodeTimeout())
	if most <= 0 {
		return fmt.Errorf("-node-timeout %v leaves renewals no time within -ttl %v: give a -ttl at least 3 times two -node-timeouts", c.effectiveNodeTimeout(), c.ttl)
	}
	if c.grace == 0 {
		c.grace = min(span/5, most)
		return nil
	}
	if c.grace > most {
		return fmt.Errorf("-grace %v is too long for %s %v: when renewals fail the command gets SIGTERM -grace before the lock ends, and a renewal needs time to land first; at most %v here", c.grace, of, span, most)
	}
	return nil
}

// effectiveNodeTimeout is -node-timeout, or when it is 0 the one derived
// from -ttl.
func (c *runConfig) effectiveNodeTimeout() time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return min(max(c.ttl/10, 2*time.Millisecond), maxNodeTimeout)
}

// defaultLabel is the label of a lock without -label: host:pid, so that
// redlock status can say who holds a lock.
func defaultLabel() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	l := host + ":" + strconv.Itoa(os.Getpid())
	if len(l) > redlock.MaxLabelLen {
		l = l[len(l)-redlock.MaxLabelLen:]
	}
	return l
}

// mode names what the run takes, for messages: "-shared", "-permits k",
// or "an exclusive lock".
func (c *runConfig) mode() string {
	switch {
	case c.shared:
		return "-shared"
	case c.permits > 0:
		return fmt.Sprintf("-permits %d", c.permits)
	}
	return "an exclusive lock"
}

// tryOnce reports whether the lock is tried once rather than waited for.
func (c *runConfig) tryOnce() bool {
	return c.noWait || (c.wait.set && c.wait.d == 0)
}

// options returns the Client's options. The retry delay is longer than the
// library's default: a release wakes the waiters at once on pub/sub, so the
// jittered retry only matters when a holder died and its key expires, and
// a tool that may wait for minutes need not poll every node 10 times a
// second for that.
func (c *runConfig) options() []redlock.Option {
	nt := c.effectiveNodeTimeout()
	return []redlock.Option{
		redlock.WithTTL(c.ttl),
		redlock.WithAutoExtend(true),
		redlock.WithKeyPrefix(c.prefix),
		redlock.WithMaxHold(c.maxHold),
		redlock.WithNodeTimeout(nt),
		redlock.WithRetryDelay(50*time.Millisecond, 500*time.Millisecond),
		redlock.WithFencing(c.fencing),
		redlock.WithOwner(c.owner),
		redlock.WithLabel(c.label),
		redlock.WithNodeGuard(c.nodeGuard),
	}
}
