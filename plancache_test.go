package skiplock_test

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TxOptions.GenericPlans: the transaction's statements see
// plan_cache_mode = force_generic_plan, with the isolation level asked for,
// whether BEGIN is pipelined or not and whatever the first statement is;
// the setting ends with the transaction; and a prepared statement run in
// such transactions is never planned for its parameters.
func TestGenericPlansTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, pipelined := range []bool{false, true} {
		db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, SeparateBegin: !pipelined})
		if !db.Dialect().PlanCacheMode {
			t.Skipf("%s has no plan_cache_mode", db.Dialect().Engine)
		}
		c, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		setting := func(q skiplock.Querier) string {
			t.Helper()
			var mode string
			if err := q.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			return mode
		}
		before := setting(c)

		if _, err := c.Exec(ctx, "CREATE TEMP TABLE generic_plans_copy (v int)"); err != nil {
			t.Fatal(err)
		}
		for _, first := range []string{"query", "exec", "copy"} {
			tx, err := c.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoRepeatableRead, GenericPlans: true})
			if err != nil {
				t.Fatal(err)
			}
			switch first {
			case "exec":
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
			case "copy":
				if _, err := tx.(copyio.Copier).CopyFrom(ctx, []string{"generic_plans_copy"}, []string{"v"}, pgx.CopyFromRows([][]any{{int32(1)}})); err != nil {
					t.Fatal(err)
				}
			}
			if got := setting(tx); got != "force_generic_plan" {
				t.Errorf("pipelined %v, %s first: plan_cache_mode %q in the transaction, want force_generic_plan", pipelined, first, got)
			}
			var jit string
			if err := tx.QueryRow(ctx, "SHOW jit").Scan(&jit); err != nil || jit != "off" {
				t.Errorf("pipelined %v, %s first: jit %q (%v) in the transaction, want off", pipelined, first, jit, err)
			}
			var iso string
			if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
				t.Errorf("pipelined %v: isolation %q (%v), want repeatable read", pipelined, iso, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := setting(c); got != before {
				t.Errorf("pipelined %v: plan_cache_mode %q after the transaction, want %q as before it", pipelined, got, before)
			}
		}

		// A statement whose custom plans would know its parameter: ten runs
		// in GenericPlans transactions, none planned for its value.
		const probe = "SELECT count(*) FROM pg_class WHERE relname = $1 /* generic plans probe */"
		for range 10 {
			tx, err := c.Begin(ctx, skiplock.TxOptions{GenericPlans: true})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := tx.QueryRow(ctx, probe, "pg_class").Scan(&n); err != nil || n != 1 {
				t.Fatalf("probe: %d, %v", n, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var generic, custom int64
		if err := c.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", probe).Scan(&generic, &custom); err != nil {
			t.Fatalf("the probe is not a prepared statement of this connection: %v", err)
		}
		if custom != 0 || generic != 10 {
			t.Errorf("pipelined %v: %d generic and %d custom plans, want 10 and 0", pipelined, generic, custom)
		}
		c.Release()
	}
}
