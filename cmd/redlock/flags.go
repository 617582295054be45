package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationsHelp is the one line of each help that says how every duration
// flag is written.
const durationsHelp = "Durations take seconds (5, 0.5) or a unit (90s, 2m).\n"

// durationFlag is the value of every duration flag: a number of seconds,
// as flock(1) -w takes them ("5", "0.5"), or a Go duration ("90s", "2m").
// The flag package's own duration takes only the second, so that -w 5 worked
// but -ttl 5 did not. A negative value is left to the command's validation,
// which says what the flag needs.
type durationFlag time.Duration

// durationVar defines a duration flag that fills p. Its usage should name
// the value `duration`, in back quotes, for the help's placeholder.
func durationVar(fs *flag.FlagSet, p *time.Duration, name, usage string) {
	fs.Var((*durationFlag)(p), name, usage)
}

// Set implements flag.Value.
func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

// String implements flag.Value. The flag package calls it on a zero value
// to tell a default worth showing: 0s is not.
func (d *durationFlag) String() string {
	if d == nil {
		return time.Duration(0).String()
	}
	return time.Duration(*d).String()
}

// Get implements flag.Getter.
func (d *durationFlag) Get() any { return time.Duration(*d) }

// waitFlag is the value of -wait, -timeout and -w. Not given, run waits as
// long as it takes; 0 tries once, as flock(1) -w 0 does; otherwise it waits
// up to d.
type waitFlag struct {
	d   time.Duration
	set bool
}

// Set accepts what durationFlag does, but for a negative value.
func (w *waitFlag) Set(s string) error {
	d, err := parseSeconds(s)
	if err != nil {
		return err
	}
	w.d, w.set = d, true
	return nil
}

// String is "" until the flag is set, so that the help shows no default.
func (w *waitFlag) String() string {
	if w == nil || !w.set {
		return ""
	}
	return w.d.String()
}

// parseSeconds parses a number of seconds or a Go duration that is not
// negative.
func parseSeconds(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", strings.TrimSpace(s))
	}
	return d, nil
}

// parseDuration parses a number of seconds or a Go duration.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, errors.New("want seconds (5, 0.5) or a duration (90s, 2m)")
		}
		return d, nil
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f*float64(time.Second)) > math.MaxInt64 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// newFlagSet returns the flag set of the command cmd. A flag error goes to
// stderr as one line that names the help to read, not as the whole help,
// which buries the error; -h and -help print help on stdout. hints adds to
// the error about a flag that cmd does not have, by the flag's name: a flag
// that means something else here, or that another command has.
//
// A help function may build a flag set with newFlagSet only to print its
// defaults, to any writer: until the set is parsed, what the flag package
// writes goes through unchanged.
func newFlagSet(cmd string, help func(io.Writer), stdout, stderr io.Writer, hints map[string]string) *flag.FlagSet {
	fs := flag.NewFlagSet("redlock "+cmd, flag.ContinueOnError)
	out := &flagOutput{fs: fs, cmd: cmd, w: stderr, hints: hints}
	fs.SetOutput(out)
	fs.Usage = func() {
		// The flag package calls Usage after it has written an error, and
		// for -h; only -h wants the help.
		if !out.failed {
			help(stdout)
		}
	}
	return fs
}

// flagOutput is a flag set's output. Once the set is being parsed, all the
// flag package writes is an error message, one per Write.
type flagOutput struct {
	fs     *flag.FlagSet
	cmd    string
	w      io.Writer
	hints  map[string]string
	failed bool // an error was written
}

func (o *flagOutput) Write(p []byte) (int, error) {
	if !o.fs.Parsed() {
		return o.w.Write(p)
	}
	o.failed = true
	msg := strings.TrimSpace(string(p))
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok && o.hints[name] != "" {
		msg += ": " + o.hints[name]
	}
	if _, err := fmt.Fprintf(o.w, "redlock %s: %s (see 'redlock help %s')\n", o.cmd, msg, o.cmd); err != nil {
		return 0, err
	}
	return len(p), nil
}

// usageError says on stderr, in one line, what is wrong with the usage of
// cmd and where its help is, and returns exitUsage.
func usageError(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "redlock %s: %v (see 'redlock help %s')\n", cmd, err, cmd)
	return exitUsage
}

// nodeTimeoutHint is what status and check say of -timeout, which they once
// took for the per-node timeout.
const nodeTimeoutHint = "-timeout is the wait of run and lock; the per-node timeout is -node-timeout"
