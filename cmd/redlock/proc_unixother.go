//go:build unix && !linux

package main

import "syscall"

// sysProcAttr gives the command a process group of its own when group is
// set. Unlike Linux, these systems cannot kill the command when run dies.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}

// foregroundTTY reports false: the terminal is only looked at on Linux, and
// elsewhere -foreground must be asked for.
func foregroundTTY() bool { return false }

// groupAlive reports whether a process of group pgid still exists. A
// zombie counts, for lack of a portable way to tell.
func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
