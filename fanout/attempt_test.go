package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// runCounter counts handler runs per job id in the test process, outside
// every transaction, so that a rolled-back attempt still counts.
type runCounter struct{ m sync.Map }

func (c *runCounter) add(id string) int64 {
	v, _ := c.m.LoadOrStore(id, new(atomic.Int64))
	return v.(*atomic.Int64).Add(1)
}

func (c *runCounter) get(id string) int64 {
	v, ok := c.m.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// waitEmpty waits until the queue has no pending job, jobs waiting out a
// backoff included.
func waitEmpty(t *testing.T, q *fanout.Queue, limit time.Duration, state func() string) {
	t.Helper()
	more := true
	defer func() {
		if more {
			t.Logf("jobs left: %s", state())
		}
	}()
	testdb.WaitFor(t, "no job pending", limit, func() bool {
		var err error
		if more, err = q.HasQueued(context.Background()); err != nil {
			t.Fatal(err)
		}
		return !more
	})
}

// TestHandlerRunsAtMostMaxAttempts: 200 jobs that always fail, max 3, on 8
// workers with a backoff of a few milliseconds, so that a job's retries
// meet other workers. Every handler run is counted in the test process;
// each job must run exactly 3 times and end in job_dead with attempts 3.
// (Before job_attempt, handlers ran 618 times for 200 such jobs: the
// failure was counted after the rollback, and another worker could claim
// the job in between.)
func TestHandlerRunsAtMostMaxAttempts(t *testing.T) {
	t.Parallel()
	const n, maxAttempts, workers = 200, 3, 8
	// The smallest pool NewWorker accepts: one connection per worker
	// and the ones that count attempts, which must never wait for theirs.
	q, db, s := setup(t, int32(workers+fanout.RecorderConns(workers)), &fanout.Config{RetryBase: time.Millisecond, RetryMax: 4 * time.Millisecond})
	ctx := context.Background()
	in := jobs(n)
	for i := range in {
		in[i].MaxAttempts = maxAttempts
	}
	ids, err := fanout.EnqueueManyIDs(ctx, q, in)
	if err != nil {
		t.Fatal(err)
	}
	var runs runCounter
	var total, lost atomic.Int64
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: workers,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			runs.add(job.ID)
			total.Add(1)
			// Work that the rollback must erase.
			if err := recordHandler(s)(ctx, tx, job); err != nil {
				return err
			}
			return errors.New("always fails")
		},
		OnResult: func(_ int, r *fanout.Result, err error) {
			if errors.Is(r.HandlerErr, fanout.ErrWorkerDied) {
				lost.Add(1)
			}
		},
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond,
		Logger: testdb.Logger(t),
	})
	waitEmpty(t, q, 2*time.Minute, func() string { return fmtCounts(w.Stats(), total.Load()) })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := w.Stats()
	for _, id := range ids {
		if got := runs.get(id); got != maxAttempts {
			t.Errorf("job %s: handler ran %d times, want %d", id, got, maxAttempts)
		}
	}
	dead := table(s, schema.DeadJobTable)
	if got := count(t, db, "SELECT count(*) FROM "+dead+" WHERE id = ANY($1) AND attempts = $2", ids, maxAttempts); got != n {
		t.Errorf("%d of %d jobs are in job_dead with attempts %d", got, n, maxAttempts)
	}
	// Every job's last attempt failed with the handler's error, which
	// job_dead keeps, also for a job buried by a claim that came before
	// its last failure was recorded.
	if got := count(t, db, "SELECT count(*) FROM "+dead+" WHERE last_error LIKE '%always fails%'"); got != n {
		t.Errorf("%d of %d dead jobs keep the handler's error", got, n)
	}
	for _, tb := range []string{schema.JobQueueTable, schema.JobAttemptTable, schema.WorkLogTable} {
		if got := count(t, db, "SELECT count(*) FROM "+table(s, tb)); got != 0 {
			t.Errorf("%s has %d rows left", tb, got)
		}
	}
	if total.Load() != n*maxAttempts || c.Dead != n || c.Errors != 0 {
		t.Errorf("%s: want %d runs, %d dead, no errors", fmtCounts(c, total.Load()), n*maxAttempts, n)
	}
	// A job whose third failure was not yet recorded when another worker
	// claimed it is buried by that worker (its count says 4), and both
	// report a failure.
	if c.Failed != n*maxAttempts+lost.Load() {
		t.Errorf("%s: want %d failures (%d + %d buried by a later claim)", fmtCounts(c, total.Load()), n*maxAttempts+lost.Load(), n*maxAttempts, lost.Load())
	}
	t.Logf("%s; %d buried by a later claim", fmtCounts(c, total.Load()), lost.Load())
}

func fmtCounts(c fanout.WorkerStats, runs int64) string {
	return fmt.Sprintf("handler runs %d, handled %d, failed %d, dead %d, errors %d", runs, c.Completed, c.Failed, c.Dead, c.Errors)
}

// TestBackoff: a failed job is not claimed while it waits out its backoff,
// and its next attempt starts no earlier than the backoff's lower bound
// (RetryBase/2 after the first failure, RetryBase after the second), by
// the database's clock: the handler logs its start and its failure
// outside the job's transaction.
func TestBackoff(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{RetryBase: time.Hour, RetryMax: time.Hour})
	ctx := context.Background()
	log := table(s, "attempt_log")
	if _, err := db.Exec(ctx, "CREATE TABLE "+log+" (job_id TEXT NOT NULL, event TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	failing := func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		if _, err := db.Exec(ctx, "INSERT INTO "+log+" (job_id, event) VALUES ($1, 'start')", job.ID); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, "INSERT INTO "+log+" (job_id, event) VALUES ($1, 'fail')", job.ID); err != nil {
			return err
		}
		return errors.New("fails")
	}

	// An hour's backoff: the failed job stays pending and is not claimed.
	id := enqueueOne(t, q, db, s, skiplock.NewJob{MaxAttempts: 3})
	res, err := q.Process(ctx, failing)
	if err != nil || res.Job == nil || res.Job.ID != id || res.HandlerErr == nil || res.Dead {
		t.Fatalf("first attempt: %+v %v", res, err)
	}
	for i := 0; i < 5; i++ {
		res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error {
			t.Error("a job waiting out its backoff was claimed")
			return nil
		})
		if err != nil || res.Job != nil {
			t.Fatalf("claim during the backoff: %+v %v", res, err)
		}
	}
	if more, err := q.HasQueued(ctx); err != nil || !more {
		t.Errorf("a job in backoff must still count as pending (work --until-empty waits for it): %v %v", more, err)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobAttemptTable)+
		" WHERE job_id = $1 AND attempts = 1 AND retry_at >= now() + interval '29 minutes'", id); got != 1 {
		t.Errorf("job_attempt does not hold one attempt and a backoff of at least half an hour")
	}
	if _, err := db.Exec(ctx, "DELETE FROM "+table(s, schema.JobQueueTable)); err != nil {
		t.Fatal(err)
	}

	// A short backoff, on another queue of the schema: each attempt
	// starts no earlier than the lower bound after the last failure.
	const base = 300 * time.Millisecond
	short, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "short", RetryBase: base, RetryMax: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id = enqueueOne(t, short, db, s, skiplock.NewJob{MaxAttempts: 3})
	for attempt := 1; attempt <= 3; attempt++ {
		res, err := processReady(t, short, failing)
		if err != nil || res.Job == nil || res.Job.ID != id || res.Job.Attempts != attempt || res.Dead != (attempt == 3) {
			t.Fatalf("attempt %d: %+v %v", attempt, res, err)
		}
	}
	rows, err := db.Query(ctx, "SELECT event, extract(epoch FROM at)::float8 FROM "+log+" WHERE job_id = $1 ORDER BY at", id)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var at []float64
	for rows.Next() {
		var e string
		var x float64
		if err := rows.Scan(&e, &x); err != nil {
			t.Fatal(err)
		}
		events, at = append(events, e), append(at, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(events, ",") != "start,fail,start,fail,start,fail" {
		t.Fatalf("events %v", events)
	}
	for i, least := range []time.Duration{base / 2, base} {
		gap := time.Duration((at[2*i+2] - at[2*i+1]) * float64(time.Second))
		t.Logf("failure %d to attempt %d: %v (at least %v)", i+1, i+2, gap, least)
		if gap < least {
			t.Errorf("attempt %d started %v after failure %d, before its backoff's lower bound %v", i+2, gap, i+1, least)
		}
	}
}

// TestCancelAndRetryResetTheCount: a job that failed and waits out an
// hour's backoff can be cancelled (its attempt count goes with it) and
// retried: it is claimable at once, as its first attempt.
func TestCancelAndRetryResetTheCount(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{RetryBase: time.Hour, RetryMax: time.Hour})
	ctx := context.Background()
	id := enqueueOne(t, q, db, s, skiplock.NewJob{MaxAttempts: 2})
	res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return errors.New("fails") })
	if err != nil || res.HandlerErr == nil || res.Dead {
		t.Fatalf("first attempt: %+v %v", res, err)
	}
	attempts := table(s, schema.JobAttemptTable)
	if got := count(t, db, "SELECT count(*) FROM "+attempts+" WHERE job_id = $1", id); got != 1 {
		t.Fatalf("no attempt count after a failure")
	}
	if err := q.CancelJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, "SELECT count(*) FROM "+attempts); got != 0 {
		t.Errorf("cancel left %d attempt rows", got)
	}
	if err := q.RetryJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err = q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil })
	if err != nil || res.Job == nil || res.Job.ID != id || res.Job.Attempts != 1 || res.HandlerErr != nil {
		t.Fatalf("after retry: %+v %v", res, err)
	}
	if got := count(t, db, "SELECT count(*) FROM "+attempts); got != 0 {
		t.Errorf("success left %d attempt rows", got)
	}
}
