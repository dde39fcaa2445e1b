package fanout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestJobTimeout: a handler that outlives WorkerConfig.JobTimeout has its
// context ended at the budget and fails its attempt; the job stays in
// the queue for another attempt.
func TestJobTimeout(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := q.NewWorker(&fanout.WorkerConfig{JobTimeout: -time.Second, Handler: func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil }}); !usage.Is(err) {
		t.Fatalf("a negative JobTimeout: %v, want a usage error", err)
	}
	if _, err := q.Enqueue(ctx, skiplock.NewJob{}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan time.Duration, 10)
	var failed testdb.Counter
	w, err := q.NewWorker(&fanout.WorkerConfig{
		Workers: 1, NoMaintenance: true, JobTimeout: 300 * time.Millisecond,
		OnResult: func(_ int, r *fanout.Result, err error) {
			if err == nil && r.HandlerErr != nil {
				failed.Add(1)
			}
		},
		Handler: func(ctx context.Context, _ skiplock.Tx, _ *skiplock.Job) error {
			start := time.Now()
			select {
			case <-ctx.Done():
				ended <- time.Since(start)
				return ctx.Err()
			case <-time.After(30 * time.Second):
				ended <- -1
				return nil
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	select {
	case took = <-ended:
	case <-ctx.Done():
		t.Fatal("the handler never returned")
	}
	failed.Reach(1, 30*time.Second) // the stats, checked below, say what happened
	if err := w.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if took < 0 {
		t.Fatal("the handler's context did not end at the job's 300ms budget")
	}
	t.Logf("the handler's context ended after %v (budget 300ms)", took.Round(time.Millisecond))
	if st := w.Stats(); st.Failed == 0 || st.Completed != 0 {
		t.Fatalf("a job over its budget: %+v, want a failed attempt and nothing completed", st)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, "job_queue")); n != 1 {
		t.Fatalf("%d jobs in the queue, want the one job back for another attempt", n)
	}
}
