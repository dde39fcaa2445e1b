package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// goalJobs is how many jobs the personality goal runs: the 20,000
// when SKIPLOCK_TEST_SCALE=full (the personalities' CI target), fewer in
// make test.
func goalJobs() int {
	if os.Getenv("SKIPLOCK_TEST_SCALE") == "full" {
		return 20000
	}
	return 2000
}

// TestEveryJobCompletesUnderThePersonality: 32 workers, a tenth of the
// jobs failing their first attempt, on whatever rules the suite runs
// under (SKIPLOCK_TEST_EMULATE: each engine's isolation, and CockroachDB's
// injected retry errors and ambiguous commits). Leases promise at least
// once: every job ends Success, none is lost, each handler ran at least
// once and a job that succeeded at once ran once unless a completion's
// outcome was lost (an ambiguous commit, counted).
func TestEveryJobCompletesUnderThePersonality(t *testing.T) {
	t.Parallel()
	const workers = 32
	n := goalJobs()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: workers + 8})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, VisibilityTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mustEnqueue(t, q, nJobs(n, "default")...)
	var runs sync.Map // id -> *atomic.Int32
	var total atomic.Int64
	var logs testdb.Records
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: workers, Prefetch: workers * 7, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			c, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			total.Add(1)
			if c.(*atomic.Int32).Add(1) == 1 && hashTenth(j.ID) {
				return errors.New("a tenth fail their first attempt")
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
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	// The database's own word, not the worker's: under a personality a
	// completion's outcome may be lost (an ambiguous commit), and the job
	// then runs again.
	testdb.WaitFor(t, "no job pending", 9*time.Minute, func() bool {
		pending, err := q.Pending(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		return !pending
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	seen, never := 0, 0
	runs.Range(func(_, _ any) bool { seen++; return true })
	success := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success'`)
	never = n - seen
	if success != int64(n) || never != 0 {
		t.Errorf("%d of %d jobs Success, %d never ran", success, n, never)
	}
	st := w.Stats()
	t.Logf("%s: %d jobs, %d handler runs, stats %+v, %d log lines", db.EngineVersion(), n, total.Load(), st, len(logs.All()))
}

// hashTenth picks about a tenth of the jobs by id.
func hashTenth(id string) bool { return len(id) > 0 && id[len(id)-1] == '3' }

// ambiguousDB opens the test server under the cockroach personality with
// that share of COMMITs answered "result is ambiguous" (half after
// committing, half after rolling back), closed with the test.
func ambiguousDB(t *testing.T, maxConns int32, rate float64) *skiplock.DB {
	t.Helper()
	edb, err := skiplock.Open(ctxT(t), testdb.DSN(t), &skiplock.OpenConfig{MaxConns: maxConns, Emulate: skiplock.PersonalityCockroach,
		Emulation: &skiplock.EmulateConfig{AmbiguousCommitRate: rate}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(edb.Close)
	return edb
}

// TestAmbiguousPermitClaimsNeverFail: a Worker of a queue with a global
// limit, under the cockroach personality with three COMMITs in ten
// answered "result is ambiguous" (half after committing, half after
// rolling back), claims under its permits without a failed claim: a
// claim that committed hands out what it read back, and one that rolled
// back (none read back) is sent once more. Every job ends Success, and
// never more than the limit run at once.
func TestAmbiguousPermitClaimsNeverFail(t *testing.T) {
	t.Parallel()
	const n, limit = 60, 3
	ctx := ctxT(t)
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	plain := queueOn(t, db, name, nil)
	if err := plain.SetLimits(ctx, "default", bucketed.Limits{Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, plain, nJobs(n, "default")...)
	edb := ambiguousDB(t, 8, 0.3)
	// A completion whose retry is ambiguous too is lost: its jobs run
	// again once their short leases lapse.
	q := queueOn(t, edb, name, &bucketed.Config{VisibilityTimeout: 2 * time.Second})
	var g testdb.Gauge
	var runs sync.Map // id -> *atomic.Int32
	var logs testdb.Records
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 6, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Logger: logs.Logger(),
		Handler: func(ctx context.Context, j *skiplock.Job) error {
			g.Enter()
			defer g.Leave()
			c, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
			time.Sleep(time.Millisecond) // the job's work: it holds its slot meanwhile
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	success := func() int64 {
		return count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success'`)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Worker's log:\n%s", logs.String())
		}
	})
	testdb.WaitFor(t, "every job Success", 2*time.Minute, func() bool { return success() == n })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if failed := logs.Matching("claim failed"); len(failed) > 0 {
		t.Errorf("%d claims failed, the first: %s", len(failed), failed[0].String())
	}
	if m := g.Most(); m > limit {
		t.Errorf("%d handlers ran at once, above the limit of %d", m, limit)
	}
	seen := 0
	runs.Range(func(_, _ any) bool { seen++; return true })
	if seen != n {
		t.Errorf("%d distinct jobs ran, want %d", seen, n)
	}
}

// TestAmbiguousCommitRecordsOutput: under the cockroach personality with
// two COMMITs in ten answered "result is ambiguous", a handler's
// RecordOutput and ReportProgress still succeed, 30 times each: the write
// (the same value under the same lease) is sent again, and the last
// values are stored.
func TestAmbiguousCommitRecordsOutput(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	mustEnqueue(t, queueOn(t, db, name, nil), nJobs(1, "default")...)
	edb := ambiguousDB(t, 4, 0.2)
	q := queueOn(t, edb, name, nil)
	var jobs []*skiplock.Job
	for claims := 0; len(jobs) == 0; claims++ {
		if claims == 20 {
			t.Fatal("20 claims and no job")
		}
		var err error
		if jobs, err = q.Dequeue(ctx, "default", 1); err != nil {
			t.Fatal(err)
		}
	}
	const n = 30
	for i := range n {
		if err := q.RecordOutput(ctx, jobs[0], json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if err := q.ReportProgress(ctx, jobs[0], json.RawMessage(fmt.Sprintf(`{"done": %d}`, i))); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	var output, progress string
	if err := db.QueryRow(ctx, `SELECT "output"::TEXT, "progress"::TEXT FROM `+jobsTable(name)).Scan(&output, &progress); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"i": %d}`, n-1); output != want {
		t.Errorf("output %s, want %s", output, want)
	}
	if want := fmt.Sprintf(`{"done": %d}`, n-1); progress != want {
		t.Errorf("progress %s, want %s", progress, want)
	}
}

// TestAmbiguousClaimHandsOutWhatItLeased: under the cockroach personality
// with every COMMIT answered "result is ambiguous" (half after committing,
// half after rolling back), a claim never fails and never leaves a job
// Running that it did not hand out: it reads its jobs back by its lease
// token, so a committed claim's jobs run now rather than after their
// leases lapse.
func TestAmbiguousClaimHandsOutWhatItLeased(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	const n = 30
	mustEnqueue(t, queueOn(t, db, name, nil), nJobs(n, "default")...)
	edb := ambiguousDB(t, 4, 1)
	q := queueOn(t, edb, name, nil)
	got := map[string]int64{} // id -> lease token handed out
	for claims := 0; len(got) < n; claims++ {
		if claims == 20*n {
			t.Fatalf("%d claims handed out %d of %d jobs", claims, len(got), n)
		}
		jobs, err := q.Dequeue(ctx, "default", 2)
		if err != nil {
			t.Fatalf("claim %d: %v; want the jobs it leased, or none", claims, err)
		}
		for _, j := range jobs {
			if _, again := got[j.ID]; again {
				t.Fatalf("job %s handed out twice", j.ID)
			}
			got[j.ID] = j.LeaseToken
		}
	}
	// Every Running job is one a claim handed out, under the token it
	// handed out: none waits for its lease to lapse.
	rows, err := db.Query(ctx, `SELECT "id"::TEXT, "lease_token" FROM `+jobsTable(name)+` WHERE "status" = 'Running'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	running := 0
	for rows.Next() {
		var id string
		var token int64
		if err := rows.Scan(&id, &token); err != nil {
			t.Fatal(err)
		}
		running++
		if tok, ok := got[id]; !ok || tok != token {
			t.Errorf("job %s is Running under token %d, but no claim handed it out under it", id, token)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if running != n {
		t.Errorf("%d jobs Running, want the %d handed out", running, n)
	}
}

// TestAmbiguousReleaseWakesWorker: a Worker that polls its idle queue
// only every ten minutes works a chain of workflow jobs, each released by
// the completion of the one before, under the cockroach personality with
// four COMMITs in ten answered "result is ambiguous". A completion whose
// commit was ambiguous may have released the next job (half of them
// committed): the release's wake must still reach the Worker, or that
// job waits for the poll. So must a claim's answer: one that rolled back
// more than once is not a drained queue (a Worker that waits when drained
// waits for the poll then). Every job ends Success within the minute, and
// runs once: a completion is sent again while its commit is ambiguous.
func TestAmbiguousReleaseWakesWorker(t *testing.T) {
	t.Parallel()
	const n = 12
	ctx := ctxT(t)
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	deps := map[string][]string{"s0": nil}
	for i := 1; i < n; i++ {
		deps[fmt.Sprintf("s%d", i)] = []string{fmt.Sprintf("s%d", i-1)}
	}
	workflowOf(t, db, queueOn(t, db, name, nil), deps)
	edb := ambiguousDB(t, 4, 0.4)
	q := queueOn(t, edb, name, nil)
	var logs testdb.Records
	var runs atomic.Int64
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 2, PollInterval: 10 * time.Minute, WaitWhenDrained: true, Logger: logs.Logger(),
		Handler: func(context.Context, *skiplock.Job) error { runs.Add(1); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Worker's log:\n%s", logs.String())
			t.Logf("%d handler runs, stats %+v", runs.Load(), w.Stats())
		}
	})
	success := func() int64 {
		return count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Success'`)
	}
	testdb.WaitFor(t, "every job of the chain Success", time.Minute, func() bool { return success() == n })
	// A completion sent again after an ambiguous commit (up to ten
	// times) loses no job: none runs twice.
	if r, lost := runs.Load(), w.Stats().Lost; r != n || lost != 0 {
		t.Errorf("%d handler runs for %d jobs, %d results lost", r, n, lost)
	}
}
