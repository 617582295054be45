package redlock

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

func TestPerCallOptionsOverrideDefaults(t *testing.T) {
	ms, cs := minis(t, 5)
	c := newClient(t, cs, WithTTL(time.Minute), WithKeyPrefix("app:"))
	l, err := c.TryLock(t.Context(), "opts", WithTTL(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, "opts", l.Key())
	eventually(t, ms, "app:opts", l.Token())
	for _, m := range ms {
		require.Equal(t, 3*time.Second, m.TTL("app:opts"))
	}
	require.NoError(t, l.Unlock(t.Context()))
	eventually(t, ms, "app:opts", "")
	l, err = c.TryLock(t.Context(), "opts")
	require.NoError(t, err)
	eventually(t, ms, "app:opts", l.Token())
	require.Equal(t, time.Minute, ms[0].TTL("app:opts"), "the default is unchanged")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestAutoExtendThatCannotFitIsRefused: at a TTL of 5 ms a renewal cannot
// reach its quorum before the validity ends; New and the call say why.
func TestAutoExtendThatCannotFitIsRefused(t *testing.T) {
	_, cs := minis(t, 3)
	_, err := New(cs, WithTTL(5*time.Millisecond), WithAutoExtend(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "auto-extension cannot work at ttl 5ms")
	require.Contains(t, err.Error(), "use a TTL of at least")
	// The TTL it suggests works.
	msg := err.Error()
	at := strings.LastIndex(msg, "at least ")
	min, perr := time.ParseDuration(msg[at+len("at least "):])
	require.NoError(t, perr)
	c, err := New(cs, WithTTL(min), WithAutoExtend(true))
	require.NoError(t, err, "the suggested %v", min)
	require.NoError(t, c.Close())

	c = newClient(t, cs, WithNodeTimeout(0))
	_, err = c.TryLock(t.Context(), "auto-5ms", WithTTL(5*time.Millisecond), WithAutoExtend(true))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "auto-extension cannot work")
}

// TestBadLabelsAreRefused: a label is a short, printable description.
func TestBadLabelsAreRefused(t *testing.T) {
	_, cs := minis(t, 3)
	for _, bad := range []struct{ label, want string }{
		{strings.Repeat("x", MaxLabelLen+1), "longer than the 128 allowed"},
		{"job\n7", "control character"},
		{"\xff", "not valid UTF-8"},
	} {
		_, err := New(cs, WithLabel(bad.label))
		require.ErrorIs(t, err, ErrInvalidOption, "%q", bad.label)
		require.Contains(t, err.Error(), bad.want, "%q", bad.label)
	}
	c := newClient(t, cs)
	_, err := c.TryLock(t.Context(), "bad-label", WithLabel("a\tb"))
	require.ErrorIs(t, err, ErrInvalidOption)
	l, err := c.TryLock(t.Context(), "good-label", WithLabel(strings.Repeat("é", MaxLabelLen/2)))
	require.NoError(t, err, "128 bytes of UTF-8 are allowed")
	require.NoError(t, l.Unlock(t.Context()))
}

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

// testCerts are the PEM files of a throwaway CA and of a server certificate
// for 127.0.0.1 that it signed.
type testCerts struct {
	ca, cert, key string // file paths
	pool          *x509.CertPool
}

func newTestCerts(t *testing.T) testCerts {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlock test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testCerts{
		ca:   write("ca.pem", "CERTIFICATE", caDER),
		cert: write("server.pem", "CERTIFICATE", srvDER),
		key:  write("server-key.pem", "EC PRIVATE KEY", keyDER),
		pool: pool,
	}
}

// freeLoopbackPort returns a port that was free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// The go-redis options users give their clients still apply to everything
// the library sends, pipelines and subscriptions included: TLS, an ACL user,
// a pool of one connection. Real redis-servers listen for TLS; each has a
// user "locker" whose password the nodes' clients carry. A wrong password
// fails every node, which shows the credentials are the ones used.
func TestUsersClientOptionsApply(t *testing.T) {
	redistest.Require(t)
	certs := newTestCerts(t)
	ctx := t.Context()
	var addrs []string
	for range 3 {
		port := freeLoopbackPort(t)
		s := redistest.Start(t, redistest.Options{Args: []string{
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certs.cert, "--tls-key-file", certs.key, "--tls-ca-cert-file", certs.ca,
			"--tls-auth-clients", "no",
		}})
		require.NoError(t, s.NewClient(t).Do(ctx, "ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all").Err())
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	clients := func(password string) []redis.UniversalClient {
		out := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			rc := redis.NewClient(&redis.Options{
				Addr:      a,
				TLSConfig: &tls.Config{RootCAs: certs.pool, MinVersion: tls.VersionTLS12},
				Username:  "locker",
				Password:  password,
				PoolSize:  1,
			})
			t.Cleanup(func() { _ = rc.Close() })
			out[i] = rc
		}
		return out
	}
	nodes := clients("s3cret")
	c := newClient(t, nodes, WithTTL(5*time.Second))

	l, err := c.TryLock(ctx, "tls-acl", WithFencing(true))
	require.NoError(t, err)
	require.Positive(t, l.Fence())
	require.NoError(t, l.Extend(ctx))
	h, err := c.Inspect(ctx, "tls-acl")
	require.NoError(t, err)
	require.True(t, h.Held)
	require.Equal(t, l.Token(), h.Token)

	// A waiter on another Client wakes on the release, announced over TLS.
	other := newClient(t, clients("s3cret"), WithRetryDelay(time.Minute, time.Minute))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := other.Lock(wctx, "tls-acl")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		for _, rc := range nodes {
			n, err := rc.PubSubNumSub(ctx, releaseChannel("tls-acl")).Result()
			if err != nil || n[releaseChannel("tls-acl")] == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the waiter did not subscribe over TLS")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-got, "the waiter was not woken by the release")

	// One connection per node in the pool: concurrent locks share it.
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			l, err := c.TryLock(ctx, fmt.Sprintf("pool-%d", i))
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}

	// The wrong password: every node refuses, and says why.
	bad := newClient(t, clients("wrong"))
	_, err = bad.TryLock(ctx, "tls-acl")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Contains(t, err.Error(), "WRONGPASS")
}

// TestLockOptionsOverClientDefaults: the config one call derives from the
// Client's defaults and its own options. A node timeout chosen for the
// Client stays, and a per-call TTL too short for it is refused; a derived
// one follows the call's TTL. nil options are skipped anywhere. A refused
// Extend TTL leaves the lock's TTL as it was. Every TTL sent, per call, per
// Extend, per semaphore or read lock, raises the bound a restarted node
// must wait out (maxTTL). A Client default that a kind of hold cannot have
// is refused by that kind with ErrInvalidOption, not silently dropped.
// Each of these is a way a lock's timing could quietly differ from what
// its caller asked for.
func TestLockOptionsOverClientDefaults(t *testing.T) {
	_, cs := minis(t, 3)
	ctx := t.Context()
	c := newClient(t, cs, WithNodeTimeout(50*time.Millisecond))
	cfg, err := c.config([]LockOption{WithTTL(time.Second)})
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, cfg.nodeTimeout)
	_, err = c.TryLock(ctx, "call-options", WithTTL(40*time.Millisecond))
	require.ErrorIs(t, err, ErrInvalidOption, "a TTL shorter than the chosen node timeout")

	// WithNodeTimeout(0): the node timeout is derived from each TTL.
	c2 := newClient(t, cs, WithNodeTimeout(0), WithTTL(10*time.Second))
	cfg, err = c2.config([]LockOption{WithTTL(50 * time.Millisecond)})
	require.NoError(t, err)
	require.Equal(t, defaultNodeTimeout(50*time.Millisecond), cfg.nodeTimeout)

	l, err := c2.TryLock(ctx, "call-options-nil", nil, WithTTL(time.Second), nil)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, nil))
	require.NoError(t, l.Extend(ctx, nil, WithTTL(2*time.Second), nil))

	l.mu.Lock()
	before := l.ttl
	l.mu.Unlock()
	require.ErrorIs(t, l.Extend(ctx, WithTTL(-time.Second)), ErrInvalidOption)
	require.ErrorIs(t, l.Extend(ctx, WithTTL(500*time.Microsecond)), ErrInvalidOption)
	l.mu.Lock()
	after := l.ttl
	l.mu.Unlock()
	require.Equal(t, before, after, "a refused Extend changed the lock's TTL")

	require.NoError(t, l.Extend(ctx, WithTTL(7*time.Second)))
	require.GreaterOrEqual(t, c2.maxTTL(), 7*time.Second)
	require.NoError(t, l.Unlock(ctx))
	sem, err := c2.Semaphore("call-options-sem", 2, WithTTL(11*time.Second))
	require.NoError(t, err)
	p, err := sem.TryAcquire(ctx, WithTTL(12*time.Second))
	require.NoError(t, err)
	require.GreaterOrEqual(t, c2.maxTTL(), 12*time.Second)
	require.NoError(t, p.Unlock(ctx))
	r, err := c2.TryRLock(ctx, "call-options-r", WithTTL(13*time.Second))
	require.NoError(t, err)
	require.GreaterOrEqual(t, c2.maxTTL(), 13*time.Second)
	require.NoError(t, r.Extend(ctx, WithTTL(14*time.Second)))
	require.GreaterOrEqual(t, c2.maxTTL(), 14*time.Second)
	require.NoError(t, r.Unlock(ctx))

	c3 := newClient(t, cs, WithOwner("o"), WithFencing(true))
	_, err = c3.TryRLock(ctx, "call-options-r3")
	require.ErrorIs(t, err, ErrInvalidOption, "RLock under the Client's WithOwner and WithFencing")
	_, err = c3.Semaphore("call-options-s3", 2)
	require.ErrorIs(t, err, ErrInvalidOption, "Semaphore under the Client's WithOwner and WithFencing")
	_, err = c3.TryLockMulti(ctx, []string{"{call-options}a", "{call-options}b"})
	require.ErrorIs(t, err, ErrInvalidOption, "LockMulti under the Client's WithOwner")
}
