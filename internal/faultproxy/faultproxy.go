// Package faultproxy is a TCP proxy for fault-injection tests and network
// emulation: it sits on loopback between clients and a database server and
// can cut connections in the middle of a statement, delay traffic, add a
// fixed latency in each direction (a distributed engine's round trips), or
// cut everything at once. Its faults are random but bounded, and it only
// ever dials the one target it was given.
package faultproxy

import (
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets the faults. The zero value forwards faithfully.
type Config struct {
	// CutRate is the chance, per chunk the client sends, that the proxy
	// cuts the connection after forwarding it: the server has the
	// statement, the client never hears back.
	CutRate float64
	// DelayRate is the chance per chunk of holding it for Delay first.
	DelayRate float64
	// Delay is how long a delayed chunk waits.
	Delay time.Duration
	// Latency is a fixed one-way delay added in each direction: every
	// chunk read from one side is written to the other Latency after it
	// was read, in order, while the proxy keeps reading (a delay line, not
	// a bandwidth limit), so a round trip costs 2*Latency more. It is read
	// when a connection is accepted: SetConfig changes it for later
	// connections only.
	Latency time.Duration
}

// Proxy forwards connections from its loopback address to one target.
type Proxy struct {
	cfg    Config
	target string
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup
	// Counters for the test's report.
	accepted, cut, delayed atomic.Int64
	// held counts chunks sent through a latency delay line; minHeld is
	// the shortest time one was held, in nanoseconds (-1: none yet).
	held, minHeld atomic.Int64
	// toServer counts the chunks read from clients.
	toServer atomic.Int64
}

// Start listens on 127.0.0.1 (a free port) and forwards to target, a
// host:port, or the path of a Unix socket (starting with "/").
func Start(target string, cfg Config) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.minHeld.Store(-1)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns how many connections were accepted, cut, and how many
// chunks were delayed.
func (p *Proxy) Stats() (accepted, cut, delayed int64) {
	return p.accepted.Load(), p.cut.Load(), p.delayed.Load()
}

// Held returns how many chunks went through a Latency delay line and the
// shortest time one of them was held (0 when none was).
func (p *Proxy) Held() (chunks int64, shortest time.Duration) {
	return p.held.Load(), time.Duration(max(p.minHeld.Load(), 0))
}

// ToServer returns how many chunks the proxy has read from its clients.
// A client's one network write arrives as one chunk, and writes it made
// while waiting for an answer in between arrive as several, so for a
// client that waits between its writes it counts round trips.
func (p *Proxy) ToServer() int64 { return p.toServer.Load() }

// SetConfig changes the faults for traffic from now on.
func (p *Proxy) SetConfig(cfg Config) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

func (p *Proxy) config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// CutAll closes every open connection at once, as a network partition
// would.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		c.Close()
		n++
	}
	p.cut.Add(int64(n))
	return n
}

// Close stops accepting, cuts every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	network := "tcp"
	if strings.HasPrefix(p.target, "/") {
		network = "unix"
	}
	server, err := net.DialTimeout(network, p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		client.Close()
		server.Close()
		return
	}
	defer p.track(client, false)
	defer p.track(server, false)
	pipe := p.pipe
	if latency := p.config().Latency; latency > 0 {
		pipe = func(dst, src net.Conn, faulty bool) { p.delayLine(dst, src, faulty, latency) }
	}
	done := make(chan struct{}, 2)
	go func() { pipe(server, client, true); done <- struct{}{} }()
	go func() { pipe(client, server, false); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst; on the client-to-server direction it injects the
// configured faults.
func (p *Proxy) pipe(dst, src net.Conn, faulty bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && faulty {
			p.toServer.Add(1)
		}
		if n > 0 && !p.forward(dst, src, buf[:n], faulty) {
			return
		}
		if err != nil {
			return // EOF or a cut: either way this direction is done
		}
	}
}

// forward writes one chunk to dst with the configured faults (on the
// client-to-server direction); false means this direction is done.
func (p *Proxy) forward(dst, src net.Conn, chunk []byte, faulty bool) bool {
	cfg := p.config()
	if faulty && cfg.DelayRate > 0 && rand.Float64() < cfg.DelayRate {
		p.delayed.Add(1)
		time.Sleep(cfg.Delay)
	}
	if _, err := dst.Write(chunk); err != nil {
		return false
	}
	if faulty && cfg.CutRate > 0 && rand.Float64() < cfg.CutRate {
		p.cut.Add(1)
		dst.Close()
		src.Close()
		return false
	}
	return true
}

// delayLineDepth bounds the chunks in flight in one direction of a
// delay line (at 32 KiB each, 64 MiB): far more than a database
// conversation keeps in flight, so the line adds latency without limiting
// bandwidth.
const delayLineDepth = 2048

// stamped is a chunk and when it may be written.
type stamped struct {
	data []byte
	read time.Time
}

// delayLine copies src to dst as pipe does, but writes each chunk latency
// after it was read: one goroutine reads and stamps chunks, another
// writes them in order at their time, so reading never waits for the
// delay.
func (p *Proxy) delayLine(dst, src net.Conn, faulty bool, latency time.Duration) {
	line := make(chan stamped, delayLineDepth)
	go func() {
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 && faulty {
				p.toServer.Add(1)
			}
			if n > 0 {
				line <- stamped{data: buf[:n], read: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		// Unblock and finish the reader: closing src ends its Read.
		src.Close()
		for range line {
		}
	}()
	timer := time.NewTimer(0)
	<-timer.C
	for c := range line {
		if wait := time.Until(c.read.Add(latency)); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		held := int64(time.Since(c.read))
		p.held.Add(1)
		for cur := p.minHeld.Load(); (cur < 0 || held < cur) && !p.minHeld.CompareAndSwap(cur, held); cur = p.minHeld.Load() {
		}
		if !p.forward(dst, src, c.data, faulty) {
			return
		}
	}
}
