package bucketed_test

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// freshConn acquires a connection that db's pool opens for it: every
// connection open now is held while it asks.
func freshConn(t *testing.T, ctx context.Context, db *skiplock.DB) skiplock.Conn {
	t.Helper()
	open := int(db.Stats().Total)
	if open >= int(db.Stats().Max) {
		t.Fatalf("the pool has all its %d connections open: no new one to test", open)
	}
	var held []skiplock.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	pids := map[uint32]bool{}
	for range open {
		c, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		pids[c.PID()] = true
	}
	c, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pids[c.PID()] {
		c.Release()
		t.Fatalf("connection %d was open before", c.PID())
	}
	return c
}

// connByPID acquires db's open connection with process id pid, holding
// the others it meets on the way until it returns.
func connByPID(t *testing.T, ctx context.Context, db *skiplock.DB, pid uint32) skiplock.Conn {
	t.Helper()
	var passed []skiplock.Conn
	defer func() {
		for _, c := range passed {
			c.Release()
		}
	}()
	for range db.Stats().Total {
		c, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.PID() == pid {
			return c
		}
		passed = append(passed, c)
	}
	t.Fatalf("connection %d is not open in the pool any more", pid)
	return nil
}

// The claim is warmed on every connection before a claim meets it there:
// one idle when the Queue is made has run it once, and so has one the
// pool opens after, each claiming nothing and handed out idle, outside
// any transaction; one in use while the Queue was made has not.
func TestConnectionsArePreparedForClaims(t *testing.T) {
	ctx := context.Background()
	db, name := testdb.MigratedOn(t, testdb.Open(t, &skiplock.OpenConfig{MaxConns: 8}), nil, schema.LayoutBucketed)
	busy := freshConn(t, ctx, db)
	defer busy.Release()
	idle := freshConn(t, ctx, db)
	idlePID := idle.PID()
	idle.Release()
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	// Jobs of the default queue and of the queue named "", the warm-up's.
	for _, queue := range []string{"", "default"} {
		if _, err := db.Exec(ctx, `INSERT INTO `+name+`.jobs (queue, payload, bucket) VALUES ($1, '{}', 0)`, queue); err != nil {
			t.Fatal(err)
		}
	}
	after := freshConn(t, ctx, db)
	defer after.Release()

	planned := func(c skiplock.Conn) int {
		var n int
		err := c.QueryRow(ctx, `SELECT COALESCE(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements WHERE statement = $1`, q.ClaimSQL()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := planned(busy); n != 0 {
		t.Errorf("a connection in use while the Queue was made ran its claim %d times", n)
	}
	wasIdle := connByPID(t, ctx, db, idlePID)
	defer wasIdle.Release()
	for what, c := range map[string]skiplock.Conn{"idle when the Queue was made": wasIdle, "opened after the Queue was made": after} {
		if n := planned(c); n != 1 {
			t.Errorf("a connection %s ran its claim %d times before its first use, want 1", what, n)
		}
		if db.Dialect().PlanCacheMode {
			var generic int
			if err := c.QueryRow(ctx, `SELECT generic_plans FROM pg_prepared_statements WHERE statement = $1`, q.ClaimSQL()).Scan(&generic); err != nil || generic != 1 {
				t.Errorf("a connection %s: the warm-up's plan: %d generic (%v), want the claims' generic plan", what, generic, err)
			}
		}
		// Inside the warm-up's transaction it would still hold its lock
		// on the jobs table.
		var locks int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND relation = $1::REGCLASS`, name+".jobs").Scan(&locks); err != nil || locks != 0 {
			t.Errorf("a connection %s was handed out inside the warm-up's transaction: %d locks on the jobs table (%v)", what, locks, err)
		}
	}
	var running, attempts int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'Queued'), COALESCE(sum(attempts), 0) FROM `+name+`.jobs`).Scan(&running, &attempts); err != nil {
		t.Fatal(err)
	}
	if running != 0 || attempts != 0 {
		t.Errorf("after the warm-up: %d jobs not Queued, %d attempts, want none", running, attempts)
	}
	jobs, err := q.Dequeue(ctx, "default", 5)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim after the warm-up: %d jobs, %v; want the one queued", len(jobs), err)
	}
}

// A warm-up that fails leaves the new connection usable.
func TestFailedWarmupLeavesTheConnectionIdle(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 4})
	db.Warm(ctx, skiplock.Warmup{SQL: `SELECT * FROM skiplock_no_such_table`})
	c := freshConn(t, ctx, db)
	defer c.Release()
	// In the failed transaction, it would answer 25P02.
	if _, err := c.Exec(ctx, `SELECT 1`); err != nil {
		t.Errorf("after a failed warm-up the connection answers %v", err)
	}
}
