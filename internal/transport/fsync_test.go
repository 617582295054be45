package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

// waitCmds ends a batch of FsyncAckers with PUBLISH on the first one's
// barrier and WAITAOF 1 0, bounded as WAIT is; with a WAIT too, after it,
// the two share the bound.
func TestWaitCmdsFsync(t *testing.T) {
	now := time.Now()
	job := func(replicas int, fsync bool, within, left time.Duration, barrier string) *fsyncJob {
		j := &fsyncJob{ackJob: ackJob{fakeJob: newJob("fsync-" + barrier), replicas: replicas, within: within, barrier: barrier}, fsync: fsync}
		j.deadline = now.Add(left)
		return j
	}
	for _, tc := range []struct {
		name                   string
		jobs                   []Job
		publish, wait, waitAOF string // "" for no command
	}{
		{"neither", []Job{job(0, false, time.Second, time.Minute, "a")}, "", "", ""},
		{"fsync only", []Job{job(0, true, 50*time.Millisecond, time.Minute, "a")}, "publish a redlock", "", "waitaof 1 0 50"},
		{"deadline first", []Job{job(0, true, time.Second, 30*time.Millisecond, "a")}, "publish a redlock", "", "waitaof 1 0 30"},
		{"at least 1ms", []Job{job(0, true, time.Second, 100*time.Microsecond, "a")}, "publish a redlock", "", "waitaof 1 0 1"},
		{"both on one job share the bound", []Job{job(2, true, 80*time.Millisecond, time.Minute, "a")},
			"publish a redlock", "wait 2 40", "waitaof 1 0 40"},
		{"both on two jobs", []Job{
			newJob("plain"),
			job(0, false, time.Millisecond, time.Minute, "none"),
			job(0, true, 90*time.Millisecond, time.Minute, "f"),
			job(1, false, time.Second, 70*time.Millisecond, "r"),
		}, "publish f redlock", "wait 1 35", "waitaof 1 0 35"},
	} {
		publish, wait, waitAOF := waitCmds(tc.jobs, now)
		args := func(c interface{ Args() []any }) string {
			return strings.TrimSpace(fmt.Sprintln(c.Args()...))
		}
		if tc.publish == "" {
			require.Nil(t, publish, tc.name)
		} else {
			require.Equal(t, tc.publish, args(publish), tc.name)
		}
		if tc.wait == "" {
			require.Nil(t, wait, tc.name)
		} else {
			require.Equal(t, tc.wait, args(wait), tc.name)
		}
		if tc.waitAOF == "" {
			require.Nil(t, waitAOF, tc.name)
		} else {
			require.Equal(t, tc.waitAOF, args(waitAOF), tc.name)
		}
	}
}

// A batch that holds an FsyncAcker ends with PUBLISH and WAITAOF on the
// same connection, and FsyncAcked gets WAITAOF's outcome before Done: here
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
	require.Equal(t, [][]string{{"incr fsync-first"}, {"incr fsync", "incr fsync-off", "publish transport-test:barrier redlock", "waitaof 1 0 50"}}, g.seen())
}
