package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// A handler that returns skiplock.Cancel ends its job Canceled at once:
// two Workers of 8 goroutines (leased claims, and held ones where the
// engine has them) work 200 jobs of five attempts each, half of which
// their handler cancels. Every handler runs once; the cancelled jobs are
// Canceled with one attempt counted and the handler's reason in
// last_error, never retried; the others succeed; the Workers count
// Cancelled apart from Failed and tell AfterResult.
func TestHandlerCancelEndsTheJob(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			t.Parallel()
			if held && testdb.Emulated() {
				t.Skip("held claims are PostgreSQL's")
			}
			const n = 200
			db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
			ctx := ctxT(t)
			jobs := make([]skiplock.NewJob, n)
			for i := range jobs {
				jobs[i] = skiplock.NewJob{MaxAttempts: 5, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"cancel":%v}`, i, i%2 == 0))}
			}
			mustEnqueue(t, queueOn(t, db, name, nil), jobs...)
			var (
				mu       sync.Mutex
				runs     = map[string]int{}
				outcomes = map[bucketed.Outcome]int{}
				ended    = make(chan struct{})
			)
			var workers []*bucketed.Worker
			for range 2 {
				q := queueOn(t, db, name, &bucketed.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
				w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: 8, HeldClaims: held, NoMaintenance: true,
					IdleMin: time.Millisecond, PollInterval: 20 * time.Millisecond,
					Handler: func(ctx context.Context, job *skiplock.Job) error {
						mu.Lock()
						runs[job.ID]++
						mu.Unlock()
						var p struct{ Cancel bool }
						if err := json.Unmarshal(job.Payload, &p); err != nil {
							return err
						}
						if p.Cancel {
							return fmt.Errorf("wrapped: %w", skiplock.Cancel(errors.New("not wanted any more")))
						}
						return nil
					},
					AfterResult: func(_ *skiplock.Job, o bucketed.Outcome) {
						mu.Lock()
						defer mu.Unlock()
						outcomes[o]++
						if outcomes[bucketed.OutcomeCompleted]+outcomes[bucketed.OutcomeCancelled] == n {
							close(ended)
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				workers = append(workers, w)
			}
			select {
			case <-ended:
			case <-time.After(time.Minute):
				t.Error("timed out waiting for every job's outcome")
			}
			var st bucketed.WorkerStats
			for _, w := range workers {
				if err := w.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				s := w.Stats()
				st.Completed += s.Completed
				st.Failed += s.Failed
				st.Cancelled += s.Cancelled
			}
			if st.Completed != n/2 || st.Cancelled != n/2 || st.Failed != 0 {
				t.Errorf("stats %+v: want %d completed, %d cancelled, none failed", st, n/2, n/2)
			}
			mu.Lock()
			defer mu.Unlock()
			if outcomes[bucketed.OutcomeFailed] != 0 || outcomes[bucketed.OutcomeCancelled] != n/2 {
				t.Errorf("AfterResult heard %v: want %d cancelled, none failed", outcomes, n/2)
			}
			for id, k := range runs {
				if k != 1 {
					t.Errorf("job %s ran %d times", id, k)
				}
			}
			var bad int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM `+jobsTable(name)+` WHERE NOT CASE WHEN ("payload"->>'cancel')::BOOL
  THEN "status"::TEXT = 'Canceled' AND "attempts" = 1 AND "finished_at" IS NOT NULL AND "last_error" = 'wrapped: job cancelled by its handler: not wanted any more'
  ELSE "status"::TEXT = 'Success' AND "attempts" = 1 END`).Scan(&bad); err != nil {
				t.Fatal(err)
			}
			if bad != 0 {
				t.Errorf("%d jobs whose status, attempts or last error do not match their handler's result", bad)
			}
		})
	}
}
