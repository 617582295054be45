package redlock

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// aclClients creates user on every server with the given ACL rules and
// returns go-redis clients that log in as it.
func aclClients(t *testing.T, admin []redis.UniversalClient, addrs []string, user string, rules ...string) []redis.UniversalClient {
	ctx := t.Context()
	for _, rc := range admin {
		args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
		for _, r := range rules {
			args = append(args, r)
		}
		require.NoError(t, rc.Do(ctx, args...).Err())
	}
	out := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a, Username: user, Password: "pw", DisableIdentity: true})
		t.Cleanup(func() { _ = rc.Close() })
		out[i] = rc
	}
	return out
}

func aclCheckFindings(t *testing.T, c *Client) (worst Severity, msgs []string) {
	rep, err := c.Check(t.Context())
	require.NoError(t, err)
	for _, f := range rep.Findings {
		if f.Check == "acl" || f.Check == "scripting" {
			msgs = append(msgs, f.Severity.String()+": "+f.Message)
			worst = max(worst, f.Severity)
		}
	}
	return worst, msgs
}

// TestCheckFindsACLThatBreaksLocks (found by the adversarial review): a user
// whose ACL makes readers, semaphores and fenced locks fail with NOPERM
// (TIME, which their scripts call, is in none of its categories) must get a
// Check finding of warning or worse; before Check's probe script ran what
// the lock scripts run, it got Info only.
func TestCheckFindsACLThatBreaksLocks(t *testing.T) {
	srv, admin := realNodes(t, 3)
	addrs := make([]string, len(srv))
	for i, s := range srv {
		addrs[i] = s.Addr()
	}
	ctx := t.Context()

	t.Run("category-based user without TIME", func(t *testing.T) {
		// A common least-privilege user: read, write, scripting, pub/sub.
		// TIME is in none of these categories, and rlock.lua,
		// semacquire.lua and a fenced acquire.lua call it.
		cs := aclClients(t, admin, addrs, "cats", "+@read", "+@write", "+@scripting", "+@pubsub", "+@connection", "~lk:*", "&lk:*")
		c := newClient(t, cs, WithKeyPrefix("lk:"), WithTTL(5*time.Second))
		worst, msgs := aclCheckFindings(t, c)
		var errs []string
		if _, err := c.TryRLock(ctx, "r"); err != nil {
			errs = append(errs, "TryRLock: "+err.Error())
		}
		sem, err := c.Semaphore("s", 2)
		require.NoError(t, err)
		if _, err := sem.TryAcquire(ctx); err != nil {
			errs = append(errs, "TryAcquire: "+err.Error())
		}
		if _, err := c.TryLock(ctx, "f", WithFencing(true)); err != nil {
			errs = append(errs, "fenced TryLock: "+err.Error())
		}
		t.Logf("check: %v", msgs)
		if len(errs) > 0 && worst < SeverityWarning {
			t.Errorf("locks fail:\n  %s\nbut Check's worst acl/scripting finding is %v:\n  %s", strings.Join(errs, "\n  "), worst, strings.Join(msgs, "\n  "))
		}
	})
}
