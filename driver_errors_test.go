package skiplock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	jackcpgx "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	ybpgx "github.com/yugabyte/pgx/v5"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"
	ybpgxpool "github.com/yugabyte/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestDriverErrorsAreMapped: every error crossing either adapter, from a
// pool, an acquired connection, a transaction skiplock began or a caller's
// wrapped one, is mapped once to the driver-neutral form (so package retry
// needs no driver), and the driver's own error stays in the chain.
func TestDriverErrorsAreMapped(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := d.Open(t, nil)
		s := sqlident.Quote(testdb.Schema(t, db))
		if _, err := db.Exec(ctx, "CREATE SCHEMA "+s); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, "CREATE TABLE "+s+".t (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		// isDriverPgError reports whether the driver's own error is still
		// in the chain, and that it is this adapter's driver's.
		isDriverPgError := func(err error) bool {
			var jpe *pgconn.PgError
			var ype *ybpgconn.PgError
			if d.Name == "jackc" {
				return errors.As(err, &jpe) && !errors.As(err, &ype)
			}
			return errors.As(err, &ype) && !errors.As(err, &jpe)
		}
		checkUnique := func(where string, err error) {
			t.Helper()
			var pe *skiplock.PgError
			if !errors.As(err, &pe) {
				t.Fatalf("%s: %v (%T) is not a *skiplock.PgError", where, err, err)
			}
			if pe.Code != "23505" || pe.Severity != "ERROR" || pe.ConstraintName != "t_pkey" || pe.TableName != "t" || pe.Message == "" {
				t.Fatalf("%s: mapped %+v: want code 23505, severity ERROR, constraint t_pkey on t", where, pe)
			}
			if skiplock.SQLState(err) != "23505" || !isDriverPgError(err) {
				t.Fatalf("%s: SQLState %q, driver error kept %v", where, skiplock.SQLState(err), isDriverPgError(err))
			}
			if !strings.Contains(err.Error(), "SQLSTATE 23505") {
				t.Fatalf("%s: text %q is not the driver's", where, err)
			}
		}
		insert := "INSERT INTO " + s + ".t VALUES (1)"
		if _, err := db.Exec(ctx, insert); err != nil {
			t.Fatal(err)
		}
		_, err := db.Exec(ctx, insert)
		checkUnique("pool Exec", err)
		err = queryErr(ctx, db, "SELECT 1/0")
		if skiplock.SQLState(err) != "22012" || !errors.As(err, new(*skiplock.PgError)) {
			t.Fatalf("pool Query: %v: want a mapped 22012", err)
		}
		err = db.QueryRow(ctx, "SELECT id FROM "+s+".t WHERE id = 2").Scan(new(int64))
		if !errors.Is(err, skiplock.ErrNoRows) || !(errors.Is(err, jackcpgx.ErrNoRows) || errors.Is(err, ybpgx.ErrNoRows)) {
			t.Fatalf("QueryRow of no row: %v: want skiplock.ErrNoRows and the driver's", err)
		}

		// A transaction skiplock began: a failed statement, then COMMIT
		// answers ROLLBACK, then the transaction is closed.
		tx, err := db.Begin(ctx, skiplock.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, insert)
		checkUnique("tx Exec", err)
		if err := tx.Commit(ctx); !errors.Is(err, skiplock.ErrTxCommitRollback) {
			t.Fatalf("COMMIT after a failed statement: %v: want skiplock.ErrTxCommitRollback", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, skiplock.ErrTxClosed) {
			t.Fatalf("ROLLBACK after COMMIT: %v: want skiplock.ErrTxClosed", err)
		}

		// An acquired connection.
		conn, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, insert)
		conn.Release()
		checkUnique("conn Exec", err)

		// A caller's own driver transaction, wrapped.
		own := d.Begin(t)
		err = queryErr(ctx, own, insert+" RETURNING id")
		checkUnique("caller's tx Query", err)
		if err := own.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := own.Exec(ctx, "SELECT 1"); !errors.Is(err, skiplock.ErrTxClosed) {
			t.Fatalf("statement after ROLLBACK: %v: want skiplock.ErrTxClosed", err)
		}
	})
}

// queryErr runs a query and returns its error, whether Query or the rows
// report it.
func queryErr(ctx context.Context, q skiplock.Querier, sql string) error {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// TestPipelinedBeginErrorsAreMapped: the jackc pool's pipelined BEGIN
// writes its own transaction, whose errors are mapped too.
func TestPipelinedBeginErrorsAreMapped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Open(t, &skiplock.OpenConfig{})
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT 1/0")
	var pe *skiplock.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" || pe.Severity != "ERROR" {
		t.Fatalf("first statement: %v: want a mapped 22012", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, skiplock.ErrTxCommitRollback) {
		t.Fatalf("COMMIT after a failed statement: %v: want skiplock.ErrTxCommitRollback", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, skiplock.ErrTxClosed) {
		t.Fatalf("second COMMIT: %v: want skiplock.ErrTxClosed", err)
	}
}

// TestNewYugabyteDBChecksTheEngine: the smart driver with load balancing
// on must reach YugabyteDB, as Open insists; with it off it is plain pgx
// and serves PostgreSQL under PostgreSQL's dialect.
func TestNewYugabyteDBChecksTheEngine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := skiplock.NewYugabyteDB(ctx, nil); !usage.Is(err) {
		t.Fatalf("nil pool: %v, want a usage error", err)
	}
	db := testdb.Drivers()[1].Open(t, nil)
	if db.Engine() != skiplock.EnginePostgres {
		t.Fatalf("smart driver without load_balance on PostgreSQL: engine %s, want %s", db.Engine(), skiplock.EnginePostgres)
	}
	dsn := testdb.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if !strings.Contains(dsn, "://") {
		sep = " "
	}
	for _, opt := range []string{"load_balance=true", "topology_keys=cloud.region.zone"} {
		pc, err := ybpgxpool.ParseConfig(dsn + sep + opt)
		if err != nil {
			t.Fatalf("%s: %v", opt, err)
		}
		pool, err := ybpgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatalf("%s: %v", opt, err)
		}
		_, err = skiplock.NewYugabyteDB(ctx, pool)
		pool.Close()
		if err == nil || !strings.Contains(err.Error(), "load_balance") {
			t.Fatalf("%s on PostgreSQL: %v: want an error that names load_balance and the fix", opt, err)
		}
		if strings.Contains(err.Error(), "password=") {
			t.Fatalf("%s: error shows the DSN: %v", opt, err)
		}
	}
}
