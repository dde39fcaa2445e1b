package skiplock

//go:generate bash scripts/gen-yugabyte-driver.sh

import (
	"context"
	"strings"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

type (
	jackcQuerier[Q driverQuerier[pgconn.CommandTag, pgx.Rows, pgx.Row]] = adapt[pgconn.CommandTag, pgx.Rows, pgx.Row, Q]
	jackcTx                                                             = adaptTx[pgconn.CommandTag, pgx.Rows, pgx.Row, pgx.Tx]
)

// WrapTx adapts a caller's own jackc/pgx transaction to a Tx, so that queue
// code can run inside it (the layouts' EnqueueTx). Committing or rolling
// back stays the caller's business. Errors through the Tx are mapped as
// every adapter maps them (see PgError).
func WrapTx(tx pgx.Tx) Tx { return jackcTx{adapt[pgconn.CommandTag, pgx.Rows, pgx.Row, pgx.Tx]{tx}} }

func jackcBegin(ctx context.Context, b interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, opts TxOptions) (Tx, error) {
	o := pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(opts.Isolation)}
	if stmts := beginStatements(opts); len(stmts) > 1 {
		// pgx sends a BeginQuery without arguments by the simple protocol,
		// which takes several statements in one message: one round trip.
		o.BeginQuery = strings.Join(stmts, "; ")
	}
	tx, err := b.BeginTx(ctx, o)
	if err != nil {
		return nil, interpretError(err)
	}
	return WrapTx(tx), nil
}

// jackcPool adapts a jackc/pgx pool to Pool.
type jackcPool struct {
	jackcQuerier[*pgxpool.Pool]
}

func newJackcPool(p *pgxpool.Pool) jackcPool { return jackcPool{jackcQuerier[*pgxpool.Pool]{p}} }

func (a jackcPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	return jackcBegin(ctx, a.q, opts)
}

func (a jackcPool) Acquire(ctx context.Context) (Conn, error) {
	c, err := a.q.Acquire(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	return jackcConn{jackcQuerier[*pgxpool.Conn]{c}}, nil
}

func (a jackcPool) Stats() PoolStats {
	s := a.q.Stat()
	return PoolStats{Total: s.TotalConns(), Max: s.MaxConns()}
}

func (a jackcPool) Close() { a.q.Close() }

// jackcConn adapts an acquired jackc/pgx connection to Conn.
type jackcConn struct {
	jackcQuerier[*pgxpool.Conn]
}

func (a jackcConn) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	return jackcBegin(ctx, a.q, opts)
}

func (a jackcConn) Release() { a.q.Release() }

func (a jackcConn) PID() uint32 { return a.q.Conn().PgConn().PID() }

func (a jackcConn) WaitForNotification(ctx context.Context) (Notification, error) {
	n, err := a.q.Conn().WaitForNotification(ctx)
	if err != nil {
		return Notification{}, interpretError(err)
	}
	return Notification{Channel: n.Channel, Payload: n.Payload}, nil
}

// jackcCopy runs CopyFrom on q when q is a jackc/pgx querier; ok is false
// when it is not.
func jackcCopy(ctx context.Context, q any, table []string, columns []string, src copyio.Source) (n int64, ok bool, err error) {
	c, ok := q.(interface {
		CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
	})
	if !ok {
		return 0, false, nil
	}
	n, err = c.CopyFrom(ctx, pgx.Identifier(table), columns, src)
	return n, true, interpretError(err)
}
