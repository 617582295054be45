//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: only Linux can tie the child's life to ours.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped returns at once: without /proc there is no portable way to see
// that a signal has stopped a process.
func waitStopped(int, <-chan struct{}) {}
