// Command redlock is the command-line companion of the redlock library.
//
// Usage:
//
//	redlock <command> [flags]
//
// The commands are:
//
//	run     run a command while holding a lock: a distributed flock(1)
//	lock    hold a lock until SIGINT or SIGTERM, as etcdctl lock does, or
//	        run a command under it, as run does
//	release release a hold that lock took, given its key and token
//	status  show, for each node, whether a key is held, by which token,
//	        label and owner, its layout and remaining TTL, and whether a
//	        quorum holds it
//	check   check the nodes against the algorithm's assumptions: independent
//	        reachable masters, eviction, persistence, clocks
//	demo    start 5 in-process Redis nodes, make several clients contend for
//	        one lock while two of the nodes are killed, and check from the
//	        recorded history that no two holders ever overlapped
//	version print the version and the commit it was built from
//	help    print this help, or with a command name, that command's flags
//
// Run "redlock help <command>" for a command's flags, or "redlock
// <command> -h". Flags take one dash or two: -key and --key are the same.
// Every duration flag takes a number of seconds (5, 0.5) or a duration with
// a unit (90s, 2m). A bad flag is reported in one line that names the help
// to read.
//
// Nodes are given as host:port, or as redis://, rediss:// (TLS) or unix://
// URLs with an optional password and database, in --nodes or in
// REDLOCK_NODES. A malformed address (an empty or non-numeric port, a port
// out of range, a host with a colon outside brackets) is a usage error.
// Redlock wants at least 3 independent masters, usually 5; with fewer, run
// and lock warn on stderr and check reports it. For example, to run a
// backup on one machine of many at a time:
//
//	export REDLOCK_NODES=r1:6379,r2:6379,r3:6379,r4:6379,r5:6379
//	redlock run --key nightly-backup --ttl 30s -w 2m -- ./backup.sh
//	redlock status --key nightly-backup
//
// Run speaks flock(1)'s flags where they fit: -w/--timeout/--wait (0
// tries once), -n/--nonblock, -E/--conflict-exit-code, -c and -x. In run
// and lock, --timeout is that wait, as in flock(1); the bound on each
// request to a node is --node-timeout, in every command that talks to the
// nodes. --node-guard keeps out the vote of a node that restarted less
// than the TTL ago or whose clock jumped (the library's WithNodeGuard);
// check --node-guard judges the nodes as for locks taken with it. The
// command that run runs finds the key in REDLOCK_KEY, the acquisition's
// token in REDLOCK_TOKEN, and with --fencing the fencing token in
// REDLOCK_FENCE. --owner takes a reentrant lock for an owner id, and
// --label describes the holder for status (host:pid by default).
//
// The exit status is 0 on success, 1 when the command ran and failed (for
// demo: an overlap, or no acquisition at all), and 2 on a usage error, such
// as an unknown command, a bad flag or a bad node address. Everywhere, 69
// (EX_UNAVAILABLE) means that too few nodes answered for a quorum: an
// outage, not a lock held elsewhere.
//
// The exit status of run, and of lock with a command, is the command's, or
// 128+N when signal N killed the command. Their own statuses are:
//
//	2      bad usage: a bad flag or node address, no key, no command (run)
//	69     too few nodes answered for a quorum (EX_UNAVAILABLE)
//	75     the lock is held elsewhere: --no-wait, or --wait ran out
//	       (EX_TEMPFAIL); --conflict-exit-code changes it
//	76     the command was stopped: the lock was lost, or renewals had
//	       not extended it --grace before its end (SIGTERM then, SIGKILL
//	       when it ends), or the command's supervisor was killed
//	126    the command could not be started
//	127    the command was not found
//	128+N  signal N ended the wait for the lock
//
// Lock without a command exits 0 once a signal has ended the hold and the
// lock is released, and 76 when the lock was lost. Status exits 0, or 69
// when fewer than a quorum of nodes answered. Check exits 0 when nothing
// is worse than info, 1 on warnings, 3 on critical findings, and 69 when
// fewer than a quorum of nodes could be checked.
//
// Whenever the status is redlock's own rather than the command's, redlock
// says why on stderr.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2

	// The statuses of run that are not the command's. 75 is EX_TEMPFAIL
	// from sysexits.h, "try again later"; 126 and 127 are the shell's, as
	// env(1) and timeout(1) use them.
	exitNotAcquired = 75
	exitLockLost    = 76
	exitCannotRun   = 126
	exitNotFound    = 127
	exitSignalBase  = 128

	// exitUnavailable is EX_UNAVAILABLE from sysexits.h: too few nodes
	// answered for a quorum. Any command that talks to the nodes may exit
	// with it. A cron job must not read an outage as "held elsewhere".
	exitUnavailable = 69

	// The statuses of check that are not 0 or 69. Critical is 3, not 2,
	// which is a usage error everywhere.
	exitCheckWarning  = 1
	exitCheckCritical = 3
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string // one line, for the command list
	// run runs the command with the arguments that follow its name and
	// returns the exit status. It reports on stdout and complains on stderr.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	// help prints the command's usage and flags.
	help func(w io.Writer)
}

// commands returns the subcommands in the order usage lists them. It is a
// function rather than a package variable because help refers back to it.
func commands() []command {
	return []command{
		{
			name:    "run",
			summary: "run a command while holding a lock: a distributed flock(1)",
			run:     runCommand,
			help:    runHelp,
		},
		{
			name:    "lock",
			summary: "hold a lock until SIGINT or SIGTERM, or run a command under it",
			run:     lockCommand,
			help:    lockHelp,
		},
		{
			name:    "release",
			summary: "release a hold that redlock lock took, by its key and token",
			run:     releaseCommand,
			help:    releaseHelp,
		},
		{
			name:    "status",
			summary: "show, for each node, whether a key is held, by whom, and its TTL",
			run:     statusCommand,
			help:    statusHelp,
		},
		{
			name:    "check",
			summary: "check the nodes against what the algorithm assumes of them",
			run:     checkCommand,
			help:    checkHelp,
		},
		{
			name:    "demo",
			summary: "contend for one lock on 5 in-process Redis nodes while 2 of them are killed",
			run:     demoCommand,
			help:    demoHelp,
		},
		{
			name:    "version",
			summary: "print the version",
			run:     versionCommand,
			help:    versionHelp,
		},
		{
			name:    "help",
			summary: "print this help, or the flags of one command",
			run:     helpCommand,
			help:    func(w io.Writer) { fmt.Fprintln(w, "usage: redlock help [command]") },
		},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	// Each command handles signals its own way: run passes them on to its
	// command, lock without a command releases its lock, demo stops early
	// and still prints its summary.
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args (without the program name) to a command and returns
// the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// usage prints the list of commands.
func usage(w io.Writer) {
	fmt.Fprint(w, "redlock is the command-line companion of the redlock library.\n\n")
	fmt.Fprint(w, "usage: redlock <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-7s  %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"redlock help <command>\" for a command's flags. Flags take one dash or two.\n")
}

func helpCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return exitOK
	case 1:
		c, ok := lookup(args[0])
		if !ok {
			fmt.Fprintf(stderr, "redlock help: unknown command %q\n\n", args[0])
			usage(stderr)
			return exitUsage
		}
		c.help(stdout)
		return exitOK
	}
	fmt.Fprintln(stderr, "usage: redlock help [command]")
	return exitUsage
}
