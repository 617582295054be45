//go:build !unix

package main

import (
	"errors"
	"os"
	"strconv"
)

// runSupported says whether this platform has what run needs: signals and
// process groups.
const runSupported = false

var (
	forwardedSignals []os.Signal
	sigTERM          os.Signal = os.Interrupt
	sigKILL          os.Signal = os.Kill
)

func endsWait(os.Signal) bool       { return true }
func foregroundTTY() bool           { return false }
func terminalSignal(os.Signal) bool { return false }

type child struct{ group bool }

type waitStatus = int

func startChild(argv, env []string, foreground bool) (*child, error) {
	return nil, errors.New("run is not supported on this platform")
}

func (c *child) signal(os.Signal) error { return nil }
func (c *child) groupAlive() bool       { return false }
func (c *child) pid() int               { return 0 }
func (c *child) finish(bool)            {}
func (c *child) killAll() error         { return nil }
func (c *child) wait() (waitStatus, error) {
	return 0, errors.New("run is not supported on this platform")
}

func signalName(sig os.Signal) string { return sig.String() }

func exitStatus(code int) int      { return code }
func describeExit(code int) string { return "exit status " + strconv.Itoa(code) }
func signalStatus(os.Signal) int   { return exitFail }
func startStatus(error) int        { return exitCannotRun }
