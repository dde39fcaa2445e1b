package skiplock

//go:generate bash scripts/gen-yugabyte-driver.sh

import (
	"context"
	"strings"
	"sync"
	"time"

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

// jackcCheckConn checks the connection of q when it is a jackc/pgx
// transaction: ok says it was one.
func jackcCheckConn(q any) (ok bool, err error) {
	tx, ok := q.(pgx.Tx)
	if !ok {
		return false, nil
	}
	return true, jackcConnClosed(tx.Conn().PgConn())
}

// jackcConnClosed reads what the server has sent on c, waiting at most a
// millisecond, and sends nothing: an error says the connection is closed
// (a FATAL message from the server, or the end of the stream). It is
// pgx's CheckConn, which pgx deprecates in favour of Ping, a round trip
// that a watch over a running transaction should not pay.
func jackcConnClosed(c *pgconn.PgConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := c.ReceiveMessage(ctx); err != nil && !pgconn.Timeout(err) {
		return err
	}
	return nil
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

// jackcWarmIdle runs w's warmups on each connection idle in p now, side
// by side, and returns once each is back in the pool.
func jackcWarmIdle(ctx context.Context, p *pgxpool.Pool, w *warmups) {
	var wg sync.WaitGroup
	for _, c := range p.AcquireAllIdle(ctx) {
		wg.Go(func() {
			defer c.Release()
			jackcWarm(ctx, c.Conn(), w)
		})
	}
	wg.Wait()
}

// jackcWarm runs w's warmups on c, a connection the pool just opened or an
// idle one (see warmups), and leaves it idle whatever they did: a failed
// warm-up is not the connection's failure.
func jackcWarm(ctx context.Context, c *pgx.Conn, w *warmups) {
	ws := w.load()
	if len(ws) == 0 {
		return
	}
	b := &pgx.Batch{}
	for _, s := range w.begin {
		b.Queue(s)
	}
	for _, s := range ws {
		b.Queue(s.SQL, s.Args...)
	}
	b.Queue("ROLLBACK")
	c.SendBatch(ctx, b).Close() //nolint:errcheck // see above
	if c.PgConn().TxStatus() != 'I' {
		c.Exec(ctx, "ROLLBACK") //nolint:errcheck // a connection that cannot roll back fails its first statement
	}
}
