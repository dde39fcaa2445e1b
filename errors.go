package skiplock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/usage"
)

// Errors every layout shares. Compare with errors.Is.
var (
	// ErrLeaseLost says the job was leased to someone else (or finished)
	// since this worker claimed it: the call changed nothing, and the worker
	// must drop the job without reporting a result.
	ErrLeaseLost = errors.New("skiplock: lease lost: the job has since been claimed by another worker or finished; the result was not recorded")
	// ErrNoJob says a lookup found no job with that id.
	ErrNoJob = usage.ErrNoJob
	// ErrClosed says the queue or worker was used after Close or Stop.
	ErrClosed = errors.New("skiplock: closed")
	// ErrTxClosed says a statement, COMMIT or ROLLBACK was sent on a
	// transaction that had already been committed or rolled back. Both
	// drivers' ErrTxClosed match it.
	ErrTxClosed = errors.New("skiplock: the transaction was already committed or rolled back")
	// ErrTxCommitRollback says the server answered COMMIT with ROLLBACK,
	// because a statement in the transaction had failed: nothing was
	// committed. Both drivers' ErrTxCommitRollback match it.
	ErrTxCommitRollback = errors.New("skiplock: COMMIT answered ROLLBACK (a statement in the transaction had failed): nothing was committed")
	// ErrNoRows says QueryRow found no row. Both drivers' ErrNoRows match
	// it.
	ErrNoRows = errors.New("skiplock: no rows in result set")
	// ErrPoolClosed says a statement was sent through a pool after it was
	// closed: open a new one. Both drivers' pools report it.
	ErrPoolClosed = errors.New("skiplock: the connection pool is closed")
)

// PgError is an error the server sent, whichever driver received it. The
// driver adapters map both drivers' *pgconn.PgError to it, so that code
// above the Querier seam (package retry, the layouts, handlers holding a
// Tx) reads the SQLSTATE, severity and message without importing a driver.
// Err keeps the driver's own error: errors.As with the driver's
// *pgconn.PgError still finds it.
type PgError struct {
	// Severity is the unlocalized severity: ERROR, FATAL or PANIC.
	Severity string
	// Code is the SQLSTATE, such as "40001".
	Code string
	// Message is the server's primary message.
	Message string
	// Detail and Hint are the server's optional secondary texts.
	Detail, Hint string
	// SchemaName, TableName, ColumnName and ConstraintName name the object
	// at fault, when the server says.
	SchemaName, TableName, ColumnName, ConstraintName string
	// Err is the driver's error; nil for a PgError built by hand.
	Err error
}

// Error returns the driver's text, or, for a PgError built by hand, the
// same "SEVERITY: message (SQLSTATE code)" form.
func (e *PgError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Severity + ": " + e.Message + " (SQLSTATE " + e.Code + ")"
}

// SQLState returns the SQLSTATE code.
func (e *PgError) SQLState() string { return e.Code }

// Unwrap returns the driver's error.
func (e *PgError) Unwrap() error { return e.Err }

// SQLState returns the SQLSTATE code of the first error in err's chain that
// has one, from either pgx driver or anything else that offers a
// SQLState() string method, or "" if none does.
func SQLState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// ErrStandby is in the chain of the error a Worker's or a client's Start
// returns when the server is a read-only standby: workers need the
// primary.
var ErrStandby = errors.New("the server is a read-only standby (pg_is_in_recovery() is true): workers need the primary: point the DSN at it, or list every host with target_session_attrs=read-write so that the driver finds the primary, also after a failover")

// CheckWritable returns an error wrapping ErrStandby when the server is a
// read-only standby. A server that cannot say (no pg_is_in_recovery)
// passes: its writes report what is wrong. A check that found the server
// writable less than writableFor ago stands without asking again: a
// client's Start checks, then each of its queues' Workers does, and
// behind a distributed engine's round trip each check is paid before the
// first claim.
func (db *DB) CheckWritable(ctx context.Context) error {
	if at := atomic.LoadInt64(&db.writableAt); at != 0 && time.Since(time.Unix(0, at)) < writableFor {
		return nil
	}
	var standby bool
	err := db.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby)
	switch {
	case err != nil:
		return nil
	case standby:
		return ErrStandby
	}
	atomic.StoreInt64(&db.writableAt, time.Now().UnixNano())
	return nil
}

// writableFor is how long a CheckWritable that found the server writable
// stands: the starts of one process's workers, not a failover's time.
const writableFor = time.Second
