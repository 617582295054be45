package redistest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill redis-server when the test binary dies,
// so a panic or a -timeout does not leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits, for up to a second, until the process is in the stopped
// state, so that Pause is in effect when it returns rather than soon after.
func waitStopped(pid int, done <-chan struct{}) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(time.Second)
	for {
		// The format is "pid (comm) state ..."; comm may hold spaces and
		// parentheses, so the state follows the last ')'.
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		select {
		case <-done:
			return
		case <-timeout:
			return
		case <-tick.C:
		}
	}
}
