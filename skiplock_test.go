package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

func TestParseEngine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]skiplock.Engine{
		"": skiplock.EngineAuto, "auto": skiplock.EngineAuto, "Postgres": skiplock.EnginePostgres, "pg": skiplock.EnginePostgres,
		"yugabyte": skiplock.EngineYugabyte, "YB": skiplock.EngineYugabyte, "cockroach": skiplock.EngineCockroach, "crdb": skiplock.EngineCockroach,
	} {
		if got, err := skiplock.ParseEngine(in); err != nil || got != want {
			t.Errorf("ParseEngine(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := skiplock.ParseEngine("mysql")
	if !usage.Is(err) || !strings.Contains(err.Error(), `"mysql"`) || !strings.Contains(err.Error(), "postgres, yugabyte or cockroach") {
		t.Errorf("ParseEngine(mysql) error %v should name the value and what is allowed", err)
	}
}

func TestEngineFromVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]skiplock.Engine{
		"PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu":                                        skiplock.EnginePostgres,
		"PostgreSQL 11.2-YB-2024.1.3.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 17.0.6":               skiplock.EngineYugabyte,
		"CockroachDB CCL v24.1.4 (x86_64-pc-linux-gnu, built 2024/08/29 12:00:00, go1.22.5 X:nocoverageredesign)": skiplock.EngineCockroach,
	} {
		if got := skiplock.EngineFromVersion(v); got != want {
			t.Errorf("EngineFromVersion(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestEveryEngineHasADialect(t *testing.T) {
	t.Parallel()
	for _, e := range skiplock.Engines {
		d := e.Dialect()
		if d.Engine != e || d.UUIDText == "" || d.BigIDDefault == "" || d.Covering == "" {
			t.Errorf("dialect of %s is incomplete: %+v", e, d)
		}
	}
}

// TestEveryEngineStatesItsIsolation: every engine's queue transactions name
// their level in BEGIN (issue 14 item 8), READ COMMITTED where SKIP LOCKED
// needs it and SERIALIZABLE on CockroachDB, whose session default may be
// READ COMMITTED; only CockroachDB needs a statement to make locks durable.
func TestEveryEngineStatesItsIsolation(t *testing.T) {
	t.Parallel()
	want := map[skiplock.Engine]skiplock.IsoLevel{
		skiplock.EnginePostgres:  skiplock.IsoReadCommitted,
		skiplock.EngineYugabyte:  skiplock.IsoReadCommitted,
		skiplock.EngineCockroach: skiplock.IsoSerializable,
	}
	for _, e := range skiplock.Engines {
		d := e.Dialect()
		if d.DefaultIsolation != want[e] {
			t.Errorf("%s: DefaultIsolation %q, want %q", e, d.DefaultIsolation, want[e])
		}
		if durable := d.DurableLocks != ""; durable != (e == skiplock.EngineCockroach) {
			t.Errorf("%s: DurableLocks %q", e, d.DurableLocks)
		}
	}
}

func TestOpenDetectsPostgresAndRunsQueries(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 3})
	if db.Engine() != skiplock.EnginePostgres {
		t.Fatalf("engine %s, want postgres", db.Engine())
	}
	if !strings.Contains(db.Version(), "PostgreSQL") {
		t.Fatalf("version %q", db.Version())
	}
	if st := db.Stats(); st.Max != 3 {
		t.Fatalf("pool max %d, want 3", st.Max)
	}
	ctx := context.Background()
	n, err := db.ServerMaxConnections(ctx)
	if err != nil || n < 100 {
		t.Fatalf("ServerMaxConnections = %d, %v", n, err)
	}
	// The seam: Exec counts rows, Query iterates, a transaction rolls back.
	name := testdb.Schema(t, db)
	table := sqlident.Quote(name) + ".t"
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+sqlident.Quote(name)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE "+table+" (v int)"); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Exec(ctx, "INSERT INTO "+table+" SELECT generate_series(1, 5)"); err != nil || n != 5 {
		t.Fatalf("insert: %d rows, %v", n, err)
	}
	tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoSerializable})
	if err != nil {
		t.Fatal(err)
	}
	var iso string
	if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("isolation %q, %v", iso, err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+table); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, "SELECT v FROM "+table+" ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	rows.Close()
	if rows.Err() != nil || sum != 15 {
		t.Fatalf("sum %d, err %v: the rollback did not keep the rows", sum, rows.Err())
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil || uint32(pid) != conn.PID() {
		t.Fatalf("PID %d vs backend %d (%v)", conn.PID(), pid, err)
	}
	conn.Release()
}

func TestNewDBWrapsCallersPoolAndLeavesItOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := skiplock.NewDB(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	if db.Engine() != skiplock.EnginePostgres {
		t.Fatalf("engine %s", db.Engine())
	}
	db.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("DB.Close closed the caller's pool: %v", err)
	}
	// WrapTx runs queue SQL inside the caller's own transaction.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var one int
	if err := skiplock.WrapTx(tx).QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("WrapTx: %d, %v", one, err)
	}
}

// TestOpenForcedYugabyteOnPostgresFailsCleanly checks the smart-driver rule (docs/design.md, "Drivers") from the
// other side: with the engine forced to YugabyteDB, the smart driver's
// load_balance would hunt for yb_servers(); Open must fail with an error
// instead of leaking connections until the server refuses more.
func TestOpenForcedYugabyteOnPostgresFailsCleanly(t *testing.T) {
	// Not parallel: it counts the server's client backends.
	db := testdb.Open(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := backends(t, db)
	_, err := skiplock.Open(ctx, testdb.DSN(t), &skiplock.OpenConfig{Engine: skiplock.EngineYugabyte, MaxConns: 2})
	if !usage.Is(err) || !strings.Contains(err.Error(), "the server is postgres") {
		t.Fatalf("want a usage error naming the real engine, got %v", err)
	}
	// A leak stays; a connection of an earlier test still closing goes.
	testdb.WaitFor(t, "the server's client backends back to at most one more than before the refused Open", 10*time.Second, func() bool {
		return backends(t, db) <= before+1
	})
}

// TestAutoOpenNeverSendsLoadBalanceToPostgres is the smart-driver rule (docs/design.md, "Drivers") proper: auto
// detection must pick jackc/pgx for PostgreSQL, which would reject the
// unknown load_balance startup parameter if it were sent.
func TestAutoOpenNeverSendsLoadBalanceToPostgres(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	ctx := context.Background()
	var lb *string
	err := db.QueryRow(ctx, "SELECT current_setting('load_balance', true)").Scan(&lb)
	if err != nil {
		t.Fatal(err)
	}
	if lb != nil && *lb != "" {
		t.Fatalf("load_balance reached PostgreSQL: %q", *lb)
	}
}

// TestSmartDriverOptionsInTheDSNDoNotBreakPostgres: a DSN written for the
// smart driver (load_balance=true) still opens a PostgreSQL server, since
// the option is the driver's, not the server's.
func TestSmartDriverOptionsInTheDSNDoNotBreakPostgres(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.DSN(t))
	if err != nil {
		t.Skip("test DSN is not a URL")
	}
	q := u.Query()
	q.Set("load_balance", "true")
	q.Set("topology_keys", "aws.us-east-2.*")
	u.RawQuery = q.Encode()
	db, err := skiplock.Open(context.Background(), u.String(), nil)
	if err != nil {
		t.Fatalf("open with smart-driver options: %v", err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

func backends(t *testing.T, db *skiplock.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenBadDSNsSayWhatIsWrongWithoutThePassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"postgres://app:s3cretpw@127.0.0.1:1/db?connect_timeout=2",
		"postgres://app:s3cretpw@127.0.0.1:1/db?sslmode=bogus",
		"host=127.0.0.1 port=1 user=app password=s3cretpw connect_timeout=2",
		"postgres://app:s3cretpw@[::1",
	} {
		_, err := skiplock.Open(ctx, dsn, nil)
		if err == nil {
			t.Fatalf("%s: opened", skiplock.RedactDSN(dsn))
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	// A wrong password against the real server.
	u, err := url.Parse(testdb.DSN(t))
	if err != nil || u.User == nil {
		t.Skip("test DSN is not a URL with a user")
	}
	u.User = url.UserPassword(u.User.Username(), "wrongpassword1")
	_, err = skiplock.Open(ctx, u.String(), nil)
	if err == nil || strings.Contains(err.Error(), "wrongpassword1") || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("wrong password: err %v", err)
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable":  "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=pw":              "postgres://u@h/db?password=xxxxx",
		"host=h user=u password=pw dbname=d":         "host=h user=u password=xxxxx dbname=d",
		"postgres://u@h/db":                          "postgres://u@h/db",
		"host=h password = 'it\\'s@Tail' user=u":     "host=h password=xxxxx user=u",
		"host=h password=abcd' user='u v' dbname=d'": "host=h password=xxxxx user='u v' dbname='d\\''",
		"postgres://u:pw@[::1/db":                    "(DSN not shown: it does not parse unambiguously, so any part of it could be its password)",
		"postgres://leaky:it's@Tail@127.0.0.1:5/db":  "(DSN not shown: it does not parse unambiguously, so any part of it could be its password)",
		"postgres://u:1234/5678@h/db":                "(DSN not shown: it does not parse unambiguously, so any part of it could be its password)",
		"host=h password='a\\' b":                    "(DSN not shown: it does not parse unambiguously, so any part of it could be its password)",
	} {
		if got := skiplock.RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestQuotedIdentifiersRoundTrip creates and reads back tables whose names
// are hostile, proving QuoteIdent against the real parser.
func TestQuotedIdentifiersRoundTrip(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	ctx := context.Background()
	name := testdb.Schema(t, db)
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+sqlident.Quote(name)); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{`a"b`, `x"; DROP SCHEMA public; --`, `ünï cödé`, `Upper`} {
		q := sqlident.Quote(name) + "." + sqlident.Quote(table)
		if _, err := db.Exec(ctx, "CREATE TABLE "+q+" (v int)"); err != nil {
			t.Fatalf("%q: %v", table, err)
		}
		var got string
		if err := db.QueryRow(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename = $2", name, table).Scan(&got); err != nil {
			t.Fatalf("%q not created under its own name: %v", table, err)
		}
	}
}

func TestNewJobNormalize(t *testing.T) {
	t.Parallel()
	j := skiplock.NewJob{}
	if err := j.Normalize(0); err != nil {
		t.Fatal(err)
	}
	if j.Queue != skiplock.DefaultQueue || string(j.Payload) != "null" || j.MaxAttempts != skiplock.DefaultMaxAttempts {
		t.Fatalf("defaults not filled: %+v", j)
	}
	for name, bad := range map[string]skiplock.NewJob{
		"invalid JSON":     {Payload: json.RawMessage(`{"a":`)},
		"too large":        {Payload: json.RawMessage(`"` + strings.Repeat("x", 200) + `"`)},
		"priority":         {Priority: 40000},
		"negative max":     {MaxAttempts: -1},
		"control in queue": {Queue: "a\nb"},
		"long queue":       {Queue: strings.Repeat("q", 129)},
		"bad utf8 queue":   {Queue: "\xff"},
	} {
		err := bad.Normalize(100)
		if !usage.Is(err) {
			t.Errorf("%s: want a usage error, got %v", name, err)
		}
	}
	// Quotes, semicolons and unicode are fine in queue names: they only
	// ever travel as parameters.
	ok := skiplock.NewJob{Queue: `it's; DROP TABLE x; -- ✓`}
	if err := ok.Normalize(0); err != nil {
		t.Fatal(err)
	}
}

func TestSQLStateThroughWrapping(t *testing.T) {
	t.Parallel()
	var err error = &pgconn.PgError{Code: "40001"}
	for i := 0; i < 3; i++ {
		err = fmt.Errorf("layer %d: %w", i, err)
	}
	if got := skiplock.SQLState(err); got != "40001" {
		t.Fatalf("jackc: %q", got)
	}
	err = fmt.Errorf("wrapped: %w", &ybpgconn.PgError{Code: "40P01"})
	if got := skiplock.SQLState(err); got != "40P01" {
		t.Fatalf("yugabyte: %q", got)
	}
	if skiplock.SQLState(errors.New("plain")) != "" {
		t.Fatal("plain error has no SQLSTATE")
	}
}

// rowCounting counts the QueryRow statements sent through its Pool.
type rowCounting struct {
	skiplock.Pool
	n atomic.Int64
}

func (p *rowCounting) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	p.n.Add(1)
	return p.Pool.QueryRow(ctx, sql, args...)
}

// TestCheckWritableAsksOnce: the checks of one process's starts (a
// client's, then each of its Workers') ask the server once: a check that
// found it writable stands for a second.
func TestCheckWritableAsksOnce(t *testing.T) {
	db := testdb.Open(t, nil)
	counting := &rowCounting{Pool: db.Pool}
	db.Pool = counting
	for range 5 {
		if err := db.CheckWritable(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := counting.n.Load(); n != 1 {
		t.Fatalf("5 checks within a second sent %d statements, want 1", n)
	}
}
