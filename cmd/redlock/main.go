// Command redlock is the command-line companion of the redlock library.
//
// Usage:
//
//	redlock <command> [flags]
//
// The commands are:
//
//	demo    start 5 in-process Redis nodes, make several clients contend for
//	        one lock while two of the nodes are killed, and check from the
//	        recorded history that no two holders ever overlapped
//	help    print this help, or with a command name, that command's flags
//
// Run "redlock help <command>" for a command's flags.
//
// The exit status is 0 on success, 1 when the command ran and failed (for
// demo: an overlap, or no acquisition at all), and 2 on a usage error, such as
// an unknown command or a bad flag.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
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
			name:    "demo",
			summary: "contend for one lock on 5 in-process Redis nodes while 2 of them are killed",
			run:     demoCommand,
			help:    demoHelp,
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
	// Ctrl-C ends a command early; demo still stops its goroutines, closes
	// its clients and prints its summary.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
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
		fmt.Fprintf(w, "  %-6s  %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"redlock help <command>\" for a command's flags.\n")
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
