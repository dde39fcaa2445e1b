package bench

import (
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/faultproxy"
	"github.com/skiplock/skiplock/internal/usage"
)

// startRTTProxy starts a loopback proxy to dsn's server that adds rtt/2 in
// each direction (Config.RTT) and returns it with dsn rewritten to go
// through it. Only the server's address changes; the password stays in
// the returned DSN, so print it only through skiplock.RedactDSN.
func startRTTProxy(dsn string, rtt time.Duration) (*faultproxy.Proxy, string, error) {
	cc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors show the DSN with its password blanked.
		return nil, "", usage.Errorf("--rtt: the DSN does not parse: %v", err)
	}
	target := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	if strings.HasPrefix(cc.Host, "/") {
		target = filepath.Join(cc.Host, ".s.PGSQL."+strconv.Itoa(int(cc.Port)))
	}
	p, err := faultproxy.Start(target, faultproxy.Config{Latency: rtt / 2})
	if err != nil {
		return nil, "", err
	}
	return p, throughProxy(dsn, p.Addr()), nil
}

// throughProxy rewrites dsn, in URL or key=value form, to connect to addr
// (a loopback host:port) instead of its server. The YugabyteDB smart
// driver is told not to balance its connections over the universe's
// other servers, which would bypass the proxy.
func throughProxy(dsn, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = addr
		q := u.Query()
		q.Del("host")
		q.Del("port")
		q.Set("load_balance", "false")
		u.RawQuery = q.Encode()
		return u.String()
	}
	// Key=value: a later key overrides an earlier one (libpq and pgx).
	return dsn + " host=" + host + " port=" + port + " load_balance=false"
}
