package chaos_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestConnectionSlotsExhausted: while a bucketed worker has jobs in hand,
// other sessions take every connection slot of a small server and the
// worker's own connections are terminated, so that its completions find
// no connection ("sorry, too many clients already"). The completions
// retry while the jobs' leases hold (the slots stay taken until they
// retried three times); once the slots are freed every job is completed
// and recorded exactly once, and none runs twice.
func TestConnectionSlotsExhausted(t *testing.T) {
	t.Parallel()
	dsn := smallServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const app = "skiplock-exhaust-worker"
	wdsn := withAppName(t, dsn, app)

	db, err := skiplock.Open(ctx, wdsn, &skiplock.OpenConfig{MaxConns: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Layouts: []schema.Layout{schema.LayoutBucketed}}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	const vt = 20 * time.Second
	q, err := bucketed.New(ctx, db, &bucketed.Config{VisibilityTimeout: vt})
	if err != nil {
		t.Fatal(err)
	}
	in := make([]skiplock.NewJob, n)
	if _, err := q.EnqueueMany(ctx, in); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var logs testdb.Records
	var retries atomic.Int64
	logs.OnRecord = func(r testdb.Record) {
		if strings.Contains(r.Msg, "retrying while the leases hold") && r.Attrs["what"] == "completion" {
			retries.Add(1)
		}
	}
	logIns := `INSERT INTO "skiplock"."work_log" ("job_id", "worker") VALUES ($1, 'exhaust')`
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 30, NoMaintenance: true, ErrorMin: 50 * time.Millisecond, ErrorMax: 500 * time.Millisecond,
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		OnComplete: func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			for _, j := range done {
				if _, err := tx.Exec(ctx, logIns, j.ID); err != nil {
					return err
				}
			}
			return nil
		},
		Logger: logs.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "the worker to claim its first 30 jobs", time.Minute, func() bool { return w.Stats().Claimed >= 30 })

	// Take every slot, then cut the worker's connections and take theirs.
	var fillers []*pgx.Conn
	fill := func() {
		for {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				if skiplock.SQLState(err) != "53300" {
					t.Fatalf("filling the server's slots: %v", err)
				}
				return
			}
			fillers = append(fillers, c)
		}
	}
	fill()
	if len(fillers) == 0 {
		t.Fatal("no slot left for the test's own session")
	}
	monitor := fillers[0]
	defer monitor.Close(context.Background())
	var cut []int32
	rows, err := monitor.Query(ctx, `SELECT "pid", pg_terminate_backend("pid") FROM pg_stat_activity WHERE "application_name" = $1`, app)
	if err == nil {
		cut, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (int32, error) {
			var pid int32
			var terminated bool
			err := r.Scan(&pid, &terminated)
			return pid, err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	// Their slots are free once the terminated backends are gone.
	testdb.WaitFor(t, "the worker's terminated backends to exit", time.Minute, func() bool {
		var left int
		if err := monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE "pid" = ANY($1)`, cut).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	fill()
	close(gate) // the 30 jobs in hand finish now, with no connection to complete them on
	held := time.Now()
	testdb.WaitFor(t, "the completions to find no connection and retry three times", time.Minute, func() bool { return retries.Load() >= 3 })
	hold := time.Since(held)
	for _, c := range fillers[1:] {
		c.Close(ctx)
	}
	freed := time.Now()

	var done int64
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%d of %d jobs Success; worker log:\n%s", done, n, logs.String())
		}
	})
	testdb.WaitFor(t, fmt.Sprintf("all %d jobs Success once the slots are free", n), 2*time.Minute, func() bool {
		if err := monitor.QueryRow(ctx, `SELECT count(*) FROM "skiplock"."jobs" WHERE "status" = 'Success'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == n
	})
	allDone := time.Now()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var logRows, logJobs, redeliveries int64
	if err := monitor.QueryRow(ctx, `SELECT count(*), count(DISTINCT "job_id") FROM "skiplock"."work_log"`).Scan(&logRows, &logJobs); err != nil {
		t.Fatal(err)
	}
	if err := monitor.QueryRow(ctx, `SELECT coalesce(sum("attempts") - count(*), 0) FROM "skiplock"."jobs"`).Scan(&redeliveries); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	line := fmt.Sprintf("chaos: connection-slots-exhausted layout=bucketed jobs=%d fillers=%d worker_connections_cut=%d held=%v completion_retries=%d work_log_rows=%d distinct=%d redeliveries=%d lost=%d all_done_after_freeing=%v",
		n, len(fillers), len(cut), hold.Round(time.Millisecond), retries.Load(), logRows, logJobs, redeliveries, st.Lost, allDone.Sub(freed).Round(time.Millisecond))
	t.Log(line)
	fmt.Println(line)
	if logRows != n || logJobs != n || redeliveries != 0 || st.Lost != 0 {
		t.Fatalf("finished work was thrown away: %s\nworker log:\n%s", line, logs.String())
	}
	if retries.Load() == 0 {
		t.Fatalf("no completion waited for a connection: the test did not exhaust the server (%s)", line)
	}
}
