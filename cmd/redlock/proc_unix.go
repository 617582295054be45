//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
)

// runSupported says whether this platform has what run needs: signals and
// process groups.
const runSupported = true

// forwardedSignals are the signals run passes on to the command. One that
// comes while run is still waiting for the lock ends the wait instead,
// except SIGUSR1 and SIGUSR2, which are then ignored.
var forwardedSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2,
}

// endsWait reports whether sig, received while run waits for the lock, ends
// the wait.
func endsWait(sig os.Signal) bool {
	return sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2
}

// terminalSignal reports whether sig is one that a terminal sends to its
// whole foreground process group.
func terminalSignal(sig os.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGQUIT
}

// child is the command that run runs under the lock. How it is started and
// waited for depends on the platform (startChild): on Linux a supervisor
// process stands between run and the command, so that the command's whole
// tree dies with run.
type child struct {
	// proc is the command's process, for signals: on Linux it holds a
	// pidfd, so that a signal never reaches another process that reused
	// the command's id once it was reaped.
	proc *os.Process
	// group is set when the command leads a process group of its own:
	// signals then go to the whole group, so that the commands a shell
	// script started stop too.
	group bool
	// waitFn waits for the command to exit and returns its status.
	waitFn func() (waitStatus, error)
	// finishFn is called once run is done with the command, after wait.
	finishFn func(keep bool)
	// killFn, when set, kills every process of the command's tree now,
	// even those outside its process group.
	killFn func()
	// note is a warning about how the command runs, for run to print.
	note string
}

// startDirect starts argv as run's own child, with the given extra
// environment, its stdio connected to run's. Unless foreground is set, the
// command gets a process group of its own.
func startDirect(argv, env []string, foreground bool) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !foreground}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{
		proc:  cmd.Process,
		group: !foreground,
		waitFn: func() (waitStatus, error) {
			err := cmd.Wait()
			if cmd.ProcessState == nil {
				return 0, err
			}
			return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
		},
	}, nil
}

// waitStatus is how a command ended.
type waitStatus = syscall.WaitStatus

// signal sends sig to the command, or to its process group. SIGTERM and
// SIGHUP are followed by SIGCONT, as systemd does, so that a stopped
// command can act on them. A command that has already exited is not an
// error.
func (c *child) signal(sig os.Signal) error {
	err := c.send(sig)
	if err == nil && (sig == syscall.SIGTERM || sig == syscall.SIGHUP) {
		err = c.send(syscall.SIGCONT)
	}
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

func (c *child) send(sig os.Signal) error {
	if c.group {
		// The kernel does not reuse a process id while a group still
		// bears it, so this cannot hit another group while the command
		// or one of its group lives.
		return syscall.Kill(-c.proc.Pid, sig.(syscall.Signal))
	}
	return c.proc.Signal(sig)
}

func (c *child) pid() int { return c.proc.Pid }

// wait waits for the command to exit, and returns its status.
func (c *child) wait() (waitStatus, error) { return c.waitFn() }

// finish tells the platform's side that run is done with the command, once
// wait has returned. With keep, what the command left running in the
// background stays, as it would without run. Without it, on Linux, every
// process left of the command's tree is killed, even one that left its
// process group: the lock was lost, or run could not tell how the command
// ended.
func (c *child) finish(keep bool) {
	if c.finishFn != nil {
		c.finishFn(keep)
	}
}

// killAll sends SIGKILL to the command, its group with a group of its own,
// and on Linux to every other process of its tree.
func (c *child) killAll() error {
	if c.killFn != nil {
		c.killFn()
	}
	return c.signal(sigKILL)
}

// groupAlive reports whether a process of the command's group is still
// running, such as one a shell script started in the background. It is
// false without a group of its own.
func (c *child) groupAlive() bool {
	return c.group && groupAlive(c.proc.Pid)
}

// exitStatus is the status run exits with for a command that ended with
// ws: its exit code, or 128 plus the signal that killed it, as shells do.
func exitStatus(ws waitStatus) int {
	if ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// describeExit says how the command ended, for -v.
func describeExit(ws waitStatus) string {
	if ws.Signaled() {
		return "killed by " + signalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// signalStatus is the status for a run that a signal ended: 128 plus its
// number.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitFail
}

// startError is a command that could not be started, with the status that
// says why.
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

// startStatus is the status for a command that could not be started, as
// env(1) and timeout(1) have it: 127 when it was not found, 126 otherwise.
func startStatus(err error) int {
	if se := (*startError)(nil); errors.As(err, &se) {
		return se.code
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)

var signalNames = map[os.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGTERM: "SIGTERM",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGKILL: "SIGKILL",
}

// signalName names sig as kill(1) does, SIGTERM rather than "terminated".
func signalName(sig os.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return sig.String()
}
