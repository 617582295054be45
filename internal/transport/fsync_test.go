package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// fsyncJob is a fakeJob that is an FsyncAcker, and an Acker when replicas
// is set.
type fsyncJob struct {
	ackJob
	fsync bool

	local    int64 // what FsyncAcked got
	fsyncErr error
}

func (j *fsyncJob) Fsync() bool { return j.fsync }
func (j *fsyncJob) FsyncAcked(local int64, err error) {
	j.local, j.fsyncErr = local, err
	j.events = append(j.events, "fsync-acked")
}

// waitCmds ends a batch of FsyncAckers with a SET of the first one's
// barrier key, which always writes and expires at once, and WAITAOF 1 0,
// bounded as WAIT is; with a WAIT too, its PUBLISH goes first and the
// WAITAOF after the WAIT, and the two share the bound.
func TestWaitCmdsFsync(t *testing.T) {
	now := time.Now()
	job := func(replicas int, fsync bool, within, left time.Duration, barrier string) *fsyncJob {
		j := &fsyncJob{ackJob: ackJob{fakeJob: newJob("fsync-" + barrier), replicas: replicas, within: within, barrier: barrier}, fsync: fsync}
		j.deadline = now.Add(left)
		return j
	}
	for _, tc := range []struct {
		name                         string
		jobs                         []Job
		publish, mark, wait, waitAOF string // "" for no command
	}{
		{"neither", []Job{job(0, false, time.Second, time.Minute, "a")}, "", "", "", ""},
		{"fsync only", []Job{job(0, true, 50*time.Millisecond, time.Minute, "a")}, "", `set a "" px 1`, "", "waitaof 1 0 50"},
		{"deadline first", []Job{job(0, true, time.Second, 30*time.Millisecond, "a")}, "", `set a "" px 1`, "", "waitaof 1 0 30"},
		{"at least 1ms", []Job{job(0, true, time.Second, 100*time.Microsecond, "a")}, "", `set a "" px 1`, "", "waitaof 1 0 1"},
		{"both on one job share the bound", []Job{job(2, true, 80*time.Millisecond, time.Minute, "a")},
			`publish a redlock`, `set a "" px 1`, "wait 2 40", "waitaof 1 0 40"},
		{"both on two jobs", []Job{
			newJob("plain"),
			job(0, false, time.Millisecond, time.Minute, "none"),
			job(0, true, 90*time.Millisecond, time.Minute, "f"),
			job(1, false, time.Second, 70*time.Millisecond, "r"),
		}, "publish f redlock", `set f "" px 1`, "wait 1 35", "waitaof 1 0 35"},
	} {
		a := waitCmds(tc.jobs, now)
		for _, c := range []struct {
			what string
			cmd  redis.Cmder
			want string
		}{{"publish", a.publish, tc.publish}, {"mark", a.mark, tc.mark}, {"wait", a.wait, tc.wait}, {"waitaof", a.waitAOF, tc.waitAOF}} {
			if c.want == "" {
				require.Nil(t, c.cmd, "%s: %s: got a command, want none", tc.name, c.what)
				continue
			}
			require.NotNil(t, c.cmd, "%s: %s: got none, want %s", tc.name, c.what, c.want)
			require.Equal(t, c.want, argLine(c.cmd), "%s: %s", tc.name, c.what)
		}
		var order []string
		for _, c := range a.append(nil) {
			order = append(order, c.Name())
		}
		var want []string
		for _, c := range []string{tc.publish, tc.mark, tc.wait, tc.waitAOF} {
			if c != "" {
				want = append(want, strings.Fields(c)[0])
			}
		}
		require.Equal(t, want, order, "%s: the order the commands go out in", tc.name)
	}
}

// argLine renders a command's arguments as "name arg ...", an empty
// argument as "".
func argLine(c redis.Cmder) string {
	args := make([]string, len(c.Args()))
	for i, a := range c.Args() {
		args[i] = fmt.Sprint(a)
		if args[i] == "" {
			args[i] = `""`
		}
	}
	return strings.Join(args, " ")
}

// A batch that holds an FsyncAcker ends with the barrier SET and WAITAOF on
// the same connection, and FsyncAcked gets WAITAOF's outcome before Done: here
// miniredis's refusal, as a server without WAITAOF (Redis 7.0) answers. A
// job that asks for no fsync hears nothing of it.
func TestFsyncAckerGetsWaitAOF(t *testing.T) {
	_, rc := mini(t)
	p, _ := newPipe(t, rc, Config{StallAfter: time.Minute})
	g := newGate(t, rc, true)

	first := newJob("fsync-first") // holds the batch out while the others queue
	p.Submit(first)
	require.Eventually(t, g.held, waitFor, time.Millisecond)
	j := &fsyncJob{ackJob: ackJob{fakeJob: newJob("fsync"), within: 50 * time.Millisecond, barrier: "transport-test:barrier"}, fsync: true}
	off := &fsyncJob{ackJob: ackJob{fakeJob: newJob("fsync-off"), within: time.Second, barrier: "other"}}
	p.Submit(j)
	p.Submit(off)
	g.release()
	j.wait(t)
	off.wait(t)

	require.ErrorContains(t, j.fsyncErr, "WAITAOF failed: ERR unknown command")
	require.Zero(t, j.local)
	require.Equal(t, []string{"fsync-acked", "done"}, j.events)
	require.Equal(t, []string{"done"}, off.events)
	require.Equal(t, []any{int64(1)}, j.batches[0].vals)
	require.Equal(t, [][]string{{"incr fsync-first"}, {"incr fsync", "incr fsync-off", `set transport-test:barrier "" px 1`, "waitaof 1 0 50"}}, g.seen())
}
