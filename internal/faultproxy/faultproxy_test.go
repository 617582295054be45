package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echo runs a line echo server and returns its address and a counter of the
// lines it received.
func echo(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 100)
	done := make(chan struct{})
	conns := make(chan net.Conn, 100)
	var wg sync.WaitGroup
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
		wg.Wait()
	})
	return ln.Addr().String(), got
}

func proxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (string, time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := c.SetDeadline(start.Add(timeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", 0, err
	}
	line, err := r.ReadString('\n')
	return line, time.Since(start), err
}

func TestPassAndLatency(t *testing.T) {
	addr, _ := echo(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	line, _, err := roundTrip(t, c, r, time.Second)
	if err != nil || line != "ping\n" {
		t.Fatalf("got %q, %v, want ping", line, err)
	}
	p.SetLatency(50*time.Millisecond, 10*time.Millisecond)
	_, took, err := roundTrip(t, c, r, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 40*time.Millisecond {
		t.Fatalf("got a round trip of %v, want at least 40ms", took)
	}
}

func TestBlackholeSwallowsRequests(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	p.SetMode(Blackhole)
	c, r := dial(t, p)
	_, _, err := roundTrip(t, c, r, 100*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a timeout", err)
	}
	select {
	case line := <-got:
		t.Fatalf("the server got %q through a blackhole", line)
	case <-time.After(50 * time.Millisecond):
	}
	// Healing closes the connection that went dark; a new one works.
	p.SetMode(Pass)
	c2, r2 := dial(t, p)
	if _, _, err := roundTrip(t, c2, r2, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDropRepliesReachesServer(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	p.SetMode(DropReplies)
	c, r := dial(t, p)
	if _, _, err := roundTrip(t, c, r, 100*time.Millisecond); err == nil {
		t.Fatal("got a reply, want none")
	}
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Fatal("the request never reached the server")
	}
}

func TestResetRefusesAndResets(t *testing.T) {
	addr, _ := echo(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	if _, _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Reset)
	if _, _, err := roundTrip(t, c, r, time.Second); err == nil {
		t.Fatal("an open connection survived Reset")
	}
	// A new connection is reset as soon as it is accepted: the dial or
	// the first round trip fails.
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		t.Cleanup(func() { _ = c2.Close() })
		_, _, err = roundTrip(t, c2, bufio.NewReader(c2), time.Second)
		if err == nil {
			t.Fatal("a new connection worked under Reset")
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("got %v, want a reset", err)
	}
}
