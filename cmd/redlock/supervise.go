package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redlockgo/redlock"
)

// supervise runs the command while l is held and returns run's exit status.
func (r *runner) supervise(ctx context.Context, l *redlock.Lock, sigs <-chan os.Signal) int {
	select {
	case <-l.Done():
		// Lost between the acquisition and now: do not start.
		r.say("lock %q lost before the command started: %v; exiting %d", r.cfg.key, l.Err(), exitLockLost)
		r.release(l)
		return exitLockLost
	default:
	}
	env := []string{"REDLOCK_KEY=" + r.cfg.key, "REDLOCK_TOKEN=" + l.Token()}
	if r.cfg.fencing {
		env = append(env, "REDLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	}
	ch, err := startChild(r.cfg.argv, env, r.cfg.foreground)
	if err != nil {
		r.release(l)
		code := startStatus(err)
		r.say("%v; exiting %d", err, code)
		return code
	}
	r.verbose("started pid %d: %s", ch.pid(), strings.Join(r.cfg.argv, " "))

	type result struct {
		ps  *os.ProcessState
		err error
	}
	exited := make(chan result, 1)
	go func() {
		ps, err := ch.wait()
		exited <- result{ps, err}
	}()

	var (
		lost     error            // why the lock was lost, once it was
		lockDone = l.Done()       // nil once lost
		ctxDone  = ctx.Done()     // nil once handled
		killAt   <-chan time.Time // fires -grace after the loss
		deadline time.Time        // when killAt fires
		killed   bool             // SIGKILL was sent
		res      result
	)
loop:
	for {
		select {
		case res = <-exited:
			break loop
		case s := <-sigs:
			if r.terminal && terminalSignal(s) {
				r.verbose("%s: the terminal sent it to the command too", signalName(s))
				continue
			}
			r.verbose("passing %s on to the command", signalName(s))
			r.signal(ch, s)
		case <-ctxDone:
			ctxDone = nil
			r.signal(ch, sigTERM)
		case <-lockDone:
			lockDone = nil
			lost = l.Err()
			r.say("lock %q lost: %v; sending SIGTERM to the command, and SIGKILL in %v", r.cfg.key, lost, r.cfg.grace)
			r.signal(ch, sigTERM)
			deadline = time.Now().Add(r.cfg.grace)
			t := time.NewTimer(r.cfg.grace)
			defer t.Stop()
			killAt = t.C
		case <-killAt:
			killAt, killed = nil, true
			r.say("the command did not exit within -grace %v of SIGTERM; sending SIGKILL", r.cfg.grace)
			r.signal(ch, sigKILL)
		}
	}
	if res.ps == nil {
		// Wait failed without the command having been reaped; there is
		// no status to pass on.
		r.say("waiting for the command: %v", res.err)
		r.release(l)
		return exitFail
	}
	code := exitStatus(res.ps)
	r.verbose("the command exited: %v", res.ps)

	if lost == nil {
		// A loss that coincides with the exit counts: the command may have
		// run its last moments without the lock.
		select {
		case <-l.Done():
			lost = l.Err()
			r.say("lock %q lost as the command exited: %v", r.cfg.key, lost)
			r.signal(ch, sigTERM) // what the command left in its group
			deadline = time.Now().Add(r.cfg.grace)
		default:
		}
	}
	if lost != nil {
		if !killed {
			r.stopGroup(ch, deadline)
		}
		// Clear what is left on the nodes that still hold the token.
		r.release(l)
		r.say("exiting %d: the lock was lost while the command ran (the command's own status was %d)", exitLockLost, code)
		return exitLockLost
	}
	r.release(l)
	return code
}

// signal sends sig to the command, and complains if that fails.
func (r *runner) signal(ch *child, sig os.Signal) {
	if err := ch.signal(sig); err != nil {
		r.say("sending %s to the command: %v", signalName(sig), err)
	}
}

// stopGroup waits, after a loss, until the rest of the command's process
// group has exited too, and kills what is left at the deadline. Programs
// that a script started in the background must not go on without the lock
// either.
func (r *runner) stopGroup(ch *child, deadline time.Time) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ch.groupAlive() {
		if !time.Now().Before(deadline) {
			r.say("sending SIGKILL to what is left of the command's process group")
			r.signal(ch, sigKILL)
			return
		}
		<-tick.C
	}
}
