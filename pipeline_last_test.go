package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/faultproxy"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/txhook"
)

// A statement sent under txhook.Last takes its transaction's COMMIT along:
// the transaction must end exactly as if COMMIT had gone on its own (kept
// on success; on a failed statement nothing committed, not even the
// transaction's earlier statements, and Rollback ends it), the
// connection must come back clean, and the whole one-statement
// transaction must go out in one network write where it took two: the
// proxy in front of the server counts the client's writes.
func TestLastStatementCarriesCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, proxy, table, has := proxiedTable(t)
	last := txhook.Last(ctx)
	// writes runs one transaction and returns the client writes it took.
	writes := func(what string, fn func(tx skiplock.Tx) error) int64 {
		t.Helper()
		before := proxy.ToServer()
		tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoSerializable})
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(tx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: commit: %v", what, err)
		}
		return proxy.ToServer() - before
	}
	insert := func(ctx context.Context, v int) func(tx skiplock.Tx) error {
		return func(tx skiplock.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v)
			return err
		}
	}
	writes("warm the statement cache", insert(last, 1))
	writes("warm the statement cache", insert(ctx, 2))
	if apart, along := writes("COMMIT apart", insert(ctx, 3)), writes("COMMIT along", insert(last, 4)); apart != 2 || along != 1 {
		t.Fatalf("a one-statement transaction took %d client writes with its COMMIT apart and %d with it along: want 2 and 1", apart, along)
	}
	if !has(3) || !has(4) {
		t.Fatal("a committed row is missing")
	}

	// Query under Last: its rows, then Commit's outcome; and the
	// isolation BEGIN asked for holds for the statement.
	writes("query", func(tx skiplock.Tx) error {
		var iso string
		if err := tx.QueryRow(last, "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil || iso != "serializable" {
			return errors.Join(err, errors.New("isolation "+iso))
		}
		// Nothing may follow the statement that took COMMIT along.
		if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
			return errors.New("a statement after the last one was sent")
		}
		return nil
	})
	writes("rows", func(tx skiplock.Tx) error {
		rows, err := tx.Query(last, "INSERT INTO "+table+" VALUES (5), (6) RETURNING v")
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n != 2 {
			return errors.New("want 2 rows back, got " + strconv.Itoa(n))
		}
		return rows.Err()
	})
	if !has(5) || !has(6) {
		t.Fatal("rows inserted under Last were not committed")
	}

	// A failed last statement: the server skipped the COMMIT, so the
	// earlier statement's row is gone with the rollback.
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(last, "INSERT INTO "+table+" VALUES (NULL)"); skiplock.SQLState(err) != "23502" {
		t.Fatalf("err %v, want not_null_violation", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback after a failed last statement: %v", err)
	}
	if has(7) {
		t.Fatal("a transaction whose last statement failed committed its earlier row")
	}
	// The one connection is clean for the next transaction.
	writes("after a failure", insert(last, 8))
	if !has(8) {
		t.Fatal("the connection did not serve the next transaction")
	}
	// Commit after a failed last statement reports the failure.
	tx, _ = db.Begin(ctx, skiplock.TxOptions{})
	rows, err := tx.Query(last, "SELECT 1/0")
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	if skiplock.SQLState(err) != "22012" {
		t.Fatalf("err %v, want division_by_zero", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit after a failed last statement returned nil")
	}
	writes("after a failed commit", insert(last, 9))
	if !has(9) {
		t.Fatal("the pool did not serve the next transaction after a failed commit")
	}
}

// TestIdleConnectionIsNotPingedFirst: a pooled connection idle for more
// than the drivers' default of one second goes straight to its statement,
// without a ping before it: the round trip a worker woken after an idle
// second would otherwise pay before its claim.
func TestIdleConnectionIsNotPingedFirst(t *testing.T) {
	t.Parallel()
	_, proxy, _, has := proxiedTable(t)
	has(1)
	time.Sleep(1500 * time.Millisecond) // time under test: past the drivers' one second
	before := proxy.ToServer()
	has(1)
	if n := proxy.ToServer() - before; n != 1 {
		t.Fatalf("a statement on a connection idle for 1.5 s took %d client writes, want 1 (no ping before it)", n)
	}
}

// proxiedTable opens a pool of one connection through a proxy that counts
// the client's writes, with a fresh table t (v int PRIMARY KEY) in a
// schema of the test's own, and returns its quoted name and has(v),
// which reports whether t holds v (failing the test when the pool's
// connection does not come back within 20 s).
func proxiedTable(t *testing.T) (*skiplock.DB, *faultproxy.Proxy, string, func(v int) bool) {
	t.Helper()
	ctx := context.Background()
	dsn, proxy := testdb.Proxied(t)
	db, err := skiplock.Open(ctx, dsn, &skiplock.OpenConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	name := testdb.Schema(t, db)
	table := sqlident.Quote(name) + ".t"
	for _, s := range []string{"CREATE SCHEMA " + sqlident.Quote(name), "CREATE TABLE " + table + " (v int PRIMARY KEY)"} {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	has := func(v int) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE v = $1", v).Scan(&n); err != nil {
			t.Fatalf("the pool's connection did not come back: %v", err)
		}
		return n == 1
	}
	return db, proxy, table, has
}
