package bucketed_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestGatheredClaims: 50 goroutines wanting 3 jobs each share 2 claim
// statements; every job is delivered exactly once, completed once, and
// heard once by AfterComplete with sane times; and claims were gathered
// (fewer statements than requests served).
func TestGatheredClaims(t *testing.T) {
	t.Parallel()
	const jobs, workers, batch = 3000, 50, 3
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(jobs, "default")...)

	var mu sync.Mutex
	delivered, heard := map[string]int{}, map[string]int{}
	var badTimes atomic.Int64
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: workers, Batch: batch, Claimers: 2, Completers: 3,
		IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Logf: t.Logf,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			mu.Lock()
			delivered[j.ID]++
			mu.Unlock()
			return nil
		},
		AfterComplete: func(j *skiplock.Job, asked, claimed time.Time) {
			if asked.IsZero() || claimed.Before(asked) || time.Now().Before(claimed) {
				badTimes.Add(1)
			}
			mu.Lock()
			heard[j.ID]++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if p, err := q.Pending(ctx, "default"); err != nil {
			t.Fatal(err)
		} else if !p {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if len(delivered) != jobs || len(heard) != jobs || st.Claimed != jobs || st.Completed != jobs || st.Lost != 0 {
		t.Fatalf("%d jobs delivered, %d heard by AfterComplete (want %d each); stats %+v", len(delivered), len(heard), jobs, st)
	}
	for id, n := range delivered {
		if n != 1 || heard[id] != 1 {
			t.Fatalf("job %s delivered %d times, heard %d times; want once each", id, n, heard[id])
		}
	}
	if n := badTimes.Load(); n > 0 {
		t.Fatalf("%d jobs with asked/claimed times out of order", n)
	}
	// Without gathering every request with jobs would need its own
	// statement: at least jobs/batch of them.
	if stmts := w.ClaimStatements(); stmts >= jobs/batch {
		t.Fatalf("%d claim statements for %d requests with jobs: claims were not gathered", stmts, jobs/batch)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success' AND "attempts" = 1`); got != jobs {
		t.Fatalf("%d jobs Success with one attempt, want %d", got, jobs)
	}
}

// TestGatheredClaimsHardStop: goroutines queued for a claim do not hold up
// Stop; the jobs in hand at its deadline go back unattempted.
func TestGatheredClaimsHardStop(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(5, "default")...)
	var started atomic.Int32
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 30, Claimers: 1, IdleMin: time.Millisecond, IdleMax: 2 * time.Millisecond,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			started.Add(1)
			<-ctx.Done()
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for started.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: want the deadline's error, got %v", err)
	}
	if st := w.Stats(); st.Claimed != 5 || st.Released != 5 || st.Completed+st.Failed+st.Lost != 0 {
		t.Fatalf("stats %+v: want 5 claimed, 5 released", st)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Queued' AND "attempts" = 0`); got != 5 {
		t.Fatalf("%d of 5 jobs back in the queue unattempted", got)
	}
}

func TestWorkerHelperCounts(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, nil)
	h := func(context.Context, *skiplock.Job) error { return nil }
	for _, c := range []bucketed.WorkerConfig{{Handler: h, Claimers: -1}, {Handler: h, Completers: 1001}} {
		if _, err := q.NewWorker(&c); !skiplock.IsUsage(err) {
			t.Fatalf("%+v: want a usage error, got %v", c, err)
		}
	}
}
