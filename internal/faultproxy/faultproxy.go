// Package faultproxy is an in-process TCP proxy that injects network faults
// between one client and one server. The chaos tests put one Proxy between
// each client and each Redis node, so that one client can be cut off from
// some nodes while the others still reach them. The faults are:
//
//   - latency with jitter on every request (SetLatency);
//   - late delivery (SetLate): a request held back at random, which can
//     reach the server after one sent later on another connection, and even
//     after its client gave up and closed the connection;
//   - a blackhole that swallows requests (Mode Blackhole);
//   - silently dropped replies on a live connection (Mode DropReplies);
//   - replies lost at random together with a reset of the connection
//     (SetLoseReplies), so that the client retries a request the server has
//     already run;
//   - resets of every connection, old and new (Mode Reset).
//
// It stands in for github.com/Shopify/toxiproxy/v2, whose library pulls in
// Prometheus, protobuf, a CLI framework and a logger for the few toxics the
// tests use. Faults apply to byte chunks as they are read, not to protocol
// messages, which is all a RESP client can observe.
//
// Every goroutine a Proxy starts ends by Close, which waits for them, so a
// test that closes its proxies leaves nothing behind for goleak.
package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the traffic it carries.
type Mode uint8

const (
	// Pass forwards both ways, after the configured latency.
	Pass Mode = iota
	// Blackhole accepts connections and swallows what clients send, and
	// never answers: a partition that looks like a hung server. Requests
	// never reach the server.
	Blackhole
	// DropReplies forwards requests to the server but swallows its replies:
	// the server acts on a request the client never hears back about.
	DropReplies
	// Reset closes every connection with a TCP reset, and resets new ones
	// as soon as they are accepted: a partition that clients see at once.
	Reset
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case DropReplies:
		return "drop-replies"
	case Reset:
		return "reset"
	}
	return "unknown"
}

// maxQueued bounds the chunks waiting out their latency on one connection;
// the reader blocks beyond it, as a full socket buffer would.
const maxQueued = 256

// drainLinger bounds how long a link whose client has gone waits for the
// server to close after its last request was delivered, so that a server
// which ignores the half-close cannot keep the link forever.
const drainLinger = 5 * time.Second

// Proxy forwards connections from its own 127.0.0.1 port to a target
// address. It is safe for concurrent use and must not be copied; create it
// with New.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every link's goroutines

	mu       sync.Mutex
	mode     Mode               // guarded by mu
	latency  time.Duration      // guarded by mu
	jitter   time.Duration      // guarded by mu
	lateProb float64            // guarded by mu
	lateMin  time.Duration      // guarded by mu
	lateMax  time.Duration      // guarded by mu
	loseProb float64            // guarded by mu
	loseNext int                // guarded by mu; replies to lose whatever loseProb says
	onLost   func()             // guarded by mu; runs after each lost reply
	stats    Stats              // guarded by mu
	rng      *rand.Rand         // guarded by mu
	links    map[*link]struct{} // guarded by mu
	closed   bool               // guarded by mu
}

// Stats counts the faults a Proxy has injected since New, so that a chaos
// test can show that a fault actually fired. It is a snapshot; the zero value
// means nothing fired.
type Stats struct {
	// Late is the number of client chunks that SetLate's rule held back.
	Late int64
	// AfterClose is the number of client chunks written to the server after
	// their client had closed its connection: requests the client gave up
	// on, which the server still received.
	AfterClose int64
	// LostReplies is the number of reply chunks that SetLoseReplies dropped,
	// each with a reset of its client connection.
	LostReplies int64
}

// New starts a proxy to target on a free 127.0.0.1 port. seed seeds every
// random draw (jitter, late delivery, lost replies), so a run can be
// replayed. Call Close to stop it.
func New(target string, seed uint64) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln:     ln,
		target: target,
		rng:    rand.New(rand.NewPCG(seed, 0x6661756c74)),
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy's mode. Switching to Reset resets every open
// connection. Switching away from Blackhole or DropReplies closes every open
// connection too, because the requests or replies they swallowed have left
// them out of step: clients see those connections fail and dial new ones.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	old := p.mode
	p.mode = m
	var drop []*link
	if m == Reset || (old != m && (old == Blackhole || old == DropReplies)) {
		for l := range p.links {
			drop = append(drop, l)
		}
	}
	p.mu.Unlock()
	for _, l := range drop {
		l.close(true)
	}
}

// SetLatency delays every chunk a client sends by latency plus a uniform
// jitter in [-jitter, +jitter], never below zero. Chunks keep their order, as
// on one TCP stream. Replies are not delayed, so a round trip grows by the
// drawn delay once. A delayed chunk still reaches the server if its client
// closes meanwhile, as with SetLate. Zero for both turns the delay off.
func (p *Proxy) SetLatency(latency, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = latency, jitter
	p.mu.Unlock()
}

// SetLate holds back client chunks at random: each chunk a client sends is,
// with probability prob, held for a delay drawn uniformly in [min, max]
// before it is written to the server. Chunks of one connection keep their
// order, as on one TCP stream, so later chunks wait behind a held one; other
// connections are not held up, so a request sent later on another
// connection can reach the server first.
//
// A held chunk is delivered even if its client closes the connection
// meanwhile: the proxy keeps the server connection open until every queued
// chunk is due and written, then half-closes it, and discards the replies.
// That is a request that times out on the client and still runs on the
// server. SetLatency still applies; a chunk is due at the later of the two
// delays. A prob of 0 turns late delivery off.
//
// SetLate panics if prob is outside [0, 1] or if min and max do not satisfy
// 0 <= min <= max, since that is a bug in the calling test.
func (p *Proxy) SetLate(prob float64, min, max time.Duration) {
	if !(prob >= 0 && prob <= 1) {
		panic(fmt.Sprintf("faultproxy: late probability must be in [0, 1], got %v", prob))
	}
	if min < 0 || max < min {
		panic(fmt.Sprintf("faultproxy: late delay needs 0 <= min <= max, got [%v, %v]", min, max))
	}
	p.mu.Lock()
	p.lateProb, p.lateMin, p.lateMax = prob, min, max
	p.mu.Unlock()
}

// SetLoseReplies loses replies at random: requests reach the server as
// usual, but each chunk of a reply is, with probability prob, dropped, and
// its client connection is reset and its server connection closed. The
// server has run the request while the client sees a network error, so a
// client that retries on network errors (go-redis does, MaxRetries times)
// runs it again on a new connection, which the proxy accepts as usual.
// Unlike Mode DropReplies, the client learns at once that the reply is lost.
// Replies that would not reach a client anyway (in Mode Blackhole or
// DropReplies, or after the client closed) are not drawn. A prob of 0 turns
// it off.
//
// SetLoseReplies panics if prob is outside [0, 1], since that is a bug in
// the calling test.
func (p *Proxy) SetLoseReplies(prob float64) {
	if !(prob >= 0 && prob <= 1) {
		panic(fmt.Sprintf("faultproxy: lost-reply probability must be in [0, 1], got %v", prob))
	}
	p.mu.Lock()
	p.loseProb = prob
	p.mu.Unlock()
}

// LoseNext loses the next n reply chunks, as SetLoseReplies does, whatever
// its probability: a deterministic lost reply for tests that need exactly
// one.
func (p *Proxy) LoseNext(n int) {
	p.mu.Lock()
	p.loseNext = n
	p.mu.Unlock()
}

// Stats returns how many faults the proxy has injected so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every connection, drops the chunks still
// waiting out a delay, and waits until every goroutine of the proxy has
// returned.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	var drop []*link
	for l := range p.links {
		drop = append(drop, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range drop {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

// delay draws how long one client chunk waits before it is written to the
// server: its latency, or its late delay if that rule fires and is longer.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.latency
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int64N(int64(2*p.jitter)+1)) - p.jitter
	}
	d = max(d, 0)
	if p.lateProb > 0 && p.rng.Float64() < p.lateProb {
		late := p.lateMin
		if span := p.lateMax - p.lateMin; span > 0 {
			late += time.Duration(p.rng.Int64N(int64(span) + 1))
		}
		d = max(d, late)
		p.stats.Late++
	}
	return d
}

// OnLost sets fn to run each time a reply is lost, before the client's
// connection is reset, so that a test can change the server between a
// request and go-redis's retry of it. nil removes it.
func (p *Proxy) OnLost(fn func()) {
	p.mu.Lock()
	p.onLost = fn
	p.mu.Unlock()
}

// loseReply draws whether the next reply chunk is lost, and counts it.
func (p *Proxy) loseReply() bool {
	p.mu.Lock()
	lose := false
	switch {
	case p.loseNext > 0:
		p.loseNext--
		lose = true
	case p.loseProb > 0 && p.rng.Float64() < p.loseProb:
		lose = true
	}
	fn := p.onLost
	if lose {
		p.stats.LostReplies++
	}
	p.mu.Unlock()
	if lose && fn != nil {
		fn()
	}
	return lose
}

// deliveredAfterClose counts a chunk written after its client had gone.
func (p *Proxy) deliveredAfterClose() {
	p.mu.Lock()
	p.stats.AfterClose++
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed || p.mode == Reset {
			p.mu.Unlock()
			resetConn(c)
			continue
		}
		l := &link{p: p, client: c, done: make(chan struct{})}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

// link is one proxied connection. Its client side may end before its server
// side: the server still gets the chunks queued when the client went.
type link struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed by close

	// clientGone is set once the client connection is closed; from then on
	// replies are discarded.
	clientGone atomic.Bool

	mu     sync.Mutex
	server net.Conn // guarded by mu; nil until dialed
	once   sync.Once
}

// run dials the server and pumps both directions until the server side
// ends, the link is closed, or the client has gone and every chunk it sent
// has been delivered.
func (l *link) run() {
	defer l.p.wg.Done()
	defer l.close(false)
	server, err := net.DialTimeout("tcp", l.p.target, time.Second)
	if err != nil {
		resetConn(l.client)
		return
	}
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		_ = server.Close()
		return
	default:
	}
	l.server = server
	l.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(3)
	queue := make(chan chunk, maxQueued)
	go func() { defer wg.Done(); l.upstream(queue) }()
	go func() { defer wg.Done(); l.deliver(queue, server) }()
	go func() { defer wg.Done(); l.downstream(server) }()
	wg.Wait()
}

// chunk is bytes read from the client, due at the server at a given time.
type chunk struct {
	b  []byte
	at time.Time
}

// upstream reads what the client sends and queues it with its due time.
// When the client ends, it closes the queue but not the link, so that deliver
// still writes what is queued: a request the client gave up on may yet run.
func (l *link) upstream(queue chan<- chunk) {
	defer close(queue)
	defer l.closeClient() // before close(queue), so deliver sees clientGone
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 && l.p.Mode() != Blackhole {
			at := time.Now().Add(l.p.delay())
			if at.Before(last) {
				at = last // one stream: no chunk overtakes another
			}
			last = at
			select {
			case queue <- chunk{b: append([]byte(nil), buf[:n]...), at: at}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver writes queued chunks to the server once they are due. Once the
// queue is closed and drained, the client has gone, so it half-closes the
// server connection rather than closing it: the server reads every request,
// then EOF, and closes its side, which ends downstream and the link. A full
// close could reset the connection and lose the last request.
func (l *link) deliver(queue <-chan chunk, server net.Conn) {
	t := time.NewTimer(0)
	defer t.Stop()
	for c := range queue {
		if d := time.Until(c.at); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-l.done:
				return // closed: what is still queued is dropped
			}
		}
		if l.p.Mode() == Blackhole {
			continue // went dark while the chunk waited
		}
		if _, err := server.Write(c.b); err != nil {
			l.close(false)
			return
		}
		if l.clientGone.Load() {
			l.p.deliveredAfterClose()
		}
	}
	tc, ok := server.(*net.TCPConn)
	if !ok || tc.CloseWrite() != nil || tc.SetReadDeadline(time.Now().Add(drainLinger)) != nil {
		l.close(false)
	}
}

// downstream copies the server's replies to the client, swallows them, or
// loses them with a reset. It reads until the server side ends, even after
// the client has gone, because the link stays open until the server has
// received every chunk queued for it.
func (l *link) downstream(server net.Conn) {
	defer l.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !l.clientGone.Load() {
			switch l.p.Mode() {
			case Blackhole, DropReplies:
			default:
				if l.p.loseReply() {
					l.close(true)
					return
				}
				if _, werr := l.client.Write(buf[:n]); werr != nil {
					l.closeClient() // upstream sees it and lets deliver drain
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// closeClient closes the client side only; the server side stays open until
// deliver has drained the queue. It may be called more than once.
func (l *link) closeClient() {
	l.clientGone.Store(true)
	_ = l.client.Close()
}

// close ends the link at once, dropping whatever is queued; with reset, the
// client sees a TCP reset rather than an orderly close. It may be called
// more than once.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		if reset {
			resetConn(l.client)
		} else {
			_ = l.client.Close()
		}
		l.mu.Lock()
		if l.server != nil {
			_ = l.server.Close()
		}
		l.mu.Unlock()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// resetConn closes c so that the peer gets a RST, not a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
