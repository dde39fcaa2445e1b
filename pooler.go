package skiplock

import (
	"context"
	"slices"
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

// beginHookPool runs every transaction of a pool, and of the connections
// it hands out, through begin, which begins it on b (the pool or the
// connection underneath): the one seam for what a DB adds to its BEGINs
// (a personality's isolation and injected errors, a pooler's SET LOCAL).
type beginHookPool struct {
	Pool
	begin func(ctx context.Context, b Beginner, opts TxOptions) (Tx, error)
}

func (p beginHookPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	return p.begin(ctx, p.Pool, opts)
}

func (p beginHookPool) Acquire(ctx context.Context) (Conn, error) {
	c, err := p.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return beginHookConn{Conn: c, begin: p.begin}, nil
}

// beginHookConn is an acquired connection of a beginHookPool.
type beginHookConn struct {
	Conn
	begin func(ctx context.Context, b Beginner, opts TxOptions) (Tx, error)
}

func (c beginHookConn) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	return c.begin(ctx, c.Conn, opts)
}

// withLocal is a beginHookPool hook that sends local (SET LOCAL
// statements) with each BEGIN, in the same message: a pool's session
// settings where a transaction pooler would hand a connection-wide SET to
// other clients.
func withLocal(local []string) func(context.Context, Beginner, TxOptions) (Tx, error) {
	return func(ctx context.Context, b Beginner, opts TxOptions) (Tx, error) {
		opts.Local = append(slices.Clip(opts.Local), local...)
		return b.Begin(ctx, opts)
	}
}

// localForms turns sessionSettings' SET statements into SET LOCAL.
func localForms(settings []string) []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = "SET LOCAL " + strings.TrimPrefix(s, "SET ")
	}
	return out
}
