//go:build unix && !linux

package main

import "syscall"

// startChild starts argv with the given extra environment, its stdio
// connected to run's. Unless foreground is set, the command gets a process
// group of its own. Unlike Linux, these systems cannot stop the command
// when run dies: a killed run leaves it running.
func startChild(argv, env []string, foreground bool) (*child, error) {
	return startDirect(argv, env, foreground)
}

// foregroundTTY reports false: the terminal is only looked at on Linux, and
// elsewhere -foreground must be asked for.
func foregroundTTY() bool { return false }

// groupAlive reports whether a process of group pgid still exists. A
// zombie counts, for lack of a portable way to tell.
func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
