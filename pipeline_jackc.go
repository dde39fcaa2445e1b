package skiplock

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/skiplock/skiplock/internal/copyio"
	"github.com/skiplock/skiplock/internal/txhook"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pipelined BEGIN (the default; OpenConfig.SeparateBegin turns it off),
// for the jackc/pgx driver:
// Begin sends nothing; the transaction's first statement goes out in one
// network write with its BEGIN (a pgx batch: BEGIN, the statement, one
// Sync), so a transaction of n statements costs n+1 round trips instead of
// n+2. The server sees the same statements in the same order: BEGIN still
// runs first, alone decides the isolation level, and an error in either
// ends the batch (the statement after a failed BEGIN is not run).
//
// A statement sent under txhook.Last also takes the COMMIT along, after
// it in the same batch: a transaction of one statement costs one round
// trip. The server still runs BEGIN, the statement and COMMIT in order; a
// failed statement makes it skip the COMMIT (the batch's Sync ends the
// skipping) and leaves the transaction aborted, for Rollback to end. The
// COMMIT's outcome is read with the statement's results and returned by
// Commit.
//
// A statement sent under txhook.Then takes along, after its COMMIT, the
// next transaction's BEGIN (the same statements) and first statement: the
// connection passes to that transaction once the COMMIT has succeeded
// (txhook.Chain), Begin under txhook.Resume returns it, and the first
// statement's answer is read when the new transaction sends it. A failed statement or COMMIT makes the server
// skip the rest (up to the Sync), so nothing of the next transaction ran.
//
// It lives apart from driver_jackc.go, which scripts/gen-yugabyte-driver.sh
// copies for the YugabyteDB smart driver: that driver does not take the
// option.

// pipelinedPool is a jackc pool whose transactions pipeline their BEGIN.
type pipelinedPool struct {
	jackcPool
}

func (a pipelinedPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	if c := txhook.ResumeOf(ctx); c != nil && c.Next != nil {
		// The transaction chained after another's COMMIT, begun already
		// with the same statements (or dropped, were they to differ).
		next, ok := c.Next.(*pipelinedTx)
		c.Next = nil
		if ok && slices.Equal(next.begin, beginStatements(opts)) {
			return interpretedTx{next}, nil
		}
		if ok {
			next.Rollback(ctx) //nolint:errcheck // a failed rollback closes the connection; a fresh transaction follows
		}
	}
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
// their BEGIN, and whose queries under txhook.Ahead return once sent.
type pipelinedConn struct {
	jackcConn
}

// Query under txhook.Ahead sends the statement as a batch of one, which
// pgx writes before it returns (once the statement is prepared on this
// connection), and reads its answer when the rows are first read.
func (a pipelinedConn) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	if !txhook.IsAhead(ctx) {
		return a.jackcConn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return interpretedRows{&aheadRows{br: a.q.Conn().SendBatch(ctx, b)}}, nil
}

// aheadRows are the rows of a statement sent ahead: the first Next reads
// its answer.
type aheadRows struct {
	br     pgx.BatchResults
	rows   pgx.Rows
	err    error // reading the answer failed
	closed bool
}

func (r *aheadRows) Next() bool {
	if r.closed || r.err != nil {
		return false
	}
	if r.rows == nil {
		if r.rows, r.err = r.br.Query(); r.err != nil {
			r.Close()
			return false
		}
	}
	if r.rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *aheadRows) Scan(dest ...any) error { return r.rows.Scan(dest...) }

func (r *aheadRows) Err() error {
	if r.err != nil {
		return r.err
	}
	if r.rows != nil {
		return r.rows.Err()
	}
	return nil
}

func (r *aheadRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.rows != nil {
		r.rows.Close()
		if err := r.rows.Err(); err != nil && r.err == nil {
			r.err = err
		}
	}
	if err := r.br.Close(); err != nil && r.err == nil {
		r.err = err
	}
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

	// The COMMIT sent with the last statement (txhook.Last): sent says it
	// went out, read that its answer (tag, err) is in, and rows are the
	// statement's rows while they are open.
	commit struct {
		sent, read bool
		tag        pgconn.CommandTag
		err        error
		rows       *batchRows
		// handedOn says the connection went on to the transaction
		// chained after the COMMIT (txhook.Then): this one is over.
		handedOn bool
	}

	// pending is the answer, not read yet, to the first statement
	// (pendingSQL) of a transaction chained after another's COMMIT.
	pending    pgx.BatchResults
	pendingSQL string
}

// errCommitSent refuses a statement after the one that took COMMIT along.
var errCommitSent = errors.New("skiplock: this transaction's COMMIT was sent with its last statement (txhook.Last): send nothing after it")

// send sends sql in one batch with what must go with it: BEGIN (with its
// settings) if it has not gone out, COMMIT after it if last, and after
// that the chained transaction's BEGIN and first statement if then is
// set. It returns the batch positioned at the statement's result.
func (t *pipelinedTx) send(ctx context.Context, sql string, args []any, last bool, then *txhook.Chain) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	begin := !t.begun
	if begin {
		for _, s := range t.begin {
			b.Queue(s)
		}
	}
	b.Queue(sql, args...)
	if last {
		b.Queue("commit")
		t.commit.sent = true
		txhook.CommitSent(ctx)
		if then != nil {
			for _, s := range t.begin {
				b.Queue(s)
			}
			b.Queue(then.SQL, then.Args...)
		}
	}
	t.begun = true
	br := t.conn.SendBatch(ctx, b)
	if begin {
		for range t.begin {
			if _, err := br.Exec(); err != nil {
				br.Close() //nolint:errcheck // BEGIN's error is the one to report
				return nil, err
			}
		}
	}
	return br, nil
}

// readCommit reads the COMMIT's answer from br, after the statement's
// result, and closes br; Commit returns what it means. With then, a
// COMMIT that succeeded hands the connection on to the chained
// transaction (chain), which keeps br open for its first statement.
func (t *pipelinedTx) readCommit(ctx context.Context, br pgx.BatchResults, then *txhook.Chain) {
	tag, err := br.Exec()
	t.commit.read, t.commit.tag, t.commit.err = true, tag, err
	if err == nil && then != nil && t.chain(ctx, br, then) {
		return
	}
	if cerr := br.Close(); err == nil {
		t.commit.err = cerr
	}
}

// chain reads the chained transaction's BEGIN from br and, once it is
// open, hands it the connection (then.Next). It reports false when the
// BEGIN failed: the caller closes br, and a transaction the failure left
// open is rolled back here, the COMMIT before it standing.
func (t *pipelinedTx) chain(ctx context.Context, br pgx.BatchResults, then *txhook.Chain) bool {
	for range t.begin {
		if _, err := br.Exec(); err != nil {
			br.Close() //nolint:errcheck // the chained transaction did not begin: the next claim begins anew
			if t.conn.PgConn().TxStatus() != 'I' {
				if _, err := t.conn.Exec(context.WithoutCancel(ctx), "rollback"); err != nil {
					_ = t.conn.Close(ctx)
				}
			}
			return false
		}
	}
	next := &pipelinedTx{conn: t.conn, begin: t.begin, begun: true, release: t.release, pending: br, pendingSQL: then.SQL}
	t.release = nil
	t.commit.handedOn = true
	then.Next = next
	return true
}

// dropPending reads and drops the answer to a chained transaction's
// first statement, if it is still to read: a statement that is not that
// one, or the transaction's end, comes first. A failed statement leaves
// the transaction aborted, for Commit to report or Rollback to end.
func (t *pipelinedTx) dropPending() {
	if t.pending != nil {
		t.pending.Close() //nolint:errcheck // see above
		t.pending = nil
	}
}

func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	switch {
	case t.closed:
		return 0, pgx.ErrTxClosed
	case t.commit.sent:
		return 0, errCommitSent
	}
	t.dropPending()
	last := txhook.IsLast(ctx)
	if t.begun && !last {
		tag, err := t.conn.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	var then *txhook.Chain
	if last {
		then = txhook.ChainOf(ctx)
	}
	br, err := t.send(ctx, sql, args, last, then)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if err != nil {
		br.Close() //nolint:errcheck // the statement's error is the one to report
		return 0, err
	}
	if last {
		t.readCommit(ctx, br, then)
		return tag.RowsAffected(), nil
	}
	return tag.RowsAffected(), br.Close()
}

func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	switch {
	case t.closed:
		return nil, pgx.ErrTxClosed
	case t.commit.sent:
		return nil, errCommitSent
	}
	if t.pending != nil && sql == t.pendingSQL {
		br := t.pending
		t.pending = nil
		rows, err := br.Query()
		if err != nil {
			br.Close() //nolint:errcheck // the query's error is the one to report
			return nil, err
		}
		return &batchRows{rows: rows, br: br}, nil
	}
	t.dropPending()
	last := txhook.IsLast(ctx)
	if t.begun && !last {
		rows, err := t.conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return rows, nil
	}
	br, err := t.send(ctx, sql, args, last, nil)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close() //nolint:errcheck // the query's error is the one to report
		return nil, err
	}
	r := &batchRows{rows: rows, br: br}
	if last {
		r.commit = t
		t.commit.rows = r
	}
	return r, nil
}

func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	if !t.closed && t.begun && !t.commit.sent && !txhook.IsLast(ctx) && t.pending == nil {
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
	t.dropPending()
	var tag pgconn.CommandTag
	var err error
	if t.commit.sent {
		// Its answer was read with the statement's rows (now, if they
		// are still open).
		t.closeLastRows()
		tag, err = t.commit.tag, t.commit.err
		if !t.commit.read {
			err = errors.New("skiplock: the COMMIT sent with the last statement was not read")
		}
	} else {
		tag, err = t.conn.Exec(ctx, "commit")
	}
	if err != nil {
		if t.conn.PgConn().TxStatus() != 'I' && !t.commit.handedOn {
			// The statement before a pipelined COMMIT failed (the server
			// skipped the COMMIT), or the outcome is unknown: end the
			// transaction with the connection.
			_ = t.conn.Close(ctx)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// closeLastRows closes the rows of the statement the COMMIT went with, if
// still open, which reads the COMMIT's answer.
func (t *pipelinedTx) closeLastRows() {
	if r := t.commit.rows; r != nil && !r.closed {
		r.Close()
	}
}

// Rollback rolls back as pgx's Tx does.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.done()
	if !t.begun || t.commit.handedOn {
		return nil // a handed-on transaction's COMMIT succeeded
	}
	t.dropPending()
	if t.commit.sent {
		t.closeLastRows()
		if t.conn.PgConn().TxStatus() == 'I' {
			return nil // the COMMIT ran, or the batch never reached the server
		}
		// The statement failed: the server skipped the COMMIT.
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
// batch's end, which frees the connection for the next statement, and
// the COMMIT sent after them if there is one (commit).
type batchRows struct {
	rows     pgx.Rows
	br       pgx.BatchResults
	commit   *pipelinedTx // the transaction whose COMMIT follows; nil: none
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
	if r.commit != nil && r.rows.Err() == nil {
		r.commit.readCommit(context.Background(), r.br, nil)
		return
	}
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
	if t.commit.sent {
		return 0, errCommitSent
	}
	t.dropPending()
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
