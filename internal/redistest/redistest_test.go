package redistest_test

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestAvailable(t *testing.T) {
	_, err := exec.LookPath("redis-server")
	t.Setenv("REDIS_SERVER", "")
	require.Equal(t, err == nil, redistest.Available(), "Available() without REDIS_SERVER, want it to match a PATH lookup")

	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	require.False(t, redistest.Available(), "Available() with REDIS_SERVER pointing nowhere: got true, want false")

	if err == nil {
		bin, _ := exec.LookPath("redis-server")
		t.Setenv("REDIS_SERVER", bin)
		t.Setenv("PATH", "")
		require.True(t, redistest.Available(), "Available() with REDIS_SERVER=%s and empty PATH: got false, want true", bin)
	}
}

// recordingTB records Skip and Fatalf instead of ending the test, so that
// Require can be watched taking either branch.
type recordingTB struct {
	testing.TB
	skipped string
	fatal   string
}

func (r *recordingTB) Helper()                        {}
func (r *recordingTB) Skip(args ...any)               { r.skipped = fmt.Sprint(args...) }
func (r *recordingTB) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recordingTB) Fatal(args ...any)              { r.fatal = fmt.Sprint(args...) }
func (r *recordingTB) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }

func TestRequireMissing(t *testing.T) {
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")

	t.Run("skips", func(t *testing.T) {
		t.Setenv("CI", "")
		r := &recordingTB{TB: t}
		redistest.Require(r)
		require.Empty(t, r.fatal, "Require without CI: got Fatalf, want Skip")
		require.Contains(t, r.skipped, "redis-server not found: install it (apt-get install -y redis-server) or set REDIS_SERVER; skipping real-Redis test")
	})
	t.Run("fails in CI", func(t *testing.T) {
		t.Setenv("CI", "true")
		r := &recordingTB{TB: t}
		redistest.Require(r)
		require.Empty(t, r.skipped, "Require with CI=true: got Skip, want Fatalf")
		require.Contains(t, r.fatal, "redis-server not found")
	})
}

func TestRequirePresent(t *testing.T) {
	redistest.Require(t) // Skips or fails here when redis-server is missing.
	r := &recordingTB{TB: t}
	redistest.Require(r)
	require.Empty(t, r.skipped)
	require.Empty(t, r.fatal)
}

func TestSetGet(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 2, redistest.Options{})
	require.Len(t, servers, 2)
	require.NotEqual(t, servers[0].Addr(), servers[1].Addr(), "two servers share an address")

	key := t.Name()
	for i, s := range servers {
		require.True(t, s.Running())
		c := s.NewClient(t)
		require.NoError(t, c.Set(t.Context(), key, i, 0).Err())
	}
	for i, s := range servers {
		got, err := s.NewClient(t).Get(t.Context(), key).Int()
		require.NoError(t, err)
		require.Equal(t, i, got, "GET %s on server %d: got %d, want %d", key, i, got, i)
	}
}

func TestStartNFast(t *testing.T) {
	t.Parallel()
	start := time.Now()
	servers := redistest.StartN(t, 5, redistest.Options{Persistence: true})
	t.Logf("5 servers up in %v", time.Since(start))
	require.Less(t, time.Since(start), 5*time.Second)
	seen := map[string]bool{}
	for _, s := range servers {
		require.False(t, seen[s.Addr()], "address %s handed out twice", s.Addr())
		seen[s.Addr()] = true
		require.NoError(t, s.NewClient(t).Ping(t.Context()).Err())
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	c := s.NewClient(t)
	require.NoError(t, c.Ping(t.Context()).Err())

	s.Kill()
	require.False(t, s.Running(), "Running after Kill: got true, want false")
	require.Error(t, c.Ping(t.Context()).Err(), "PING after Kill: got PONG, want an error")
	s.Kill() // Idempotent.
	require.False(t, s.Running())
}

func TestRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	addr := s.Addr()
	c := s.NewClient(t)
	key := t.Name()
	require.NoError(t, c.Set(t.Context(), key, "v", 0).Err())

	s.Restart() // From running: kills first.
	require.True(t, s.Running())
	require.Equal(t, addr, s.Addr(), "address after Restart")
	require.ErrorIs(t, c.Get(t.Context(), key).Err(), redis.Nil, "GET after Restart without persistence: want an empty server")
}

func TestRestartWithPersistence(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Persistence: true})
	c := s.NewClient(t)
	key := t.Name()
	require.NoError(t, c.Set(t.Context(), key, "v", 0).Err())

	s.Kill()
	s.Restart()
	got, err := c.Get(t.Context(), key).Result()
	require.NoError(t, err, "GET after kill -9 and Restart with persistence")
	require.Equal(t, "v", got)

	// Restart without a Kill first keeps the data too.
	s.Restart()
	got, err = c.Get(t.Context(), key).Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
}

func TestRestartEmpty(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Persistence: true})
	addr := s.Addr()
	c := s.NewClient(t)
	key := t.Name()
	require.NoError(t, c.Set(t.Context(), key, "v", 0).Err())

	s.RestartEmpty()
	require.True(t, s.Running())
	require.Equal(t, addr, s.Addr(), "address after RestartEmpty")
	require.ErrorIs(t, c.Get(t.Context(), key).Err(), redis.Nil, "GET after RestartEmpty: want the key gone")

	// Persistence is still on after RestartEmpty.
	require.NoError(t, c.Set(t.Context(), key, "w", 0).Err())
	s.Restart()
	got, err := c.Get(t.Context(), key).Result()
	require.NoError(t, err)
	require.Equal(t, "w", got)
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(t.Context()).Err())

	s.Pause()
	require.True(t, s.Paused())
	require.True(t, s.Running(), "a paused server is still running")
	start := time.Now()
	err := c.Ping(t.Context()).Err()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "PING to a paused server: got %v, want a timeout", err)
	require.Less(t, time.Since(start), 2*time.Second)

	s.Resume()
	require.False(t, s.Paused())
	require.NoError(t, c.Ping(t.Context()).Err(), "PING after Resume")

	// Cleanup must be able to kill a server that is still paused.
	s.Pause()
}

func TestUnexpectedExit(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	c := s.NewClient(t)
	_ = c.ShutdownNoSave(t.Context()).Err() // The connection drops; no reply.
	require.Eventually(t, func() bool { return !s.Running() }, 5*time.Second, 5*time.Millisecond,
		"Running after SHUTDOWN: got true, want false")
	s.Kill()   // A no-op on an exited server.
	s.Pause()  // So is this.
	s.Resume() // And this.
	require.False(t, s.Paused())

	s.Restart()
	require.NoError(t, c.Ping(t.Context()).Err(), "PING after Restart of an exited server")
}

func TestArgs(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory", "1mb"}})
	got, err := s.NewClient(t).ConfigGet(t.Context(), "maxmemory").Result()
	require.NoError(t, err)
	require.Equal(t, "1048576", got["maxmemory"], "maxmemory: got %s, want 1048576", got["maxmemory"])
}
