package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runOrLock(ctx, "run", args, stdout, stderr)
}

func lockCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runOrLock(ctx, "lock", args, stdout, stderr)
}

// runOrLock is run, and lock, which is run with the command optional.
func runOrLock(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	if !runSupported {
		fmt.Fprintf(stderr, "redlock %s: not supported on this platform\n", name)
		return exitUsage
	}
	cfg := defaultRunConfig(name)
	fs := runFlags(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	cfg.argv = fs.Args()
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	cfg.labelSet = explicit["label"]
	cfg.permitsSet = explicit["permits"]
	specs, err := cfg.validate()
	if err != nil {
		fmt.Fprintf(stderr, "redlock %s: %v\n(redlock help %s prints the flags and exit statuses)\n", name, err, name)
		return exitUsage
	}
	r := &runner{cfg: cfg, specs: specs, stdout: stdout, stderr: stderr}
	if w := fewNodesWarning(len(specs)); w != "" && !cfg.quiet {
		r.say("%s", w)
	}
	// In a group of its own, a command that reads the terminal would be
	// stopped by SIGTTIN, and run would wait for it forever. So on an
	// interactive terminal the command stays in run's group, unless
	// -foreground=false says otherwise.
	if len(cfg.argv) > 0 && foregroundTTY() {
		if !explicit["foreground"] {
			r.cfg.foreground = true
		}
		r.terminal = r.cfg.foreground
	}
	return r.run(ctx)
}

// runner is one run of the command under the lock.
type runner struct {
	cfg    runConfig
	specs  []nodeSpec
	stdout io.Writer // lock without a command prints the lock here
	stderr io.Writer
	// sayMu makes each message one write: the wait's watcher and the
	// Observer speak beside the run.
	sayMu sync.Mutex
	// progress watches the acquisition attempts, to report an outage.
	progress *progress
	// terminal is set when the command shares run's process group in the
	// foreground of a terminal: the terminal's SIGINT and SIGQUIT reach the
	// command directly, and are not passed on a second time.
	terminal bool
}

func (r *runner) say(format string, args ...any) {
	msg := fmt.Sprintf("redlock "+r.cfg.name+": "+format+"\n", args...)
	r.sayMu.Lock()
	defer r.sayMu.Unlock()
	_, _ = io.WriteString(r.stderr, msg)
}

func (r *runner) verbose(format string, args ...any) {
	if r.cfg.verbose {
		r.say(format, args...)
	}
}

func (r *runner) run(ctx context.Context) int {
	// Catch the signals before the first request: one that comes while
	// run waits for the lock ends the wait, and one that comes while the
	// command runs is passed on.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	rcs := dial(r.specs, r.cfg.effectiveNodeTimeout())
	defer closeAll(rcs)
	conns := make([]redis.UniversalClient, len(rcs))
	for i, rc := range rcs {
		conns[i] = rc
	}
	r.progress = newProgress(&r.cfg, r.say)
	client, err := redlock.New(conns, append(r.cfg.options(), r.progress.options()...)...)
	if err != nil {
		// Bad options, or the same server given twice.
		r.say("%s", bare(err))
		return exitUsage
	}
	// Deferred after closeAll, so it runs first: the Client's requests in
	// flight need the go-redis clients.
	defer client.Close()

	l, code := r.acquire(ctx, client, sigs)
	if l == nil {
		return code
	}
	if len(r.cfg.argv) == 0 {
		return r.hold(ctx, l, sigs)
	}
	return r.supervise(ctx, l, sigs)
}

// acquire acquires the lock. Without it, it returns run's exit status.
func (r *runner) acquire(ctx context.Context, c *redlock.Client, sigs <-chan os.Signal) (*redlock.Lock, int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !r.cfg.tryOnce() && r.cfg.wait.d > 0 {
		var cancelWait context.CancelFunc
		actx, cancelWait = context.WithTimeout(actx, r.cfg.wait.d)
		defer cancelWait()
	}

	// A signal ends the wait. The watcher is stopped before the command
	// starts, and says which signal it got. It says so at once: the
	// attempt in flight may take a while to end on hung nodes.
	stop := make(chan struct{})
	interrupted := make(chan os.Signal, 1)
	go func() {
		defer close(interrupted)
		for {
			select {
			case s := <-sigs:
				if endsWait(s) {
					cancel()
					outage := ""
					if r.progress.nodesDown() {
						outage = " (" + r.progress.unavailable() + ")"
					}
					r.say("%s while waiting for %q%s; exiting %d", signalName(s), r.cfg.key, outage, signalStatus(s))
					interrupted <- s
					return
				}
			case <-stop:
				return
			}
		}
	}()

	switch {
	case r.cfg.tryOnce():
		r.verbose("trying to acquire %q once on %d nodes", r.cfg.key, len(r.specs))
	case r.cfg.wait.d > 0:
		r.verbose("acquiring %q on %d nodes, waiting up to %v", r.cfg.key, len(r.specs), r.cfg.wait.d)
	default:
		r.verbose("acquiring %q on %d nodes, waiting as long as it takes", r.cfg.key, len(r.specs))
	}
	start := time.Now()
	watched := make(chan struct{})
	if r.cfg.tryOnce() {
		close(watched)
	} else {
		go func() {
			defer close(watched)
			r.progress.watch(start, stop, actx.Done())
		}()
	}
	l, err := r.take(actx, c)
	close(stop)
	<-watched
	if sig, ok := <-interrupted; ok {
		if l != nil {
			r.release(l)
		}
		return nil, signalStatus(sig)
	}
	if err != nil {
		if errors.Is(err, redlock.ErrInvalidOption) || errors.Is(err, redlock.ErrPermitsMismatch) {
			// Waiting would not help: the key's holders use other permits.
			r.say("%s; exiting %d", bare(err), exitUsage)
			return nil, exitUsage
		}
		var why string
		switch {
		case r.cfg.noWait:
			why = "-no-wait: "
		case r.cfg.tryOnce():
			why = "-wait 0: "
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			why = fmt.Sprintf("-wait %v ran out: ", r.cfg.wait.d)
		}
		if errors.Is(err, redlock.ErrUnavailable) {
			r.say("%s%s; exiting %d", why, r.describeOutage(err), exitUnavailable)
			return nil, exitUnavailable
		}
		r.say("%s%s; exiting %d", why, bare(err), r.cfg.conflictCode)
		return nil, r.cfg.conflictCode
	}
	st := l.Stats()
	took := time.Since(start).Round(time.Millisecond)
	if r.progress.inOutage() {
		r.say("acquired %q after %v, once the nodes answered again", r.cfg.key, took)
	}
	if r.cfg.verbose {
		var nodes string
		if d := describeNodes(notes(st.Nodes, "not needed: quorum already decided")); d != "" {
			nodes = "; " + d
		}
		r.say("acquired %q after %v: %d of %d nodes (quorum %d), validity %v, token %s%s",
			r.cfg.key, took, st.Yes, len(st.Nodes), st.Quorum, st.Validity.Round(time.Millisecond), l.Token(), nodes)
	}
	return l, 0
}

// describeOutage says which nodes failed, and why, for err, an
// acquisition's ErrUnavailable: by what the attempts found, since a round
// that a quorum of failures decided did not wait for the other nodes.
func (r *runner) describeOutage(err error) string {
	if d := r.progress.unavailable(); d != "" {
		return d
	}
	return bare(err)
}

// take makes the acquisition: a lock, a read lock with -shared, or a permit
// with -permits; once, or waiting as long as ctx allows.
func (r *runner) take(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) {
	once, key := r.cfg.tryOnce(), r.cfg.key
	switch {
	case r.cfg.shared && once:
		return c.TryRLock(ctx, key)
	case r.cfg.shared:
		return c.RLock(ctx, key)
	case r.cfg.permits > 0:
		s, err := c.Semaphore(key, r.cfg.permits)
		if err != nil {
			return nil, err
		}
		if once {
			return s.TryAcquire(ctx)
		}
		return s.Acquire(ctx)
	case once:
		return c.TryLock(ctx, key)
	}
	return c.Lock(ctx, key)
}

// release unlocks l. The command has exited, so a failure changes nothing
// but the time others wait: the keys that are left expire within the TTL.
func (r *runner) release(l *redlock.Lock) {
	wasLost := l.Err() != nil
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	switch err := l.Unlock(ctx); {
	case wasLost:
		// Already reported; this only cleared what was left on the nodes.
	case err != nil:
		r.say("warning: releasing %q: %s; what is left on the nodes expires within -ttl %v", r.cfg.key, bare(err), r.cfg.ttl)
	default:
		r.verbose("released %q", r.cfg.key)
	}
}
