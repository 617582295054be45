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
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/redistest"
)

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
