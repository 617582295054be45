package main

import (
	"context"
	"fmt"
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
		r.say("lock %q lost before the command started: %s; exiting %d", r.cfg.key, lossReason(l.Err()), exitLockLost)
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
	if ch.note != "" {
		r.say("warning: %s", ch.note)
	}
	r.verbose("started pid %d: %s", ch.pid(), strings.Join(r.cfg.argv, " "))

	type result struct {
		ws  waitStatus
		err error
	}
	exited := make(chan result, 1)
	go func() {
		ws, err := ch.wait()
		exited <- result{ws, err}
	}()

	// The command is stopped -grace before the lock's validity ends when
	// renewals have not extended it by then, so that the grace ends by
	// Until: past Until another client may hold the lock.
	began := time.Now()
	term := time.NewTimer(time.Until(l.Until().Add(-r.cfg.grace)))
	defer term.Stop()
	var kill *time.Timer
	defer func() {
		if kill != nil {
			kill.Stop()
		}
	}()
	var (
		lost      error            // why the lock was lost, once it was
		stopped   string           // why run stopped the command, once it did
		lockDone  = l.Done()       // nil once lost
		ctxDone   = ctx.Done()     // nil once handled
		termAt    = term.C         // nil once the command is being stopped
		killAt    <-chan time.Time // fires when the command's time is up
		deadline  time.Time        // when killAt fires
		stopUntil time.Time        // the end of validity that SIGTERM was sent for
		killed    bool             // SIGKILL was sent
		res       result
	)
	// stop sends SIGTERM and arms SIGKILL for the deadline.
	stop := func(why string, by time.Time) {
		stopped, termAt = why, nil
		r.signal(ch, sigTERM)
		deadline = by
		kill = time.NewTimer(time.Until(by))
		killAt = kill.C
	}
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
		case <-termAt:
			until := l.Until()
			left := time.Until(until)
			if left > r.cfg.grace {
				term.Reset(left - r.cfg.grace) // extended meanwhile
				continue
			}
			why, reason := "renewals have not extended it", "renewals had not extended the lock"
			if r.cfg.maxHold > 0 && time.Since(began)+left >= r.cfg.maxHold-r.cfg.ttl/3 {
				why = fmt.Sprintf("-max-hold %v ends it", r.cfg.maxHold)
				reason = fmt.Sprintf("-max-hold %v ended the lock", r.cfg.maxHold)
			}
			r.say("lock %q ends in %v: %s; sending SIGTERM to the command, and SIGKILL when the lock ends",
				r.cfg.key, left.Round(time.Millisecond), why)
			// SIGKILL a little before Until: the kill and the reaping of
			// the tree take time, and Until is where another client may
			// begin.
			stop(reason, until.Add(-min(r.cfg.grace/4, 50*time.Millisecond)))
			stopUntil = until
		case <-lockDone:
			lockDone = nil
			lost = l.Err()
			if stopped == "" {
				r.say("lock %q lost: %s; sending SIGTERM to the command, and SIGKILL in %v", r.cfg.key, lossReason(lost), r.cfg.grace)
				stop("the lock was lost", time.Now().Add(r.cfg.grace))
			} else {
				r.say("lock %q lost: %s", r.cfg.key, lossReason(lost))
			}
		case <-killAt:
			killAt, killed = nil, true
			r.say("the command did not exit by %s; sending SIGKILL", r.graceEnd(l, stopped, stopUntil))
			if err := ch.killAll(); err != nil {
				r.say("sending SIGKILL to the command: %v", err)
			}
		}
	}
	if res.err != nil {
		// The supervisor was killed: the command and its tree are gone,
		// and there is no status to pass on. The lock may be held still,
		// but the command was stopped.
		ch.finish(false)
		r.release(l)
		r.say("%v; exiting %d", res.err, exitLockLost)
		return exitLockLost
	}
	code := exitStatus(res.ws)
	r.verbose("the command exited: %s", describeExit(res.ws))

	if lost == nil {
		// A loss that coincides with the exit counts: the command may have
		// run its last moments without the lock.
		select {
		case <-l.Done():
			lost = l.Err()
			r.say("lock %q lost as the command exited: %s", r.cfg.key, lossReason(lost))
			if stopped == "" {
				r.signal(ch, sigTERM) // what the command left in its group
				deadline = time.Now().Add(r.cfg.grace)
			}
		default:
		}
	}
	if lost != nil || stopped != "" {
		if !killed {
			r.stopGroup(ch, deadline)
		}
		// Whatever is left of the command's tree, even outside its group,
		// goes too.
		ch.finish(false)
		// Clear what is left on the nodes that still hold the token.
		r.release(l)
		switch {
		case lost != nil:
			r.say("exiting %d: the lock was lost while the command ran (the command's own status was %d)", exitLockLost, code)
		case l.Err() == nil && !stopUntil.IsZero() && l.Until().After(stopUntil):
			r.say("exiting %d: the command was stopped because %s in time; they did later, and it was released (the command's own status was %d)", exitLockLost, stopped, code)
		default:
			r.say("exiting %d: the command was stopped because %s (its own status was %d)", exitLockLost, stopped, code)
		}
		return exitLockLost
	}
	ch.finish(true)
	r.release(l)
	return code
}

// graceEnd says when the command's time ran out, for a message.
func (r *runner) graceEnd(l *redlock.Lock, stopped string, until time.Time) string {
	switch {
	case stopped == "the lock was lost":
		return fmt.Sprintf("the end of -grace %v after SIGTERM", r.cfg.grace)
	case l.Err() == nil && l.Until().After(until):
		return "the deadline SIGTERM gave it (renewals have extended the lock since)"
	}
	return "the end of the lock's validity"
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
	// The deadline has a timer of its own: a tick may come after it, and
	// past the deadline another client may hold the lock.
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for ch.groupAlive() {
		select {
		case <-end.C:
			r.say("sending SIGKILL to what is left of the command's process group")
			if err := ch.killAll(); err != nil {
				r.say("sending SIGKILL to the command: %v", err)
			}
			return
		case <-tick.C:
		}
	}
}
