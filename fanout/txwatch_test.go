package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestHandlerStopsWhenItsTransactionIsLost: a fanout job's transaction
// is its lease. When the server ends it under a running handler (the
// session terminated, or idle past idle_in_transaction_session_timeout),
// the server unlocks the job and another worker may take it: the
// handler's context must end then, with ErrTransactionLost as its
// cause, within a few of the watch's checks, not when the handler
// happens to return. The attempt counts, and the job then runs again and
// completes once. Without the watch the first handler runs on to its own
// 20 s patience and the test fails.
// Both drivers, each way of losing the transaction.
func TestHandlerStopsWhenItsTransactionIsLost(t *testing.T) {
	t.Parallel()
	ways := []struct {
		name string
		open skiplock.OpenConfig
		// lose ends the transaction of the session pid, or leaves it to
		// the server.
		lose func(ctx context.Context, db *skiplock.DB, pid int64) error
	}{
		{"terminated", skiplock.OpenConfig{MaxConns: 4}, func(ctx context.Context, db *skiplock.DB, pid int64) error {
			var ok bool
			if err := db.QueryRow(ctx, "SELECT pg_terminate_backend($1::INT4)", pid).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
			}
			return nil
		}},
		{"idle timeout", skiplock.OpenConfig{MaxConns: 4, IdleInTransactionTimeout: 500 * time.Millisecond}, nil},
	}
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		for _, way := range ways {
			t.Run(way.name, func(t *testing.T) {
				t.Parallel()
				lostHandlerStops(t, d, way.open, way.lose)
			})
		}
	})
}

func lostHandlerStops(t *testing.T, d testdb.Driver, oc skiplock.OpenConfig, lose func(context.Context, *skiplock.DB, int64) error) {
	q, db, s := setupOpen(t, d, &oc, &fanout.Config{RetryBase: 10 * time.Millisecond})
	admin := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := enqueueOne(t, q, db, s, skiplock.NewJob{Payload: []byte(`{}`)})
	type first struct {
		pid     int64
		attempt int
		began   time.Time
	}
	started := make(chan first, 1)
	type ending struct {
		at    time.Time
		cause error // nil: the handler's patience ran out first
	}
	ended := make(chan ending, 1)
	var runs atomic.Int64
	var waiter atomic.Bool
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: 2, NoMaintenance: true, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
		Logger: testdb.Logger(t),
		Handler: func(hctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			runs.Add(1)
			if waiter.Load() {
				// Any run after the lost one completes the job.
				_, err := tx.Exec(hctx, "INSERT INTO "+table(s, "work_log")+" (job_id, worker) VALUES ($1, $2)", job.ID, strconv.Itoa(job.Attempts))
				return err
			}
			// The first run to get this far uses its transaction, then
			// waits on it. (Under the cockroach personality an injected
			// retry may end a run before that.)
			var pid int64
			if err := tx.QueryRow(hctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			if !waiter.CompareAndSwap(false, true) {
				return errors.New("another run is the waiting one")
			}
			began := time.Now()
			started <- first{pid, job.Attempts, began}
			select {
			case <-hctx.Done():
				ended <- ending{time.Now(), context.Cause(hctx)}
				return hctx.Err()
			case <-time.After(20 * time.Second):
				ended <- ending{time.Now(), nil}
				return nil
			}
		},
	})
	var f first
	select {
	case f = <-started:
	case <-ctx.Done():
		t.Fatal("the job's first attempt never started")
	}
	lostAt := f.began.Add(oc.IdleInTransactionTimeout) // the server's own timeout
	if lose != nil {
		if err := lose(ctx, admin, f.pid); err != nil {
			t.Fatal(err)
		}
		lostAt = time.Now()
	}
	e := <-ended
	if e.cause == nil {
		t.Fatalf("the handler ran on for %v after its transaction was lost: nothing cancelled it", e.at.Sub(lostAt).Round(time.Millisecond))
	}
	if !errors.Is(e.cause, fanout.ErrTransactionLost) {
		t.Fatalf("the handler's context ended with cause %v, want fanout.ErrTransactionLost", e.cause)
	}
	// The watch checks every 200 ms; the bound leaves a loaded machine room.
	if late := e.at.Sub(lostAt); late > 5*time.Second {
		t.Fatalf("the handler's context ended %v after its transaction was lost, want within a few check intervals", late.Round(time.Millisecond))
	}
	t.Logf("the handler's context ended %v after its transaction was lost: %v", e.at.Sub(lostAt).Round(time.Millisecond), e.cause)
	testdb.WaitFor(t, "the job to run again and complete", time.Minute, func() bool {
		return count(t, admin, "SELECT count(*) FROM "+table(s, "work_log")) > 0
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var done []struct {
		id      string
		attempt int
	}
	rows, err := admin.Query(ctx, "SELECT job_id, worker::INT FROM "+table(s, "work_log"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r struct {
			id      string
			attempt int
		}
		if err := rows.Scan(&r.id, &r.attempt); err != nil {
			t.Fatal(err)
		}
		done = append(done, r)
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(done) != 1 || done[0].id != id {
		t.Fatalf("work_log %+v: want job %s completed once", done, id)
	}
	// Under a personality, injected retries end counted attempts early
	// and a claim may read a count one low (the package doc, "Failures"):
	// Job.Attempts is exact only on PostgreSQL's own rules.
	if !testdb.Emulated() && done[0].attempt <= f.attempt {
		t.Fatalf("the job completed at attempt %d, after the lost attempt %d: the lost attempt must count", done[0].attempt, f.attempt)
	}
	if n := count(t, admin, "SELECT count(*) FROM "+table(s, "job_queue")); n != 0 {
		t.Fatalf("%d jobs left in the queue, want none", n)
	}
	if r := runs.Load(); r < 2 {
		t.Fatalf("%d handler runs, want at least the lost one and the one that completed", r)
	}
}
