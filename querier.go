package skiplock

import "context"

// Querier runs SQL. A pool, an acquired connection and a transaction are all
// Queriers, whichever driver is underneath.
//
// This is the narrow seam between queue code and the two pgx drivers
// (jackc/pgx and the YugabyteDB smart driver, whose types differ). Scan
// destinations must be standard Go types (string, int64, time.Time, []byte,
// pointers to them for NULLs) so that both drivers can fill them.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a statement that returns rows. Close the rows when done.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a statement expected to return at most one row. Its
	// error is deferred to Scan.
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows is the result of Query. It matches the common part of both drivers'
// pgx.Rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is the result of QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Tx is a transaction on either driver.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// TxOptions sets how a transaction begins.
type TxOptions struct {
	// Isolation is the isolation level; IsoDefault leaves the server's.
	Isolation IsoLevel
	// GenericPlans runs the transaction's prepared statements on their
	// generic plans, without JIT compilation (SET LOCAL plan_cache_mode =
	// force_generic_plan and jit = off, sent with BEGIN: no extra round
	// trip). Only where the engine has the
	// setting (Dialect.PlanCacheMode). For a statement PostgreSQL would
	// otherwise plan anew at each call once its statistics made a custom
	// plan look cheaper (docs/design.md, "Planning a prepared claim").
	GenericPlans bool

	// Local are SET LOCAL statements the transaction runs first, sent in
	// one message with BEGIN (no round trip of their own): the pool's
	// session settings behind a transaction pooler, where a session's SET
	// would reach other clients (withLocal), or a caller's setting for
	// one transaction. A failed one fails the Begin or, where BEGIN is
	// pipelined, the transaction's first statement.
	Local []string
}

// Beginner starts transactions.
type Beginner interface {
	Begin(ctx context.Context, opts TxOptions) (Tx, error)
}

// Conn is one connection taken from a pool. Release returns it.
type Conn interface {
	Querier
	Beginner
	// Release returns the connection to its pool.
	Release()
	// PID is the server's process id for this connection (0 where the
	// engine has none).
	PID() uint32
	// WaitForNotification blocks until a NOTIFY arrives on a channel this
	// connection LISTENs on, or ctx ends. Only engines with
	// Dialect.Notifications deliver any.
	WaitForNotification(ctx context.Context) (Notification, error)
}

// Notification is one NOTIFY received by a LISTENing connection.
type Notification struct {
	// Channel is the channel it was sent on; Payload its text.
	Channel, Payload string
}

// Pool is a connection pool on either driver.
type Pool interface {
	Querier
	Beginner
	// Acquire takes one connection for exclusive use, for session state
	// such as an advisory lock.
	Acquire(ctx context.Context) (Conn, error)
	// Stats reports the pool's connection counts.
	Stats() PoolStats
	// Close closes every connection.
	Close()
}

// PoolStats are a pool's connection counts.
type PoolStats struct {
	// Total is the number of open connections.
	Total int32
	// Max is the most connections the pool will open.
	Max int32
}

// beginSQL is the BEGIN statement for opts. Both drivers take the level as
// part of BEGIN, which is the one form every engine accepts.
func beginSQL(opts TxOptions) string {
	if opts.Isolation == IsoDefault {
		return "BEGIN"
	}
	return "BEGIN ISOLATION LEVEL " + string(opts.Isolation)
}

// genericPlansSQL is what TxOptions.GenericPlans sends after BEGIN: the
// generic plans, and no JIT compilation. A generic plan is costed for
// parameters unknown, and a statement with branches it rarely runs (a
// partitioned queue's loose scan in the claim of a queue that is not one)
// can be costed past jit_above_cost, and compiled at every run: tens of
// milliseconds for a statement that runs in one.
var genericPlansSQL = []string{"SET LOCAL plan_cache_mode = force_generic_plan", "SET LOCAL jit = off"}

// beginStatements are the statements that open a transaction with opts:
// BEGIN, then the settings opts asks for.
func beginStatements(opts TxOptions) []string {
	out := []string{beginSQL(opts)}
	if opts.GenericPlans {
		out = append(out, genericPlansSQL...)
	}
	out = append(out, opts.Local...)
	return out
}
