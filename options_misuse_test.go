package redlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// misuseSrc uses the options as a user's code would: each line marked
// "misuse" gives an option where it has no meaning, and must not compile;
// every other line must.
const misuseSrc = `package misuse

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

type observer struct{}

func (observer) Attempted(redlock.Stats, error) {}
func (observer) Extended(redlock.Stats, error)  {}
func (observer) Released(redlock.Stats, error)  {}
func (observer) Lost(key string, err error)     {}

func good(nodes []redis.UniversalClient) error {
	ctx := context.Background()
	defaults := []redlock.Option{redlock.WithTTL(time.Second), redlock.WithNodeTimeout(50 * time.Millisecond)}
	defaults = append(defaults, redlock.WithFencing(true), redlock.WithLogger(slog.Default()), redlock.WithObserver(observer{}))
	c, err := redlock.New(nodes, defaults...)
	if err != nil {
		return err
	}
	var lockOpts []redlock.LockOption = []redlock.LockOption{redlock.WithTTL(time.Second), redlock.WithAutoExtend(true),
		redlock.WithMaxHold(time.Minute), redlock.WithRetryDelay(time.Millisecond, time.Second), redlock.WithOwner("o"), redlock.WithLabel("l")}
	l, err := c.Lock(ctx, "k", lockOpts...)
	if err != nil {
		return err
	}
	var ttl redlock.ExtendOption = redlock.WithTTL(time.Minute)
	return l.Extend(ctx, ttl)
}

func bad(c *redlock.Client, l *redlock.Lock, s *redlock.Semaphore, fn func(context.Context) error) {
	ctx := context.Background()
	c.Lock(ctx, "k", redlock.WithLogger(slog.Default()))        // misuse
	c.TryLock(ctx, "k", redlock.WithKeyPrefix("p:"))           // misuse
	c.LockMulti(ctx, []string{"a"}, redlock.WithDriftFactor(0.1)) // misuse
	c.RLock(ctx, "k", redlock.WithObserver(observer{}))        // misuse
	c.Do(ctx, "k", fn, redlock.WithNodeGuard(true))            // misuse
	c.Semaphore("k", 2, redlock.WithPubSub(false))             // misuse
	s.Acquire(ctx, redlock.WithReplicaAck(1))                  // misuse
	s.TryAcquire(ctx, redlock.WithNodeTimeout(time.Second))    // misuse
	l.Extend(ctx, redlock.WithNodeTimeout(time.Second))        // misuse
	l.Extend(ctx, redlock.WithFencing(true))                   // misuse
	l.Extend(ctx, redlock.WithAutoExtend(true))                // misuse
	l.Extend(ctx, redlock.WithMaxHold(time.Second))            // misuse
	l.Extend(ctx, redlock.WithOwner("o"), redlock.WithLabel("l")) // misuse
}
`

// TestOptionMisuseDoesNotCompile builds misuseSrc as a package of the
// module and checks that the compiler refuses every misuse line, and
// nothing else: an option where it has no meaning is a compile error, not
// a surprise at run time.
func TestOptionMisuseDoesNotCompile(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the go command is needed: %v", err)
		}
		t.Skip("no go command")
	}
	// A directory under the module, so that the package builds against
	// this checkout; the leading underscore keeps ./... away from it.
	dir, err := os.MkdirTemp(".", "_misuse")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "misuse.go"), []byte(misuseSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{}
	for i, line := range strings.Split(misuseSrc, "\n") {
		if strings.HasSuffix(line, "// misuse") {
			want[i+1] = true
		}
	}
	cmd := exec.Command(gobin, "build", "-gcflags=-e", "./"+filepath.Base(dir))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the misuses compiled")
	}
	got := map[int]string{}
	re := regexp.MustCompile(`misuse\.go:(\d+):\d+: (.*)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = m[2]
	}
	if len(got) == 0 {
		t.Fatalf("go build failed without a compile error:\n%s", out)
	}
	for n, msg := range got {
		if !want[n] {
			t.Errorf("line %d should compile, got: %s", n, msg)
		} else if !strings.Contains(msg, "does not implement redlock.") {
			t.Errorf("line %d: got %q, want an option type error", n, msg)
		}
	}
	for n := range want {
		if _, ok := got[n]; !ok {
			t.Errorf("line %d compiled, but is a misuse: %s", n, strings.Split(misuseSrc, "\n")[n-1])
		}
	}
}
