package skiplock

import (
	"context"
	"errors"

	"github.com/skiplock/skiplock/internal/copyio"

	jackcpgx "github.com/jackc/pgx/v5"
	jackcpgconn "github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/skiplock/skiplock/internal/usage"
	ybpgx "github.com/yugabyte/pgx/v5"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"
)

// interpretError maps an error from either pgx driver to skiplock's
// driver-neutral form, once, at the seam (River's drivers do the same with
// their interpretError): a server error becomes a *PgError, and the
// drivers' sentinel errors also match ErrTxClosed, ErrTxCommitRollback and
// ErrNoRows. The driver's own error stays in the chain, so errors.As and
// errors.Is with the driver's types keep working, and the text is the
// driver's. Any other error (a connection failure, with its SafeToRetry
// method) is returned as it is.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	var mine *PgError
	if errors.As(err, &mine) {
		return err
	}
	var jpe *jackcpgconn.PgError
	if errors.As(err, &jpe) {
		return &PgError{Severity: firstNonEmpty(jpe.SeverityUnlocalized, jpe.Severity), Code: jpe.Code,
			Message: jpe.Message, Detail: jpe.Detail, Hint: jpe.Hint, SchemaName: jpe.SchemaName,
			TableName: jpe.TableName, ColumnName: jpe.ColumnName, ConstraintName: jpe.ConstraintName, Err: err}
	}
	var ype *ybpgconn.PgError
	if errors.As(err, &ype) {
		return &PgError{Severity: firstNonEmpty(ype.SeverityUnlocalized, ype.Severity), Code: ype.Code,
			Message: ype.Message, Detail: ype.Detail, Hint: ype.Hint, SchemaName: ype.SchemaName,
			TableName: ype.TableName, ColumnName: ype.ColumnName, ConstraintName: ype.ConstraintName, Err: err}
	}
	for _, s := range []struct{ mine, jackc, yb error }{
		{ErrTxClosed, jackcpgx.ErrTxClosed, ybpgx.ErrTxClosed},
		{ErrTxCommitRollback, jackcpgx.ErrTxCommitRollback, ybpgx.ErrTxCommitRollback},
		{ErrNoRows, jackcpgx.ErrNoRows, ybpgx.ErrNoRows},
		// Both drivers' pools are puddle pools.
		{ErrPoolClosed, puddle.ErrClosedPool, puddle.ErrClosedPool},
	} {
		if errors.Is(err, s.mine) {
			return err
		}
		if errors.Is(err, s.jackc) || errors.Is(err, s.yb) {
			return &sentinelError{sentinel: s.mine, err: err}
		}
	}
	return err
}

// sentinelError is a driver's sentinel error that also matches skiplock's.
type sentinelError struct {
	sentinel error
	err      error
}

func (e *sentinelError) Error() string   { return e.err.Error() }
func (e *sentinelError) Unwrap() []error { return []error{e.sentinel, e.err} }

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// interpretedRows maps the errors of a driver's rows.
type interpretedRows struct{ Rows }

func (r interpretedRows) Scan(dest ...any) error { return interpretError(r.Rows.Scan(dest...)) }
func (r interpretedRows) Err() error             { return interpretError(r.Rows.Err()) }

// interpretedRow maps the error of a driver's row.
type interpretedRow struct{ Row }

func (r interpretedRow) Scan(dest ...any) error { return interpretError(r.Row.Scan(dest...)) }

// interpretedTx maps the errors of a Tx written against a driver directly
// (the pipelined transaction).
type interpretedTx struct{ tx Tx }

func (t interpretedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	n, err := t.tx.Exec(ctx, sql, args...)
	return n, interpretError(err)
}

func (t interpretedTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	return interpretedRows{rows}, nil
}

func (t interpretedTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return interpretedRow{t.tx.QueryRow(ctx, sql, args...)}
}

func (t interpretedTx) Commit(ctx context.Context) error   { return interpretError(t.tx.Commit(ctx)) }
func (t interpretedTx) Rollback(ctx context.Context) error { return interpretError(t.tx.Rollback(ctx)) }

// CopyFrom copies through the Tx when it is a copyio.Copier.
func (t interpretedTx) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	c, ok := t.tx.(copyio.Copier)
	if !ok {
		return 0, usage.Errorf("this transaction cannot COPY: use the INSERT path")
	}
	n, err := c.CopyFrom(ctx, table, columns, src)
	return n, interpretError(err)
}
