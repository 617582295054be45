package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// sysProcAttr gives the command a process group of its own when group is
// set. The kernel also kills the command when run dies: a command left
// running by a killed run would outlive the lock it needs, which nothing
// renews any more.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}

// foregroundTTY reports whether stdin is a terminal and run's process group
// is its foreground group: run was started from an interactive shell, not
// in the background.
func foregroundTTY() bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}

// groupAlive reports whether a process of group pgid is still running.
// Zombies do not count: an orphan that the init process has not reaped
// yet has exited all the same, and some inits reap only now and then.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ..."; comm may hold spaces and
		// parentheses, so the fields are counted from the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == want && f[0] != "Z" {
			return true
		}
	}
	return false
}
