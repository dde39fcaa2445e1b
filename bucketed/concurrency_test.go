package bucketed_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// TestTwoSessionsSkipHeldRows: a row one session has claimed (its
// transaction still open) is skipped by another session's claim, never
// handed out twice. It runs through both driver adapters; the 50,000-job
// worker runs below stay on jackc alone, since the adapters share every
// line of code above the driver calls and the locking is the server's.
func TestTwoSessionsSkipHeldRows(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, testTwoSessionsSkipHeldRows)
}

func testTwoSessionsSkipHeldRows(t *testing.T, d testdb.Driver) {
	// Watermarks off: this is about row locks, and A's rolled-back rows
	// would otherwise wait for the next heads probe behind B's watermark.
	q, _ := newQueueOn(t, d, &bucketed.Config{HintMaxAge: -1})
	db := q.DB()
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(3, "default")...)

	txA, err := db.Begin(ctx, skiplock.TxOptions{Isolation: db.Dialect().DefaultIsolation})
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	a, err := q.ClaimTx(ctx, txA, "default", 2)
	if err != nil || len(a) != 2 {
		t.Fatalf("session A claimed %d, %v", len(a), err)
	}
	// Session B, while A holds its rows: only the third job is free.
	b, err := q.Dequeue(ctx, "default", 3)
	if err != nil || len(b) != 1 {
		t.Fatalf("session B claimed %d jobs, %v; want only the one A does not hold", len(b), err)
	}
	if b[0].ID == a[0].ID || b[0].ID == a[1].ID {
		t.Fatalf("job %s delivered to both sessions", b[0].ID)
	}
	if c, err := q.Dequeue(ctx, "default", 3); err != nil || len(c) != 0 {
		t.Fatalf("session C claimed %d, %v; want none", len(c), err)
	}
	// A rolls back: its rows are free again, and nothing was changed.
	if err := txA.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := q.Dequeue(ctx, "default", 3)
	if err != nil || len(again) != 2 || again[0].Attempts != 1 {
		t.Fatalf("after A's rollback: claimed %d, %v", len(again), err)
	}
}

// TestBatchClaimNeverExceedsN pushes the planner toward nested loops and
// index scans (docs/design.md, "A LIMIT subquery under an UPDATE can run more than once") and checks that a claim of n changes exactly the
// rows it returns, at most n, each once.
func TestBatchClaimNeverExceedsN(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	mustEnqueue(t, q, nJobs(500, "default")...)
	claimNeverExceedsN(t, q, db, name)
}

// claimNeverExceedsN claims batches of 1, 7, 50 and 100 with nested loops
// and index scans forced, and checks that each claim of n changes exactly
// the rows it returns, n of them.
func claimNeverExceedsN(t *testing.T, q *bucketed.Queue, db *skiplock.DB, name string) {
	t.Helper()
	ctx := ctxT(t)
	claimed := 0
	for _, n := range []int{1, 7, 50, 100} {
		tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: db.Dialect().DefaultIsolation})
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range []string{"enable_hashjoin", "enable_mergejoin", "enable_seqscan", "enable_bitmapscan", "enable_material"} {
			if _, err := tx.Exec(ctx, "SET LOCAL "+set+" = off"); err != nil {
				t.Fatal(err)
			}
		}
		jobs, err := q.ClaimTx(ctx, tx, "default", n)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		claimed += len(jobs)
		if len(jobs) != n {
			t.Errorf("claim of %d returned %d", n, len(jobs))
		}
		running := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Running'`)
		over := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "attempts" > 1`)
		if running != int64(claimed) || over != 0 {
			t.Fatalf("after claims totalling %d: %d Running, %d with attempts > 1", claimed, running, over)
		}
	}
}

// TestLeaseExpiry: a worker that stops heartbeating loses its job to
// another (claims never read leases: the maintenance rescuer puts the job
// back); its late Complete (and Fail, Extend) returns ErrLeaseLost and
// changes nothing.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	e := enqueueOne(t, q, skiplock.NewJob{})
	stale, err := q.DequeueAs(ctx, "default", 1, "stale")
	if err != nil || len(stale) != 1 {
		t.Fatal(len(stale), err)
	}
	if again, _ := q.Dequeue(ctx, "default", 1); len(again) != 0 {
		t.Fatal("a leased job was claimed again before its lease expired")
	}
	// Time passes for the lease, not the test: move its end to the past.
	if _, err := db.Exec(ctx, "UPDATE "+jobsTable(name)+` SET "lease_expires_at" = now() - interval '1 second' WHERE "id" = $1`, parseID(t, e.ID)); err != nil {
		t.Fatal(err)
	}
	if again, _ := q.Dequeue(ctx, "default", 1); len(again) != 0 {
		t.Fatal("a claim took an expired lease: that is the rescuer's work")
	}
	rescue(t, db, name)
	fresh := dequeueSoon(t, q, "fresh")
	if len(fresh) != 1 || fresh[0].ID != stale[0].ID || fresh[0].Attempts != 2 || fresh[0].LeaseToken == stale[0].LeaseToken {
		t.Fatalf("expired lease: claimed %+v", fresh)
	}
	before, _ := q.LookupJob(ctx, e.ID)
	for what, call := range map[string]func() error{
		"Complete": func() error { return q.Complete(ctx, stale[0]) },
		"Fail":     func() error { return q.Fail(ctx, stale[0], errors.New("late")) },
		"Cancel":   func() error { return q.Cancel(ctx, stale[0]) },
		"Extend":   func() error { return q.Extend(ctx, stale[0], time.Hour) },
		"Release":  func() error { return q.Release(ctx, stale[0]) },
	} {
		if err := call(); !errors.Is(err, skiplock.ErrLeaseLost) {
			t.Errorf("stale %s: want ErrLeaseLost, got %v", what, err)
		}
	}
	after, _ := q.LookupJob(ctx, e.ID)
	if !reflect.DeepEqual(after, before) || after.Status != skiplock.StatusRunning || after.LeaseOwner != "fresh" {
		t.Fatalf("stale calls changed the job:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := q.Complete(ctx, fresh[0]); err != nil {
		t.Fatalf("the new owner's Complete: %v", err)
	}
}

// TestNoDoubleDelivery: 64 workers, 50,000 jobs; every delivery counted;
// every job handled exactly once and none left behind.
func TestNoDoubleDelivery(t *testing.T) {
	t.Parallel()
	noDoubleDelivery(t, testdb.Drivers()[0], 50000)
}

// TestNoDoubleDeliveryYugabyteAdapter is the same run, smaller, on the
// YugabyteDB smart driver's pool (a fork of pgxpool, with its own code
// under 64 concurrent workers), over PostgreSQL with load_balance off.
func TestNoDoubleDeliveryYugabyteAdapter(t *testing.T) {
	t.Parallel()
	noDoubleDelivery(t, testdb.Drivers()[1], 5000)
}

func noDoubleDelivery(t *testing.T, d testdb.Driver, jobs int) {
	const workers = 64
	db := d.Open(t, &skiplock.OpenConfig{MaxConns: workers + 8})
	name := testdb.Schema(t, db)
	ctx := ctxT(t)
	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Options: schema.Options{Schema: name}, Layouts: []schema.Layout{schema.LayoutBucketed}}); err != nil {
		t.Fatal(err)
	}
	q := queueOn(t, db, name, nil)
	mustEnqueue(t, q, nJobs(jobs, "default")...)

	var deliveries sync.Map // id -> *atomic.Int32
	var total, recorded atomic.Int64
	var completed testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: workers, Prefetch: workers * 15, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			c, _ := deliveries.LoadOrStore(j.ID, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
			total.Add(1)
			return nil
		},
		OnComplete: func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			recorded.Add(int64(len(done)))
			return nil
		},
		AfterComplete: func(*skiplock.Job, time.Time, time.Time) { completed.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	completed.Wait(t, "completions committed", int64(jobs), 110*time.Second)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dupes, seen := 0, 0
	deliveries.Range(func(k, v any) bool {
		seen++
		if v.(*atomic.Int32).Load() != 1 {
			dupes++
		}
		return true
	})
	st := w.Stats()
	if seen != jobs || dupes != 0 || total.Load() != int64(jobs) || st.Completed != int64(jobs) || st.Lost != 0 {
		t.Fatalf("%d distinct jobs delivered (want %d), %d more than once, %d deliveries; stats %+v", seen, jobs, dupes, total.Load(), st)
	}
	if recorded.Load() < int64(jobs) {
		t.Fatalf("OnComplete saw %d jobs, want %d", recorded.Load(), jobs)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success' AND "attempts" = 1`); got != int64(jobs) {
		t.Fatalf("%d jobs Success with one attempt, want %d", got, jobs)
	}
}

// TestWorkerRetries: fail twice then succeed ends Success with attempts 3;
// always failing (or panicking) ends Failed after max_attempts with the
// last error kept.
func TestWorkerRetries(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx := ctxT(t)
	flaky := enqueueOne(t, q, skiplock.NewJob{Payload: []byte(`"flaky"`)})
	doomed := enqueueOne(t, q, skiplock.NewJob{Payload: []byte(`"doomed"`), MaxAttempts: 4})
	panics := enqueueOne(t, q, skiplock.NewJob{Payload: []byte(`"panics"`), MaxAttempts: 2})
	var mu sync.Mutex
	calls := map[string]int{}
	var ended testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 3, IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond, Logger: testdb.Logger(t),
		AfterResult: settled(&ended),
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			mu.Lock()
			calls[j.ID]++
			n := calls[j.ID]
			mu.Unlock()
			if n != j.Attempts {
				return fmt.Errorf("call %d saw attempts %d", n, j.Attempts)
			}
			switch string(j.Payload) {
			case `"flaky"`:
				if n <= 2 {
					return fmt.Errorf("flaky failure %d", n)
				}
			case `"doomed"`:
				return fmt.Errorf("doomed failure %d", n)
			case `"panics"`:
				panic("boom " + strconv.Itoa(n))
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ended.Wait(t, "jobs ended (Success, or Failed with no attempt left)", 3, 30*time.Second)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id       string
		status   skiplock.Status
		attempts int
		lastErr  string
	}{
		{flaky.ID, skiplock.StatusSuccess, 3, "flaky failure 2"},
		{doomed.ID, skiplock.StatusFailed, 4, "doomed failure 4"},
		{panics.ID, skiplock.StatusFailed, 2, "handler panicked: boom 2"},
	} {
		j, err := q.LookupJob(ctx, c.id)
		lastErr := j.LastError
		if c.id == panics.ID {
			// The panic's stack is kept after its message.
			if !strings.Contains(lastErr, "\n\ngoroutine ") || !strings.Contains(lastErr, "TestWorkerRetries") {
				t.Errorf("panicked job: last_error %q lacks the panic's stack", lastErr)
			}
			lastErr, _, _ = strings.Cut(lastErr, "\n")
		}
		if err != nil || j.Status != c.status || j.Attempts != c.attempts || lastErr != c.lastErr {
			t.Errorf("job %s: %s attempts=%d last_error=%q (%v); want %s attempts=%d last_error=%q",
				c.id, j.Status, j.Attempts, j.LastError, err, c.status, c.attempts, c.lastErr)
		}
	}
}

// TestWorkerGracefulStop: on Stop, jobs claimed but not started go back
// at once; a handler still running at the deadline is cancelled and its
// job released, not failed; every result is written before Stop returns.
func TestWorkerGracefulStop(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(10, "default")...)
	started := make(chan struct{}, 10)
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 1, Prefetch: 9,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			started <- struct{}{}
			<-ctx.Done() // a long job that honours cancellation
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waits := func(what string) {
		t.Helper()
		done := make(chan struct{})
		go func() { w.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Wait %s did not return", what)
		}
	}
	waits("before Start")
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: want the deadline's error (a hard stop happened), got %v", err)
	}
	waits("after Stop")
	st := w.Stats()
	if st.Claimed != 10 || st.Released != 10 || st.Failed != 0 || st.Completed != 0 {
		t.Fatalf("stats %+v: want 10 claimed, 10 released", st)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Queued' AND "attempts" = 0 AND "lease_expires_at" IS NULL`); got != 10 {
		t.Fatalf("%d of 10 jobs back in the queue with no attempt counted", got)
	}
}

// TestWorkerHeartbeatKeepsLease: a job that runs longer than the
// visibility timeout keeps its lease through heartbeats, so no one else
// gets it, and completes once.
func TestWorkerHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: time.Second})
	ctx := ctxT(t)
	e := enqueueOne(t, q, skiplock.NewJob{})
	var runs atomic.Int32
	var results testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 2, Heartbeat: 100 * time.Millisecond, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond,
		// The job's first result, whatever it is: the checks below want
		// its Success.
		AfterResult: func(*skiplock.Job, bucketed.Outcome) { results.Add(1) },
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			runs.Add(1)
			select {
			case <-time.After(2500 * time.Millisecond): // over two visibility timeouts
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx) //nolint:errcheck
	results.Wait(t, "the job's result", 1, 30*time.Second)
	w.Stop(ctx) //nolint:errcheck
	j, _ := q.LookupJob(ctx, e.ID)
	if runs.Load() != 1 || j.Status != skiplock.StatusSuccess || j.Attempts != 1 {
		t.Fatalf("runs=%d status=%s attempts=%d; want one run, Success", runs.Load(), j.Status, j.Attempts)
	}
}

// TestHandlerStopsBeforeAnUnextendedLeaseLapses: when the heartbeats
// cannot extend a job's lease (here a row lock the test holds stalls
// them), the handler is cancelled before the lease ends, so the job never
// runs here and elsewhere at once; once its lease ends it runs again.
func TestHandlerStopsBeforeAnUnextendedLeaseLapses(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	const visibility = 1500 * time.Millisecond
	q := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: visibility})
	ctx := ctxT(t)
	e := enqueueOne(t, q, skiplock.NewJob{})
	var runs atomic.Int32
	var results testdb.Counter
	started := make(chan time.Time, 1)
	stopped := make(chan time.Time, 1)
	failed := make(chan struct{}) // a failing test's handler returns
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 1, Heartbeat: 250 * time.Millisecond, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
		AfterResult: func(*skiplock.Job, bucketed.Outcome) { results.Add(1) },
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			if runs.Add(1) > 1 {
				return nil
			}
			started <- time.Now()
			select {
			case <-ctx.Done():
			case <-failed:
			}
			stopped <- time.Now()
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck
	defer close(failed)
	start := <-started
	// Hold the job's row: every heartbeat's UPDATE waits on it.
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+jobsTable(name)+` WHERE "id" = $1 FOR UPDATE`, parseID(t, e.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case end := <-stopped:
		// The lease was taken before the handler started: it ends
		// before start + visibility.
		if !end.Before(start.Add(visibility)) {
			t.Fatalf("handler cancelled %v after it started, not before its lease (%v) ended", end.Sub(start), visibility)
		}
	case <-time.After(3 * visibility):
		t.Fatalf("handler still running %v after it started: its lease (%v) lapsed unextended and nothing cancelled it", 3*visibility, visibility)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rescue(t, db, name)
	results.Wait(t, "the job's second run", 2, 30*time.Second)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := q.LookupJob(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); runs.Load() != 2 || j.Status != skiplock.StatusSuccess || st.Lost != 1 || st.Completed != 1 {
		t.Fatalf("runs=%d status=%s stats %+v; want two runs, the first lost, Success", runs.Load(), j.Status, st)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(12, "default")...)
	jobs, _ := q.Dequeue(ctx, "default", 10)
	q.CompleteMany(ctx, jobs[:7]) //nolint:errcheck
	q.Cancel(ctx, jobs[7])        //nolint:errcheck
	if _, err := db.Exec(ctx, "UPDATE "+jobsTable(name)+` SET "finished_at" = now() - interval '2 hours' WHERE "finished_at" IS NOT NULL AND "id" <> $1`, mustID(t, jobs[0])); err != nil {
		t.Fatal(err)
	}
	n, err := q.DeleteFinished(ctx, time.Hour, 3)
	if err != nil || n != 7 {
		t.Fatalf("DeleteFinished: %d, %v; want the 7 old finished jobs", n, err)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); got != 5 {
		t.Fatalf("%d rows left, want 5 (2 Running, 2 Queued, 1 recent)", got)
	}
	if _, err := q.DeleteFinished(ctx, -time.Second, 0); !usage.Is(err) {
		t.Fatalf("negative age: %v", err)
	}
}

func mustID(t testing.TB, j *skiplock.Job) int64 {
	id, err := bucketed.JobID(j)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// parseID is the bucketed id in id (bucketed.ParseID), for SQL on the
// jobs table.
func parseID(t testing.TB, id string) int64 {
	n, err := bucketed.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
