package skiplock

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// transactionPooled reports whether the connections cc opens reach the
// server through a transaction pooler. conn is one such connection,
// open. In session mode, and on a direct connection, a client connection
// keeps one server session (one backend pid) for its life, and two open
// client connections never share one. A transaction pooler gives a
// connection whichever server session is free for each transaction, the
// one just released first (PgBouncer's default LIFO): alternating
// statements of two connections then land on one session, and under other
// clients' load each connection's statements move between sessions.
// Either is proof; poolingRounds rounds make missing both unlikely however
// busy the pooler is.
func transactionPooled(ctx context.Context, cc *pgx.ConnConfig, conn *pgx.Conn) (bool, error) {
	pid := func(c *pgx.Conn) (int64, error) {
		var p int64
		err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p)
		return p, err
	}
	other, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer other.Close(context.WithoutCancel(ctx))
	var first, second int64
	for round := range poolingRounds {
		a, err := pid(conn)
		if err != nil {
			return false, err
		}
		b, err := pid(other)
		if err != nil {
			return false, err
		}
		if round == 0 {
			first, second = a, b
		}
		if a == b || a != first || b != second {
			return true, nil
		}
	}
	return false, nil
}

// poolingRounds is how many statement pairs transactionPooled sends.
const poolingRounds = 5

// localSettingsPool sends a pool's session settings with each BEGIN, as
// SET LOCAL in the same message (no round trip of their own), where a
// transaction pooler would hand a connection-wide SET to other clients.
type localSettingsPool struct {
	Pool
	local []string
}

func (p localSettingsPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	opts.local = append(opts.local, p.local...)
	return p.Pool.Begin(ctx, opts)
}

func (p localSettingsPool) Acquire(ctx context.Context) (Conn, error) {
	c, err := p.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return localSettingsConn{Conn: c, local: p.local}, nil
}

// localSettingsConn is an acquired connection of a localSettingsPool.
type localSettingsConn struct {
	Conn
	local []string
}

func (c localSettingsConn) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	opts.local = append(opts.local, c.local...)
	return c.Conn.Begin(ctx, opts)
}

// localForms turns sessionSettings' SET statements into SET LOCAL.
func localForms(settings []string) []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = "SET LOCAL " + strings.TrimPrefix(s, "SET ")
	}
	return out
}
