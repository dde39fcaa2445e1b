package fanout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/schema"
)

// A handler that returns skiplock.Cancel moves its job to job_dead at
// once: a Worker of 8 goroutines works 200 jobs of five attempts each,
// half of which their handler cancels after writing in the job's
// transaction. The completed jobs' handlers run once and their writes
// commit; the cancelled jobs' writes are rolled back and they sit in
// job_dead with the reason in last_error; the Worker counts Cancelled
// apart from Failed and Dead, and OnResult sees Cancelled. A cancelled
// job runs once, but for fanout's documented window (docs/concepts.md,
// "Retries, backoff and snoozes"): a claim whose snapshot predates the
// attempt's count can take the job between the rollback and the recording
// of its cancel, and run it a second time, which the Worker counts as
// Failed (the job already dead).
func TestHandlerCancelMovesTheJobToDead(t *testing.T) {
	t.Parallel()
	const n = 200
	q, db, s := setup(t, int32(8+fanout.RecorderConns(8)), &fanout.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx := context.Background()
	jobs := make([]skiplock.NewJob, n)
	for i := range jobs {
		jobs[i] = skiplock.NewJob{MaxAttempts: 5, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"cancel":%v}`, i, i%2 == 0))}
	}
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	record := recordHandler(s)
	var (
		mu        sync.Mutex
		runs      = map[string]int{}
		cancelled int
		ended     = make(chan struct{})
		seen      int
	)
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{Workers: 8, NoMaintenance: true,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			if err := record(ctx, tx, job); err != nil {
				return err
			}
			var p struct{ Cancel bool }
			if err := json.Unmarshal(job.Payload, &p); err != nil {
				return err
			}
			if p.Cancel {
				return skiplock.Cancel(errors.New("not wanted any more"))
			}
			return nil
		},
		OnResult: func(_ int, res *fanout.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if res.Job == nil || err != nil {
				return
			}
			if res.Cancelled {
				cancelled++
			}
			if seen++; seen == n {
				close(ended)
			}
		},
	})
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Error("timed out waiting for every job's result")
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	again := 0 // cancelled jobs run a second time in the window
	for id, k := range runs {
		switch {
		case k == 2 && count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable)+` WHERE "id" = $1`, id) == 1:
			again++ // a cancelled job: only those are in job_dead (below)
		case k != 1:
			t.Errorf("job %s ran %d times", id, k)
		}
	}
	if st := w.Stats(); st.Completed != n/2 || st.Cancelled != n/2 || st.Failed != int64(again) || st.Dead != 0 {
		t.Errorf("stats %+v: want %d completed, %d cancelled, %d failed (run again in the window), none dead", st, n/2, n/2, again)
	}
	if cancelled != n/2 {
		t.Errorf("OnResult saw %d cancelled, want %d", cancelled, n/2)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)+" WHERE \"job_id\" IN (SELECT \"id\" FROM "+table(s, schema.DeadJobTable)+")"); got != 0 {
		t.Errorf("%d cancelled jobs' writes committed", got)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)); got != n/2 {
		t.Errorf("work_log has %d rows, want the %d completed jobs'", got, n/2)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable)+
		" WHERE \"last_error\" = 'job cancelled by its handler: not wanted any more' AND (\"payload\"->>'cancel')::BOOL"); got != n/2 {
		t.Errorf("%d jobs in job_dead with the handler's reason, want %d", got, n/2)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); got != 0 {
		t.Errorf("%d jobs left in the queue", got)
	}
}
