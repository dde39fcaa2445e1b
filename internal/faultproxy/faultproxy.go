// Package faultproxy is a TCP proxy for fault-injection tests: it sits on
// loopback between clients and a database server and can cut connections in
// the middle of a statement, delay traffic, or cut everything at once. Its
// faults are random but bounded, and it only ever dials the one target it
// was given.
package faultproxy

import (
	"math/rand/v2"
	"net"
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
}

// Start listens on 127.0.0.1 (a free port) and forwards to target.
func Start(target string, cfg Config) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
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
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
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
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, true); done <- struct{}{} }()
	go func() { p.pipe(client, server, false); done <- struct{}{} }()
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
		if n > 0 {
			cfg := p.config()
			if faulty && cfg.DelayRate > 0 && rand.Float64() < cfg.DelayRate {
				p.delayed.Add(1)
				time.Sleep(cfg.Delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if faulty && cfg.CutRate > 0 && rand.Float64() < cfg.CutRate {
				p.cut.Add(1)
				dst.Close()
				src.Close()
				return
			}
		}
		if err != nil {
			return // EOF or a cut: either way this direction is done
		}
	}
}
