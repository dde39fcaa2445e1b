package skiplock

import (
	"context"
	"strings"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pipelined BEGIN (OpenConfig.PipelineBegin), for the jackc/pgx driver:
// Begin sends nothing; the transaction's first statement goes out in one
// network write with its BEGIN (a pgx batch: BEGIN, the statement, one
// Sync), so a transaction of n statements costs n+1 round trips instead of
// n+2. The server sees the same statements in the same order: BEGIN still
// runs first, alone decides the isolation level, and an error in either
// ends the batch (the statement after a failed BEGIN is not run).
//
// It lives apart from driver_jackc.go, which scripts/gen-yugabyte-driver.sh
// copies for the YugabyteDB smart driver: that driver does not take the
// option.

// pipelinedPool is a jackc pool whose transactions pipeline their BEGIN.
type pipelinedPool struct {
	jackcPool
}

func (a pipelinedPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	c, err := a.q.Acquire(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	return interpretedTx{&pipelinedTx{conn: c.Conn(), begin: beginStatements(opts), release: c.Release}}, nil
}

func (a pipelinedPool) Acquire(ctx context.Context) (Conn, error) {
	c, err := a.q.Acquire(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	return pipelinedConn{jackcConn{jackcQuerier[*pgxpool.Conn]{c}}}, nil
}

// pipelinedConn is an acquired connection whose transactions pipeline
// their BEGIN.
type pipelinedConn struct {
	jackcConn
}

func (a pipelinedConn) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	return interpretedTx{&pipelinedTx{conn: a.q.Conn(), begin: beginStatements(opts)}}, nil
}

// pipelinedTx is a transaction whose BEGIN has not been sent until its
// first statement. Like pgx's, it is not safe for concurrent use.
type pipelinedTx struct {
	conn    *pgx.Conn
	begin   []string // BEGIN and the settings TxOptions asked for
	begun   bool     // BEGIN has gone out (with the first statement)
	closed  bool     // committed or rolled back
	release func()   // gives a pool's connection back; nil for a Conn's
}

// first sends BEGIN (with its settings) and the first statement in one
// batch and returns the batch positioned at the statement's result.
func (t *pipelinedTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.begun = true
	b := &pgx.Batch{}
	for _, s := range t.begin {
		b.Queue(s)
	}
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	for range t.begin {
		if _, err := br.Exec(); err != nil {
			br.Close() //nolint:errcheck // BEGIN's error is the one to report
			return nil, err
		}
	}
	return br, nil
}

func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if t.closed {
		return 0, pgx.ErrTxClosed
	}
	if t.begun {
		tag, err := t.conn.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	br, err := t.first(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}

func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	if t.begun {
		rows, err := t.conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return rows, nil
	}
	br, err := t.first(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close() //nolint:errcheck // the query's error is the one to report
		return nil, err
	}
	return &batchRows{rows: rows, br: br}, nil
}

func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	if !t.closed && t.begun {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return batchRow{rows: rows, err: err}
}

// Commit commits as pgx's Tx does. A transaction that never ran a
// statement sent nothing, and commits nothing.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.done()
	if !t.begun {
		return nil
	}
	tag, err := t.conn.Exec(ctx, "commit")
	if err != nil {
		if t.conn.PgConn().TxStatus() != 'I' {
			_ = t.conn.Close(ctx) // the error to return is err; the connection's state is unknown
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back as pgx's Tx does.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.done()
	if !t.begun {
		return nil
	}
	if _, err := t.conn.Exec(ctx, "rollback"); err != nil {
		_ = t.conn.Close(ctx) // a failed rollback leaves the connection in an unknown state
		return err
	}
	return nil
}

func (t *pipelinedTx) done() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

// batchRows are the first statement's rows; closing them also reads the
// batch's end, which frees the connection for the next statement.
type batchRows struct {
	rows     pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) Next() bool {
	if r.rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Scan(dest ...any) error { return r.rows.Scan(dest...) }

func (r *batchRows) Err() error {
	if err := r.rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.rows.Close()
	r.closeErr = r.br.Close()
}

// batchRow is QueryRow over the first statement, with pgx's semantics:
// no row is pgx.ErrNoRows.
type batchRow struct {
	rows Rows
	err  error
}

func (r batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// CopyFrom sends BEGIN on its own first if no statement has: COPY cannot
// share a batch with it.
func (t *pipelinedTx) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	if t.closed {
		return 0, pgx.ErrTxClosed
	}
	if !t.begun {
		t.begun = true
		// Without arguments pgx sends the simple protocol, which takes
		// several statements in one message.
		if _, err := t.conn.Exec(ctx, strings.Join(t.begin, "; ")); err != nil {
			return 0, err
		}
	}
	return t.conn.CopyFrom(ctx, pgx.Identifier(table), columns, src)
}
