package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/skiplock/skiplock/internal/usage"
)

// The two pgx drivers have the same method shapes over different types. The
// generic adapter below is written once and instantiated for each, so the
// driver files hold only what truly differs (Begin, Acquire, PID). Every
// error that crosses it is mapped to skiplock's driver-neutral form
// (interpretError): a *PgError for the server's errors, ErrTxClosed,
// ErrTxCommitRollback and ErrNoRows for the drivers' sentinels.

type commandTag interface{ RowsAffected() int64 }

type driverQuerier[Tag commandTag, R Rows, RW Row] interface {
	Exec(ctx context.Context, sql string, args ...any) (Tag, error)
	Query(ctx context.Context, sql string, args ...any) (R, error)
	QueryRow(ctx context.Context, sql string, args ...any) RW
}

// adapt turns a driver's pool, connection or transaction into a Querier.
type adapt[Tag commandTag, R Rows, RW Row, Q driverQuerier[Tag, R, RW]] struct{ q Q }

func (a adapt[Tag, R, RW, Q]) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := a.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), interpretError(err)
}

func (a adapt[Tag, R, RW, Q]) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	rows, err := a.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	return interpretedRows{rows}, nil
}

func (a adapt[Tag, R, RW, Q]) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return interpretedRow{a.q.QueryRow(ctx, sql, args...)}
}

// driverTx is what both drivers' pgx.Tx offer beyond querying.
type driverTx[Tag commandTag, R Rows, RW Row] interface {
	driverQuerier[Tag, R, RW]
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// adaptTx turns a driver's transaction into a Tx.
type adaptTx[Tag commandTag, R Rows, RW Row, T driverTx[Tag, R, RW]] struct {
	adapt[Tag, R, RW, T]
}

func (a adaptTx[Tag, R, RW, T]) Commit(ctx context.Context) error {
	return interpretError(a.q.Commit(ctx))
}

func (a adaptTx[Tag, R, RW, T]) Rollback(ctx context.Context) error {
	return interpretError(a.q.Rollback(ctx))
}

// CopyFrom runs the driver's CopyFrom: each driver file offers a function
// that recognizes its own module's queriers (jackcCopy, ybCopy).
func (a adapt[Tag, R, RW, Q]) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	for _, cp := range []func(context.Context, any, []string, []string, copyio.Source) (int64, bool, error){jackcCopy, ybCopy} {
		if n, ok, err := cp(ctx, a.q, table, columns, src); ok {
			return n, err
		}
	}
	return 0, usage.Errorf("this connection's driver cannot COPY: use the INSERT path")
}
