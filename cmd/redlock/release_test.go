package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redlock release frees a hold that redlock lock took, given its token: for
// each kind of lock lock takes. The holder finds its lock lost and exits 76;
// a second release, or a wrong token, exits 1 and frees nothing.
func TestReleaseCommand(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	for _, tt := range []struct {
		name string
		args []string // the kind of hold, for lock and release alike
	}{
		{"exclusive", nil},
		{"fenced", []string{"--fencing"}},
		{"owner", []string{"--owner", "deployer"}},
		{"shared", []string{"--shared"}},
		{"permit", []string{"--permits", "2"}},
		{"prefixed", []string{"--prefix", "app:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "release-" + tt.name
			lockArgs := append([]string{"--ttl", "3"}, tt.args...)
			l := startLock(t, nodes, key, lockArgs...)
			relArgs := []string{"release", "--nodes", nodes, "--key", key}
			for i := 0; i < len(tt.args); i++ {
				if tt.args[i] == "--fencing" {
					continue
				}
				relArgs = append(relArgs, tt.args[i])
			}

			code, _, stderr := runRedlock(t, nil, append(relArgs, "--token", l.token()+"x")...)
			require.Equal(t, exitFail, code, "a wrong token; stderr:\n%s", stderr)
			require.Contains(t, stderr, "not held by that token")

			// The token may also come from the environment, as lock's
			// output sets it.
			code, _, stderr = runRedlock(t, []string{"REDLOCK_TOKEN=" + l.token()}, relArgs...)
			require.Equal(t, exitOK, code, "stderr:\n%s", stderr)

			code = l.p.wait(t, 10*time.Second)
			require.Equal(t, exitLockLost, code, "the holder did not find its lock lost; stderr:\n%s", l.p.errText())

			code, _, stderr = runRedlock(t, nil, append(relArgs, "--token", l.token())...)
			require.Equal(t, exitFail, code, "a second release; stderr:\n%s", stderr)
			require.NotContains(t, stderr, "redlock: ", "one prefix per message")
		})
	}

	t.Run("usage", func(t *testing.T) {
		code, _, stderr := runRedlock(t, nil, "release", "--nodes", nodes, "--key", "k")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "-token is required")
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		code, _, stderr = runRedlock(t, nil, "release", "--nodes", nodes, "--token", "t")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "-key is required")
	})

	t.Run("nodes down", func(t *testing.T) {
		l := startLock(t, nodes, "release-down", "--ttl", "10")
		for _, s := range servers[:2] {
			s.Kill()
		}
		code, _, stderr := runRedlock(t, nil, "release", "--nodes", nodes, "--key", "release-down", "--token", l.token(), "--node-timeout", "0.5")
		require.Equal(t, exitUnavailable, code, "stderr:\n%s", stderr)
		require.Contains(t, stderr, "too few nodes answered")
	})
}
