package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// On Linux, run does not start the command itself. It starts a supervisor,
// a second copy of its own binary, which starts the command:
//
//	redlock run (holds the lock)
//	└── supervisor (a child subreaper)
//	    └── the command
//	        └── what the command starts ...
//
// A killed run (SIGKILL, the OOM killer) can do nothing, and the kernel's
// parent-death signal reaches only a direct child. The supervisor outlives
// run: it learns of run's death from the end of a pipe that only run holds
// open, and then kills every process under it. As a child subreaper it
// inherits every orphan of the tree, even one that left the command's
// process group or session, so none escapes: a script's `pg_dump &` does not
// go on without the lock. It leads a process group of its own, so that a
// kill of run's group (timeout -s KILL, kill -9 %1) does not take it too,
// and its name and arguments do not hold "redlock", so that a kill by name
// (pkill -9 redlock) does not either. Run is a child subreaper too: when
// the supervisor alone is killed, the command's orphans come up to run,
// which kills them and the command's group before it releases the lock.
// Only both killed at once, by a signal to each, leaves the tree to the
// kernel: the command dies with the supervisor, what it started goes on.
//
// The supervisor speaks to run over two pipes: the lifeline (fd 3 in the
// supervisor), which run writes "q" to when it exits normally, and whose
// end means that run died; and the report (fd 4), on which the supervisor
// writes "pid N" once the command runs, "start CODE MESSAGE" when it could
// not be started, and "exit STATUS" when it has exited.

// superviseArg, as the first argument, makes the binary a supervisor. No
// user types it: run passes it to its own binary.
const superviseArg = "__rl-supervise"

// supervisorName is the supervisor's argv[0] and its name in ps, which a
// kill by name of redlock does not match.
const supervisorName = "rl-supervise"

// The supervisor's file descriptors, as ExtraFiles places them.
const (
	lifelineFD = 3
	reportFD   = 4
)

// The process is a supervisor when run started it as one. This runs in an
// init function, before main and before a test binary's TestMain, so that
// the tests that call run in-process start the supervisor from their own
// binary too.
func init() {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(superviseMain(os.Args[2:]))
	}
}

// sysProcAttr puts the command in process group pgid, or in a group of its
// own when pgid is 0. The kernel also kills the command when its parent,
// the supervisor, dies.
func sysProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}

// startChild starts argv with the given extra environment, its stdio
// connected to run's, under a supervisor that kills the command's whole
// tree if run dies. Unless foreground is set, the command gets a process
// group of its own.
func startChild(argv, env []string, foreground bool) (*child, error) {
	// Look the command up here, so that a missing one is reported as it
	// would be without the supervisor.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		// No /proc (a minimal sandbox): run the command as other systems
		// do, and say what is lost.
		c, err := startDirect(argv, env, foreground)
		if c != nil {
			c.note = "no /proc: the command runs without a supervisor, and a killed redlock leaves what it started running"
		}
		return c, err
	}
	// Orphans of the tree come up to run if the supervisor dies.
	_ = setSubreaper()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, err
	}
	// The command's process group: its own (0), or in the foreground
	// run's, so that it can read from the terminal.
	pgid := 0
	if foreground {
		pgid = syscall.Getpgrp()
	}
	// /proc/self/exe is run's own binary even if the file was replaced or
	// removed since run started, as an upgrade may do.
	sup := exec.Command("/proc/self/exe")
	sup.Args = append([]string{supervisorName, superviseArg, strconv.Itoa(pgid), path}, argv...)
	sup.Stdin, sup.Stdout, sup.Stderr = os.Stdin, os.Stdout, os.Stderr
	sup.Env = append(os.Environ(), env...)
	sup.ExtraFiles = []*os.File{lifeR, repW}
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = sup.Start()
	lifeR.Close()
	repW.Close()
	if err != nil {
		lifeW.Close()
		repR.Close()
		return nil, &startError{code: exitCannotRun, msg: fmt.Sprintf("starting the command's supervisor: %v", err)}
	}
	rep := bufio.NewReader(repR)
	// fail ends a supervisor that started no command, and reaps it.
	fail := func(err error) (*child, error) {
		lifeW.Close() // the supervisor kills what there may be, and exits
		repR.Close()
		_ = sup.Wait()
		return nil, err
	}
	line, err := rep.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("the supervisor exited before starting the command: %w", err))
	}
	word, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch word {
	case "start":
		code, msg, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(code)
		return fail(&startError{code: n, msg: msg})
	case "pid":
	default:
		return fail(fmt.Errorf("the supervisor said %q", line))
	}
	pid, err := strconv.Atoi(rest)
	if err != nil {
		return fail(fmt.Errorf("the supervisor said %q", line))
	}
	// On Linux this holds a pidfd: a signal sent through it never reaches
	// a process that reused the command's id after the supervisor reaped
	// the command.
	proc, err := os.FindProcess(pid)
	if err != nil {
		return fail(err)
	}
	c := &child{proc: proc, group: !foreground}
	supStart := startTime(sup.Process.Pid)
	c.waitFn = func() (waitStatus, error) {
		defer repR.Close()
		line, err := rep.ReadString('\n')
		word, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if err != nil || word != "exit" {
			// The supervisor died (someone killed it); the kernel then
			// killed the command, its direct child, and what the command
			// started came up to run, the next subreaper.
			lifeW.Close()
			_ = sup.Wait()
			killOrphans(pid, !foreground, supStart)
			return 0, fmt.Errorf("the command's supervisor was killed (%v), and with it the command and what it started", sup.ProcessState)
		}
		ws, err := strconv.ParseUint(rest, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("the supervisor said %q", line)
		}
		return syscall.WaitStatus(ws), nil
	}
	c.killFn = func() { _, _ = lifeW.Write([]byte("k")) }
	c.finishFn = func(keep bool) {
		// With keep, the supervisor exits and leaves what the command
		// started in the background to the init process, as it would be
		// without the supervisor. Without it, the lifeline ends as it does
		// when run dies, and the supervisor kills the whole tree.
		if keep {
			_, _ = lifeW.Write([]byte("q"))
		}
		lifeW.Close()
		_ = sup.Wait()
		_ = proc.Release()
	}
	return c, nil
}

// superviseMain is the supervisor's main function: args are the command's
// process group (0 for one of its own), its path, then its argv. It
// returns the supervisor's exit status, which nobody reads but tests.
func superviseMain(args []string) int {
	// The command must not inherit the pipes: the lifeline would stay open
	// after run's death, and the report after the supervisor's.
	syscall.CloseOnExec(lifelineFD)
	syscall.CloseOnExec(reportFD)
	lifeline, report := os.NewFile(lifelineFD, "lifeline"), os.NewFile(reportFD, "report")
	if len(args) < 3 || lifeline == nil || report == nil {
		fmt.Fprintln(os.Stderr, "redlock: the supervisor is started by redlock run, not by hand")
		return exitUsage
	}
	pgid, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(report, "start %d bad process group %q\n", exitCannotRun, args[0])
		return exitCannotRun
	}
	path, argv := args[1], args[2:]
	// The parent-death signal is sent when the thread that started the
	// command ends, not the process: keep this goroutine on its thread.
	runtime.LockOSThread()
	setName(supervisorName)
	if err := setSubreaper(); err != nil {
		fmt.Fprintf(report, "start %d cannot supervise the command: %v\n", exitCannotRun, err)
		return exitCannotRun
	}
	// The signals that run passes on go to the command, not here; but in
	// the foreground of a terminal, its Ctrl-C reaches the whole group,
	// this process too. Caught rather than ignored, so that the command
	// starts with them at their defaults.
	signal.Notify(make(chan os.Signal, 1), forwardedSignals...)

	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   sysProcAttr(pgid),
	})
	if err != nil {
		code := exitCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(report, "start %d %v\n", code, err)
		return code
	}
	pid := proc.Pid
	fmt.Fprintf(report, "pid %d\n", pid)

	// The reaper reaps every child: the command, and the orphans of its
	// tree that come to this subreaper. It ends once there is none left.
	status := make(chan syscall.WaitStatus, 1)
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				return // ECHILD: nothing is left under the supervisor
			case wpid == pid:
				status <- ws
			}
		}
	}()
	lifeEnded := make(chan bool, 1)
	killNow := make(chan struct{})
	go func() {
		b := make([]byte, 1)
		asked := false
		for {
			n, _ := lifeline.Read(b)
			if n == 1 && b[0] == 'k' {
				if !asked {
					close(killNow)
					asked = true
				}
				continue
			}
			lifeEnded <- n == 1 && b[0] == 'q'
			return
		}
	}()
	kn := killNow
	killed := false
	for {
		select {
		case ws := <-status:
			fmt.Fprintf(report, "exit %d\n", uint32(ws))
			if <-lifeEnded && !killed {
				return exitOK
			}
		case <-kn:
			kn, killed = nil, true
			go killTree(pid, pgid == 0, reaped)
			continue
		case <-lifeEnded:
		}
		break
	}
	killTree(pid, pgid == 0, reaped)
	return exitFail
}

// killTree kills the command's process group and every process under the
// supervisor, again and again as orphans come up to it, until the reaper
// has reaped them all.
func killTree(pid int, group bool, reaped <-chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if group {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		for _, k := range childrenOf(os.Getpid()) {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
		select {
		case <-reaped:
			return
		case <-tick.C:
		}
	}
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(ppid)
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) >= 2 && f[1] == want {
			kids = append(kids, pid)
		}
	}
	return kids
}

// procStat returns the fields of /proc/pid/stat after the command name:
// state, ppid, pgrp, ...; nil when the process is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// "pid (comm) state ppid pgrp ..."; comm may hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// setSubreaper makes this process a child subreaper: the orphans of its
// descendants become its children, not the init process's.
func setSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

// setName names this process in ps and top, best effort.
func setName(name string) {
	const prSetName = 15
	b := append([]byte(name), 0)
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetName, uintptr(unsafe.Pointer(&b[0])), 0)
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
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) >= 3 && f[2] == want && f[0] != "Z" {
			return true
		}
	}
	return false
}

// killOrphans kills, once the supervisor was killed, the command's process
// group and every child of run that the command's tree left behind: they
// came up to run, the next subreaper. Only children that started after the
// supervisor count, so that other children of the process (a test binary
// has some) are left alone. It gives up after a few seconds of a tree that
// keeps forking.
func killOrphans(pid int, group bool, since uint64) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if group {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		var kids []int
		for _, k := range childrenOf(os.Getpid()) {
			if startTime(k) >= since {
				kids = append(kids, k)
			}
		}
		if len(kids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(k, &ws, syscall.WNOHANG, nil)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startTime is when process pid started, in clock ticks since boot; 0
// when it is gone.
func startTime(pid int) uint64 {
	// starttime is field 22 of stat; procStat's fields begin at field 3.
	f := procStat(pid)
	if len(f) < 20 {
		return 0
	}
	t, _ := strconv.ParseUint(f[19], 10, 64)
	return t
}
