package faultproxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/faultproxy"
	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// through rewrites a DSN to go through the proxy.
func through(t *testing.T, dsn, addr string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Skip("test DSN is not a URL")
	}
	u.Host = addr
	return u.String()
}

func TestProxyForwardsThenCuts(t *testing.T) {
	p, err := faultproxy.Start(hostOf(t, testdb.DSN(t)), faultproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, through(t, testdb.DSN(t), p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
		t.Fatalf("through the proxy: %d, %v", n, err)
	}
	if p.CutAll() == 0 {
		t.Fatal("no connection to cut")
	}
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err == nil {
		t.Fatal("a query on a cut connection succeeded")
	}
	// Every chunk cut: connecting fails.
	p.SetConfig(faultproxy.Config{CutRate: 1})
	if c, err := pgx.Connect(ctx, through(t, testdb.DSN(t), p.Addr())); err == nil {
		c.Close(ctx)
		t.Fatal("connected through a proxy that cuts everything")
	}
	accepted, cut, _ := p.Stats()
	if accepted < 2 || cut < 2 {
		t.Fatalf("stats: accepted %d cut %d", accepted, cut)
	}
}

func hostOf(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skip("test DSN is not a URL with a host")
	}
	return u.Host
}

// echoServer echoes every connection back until it closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c) //nolint:errcheck // the test reads what came back
			}()
		}
	}()
	return ln.Addr().String()
}

// With a latency, every byte still arrives once, in order, on many
// connections at once, while both directions are busy; and a round trip
// is held at least twice the one-way latency (a bound the delay line
// guarantees, not a measure of the machine's speed).
func TestLatencyKeepsOrderAndContent(t *testing.T) {
	const latency = 5 * time.Millisecond
	p, err := faultproxy.Start(echoServer(t), faultproxy.Config{Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// One small round trip first: it cannot come back sooner than 2x.
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	if rtt := time.Since(start); rtt < 2*latency {
		t.Fatalf("a round trip took %v through a proxy adding %v each way", rtt, latency)
	}
	c.Close()

	const conns, size = 8, 2 << 20
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echoThrough(p.Addr(), uint64(i), size)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	chunks, shortest := p.Held()
	if chunks == 0 || shortest < latency {
		t.Fatalf("held %d chunks, the shortest for %v: want every chunk held at least %v", chunks, shortest, latency)
	}
}

// echoThrough sends size pseudo-random bytes in writes of random sizes
// while reading the echo back, and checks it byte for byte.
func echoThrough(addr string, seed uint64, size int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	want := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, 42))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	wrote := make(chan error, 1)
	go func() {
		for off := 0; off < size; {
			n := min(1+r.IntN(40<<10), size-off)
			if _, err := c.Write(want[off : off+n]); err != nil {
				wrote <- err
				return
			}
			off += n
		}
		wrote <- nil
	}()
	got := make([]byte, size)
	c.SetReadDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // a plain TCP conn
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("connection %d: read the echo: %w", seed, err)
	}
	if err := <-wrote; err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		return fmt.Errorf("connection %d: the echo differs from byte %d on", seed, i)
	}
	return nil
}
