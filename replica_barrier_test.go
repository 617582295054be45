package redlock

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestReplicaAckBarrierRefusedByACL (found by the second adversarial
// review): a user whose ACL allows the release channels but not the barrier
// channel, or no channel at all. The PUBLISH before WAIT is refused with
// NOPERM; when its error was ignored, on Redis 7.2+ and Valkey the WAIT
// after a resent acquire returned at once, and the yes counted with the
// replica stopped (8 of 10 runs on Valkey 8.0.1). The vote must fail with
// ErrReplicaAck, and Check must say why.
func TestReplicaAckBarrierRefusedByACL(t *testing.T) {
	for name, chans := range map[string]string{"release channels only": "&*released*", "no channels (Redis 7 default)": "resetchannels"} {
		t.Run(name, func(t *testing.T) { replicaAckBarrierACL(t, chans) })
	}
}

func replicaAckBarrierACL(t *testing.T, chans string) {
	nd := startReplicas(t, 1, false)[0]
	ctx := t.Context()
	require.NoError(t, nd.mc.Do(ctx, "ACL", "SETUSER", "rel", "reset", "on", ">pw", "+@all", "~*", chans).Err())
	const key = "resent-acquire"
	dup := &copyElsewhere{key: key, other: nd.master.NewClient(t)}
	nc := redis.NewClient(&redis.Options{Addr: nd.master.Addr(), Username: "rel", Password: "pw", DisableIdentity: true})
	nc.AddHook(dup)
	t.Cleanup(func() { _ = nc.Close() })
	c := newClient(t, []redis.UniversalClient{nc}, WithTTL(30*time.Second), WithNodeTimeout(6*time.Second), WithReplicaAck(1))

	worst, msgs := aclCheckFindings(t, c)
	t.Logf("Check acl findings (worst %v): %v", worst, msgs)
	require.Equal(t, SeverityCritical, worst, "Check: %v", msgs)
	require.Contains(t, strings.Join(msgs, "\n"), "barrier channels", "Check names the barrier channel")

	nd.replica.Pause()
	t.Cleanup(nd.replica.Resume)
	_, err := c.TryLock(ctx, key)
	rep := dup.report()
	t.Logf("copy=%v checked=%v WAIT acks=%d err=%v; TryLock err=%v", rep.copied, rep.checked, rep.acks, rep.waitErr, err)
	require.True(t, rep.checked)
	require.ErrorIs(t, err, ErrNotAcquired, "a yes whose first copy never reached the stopped replica counted: the barrier PUBLISH was refused (NOPERM) and ignored")
	require.ErrorIs(t, err, ErrReplicaAck, "the refused PUBLISH fails the vote")
	require.Contains(t, err.Error(), "PUBLISH before WAIT")
}
