package skiplock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
)

// A statement sent under txhook.Then takes its COMMIT and the next
// transaction's BEGIN and first statement along, in one network write.
// The next transaction must be the one Begin under txhook.Resume returns
// (same settings, its first statement's answer waiting), and every way it
// can go wrong must leave nothing half done: a failed statement or COMMIT
// runs nothing of the next transaction; one nobody takes is rolled back
// by Drop; a Begin with other settings drops it; another first statement
// reads past it. The pool has one connection, so a connection that
// leaked would stall the next step (each runs under a deadline).
func TestChainedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, proxy, table, has := proxiedTable(t)
	deferred := strings.TrimSuffix(table, ".t") + ".d"
	if _, err := db.Exec(ctx, "CREATE TABLE "+deferred+" (v int, CONSTRAINT once UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)"); err != nil {
		t.Fatal(err)
	}
	step := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		t.Cleanup(cancel)
		return c
	}
	insertSQL := "INSERT INTO " + table + " VALUES ($1) RETURNING v"
	serializable := skiplock.TxOptions{Isolation: skiplock.IsoSerializable}
	// first runs a transaction whose last statement, sql with v, takes
	// the insert of next along, and returns its chain and Commit's error.
	first := func(sql string, v, next int) (*txhook.Chain, error) {
		t.Helper()
		c := &txhook.Chain{SQL: insertSQL, Args: []any{next}}
		tx, err := db.Begin(step(), serializable)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(txhook.Then(step(), c), sql, v); err != nil {
			if c.Next != nil {
				t.Fatalf("the last statement failed (%v), yet the next transaction was handed over", err)
			}
			if err := tx.Rollback(step()); err != nil {
				t.Fatal(err)
			}
			return c, err
		}
		return c, tx.Commit(step())
	}
	insert := "INSERT INTO " + table + " VALUES ($1)"
	warm, err := first(insert, 1, 2)
	if err != nil || warm.Next == nil {
		t.Fatalf("warm the statement cache: %v, next %v", err, warm.Next)
	}
	warm.Drop(step())

	// Chained: one write for both transactions' statements; the next
	// transaction's first statement answers from that write, in the
	// isolation the first asked for.
	before := proxy.ToServer()
	c, err := first(insert, 10, 11)
	if err != nil || c.Next == nil {
		t.Fatalf("chain: %v, next %v", err, c.Next)
	}
	tx, err := db.Begin(txhook.Resume(step(), c), serializable)
	if err != nil {
		t.Fatal(err)
	}
	if c.Next != nil {
		t.Fatal("Begin under Resume left the chained transaction to take")
	}
	var got int
	if err := tx.QueryRow(step(), insertSQL, 11).Scan(&got); err != nil || got != 11 {
		t.Fatalf("the chained statement's answer: %d, %v", got, err)
	}
	if writes := proxy.ToServer() - before; writes != 1 {
		t.Fatalf("two transactions' statements took %d client writes, want 1", writes)
	}
	var iso string
	if err := tx.QueryRow(step(), "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("the chained transaction runs at %q (%v), want serializable as its BEGIN asked", iso, err)
	}
	if err := tx.Commit(step()); err != nil {
		t.Fatal(err)
	}
	if !has(10) || !has(11) {
		t.Fatal("a chained transaction's row is missing")
	}

	// A failed last statement: nothing after it ran.
	if c, err = first(insert, 10, 12); skiplock.SQLState(err) != "23505" {
		t.Fatalf("err %v, want unique_violation", err)
	}
	if c.Next != nil || has(12) {
		t.Fatal("the statement chained after a failed one ran")
	}

	// A failed COMMIT (a deferred constraint): nothing after it ran.
	if c, err = first("INSERT INTO "+deferred+" VALUES ($1), ($1)", 1, 13); skiplock.SQLState(err) != "23505" {
		t.Fatalf("commit err %v, want unique_violation", err)
	}
	if c.Next != nil || has(13) {
		t.Fatal("the transaction chained after a failed COMMIT was handed over or ran")
	}

	// Not taken: Drop rolls it back and gives the connection back.
	if c, err = first(insert, 14, 15); err != nil || c.Next == nil {
		t.Fatalf("chain: %v", err)
	}
	c.Drop(step())
	if !has(14) || has(15) {
		t.Fatal("Drop did not roll back the chained transaction (or lost the one before)")
	}

	// A Begin with other settings: the chained one is rolled back and a
	// fresh transaction begins.
	if c, err = first(insert, 16, 17); err != nil || c.Next == nil {
		t.Fatalf("chain: %v", err)
	}
	tx, err = db.Begin(txhook.Resume(step(), c), skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = tx.QueryRow(step(), "SELECT current_setting('transaction_isolation')").Scan(&iso)
	if err := tx.Commit(step()); err != nil {
		t.Fatal(err)
	}
	if err != nil || iso == "serializable" {
		t.Fatalf("a Begin with other settings got the chained transaction (%q, %v)", iso, err)
	}
	if has(17) {
		t.Fatal("the chained transaction dropped for other settings committed")
	}

	// Another first statement reads past the chained one's answer; the
	// chained statement ran in the transaction all the same.
	if c, err = first(insert, 18, 19); err != nil || c.Next == nil {
		t.Fatalf("chain: %v", err)
	}
	tx, err = db.Begin(txhook.Resume(step(), c), serializable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(step(), insert, 20); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(step()); err != nil {
		t.Fatal(err)
	}
	if !has(19) || !has(20) {
		t.Fatal("a chained transaction whose first statement was another lost a row")
	}

	// The chained statement fails: its error is the first Query's, and
	// the transaction rolls back with the connection clean.
	if c, err = first(insert, 21, 10); err != nil || c.Next == nil {
		t.Fatalf("chain: %v", err)
	}
	tx, err = db.Begin(txhook.Resume(step(), c), serializable)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(step(), insertSQL, 10).Scan(&got); skiplock.SQLState(err) != "23505" {
		t.Fatalf("the failed chained statement: err %v, want unique_violation", err)
	}
	if err := tx.Rollback(step()); err != nil {
		t.Fatal(err)
	}
	if !has(21) {
		t.Fatal("the transaction before a failed chained statement lost its row")
	}
}
