package retry_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/retry"
)

// engineDB opens SKIPLOCK_TEST_DSN and skips, saying why, unless it is the
// wanted engine.
func engineDB(t *testing.T, want skiplock.Engine) *skiplock.DB {
	t.Helper()
	if os.Getenv("SKIPLOCK_TEST_DSN") == "" {
		t.Skipf("%s test skipped: SKIPLOCK_TEST_DSN is not set; point it at a %s server to run it", want, want)
	}
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 8})
	if db.Engine() != want {
		t.Skipf("%s test skipped: SKIPLOCK_TEST_DSN points at a %s server, not %s", want, db.Engine(), want)
	}
	return db
}

// cockroachSQL renders testdata/cockroach.sql, the statements the
// CockroachDB tests send or see sent, for a quoted schema. The CockroachDB
// grammar check in internal/crdbcheck parses every block of that file.
func cockroachSQL(t *testing.T, schema string) map[string]string {
	t.Helper()
	src, err := os.ReadFile("testdata/cockroach.sql")
	if err != nil {
		t.Fatal(err)
	}
	f, err := sqltext.Parse("retry/testdata/cockroach.sql", string(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Render(map[string]string{"schema": schema})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hookBeginner runs before(n) ahead of the n-th Begin (1-based).
type hookBeginner struct {
	skiplock.Beginner
	n      int
	before func(ctx context.Context, n int) error
}

func (h *hookBeginner) Begin(ctx context.Context, opts skiplock.TxOptions) (skiplock.Tx, error) {
	h.n++
	if err := h.before(ctx, h.n); err != nil {
		return nil, err
	}
	return h.Beginner.Begin(ctx, opts)
}

// TestCockroachInjectedRetries uses CockroachDB's inject_retry_errors_enabled:
// every statement in an explicit transaction fails with a real 40001
// "restart transaction". The injection only stops for savepoint retries
// (package doc), so the first case turns it off before the third BEGIN.
func TestCockroachInjectedRetries(t *testing.T) {
	t.Parallel()
	db := engineDB(t, skiplock.EngineCockroach)
	ctx := context.Background()
	sql := cockroachSQL(t, sqlident.Quote(testdb.Schema(t, db)))
	mustExec(t, db, sql["create_schema"])
	mustExec(t, db, sql["create_table"])
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(context.Background(), sql["inject_off"]) //nolint:errcheck // best effort before the connection goes back
	iso := db.Dialect().DefaultIsolation
	upsert := func(id int) func(context.Context, skiplock.Tx) error {
		return func(ctx context.Context, tx skiplock.Tx) error {
			_, err := tx.Exec(ctx, sql["upsert"], id)
			return err
		}
	}

	t.Run("retried to success", func(t *testing.T) {
		mustExec(t, conn, sql["inject_on"])
		b := &hookBeginner{Beginner: conn, before: func(ctx context.Context, n int) error {
			if n == 3 {
				_, err := conn.Exec(ctx, sql["inject_off"])
				return err
			}
			return nil
		}}
		var c retry.Counters
		if err := retry.Run(ctx, b, &retry.Options{Isolation: iso, Counters: &c}, upsert(1)); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if c.Attempts() != 3 || c.RetriesBySQLState()["40001"] != 2 {
			t.Fatalf("attempts %d, retries %v: want 3 attempts, two 40001 retries", c.Attempts(), c.RetriesBySQLState())
		}
		if n := count(t, db, sql["select_n"], 1); n != 1 {
			t.Fatalf("n = %d, want 1: a failed attempt was applied", n)
		}
	})

	t.Run("gives up", func(t *testing.T) {
		mustExec(t, conn, sql["inject_on"])
		var c retry.Counters
		err := retry.Run(ctx, conn, &retry.Options{Isolation: iso, MaxAttempts: 4, Counters: &c}, upsert(2))
		mustExec(t, conn, sql["inject_off"])
		if skiplock.SQLState(err) != "40001" || !strings.Contains(strings.ToLower(err.Error()), "restart transaction") {
			t.Fatalf("Run = %v: want the injected 40001 restart error", err)
		}
		if c.Attempts() != 4 || c.GaveUp() != 1 || c.RetriesBySQLState()["40001"] != 3 {
			t.Fatalf("attempts %d, gave up %d, retries %v: want 4, 1, three 40001s", c.Attempts(), c.GaveUp(), c.RetriesBySQLState())
		}
		if n := count(t, db, sql["count_id"], 2); n != 0 {
			t.Fatalf("%d rows for id 2, want 0", n)
		}
	})
}

// TestYugabyteRetries runs on YugabyteDB through the smart driver: a real
// conflict retried to success, and SKIP LOCKED under SERIALIZABLE refused
// as a permanent error.
func TestYugabyteRetries(t *testing.T) {
	t.Parallel()
	db := engineDB(t, skiplock.EngineYugabyte)
	ctx := context.Background()
	s := sqlident.Quote(testdb.Schema(t, db))
	mustExec(t, db, "CREATE SCHEMA "+s)
	mustExec(t, db, "CREATE TABLE "+s+".q (id int PRIMARY KEY, n int NOT NULL)")
	mustExec(t, db, "INSERT INTO "+s+".q VALUES (1, 0), (2, 0)")

	var eff string
	if err := retry.Run(ctx, db, &retry.Options{Isolation: skiplock.IsoReadCommitted}, func(ctx context.Context, tx skiplock.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting('yb_effective_transaction_isolation_level')").Scan(&eff)
	}); err != nil {
		t.Logf("could not read the effective isolation (older YugabyteDB?): %v", err)
	} else {
		t.Logf("READ COMMITTED runs as %q here (read committed needs the tserver flag yb_enable_read_committed_isolation=true)", eff)
	}

	t.Run("conflict retried", func(t *testing.T) {
		var c retry.Counters
		attempt := 0
		err := retry.Run(ctx, db, &retry.Options{Isolation: skiplock.IsoRepeatableRead, Counters: &c}, func(ctx context.Context, tx skiplock.Tx) error {
			attempt++
			var n int64
			if err := tx.QueryRow(ctx, "SELECT n FROM "+s+".q WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			if attempt == 1 {
				if _, err := db.Exec(ctx, "UPDATE "+s+".q SET n = n + 100 WHERE id = 1"); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "UPDATE "+s+".q SET n = n + 1 WHERE id = 1")
			return err
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := count(t, db, "SELECT n FROM "+s+".q WHERE id = 1"); n != 101 {
			t.Fatalf("n = %d, want 101", n)
		}
		if c.Retries() < 1 {
			t.Fatalf("no retry counted (%v)", c.RetriesBySQLState())
		}
		t.Logf("attempts %d, retries %v", c.Attempts(), c.RetriesBySQLState())
	})

	t.Run("skip locked refused in serializable", func(t *testing.T) {
		var c retry.Counters
		err := retry.Run(ctx, db, &retry.Options{Isolation: skiplock.IsoSerializable, Counters: &c}, func(ctx context.Context, tx skiplock.Tx) error {
			_, err := tx.Exec(ctx, "SELECT id FROM "+s+".q ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
			return err
		})
		if err == nil {
			t.Skip("this YugabyteDB accepts SKIP LOCKED under SERIALIZABLE; the package doc's advice is stale for it")
		}
		if retry.Classify(err) != retry.Permanent || c.Attempts() != 1 {
			t.Fatalf("Run = %v (SQLSTATE %s): class %v after %d attempts, want permanent after 1", err, skiplock.SQLState(err), retry.Classify(err), c.Attempts())
		}
		t.Logf("refused: %v", err)
	})
}

// sqlRecorder records every statement a jackc connection sends.
type sqlRecorder struct {
	mu  sync.Mutex
	sql []string
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.sql = append(r.sql, d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *sqlRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sql
	r.sql = nil
	return out
}

// TestRunSendsOnlyListedSQL records the statements Run really sends
// (through a tracing jackc pool on the test server, with the CockroachDB
// dialect's isolation and the others a caller may choose), over a success,
// a retry and a permanent failure, and checks that each is a run_ block of
// testdata/cockroach.sql, whose blocks internal/crdbcheck parses with
// CockroachDB 25.2's grammar.
func TestRunSendsOnlyListedSQL(t *testing.T) {
	t.Parallel()
	rec := &sqlRecorder{}
	pc, err := pgxpool.ParseConfig(testdb.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = rec
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := skiplock.NewDB(ctx, pool, skiplock.EngineAuto)
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	retryable := &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "restart transaction: injected by the test"}
	permanent := errors.New("handler refused")
	seen := map[string]bool{}
	for _, iso := range []skiplock.IsoLevel{skiplock.EngineCockroach.Dialect().DefaultIsolation, skiplock.IsoDefault, skiplock.IsoSerializable, skiplock.IsoReadCommitted} {
		attempt := 0
		if err := retry.Run(ctx, db, &retry.Options{Isolation: iso}, func(context.Context, skiplock.Tx) error {
			if attempt++; attempt == 1 {
				return retryable
			}
			return nil
		}); err != nil {
			t.Fatalf("isolation %q: %v", iso, err)
		}
		if err := retry.Run(ctx, db, &retry.Options{Isolation: iso}, func(context.Context, skiplock.Tx) error { return permanent }); !errors.Is(err, permanent) {
			t.Fatalf("isolation %q: Run = %v, want the handler's error", iso, err)
		}
		for _, sql := range rec.take() {
			seen[sql] = true
		}
	}
	for _, want := range []string{"begin", "begin isolation level serializable", "begin isolation level read committed", "commit", "rollback"} {
		if !seen[want] {
			t.Errorf("Run never sent %q (sent %v): the recorder or the test is wrong", want, seen)
		}
	}
	listed := map[string]bool{}
	for name, sql := range cockroachSQL(t, `"s"`) {
		if strings.HasPrefix(name, "run_") {
			listed[sql] = true
		}
	}
	for sql := range seen {
		if !listed[sql] {
			t.Errorf("Run sends %q, which is not a run_ block of testdata/cockroach.sql: add it there so that the CockroachDB grammar check parses it", sql)
		}
	}
}
