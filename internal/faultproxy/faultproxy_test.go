package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// arrival is one line the echo server received, and when.
type arrival struct {
	line string
	at   time.Time
}

// echo runs a line echo server and returns its address and the lines it
// received, in the order they arrived.
func echo(t *testing.T) (string, <-chan arrival) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan arrival, 100)
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
					got <- arrival{line: line, at: time.Now()}
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
	case a := <-got:
		t.Fatalf("the server got %q through a blackhole", a.line)
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

// next returns the next line the echo server received, or fails the test if
// none comes within a generous bound.
func next(t *testing.T, got <-chan arrival) arrival {
	t.Helper()
	select {
	case a := <-got:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("got no request at the server within 5s, want one")
		return arrival{}
	}
}

// waitFor polls cond until it holds, or fails the test after a generous
// bound; what names the condition in the failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("got no %s within 5s, want it", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

func TestLateDeliveryAfterClientCloses(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	const minDelay = 150 * time.Millisecond
	p.SetLate(1, minDelay, 200*time.Millisecond)
	c, _ := dial(t, p)
	start := time.Now()
	write(t, c, "set k v\n")
	// The client gives up at once, as go-redis does after a read timeout;
	// the server must still get the request, late.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	a := next(t, got)
	if a.line != "set k v\n" {
		t.Fatalf("got %q, want %q", a.line, "set k v\n")
	}
	if took := a.at.Sub(start); took < minDelay {
		t.Fatalf("got the request at the server after %v, want at least %v", took, minDelay)
	}
	waitFor(t, "count of a chunk delivered after close", func() bool { return p.Stats().AfterClose == 1 })
	if s := p.Stats(); s.Late != 1 || s.LostReplies != 0 {
		t.Fatalf("got stats %+v, want Late 1 and LostReplies 0", s)
	}
}

func TestLateReordersAcrossConnections(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	a, _ := dial(t, p)
	b, _ := dial(t, p)
	p.SetLate(1, time.Second, time.Second)
	write(t, a, "a\n")
	// Turn late delivery off only once a's chunk is held, so that b's is not.
	waitFor(t, "held chunk", func() bool { return p.Stats().Late == 1 })
	p.SetLate(0, 0, 0)
	write(t, b, "b\n")
	first, second := next(t, got), next(t, got)
	if first.line != "b\n" || second.line != "a\n" {
		t.Fatalf("got %q then %q at the server, want %q then %q", first.line, second.line, "b\n", "a\n")
	}
}

func TestLateKeepsConnectionOrder(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	c, _ := dial(t, p)
	const delay = 200 * time.Millisecond
	p.SetLate(1, delay, delay)
	start := time.Now()
	write(t, c, "0\n")
	waitFor(t, "held chunk", func() bool { return p.Stats().Late == 1 })
	// The next chunks are due at once, but must wait behind the held one.
	p.SetLate(0, 0, 0)
	for i := 1; i < 10; i++ {
		write(t, c, strconv.Itoa(i)+"\n")
	}
	for i := range 10 {
		a := next(t, got)
		if want := strconv.Itoa(i) + "\n"; a.line != want {
			t.Fatalf("got %q at the server, want %q", a.line, want)
		}
		if took := a.at.Sub(start); took < delay {
			t.Fatalf("got line %d at the server after %v, want at least %v: it overtook the held chunk", i, took, delay)
		}
	}
}

func TestLateCombinesWithLatency(t *testing.T) {
	addr, _ := echo(t)
	p := proxy(t, addr)
	c, r := dial(t, p)
	const long = 200 * time.Millisecond
	for _, tc := range []struct {
		name          string
		latency, late time.Duration
	}{
		{"late is longer", 10 * time.Millisecond, long},
		{"latency is longer", long, 10 * time.Millisecond},
	} {
		p.SetLatency(tc.latency, 0)
		p.SetLate(1, tc.late, tc.late)
		_, took, err := roundTrip(t, c, r, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took < long {
			t.Fatalf("%s: got a round trip of %v, want at least %v", tc.name, took, long)
		}
	}
}

func TestLateChunkSwallowedByBlackhole(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	c, _ := dial(t, p)
	p.SetLate(1, 200*time.Millisecond, 200*time.Millisecond)
	write(t, c, "ping\n")
	waitFor(t, "held chunk", func() bool { return p.Stats().Late == 1 })
	p.SetMode(Blackhole)
	select {
	case a := <-got:
		t.Fatalf("the server got %q through a blackhole", a.line)
	case <-time.After(500 * time.Millisecond):
	}
}

func TestCloseDropsLateChunks(t *testing.T) {
	addr, got := echo(t)
	// Only the proxy's goroutines must be gone after Close; the echo server
	// and the test's own run until cleanup.
	ignore := goleak.IgnoreCurrent()
	p := proxy(t, addr)
	p.SetLate(1, time.Minute, time.Minute)
	open, _ := dial(t, p)
	closed, _ := dial(t, p)
	write(t, open, "open\n")
	write(t, closed, "closed\n")
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two held chunks", func() bool { return p.Stats().Late == 2 })

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Close()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("got Close still waiting after 5s, want it to drop the held chunks and return")
	}
	goleak.VerifyNone(t, ignore)
	select {
	case a := <-got:
		t.Fatalf("the server got %q after Close, want nothing", a.line)
	default:
	}
}

func TestLoseRepliesResets(t *testing.T) {
	addr, got := echo(t)
	p := proxy(t, addr)
	p.SetLoseReplies(1)
	c, r := dial(t, p)
	if _, _, err := roundTrip(t, c, r, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want a connection reset", err)
	}
	if a := next(t, got); a.line != "ping\n" {
		t.Fatalf("got %q at the server, want the request it ran", a.line)
	}
	if s := p.Stats(); s.LostReplies != 1 {
		t.Fatalf("got %d lost replies, want 1", s.LostReplies)
	}
	// Unlike Mode Reset, a new connection is accepted and its request
	// reaches the server; only its reply is lost again.
	c2, r2 := dial(t, p)
	if _, _, err := roundTrip(t, c2, r2, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want a connection reset", err)
	}
	next(t, got)

	p.SetLoseReplies(0)
	c3, r3 := dial(t, p)
	if line, _, err := roundTrip(t, c3, r3, 5*time.Second); err != nil || line != "ping\n" {
		t.Fatalf("got %q, %v, want ping", line, err)
	}
}

func TestLoseRepliesMakesGoRedisRetry(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxy(t, m.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // MaxRetries 3
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()

	// A retry on a new connection would lose the reply to the handshake go-redis
	// sends first, and never send INCR, so open idle connections beforehand: four
	// clients blocked at once each need their own.
	const conns = 4
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() { _ = rdb.BLPop(ctx, 0, "warm").Err() })
	}
	waitFor(t, "warm connections", func() bool { return m.CurrentConnectionCount() == conns })
	for range conns {
		if _, err := m.Lpush("warm", "x"); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	if n, err := rdb.Incr(ctx, "n").Result(); err != nil || n != 1 {
		t.Fatalf("got %d, %v, want 1", n, err)
	}
	p.SetLoseReplies(1)
	// go-redis may report the reset as EOF; either way it is a network error,
	// which it retries.
	if err := rdb.Incr(ctx, "n").Err(); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want a connection reset or EOF", err)
	}
	v, err := m.Get("n")
	if err != nil {
		t.Fatal(err)
	}
	ran, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	ran-- // the first INCR
	if ran < 2 {
		t.Fatalf("got the failed INCR run %d times at the server, want more than once", ran)
	}
	t.Logf("the failed INCR ran %d times; %d replies lost", ran, p.Stats().LostReplies)

	p.SetLoseReplies(0)
	if n, err := rdb.Incr(ctx, "n").Result(); err != nil || n != int64(ran)+2 {
		t.Fatalf("got %d, %v, want %d", n, err, ran+2)
	}
}
