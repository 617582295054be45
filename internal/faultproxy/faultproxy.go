// Package faultproxy is an in-process TCP proxy that injects network faults
// between one client and one server: latency with jitter, a blackhole, lost
// replies, and connection resets. The chaos tests put one Proxy between each
// client and each Redis node, so that one client can be cut off from some
// nodes while the others still reach them.
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
	"math/rand/v2"
	"net"
	"sync"
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

// Proxy forwards connections from its own 127.0.0.1 port to a target
// address. It is safe for concurrent use and must not be copied; create it
// with New.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every link's goroutines

	mu      sync.Mutex
	mode    Mode               // guarded by mu
	latency time.Duration      // guarded by mu
	jitter  time.Duration      // guarded by mu
	rng     *rand.Rand         // guarded by mu
	links   map[*link]struct{} // guarded by mu
	closed  bool               // guarded by mu
}

// New starts a proxy to target on a free 127.0.0.1 port. seed seeds the
// jitter, so a run can be replayed. Call Close to stop it.
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
// drawn delay once. Zero for both turns the delay off.
func (p *Proxy) SetLatency(latency, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = latency, jitter
	p.mu.Unlock()
}

// Close stops accepting, closes every connection, and waits until every
// goroutine of the proxy has returned.
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

// delay draws the latency of one chunk.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.latency
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int64N(int64(2*p.jitter)+1)) - p.jitter
	}
	return max(d, 0)
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

// link is one proxied connection.
type link struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed by close

	mu     sync.Mutex
	server net.Conn // guarded by mu; nil until dialed
	once   sync.Once
}

// run dials the server and pumps both directions until either side ends.
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
func (l *link) upstream(queue chan<- chunk) {
	defer close(queue)
	defer l.close(false)
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

// deliver writes queued chunks to the server once they are due.
func (l *link) deliver(queue <-chan chunk, server net.Conn) {
	defer l.close(false)
	t := time.NewTimer(0)
	defer t.Stop()
	for c := range queue {
		if d := time.Until(c.at); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-l.done:
				return
			}
		}
		if l.p.Mode() == Blackhole {
			continue // went dark while the chunk waited
		}
		if _, err := server.Write(c.b); err != nil {
			return
		}
	}
}

// downstream copies the server's replies to the client, or swallows them.
func (l *link) downstream(server net.Conn) {
	defer l.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			switch l.p.Mode() {
			case Blackhole, DropReplies:
			default:
				if _, werr := l.client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// close ends the link; with reset, the client sees a TCP reset rather than
// an orderly close. It may be called more than once.
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
