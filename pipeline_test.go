package skiplock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// Pipelined BEGIN (the default): BEGIN rides with the first statement. The
// transactions must behave exactly as unpipelined ones: isolation taken,
// commit keeps, rollback discards, a failed first statement rolls back
// cleanly and leaves the connection usable, QueryRow says ErrNoRows.
func TestPipelinedBeginBehavesLikeBegin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 4})
	name := testdb.Schema(t, db)
	table := sqlident.Quote(name) + ".t"
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+sqlident.Quote(name)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE "+table+" (v int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return int(n)
	}

	for _, via := range []string{"pool", "conn"} {
		var b skiplock.Beginner = db
		if via == "conn" {
			c, err := db.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			b = c
		}
		// The isolation level is BEGIN's, seen by the first statement.
		tx, err := b.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoSerializable})
		if err != nil {
			t.Fatal(err)
		}
		var iso string
		if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
			t.Fatalf("%s: isolation %q, %v", via, iso, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}

		// Exec first, then Query: both inside one transaction; rollback
		// discards both inserts.
		before := count()
		tx, err = b.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1000), (1001)"); err != nil || n != 2 {
			t.Fatalf("%s: insert %d, %v", via, n, err)
		}
		rows, err := tx.Query(ctx, "SELECT v FROM "+table+" WHERE v >= 1000")
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for rows.Next() {
			seen++
		}
		rows.Close()
		if rows.Err() != nil || seen != 2 {
			t.Fatalf("%s: saw %d of its own rows, %v", via, seen, rows.Err())
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if count() != before {
			t.Fatalf("%s: rollback kept rows", via)
		}

		// Query first (rows read to the end), then commit keeps the row.
		tx, _ = b.Begin(ctx, skiplock.TxOptions{})
		rows, err = tx.Query(ctx, "INSERT INTO "+table+" VALUES (2000) RETURNING v")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if count() != before+1 {
			t.Fatalf("%s: commit lost the row", via)
		}
		if _, err := db.Exec(ctx, "DELETE FROM "+table); err != nil {
			t.Fatal(err)
		}

		// A failing first statement: the error comes back, rollback works,
		// the connection serves the next transaction.
		tx, _ = b.Begin(ctx, skiplock.TxOptions{})
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (NULL)"); skiplock.SQLState(err) != "23502" {
			t.Fatalf("%s: err %v, want not_null_violation", via, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("%s: rollback after a failed first statement: %v", via, err)
		}
		tx, _ = b.Begin(ctx, skiplock.TxOptions{})
		var v int64
		if err := tx.QueryRow(ctx, "SELECT v FROM "+table+" WHERE v = -1").Scan(&v); !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("%s: no row: %v", via, err)
		}
		if err := tx.QueryRow(ctx, "SELECT 7").Scan(&v); err != nil || v != 7 {
			t.Fatalf("%s: second statement: %d, %v", via, v, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: second commit: %v", via, err)
		}

		// A transaction that ran nothing sent nothing and commits nothing.
		tx, _ = b.Begin(ctx, skiplock.TxOptions{})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every connection went back to the pool idle and usable.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := db.Begin(ctx, skiplock.TxOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck // read-only
			var one int64
			if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Errorf("pooled transaction: %d, %v", one, err)
			}
		}()
	}
	wg.Wait()
}

// Two pipelined transactions locking the same row: the second waits for
// the first's commit, as with a separate BEGIN (the lock is held from the
// first statement to COMMIT).
func TestPipelinedBeginHoldsLocksUntilCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 4})
	name := testdb.Schema(t, db)
	table := sqlident.Quote(name) + ".t"
	for _, sql := range []string{"CREATE SCHEMA " + sqlident.Quote(name), "CREATE TABLE " + table + " (v int PRIMARY KEY)", "INSERT INTO " + table + " VALUES (1)"} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := db.Begin(ctx, skiplock.TxOptions{})
	if _, err := a.Exec(ctx, "SELECT v FROM "+table+" WHERE v = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	b, _ := db.Begin(ctx, skiplock.TxOptions{})
	var got int64 = -1
	rows, err := b.Query(ctx, "SELECT v FROM "+table+" WHERE v = 1 FOR UPDATE SKIP LOCKED")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		got = 1
	}
	rows.Close()
	if got != -1 {
		t.Fatal("a second transaction locked a row the first holds")
	}
	b.Rollback(ctx) //nolint:errcheck
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
