package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/redlockgo/redlock"
)

func lockHelp(w io.Writer) {
	fmt.Fprintf(w, `usage: redlock lock --nodes HOST:PORT,... --key KEY [flags] [[--] command [args...]]

Lock without a command acquires the lock KEY and holds it, as etcdctl lock
does: it extends the lock every third of -ttl until it gets SIGINT,
SIGTERM, SIGHUP or SIGQUIT, then releases it and exits 0. Once it holds the
lock it prints on stdout, one line each, quoted for sh where needed:

  REDLOCK_KEY=KEY
  REDLOCK_TOKEN=TOKEN     the value that marks the lock on the nodes
  REDLOCK_FENCE=N         with -fencing: the fencing token

If the lock is lost meanwhile (renewals failed until its validity ran out,
a quorum of nodes lost the key, or -max-hold passed), it says why on stderr
and exits %[1]d. A script can hold a lock across several steps:

  redlock lock --key deploy > lock.env &
  holder=$!
  until [ -s lock.env ]; do sleep 0.1; done    # acquired (or exited)
  ...
  kill $holder; wait $holder                    # release; 0 unless lost

With a command, lock is the same as run: see redlock help run. Its flags,
and the exit statuses below, are run's.

%[2]s
%[3]s
Flags:
`, exitLockLost, runExitHelp("lock"), nodesHelp)
	cfg := defaultRunConfig("lock")
	runFlags(&cfg, w).PrintDefaults()
}

// hold holds l, for lock without a command, until a signal ends the hold
// or the lock is lost, and returns the exit status.
func (r *runner) hold(ctx context.Context, l *redlock.Lock, sigs <-chan os.Signal) int {
	select {
	case <-l.Done():
		r.say("lock %q lost before it was announced: %s; exiting %d", r.cfg.key, lossReason(l.Err()), exitLockLost)
		r.release(l)
		return exitLockLost
	default:
	}
	lines := []string{"REDLOCK_KEY=" + shellQuote(r.cfg.key), "REDLOCK_TOKEN=" + shellQuote(l.Token())}
	if r.cfg.fencing {
		lines = append(lines, "REDLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	}
	// One write, so that a reader never sees some of the lines only.
	if _, err := io.WriteString(r.stdout, strings.Join(lines, "\n")+"\n"); err != nil {
		// Whoever waits for the lines cannot know it holds the lock.
		r.say("writing the lock to stdout: %v; releasing %q", err, r.cfg.key)
		r.release(l)
		return exitFail
	}
	r.verbose("holding %q until SIGINT or SIGTERM", r.cfg.key)
	for {
		select {
		case s := <-sigs:
			if !endsWait(s) {
				r.verbose("%s ignored: it does not end the hold", signalName(s))
				continue
			}
			r.verbose("%s: releasing %q", signalName(s), r.cfg.key)
			r.release(l)
			return exitOK
		case <-ctx.Done():
			r.release(l)
			return exitOK
		case <-l.Done():
			r.say("lock %q lost: %s; exiting %d", r.cfg.key, lossReason(l.Err()), exitLockLost)
			// Clear what is left on the nodes that still hold the token.
			r.release(l)
			return exitLockLost
		}
	}
}

// shellQuote quotes s for sh when it holds anything but the characters that
// need no quoting.
func shellQuote(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-.,:/@%+=", c))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
