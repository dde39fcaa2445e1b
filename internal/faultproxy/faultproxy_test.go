package faultproxy_test

import (
	"context"
	"net/url"
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
