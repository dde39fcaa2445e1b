package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newQueue gives a Queue on a fresh migrated schema.
func newQueue(t testing.TB, cfg *bucketed.Config) (*bucketed.Queue, string) {
	t.Helper()
	return newQueueOn(t, testdb.Drivers()[0], cfg)
}

// newQueueOn is newQueue through driver adapter d.
func newQueueOn(t testing.TB, d testdb.Driver, cfg *bucketed.Config) (*bucketed.Queue, string) {
	t.Helper()
	db, name := testdb.MigratedOn(t, d.Open(t, nil), nil, schema.LayoutBucketed)
	return queueOn(t, db, name, cfg), name
}

func queueOn(t testing.TB, db *skiplock.DB, name string, cfg *bucketed.Config) *bucketed.Queue {
	t.Helper()
	c := bucketed.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = name
	q, err := bucketed.New(ctxT(t), db, &c)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func jobsTable(name string) string {
	return sqlident.Quote(name) + "." + sqlident.Quote(schema.JobsTable)
}

func count(t testing.TB, db *skiplock.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(ctxT(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// rescue runs the maintenance leader's rescuer on schema name until no
// Running job has an expired lease.
func rescue(t testing.TB, db *skiplock.DB, name string) {
	t.Helper()
	ctx := ctxT(t)
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: name, RescueInterval: 5 * time.Millisecond, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(ctx) //nolint:errcheck // test helper
	testdb.WaitFor(t, "the rescuer to put the expired leases back", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Running' AND "lease_expires_at" <= now()`) == 0
	})
}

// dequeueSoon claims one job of queue "default" as owner, waiting up to
// the Queue's heads probe interval (and a margin) for a job put back below
// its watermarks.
func dequeueSoon(t testing.TB, q *bucketed.Queue, owner string) []*skiplock.Job {
	t.Helper()
	return dequeueSoonAs(t, q, "default", owner)
}

// dequeueSoonAs is dequeueSoon from queue.
func dequeueSoonAs(t testing.TB, q *bucketed.Queue, queue, owner string) []*skiplock.Job {
	t.Helper()
	ctx := ctxT(t)
	var jobs []*skiplock.Job
	testdb.WaitFor(t, "a claim of a job put back", bucketed.DefaultHintMaxAge+10*time.Second, func() bool {
		var err error
		if jobs, err = q.DequeueAs(ctx, queue, 1, owner); err != nil {
			t.Fatal(err)
		}
		return len(jobs) > 0
	})
	return jobs
}

// mustEnqueue enqueues jobs, setup for a test that nothing else writes
// to q's schema meanwhile. Under the cockroach personality's injected
// ambiguous commits it counts the schema's jobs to tell what committed
// (EnqueueMany's transactions commit in order) and enqueues the rest.
func mustEnqueue(t testing.TB, q *bucketed.Queue, jobs ...skiplock.NewJob) {
	t.Helper()
	ctx := ctxT(t)
	countJobs := func() int {
		var n int
		if err := q.DB().QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(q.Schema())+".jobs").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 3 {
		before := countJobs()
		n, err := q.EnqueueMany(ctx, jobs)
		if errors.As(err, new(*retry.AmbiguousCommitError)) {
			if jobs = jobs[countJobs()-before:]; len(jobs) == 0 {
				return
			}
			continue
		}
		if err != nil || n != len(jobs) {
			t.Fatalf("EnqueueMany: added %d of %d: %v", n, len(jobs), err)
		}
		return
	}
	t.Fatalf("EnqueueMany: three ambiguous commits in a row")
}

// enqueueOne is q.Enqueue of a job without a unique key, for a test that
// nothing else writes to q's schema meanwhile (no worker runs yet),
// resolving the cockroach personality's injected ambiguous commits
// (testdb.InsertOne).
func enqueueOne(t testing.TB, q *bucketed.Queue, job skiplock.NewJob) skiplock.Enqueued {
	t.Helper()
	id := testdb.InsertOne(t, q.DB(), "SELECT id::TEXT FROM "+sqlident.Quote(q.Schema())+".jobs", func() (string, error) {
		e, err := q.Enqueue(ctxT(t), job)
		return e.ID, err
	})
	return skiplock.Enqueued{ID: id}
}

func nJobs(n int, queue string) []skiplock.NewJob {
	jobs := make([]skiplock.NewJob, n)
	for i := range jobs {
		jobs[i] = skiplock.NewJob{Queue: queue, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return jobs
}

// TestStatementsRenderForEveryEngine renders bucketed.sql for every
// engine (a block without a statement, or a statement without a block,
// panics) and checks the claim's bucket predicate. internal/crdbcheck, its
// own module, parses every statement with CockroachDB's grammar.
func TestStatementsRenderForEveryEngine(t *testing.T) {
	t.Parallel()
	for _, s := range bucketed.Statements(skiplock.EngineCockroach.Dialect(), "My$Schema") {
		if strings.Contains(s, `"bucket" = h.bucket`) {
			t.Errorf("CockroachDB's sharded index fans out itself; the claim should not scan per bucket:\n%s", s)
		}
	}
	for _, e := range []skiplock.Engine{skiplock.EnginePostgres, skiplock.EngineYugabyte} {
		if all := strings.Join(bucketed.Statements(e.Dialect(), "s"), "\n"); !strings.Contains(all, `"bucket" = h.bucket`) {
			t.Errorf("%s claim should scan per bucket", e)
		}
	}
}

// TestInsertTargetsTheUniqueIndex checks that insert's ON CONFLICT target
// is the jobs_unique_states index of the table model, predicate and all.
func TestInsertTargetsTheUniqueIndex(t *testing.T) {
	t.Parallel()
	var target string
	for _, ix := range schema.JobsTableDef(schema.DefaultBuckets).Indexes {
		if ix.Name == schema.UniqueIndex {
			target = ix.ConflictTarget()
		}
	}
	insert := bucketed.Statements(skiplock.EnginePostgres.Dialect(), "s")[0]
	if target == "" || !strings.Contains(insert, "ON CONFLICT "+target+" DO NOTHING") {
		t.Fatalf("insert does not target the unique index %s:\n%s", target, insert)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	for _, c := range []bucketed.Config{
		{Schema: `x"; DROP TABLE y`},
		{VisibilityTimeout: -time.Second},
		{RetryBase: time.Hour, RetryMax: time.Second},
		{MaxPayloadBytes: -1},
	} {
		if c.Schema == "" {
			c.Schema = name
		}
		if _, err := bucketed.New(ctxT(t), db, &c); !usage.Is(err) {
			t.Errorf("%+v: want a usage error, got %v", c, err)
		}
	}
	if _, err := bucketed.New(ctxT(t), db, &bucketed.Config{Schema: "no_such_schema"}); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Errorf("unmigrated schema: want an error that says to migrate, got %v", err)
	}
	q := queueOn(t, db, name, nil)
	if q.Buckets() != schema.DefaultBuckets {
		t.Errorf("buckets = %d, want %d from the schema", q.Buckets(), schema.DefaultBuckets)
	}
	if _, err := q.Dequeue(ctxT(t), "default", 0); !usage.Is(err) {
		t.Errorf("Dequeue n=0: %v", err)
	}
	if _, err := q.Enqueue(ctxT(t), skiplock.NewJob{Payload: json.RawMessage("{bad")}); !usage.Is(err) {
		t.Errorf("bad payload: %v", err)
	}
	if n, err := q.EnqueueMany(ctxT(t), []skiplock.NewJob{{}, {Priority: 99999}}); !usage.Is(err) || n != 0 {
		t.Errorf("bad priority in a batch: added %d, %v", n, err)
	}
	if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); got != 0 {
		t.Errorf("bad input wrote %d rows", got)
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, testLifecycle)
}

func testLifecycle(t *testing.T, d testdb.Driver) {
	q, name := newQueueOn(t, d, nil)
	ctx := ctxT(t)
	e := enqueueOne(t, q, skiplock.NewJob{Queue: "mail", Payload: json.RawMessage(`{"to":"a"}`), Priority: 3, MaxAttempts: 7})
	if e.ID == "" || e.Duplicate {
		t.Fatalf("Enqueue: %+v", e)
	}
	if jobs, err := q.Dequeue(ctx, "other", 10); err != nil || len(jobs) != 0 {
		t.Fatalf("another queue's Dequeue got %d jobs, %v", len(jobs), err)
	}
	jobs, err := q.Dequeue(ctx, "mail", 10)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Dequeue: %d jobs, %v", len(jobs), err)
	}
	j := jobs[0]
	if j.ID != e.ID || j.Queue != "mail" || string(j.Payload) != `{"to": "a"}` || j.Priority != 3 ||
		j.Status != skiplock.StatusRunning || j.Attempts != 1 || j.MaxAttempts != 7 || j.LeaseToken == 0 ||
		j.LeaseOwner == "" || !j.LeaseExpiresAt.After(time.Now().Add(20*time.Second)) {
		t.Fatalf("claimed job: %+v", j)
	}
	before := j.LeaseExpiresAt
	if err := q.Extend(ctx, j, time.Hour); err != nil || !j.LeaseExpiresAt.After(before) {
		t.Fatalf("Extend: %v, expires %v (was %v)", err, j.LeaseExpiresAt, before)
	}
	if err := q.Complete(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, j); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("second Complete: want ErrLeaseLost, got %v", err)
	}
	got, err := q.LookupJob(ctx, e.ID)
	if err != nil || got.Status != skiplock.StatusSuccess || got.ID != j.ID {
		t.Fatalf("LookupJob(%q): %+v %v", e.ID, got, err)
	}
	if _, err := q.LookupJob(ctx, "not-a-number"); !usage.Is(err) {
		t.Fatalf("LookupJob of a fanout-style id: %v, want a usage error", err)
	}
	if _, err := q.LookupJob(ctx, "999999999"); !errors.Is(err, skiplock.ErrNoJob) {
		t.Fatalf("LookupJob of a missing id: %v, want ErrNoJob", err)
	}
	st, err := q.Stats(ctx, "")
	if err != nil || st.ByStatus[skiplock.StatusSuccess] != 1 || st.ByStatus[skiplock.StatusQueued] != 0 {
		t.Fatalf("Stats: %+v %v", st, err)
	}
	// Cancel and Release.
	mustEnqueue(t, q, nJobs(2, "mail")...)
	jobs, _ = q.Dequeue(ctx, "mail", 2)
	if len(jobs) != 2 {
		t.Fatalf("got %d jobs", len(jobs))
	}
	if err := q.Cancel(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ctx, jobs[1]); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ctx, jobs[1]); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("second Release: %v", err)
	}
	again, err := q.Dequeue(ctx, "mail", 5)
	if err != nil || len(again) != 1 || again[0].ID != jobs[1].ID || again[0].Attempts != 1 {
		t.Fatalf("released job should come back with the attempt not counted: %+v %v", again, err)
	}
	_ = name
}

func TestUniqueKeysDedupe(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, nil)
	ctx := ctxT(t)
	a, err := q.Enqueue(ctx, skiplock.NewJob{UniqueKey: "k1"})
	if err != nil || a.Duplicate {
		t.Fatal(a, err)
	}
	b, err := q.Enqueue(ctx, skiplock.NewJob{UniqueKey: "k1"})
	if err != nil || !b.Duplicate || b.ID != a.ID {
		t.Fatalf("second enqueue of k1: %+v %v; want Duplicate with id %s", b, err, a.ID)
	}
	if c, err := q.Enqueue(ctx, skiplock.NewJob{Queue: "other", UniqueKey: "k1"}); err != nil || c.Duplicate {
		t.Fatalf("same key on another queue: %+v %v", c, err)
	}
	n, err := q.EnqueueMany(ctx, []skiplock.NewJob{{UniqueKey: "k1"}, {UniqueKey: "k2"}, {UniqueKey: "k2"}, {}})
	if err != nil || n != 2 {
		t.Fatalf("EnqueueMany with keys: added %d, %v; want 2 (k2 once, and the keyless job)", n, err)
	}
	// Running still holds the key; finished frees it.
	jobs, _ := q.Dequeue(ctx, "default", 10)
	if d, _ := q.Enqueue(ctx, skiplock.NewJob{UniqueKey: "k1"}); !d.Duplicate {
		t.Fatal("a Running job should still hold its key")
	}
	if _, err := q.CompleteMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if d, err := q.Enqueue(ctx, skiplock.NewJob{UniqueKey: "k1"}); err != nil || d.Duplicate {
		t.Fatalf("after completion the key is free: %+v %v", d, err)
	}
}

func TestEnqueueTxRollsBackWithCaller(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		q, name := newQueueOn(t, d, &bucketed.Config{Queue: "mail"})
		db := q.DB()
		ctx := ctxT(t)
		if _, err := q.EnqueueTx(ctx, nil, nJobs(1, "")...); !usage.Is(err) {
			t.Fatalf("nil tx: %v, want a usage error", err)
		}
		tx := d.Begin(t) // the caller's own driver transaction
		if n, err := q.EnqueueTx(ctx, tx, nJobs(3, "default")...); err != nil || n != 3 {
			t.Fatalf("EnqueueTx: %d %v", n, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if got := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); got != 0 {
			t.Fatalf("rolled-back EnqueueTx left %d jobs", got)
		}
		tx = d.Begin(t)
		if _, err := q.EnqueueTx(ctx, tx, nJobs(2, "default")...); err != nil {
			t.Fatal(err)
		}
		// EnqueueIn returns the ids; a job naming no queue goes to
		// Config.Queue.
		ids, err := q.EnqueueIn(ctx, tx, skiplock.NewJob{UniqueKey: "once"}, skiplock.NewJob{UniqueKey: "once"})
		if err != nil || len(ids) != 1 {
			t.Fatalf("EnqueueIn with a repeated unique key: %v %v, want one id", ids, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if jobs, err := q.Dequeue(ctx, "default", 10); err != nil || len(jobs) != 2 {
			t.Fatalf("committed EnqueueTx: dequeued %d, %v", len(jobs), err)
		}
		if j, err := q.LookupJob(ctx, ids[0]); err != nil || j.Queue != "mail" {
			t.Fatalf("EnqueueIn's job %s: %+v %v; want it on Config.Queue", ids[0], j, err)
		}
	})
}

// TestOnCompleteEnqueuesFollowUp: an OnComplete hook enqueues a
// follow-up job through the skiplock.Tx it is given (EnqueueIn): the
// follow-up commits exactly when the job's Success does. A failed attempt
// enqueues nothing, and a hook that fails (on a server error, through the
// driver adapter's mapped errors) rolls its follow-ups back with the
// completion, leaving the job Running.
func TestOnCompleteEnqueuesFollowUp(t *testing.T) {
	t.Parallel()
	testdb.ForEachDriver(t, func(t *testing.T, d testdb.Driver) {
		q, name := newQueueOn(t, d, &bucketed.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
		db := q.DB()
		ctx := ctxT(t)
		followUps := func() int64 {
			return count(t, db, "SELECT count(*) FROM "+jobsTable(name)+" WHERE queue = 'follow-up'")
		}
		follow := func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			next := make([]skiplock.NewJob, len(done))
			for i, j := range done {
				next[i] = skiplock.NewJob{Queue: "follow-up", Payload: json.RawMessage(`{"after":"` + j.ID + `"}`)}
			}
			_, err := q.EnqueueIn(ctx, tx, next...)
			return err
		}

		// A hook that fails rolls back its follow-ups and the completion.
		mustEnqueue(t, q, nJobs(1, "default")...)
		jobs, err := q.Dequeue(ctx, "default", 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Dequeue: %d %v", len(jobs), err)
		}
		_, err = q.CompleteManyWith(ctx, jobs, func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			if err := follow(ctx, tx, done); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT 1/0")
			return err
		})
		var pe *skiplock.PgError
		if !errors.As(err, &pe) || pe.Code != "22012" {
			t.Fatalf("failing hook: %v, want the mapped division by zero", err)
		}
		if n := followUps(); n != 0 {
			t.Fatalf("a failed completion left %d follow-ups", n)
		}
		if j, err := q.LookupJob(ctx, jobs[0].ID); err != nil || j.Status != skiplock.StatusRunning {
			t.Fatalf("after the failed completion: %+v %v, want Running", j, err)
		}
		if err := q.Release(ctx, jobs[0]); err != nil {
			t.Fatal(err)
		}

		// Through a Worker: the first attempt fails (no follow-up), the
		// second completes with its follow-up.
		var calls sync.Map
		var completed testdb.Counter
		w, err := q.NewWorker(&bucketed.WorkerConfig{
			Workers: 2, IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond, Logger: testdb.Logger(t),
			AfterComplete: func(*skiplock.Job, time.Time, time.Time) { completed.Add(1) },
			Handler: func(ctx context.Context, j *skiplock.Job) error {
				if _, again := calls.LoadOrStore(j.ID, true); !again {
					if n := followUps(); n != 0 {
						t.Errorf("before any completion: %d follow-ups", n)
					}
					return errors.New("first attempt fails")
				}
				return nil
			},
			OnComplete: follow,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		completed.Wait(t, "the job's completion", 1, 30*time.Second)
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Completed != 1 || st.Failed != 1 {
			t.Fatalf("worker stats %+v: want 1 failed attempt and 1 completion", st)
		}
		if n := followUps(); n != 1 {
			t.Fatalf("after the completion: %d follow-ups, want exactly 1", n)
		}
		if n := count(t, db, "SELECT count(*) FROM "+jobsTable(name)+" WHERE queue = 'follow-up' AND payload->>'after' = $1", jobs[0].ID); n != 1 {
			t.Fatalf("the follow-up does not name job %s", jobs[0].ID)
		}
	})
}

func TestNotClaimedBeforeRunAt(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	ctx := ctxT(t)
	e := enqueueOne(t, q, skiplock.NewJob{RunAt: time.Now().Add(time.Hour)})
	if jobs, err := q.Dequeue(ctx, "default", 10); err != nil || len(jobs) != 0 {
		t.Fatalf("claimed %d jobs before run_at, %v", len(jobs), err)
	}
	if ok, _ := q.Pending(ctx, "default"); !ok {
		t.Fatal("a scheduled job is pending")
	}
	if _, err := db.Exec(ctx, "UPDATE "+jobsTable(name)+` SET "run_at" = now() - interval '1 second' WHERE "id" = $1`, parseID(t, e.ID)); err != nil {
		t.Fatal(err)
	}
	if jobs, err := q.Dequeue(ctx, "default", 10); err != nil || len(jobs) != 1 {
		t.Fatalf("due job: claimed %d, %v", len(jobs), err)
	}
}

// TestFailManyKeepsEachError: a batch of failures records each job's own
// error, whatever order the batch comes in.
func TestFailManyKeepsEachError(t *testing.T) {
	t.Parallel()
	q, _ := newQueue(t, nil)
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(5, "default")...)
	jobs, _ := q.Dequeue(ctx, "default", 5)
	var fs []bucketed.Failure
	for i := len(jobs) - 1; i >= 0; i-- { // reversed: not id order
		fs = append(fs, bucketed.Failure{Job: jobs[i], Err: errors.New("error of " + jobs[i].ID)})
	}
	if lost, err := q.FailMany(ctx, fs); err != nil || len(lost) != 0 {
		t.Fatal(lost, err)
	}
	for _, j := range jobs {
		got, _ := q.LookupJob(ctx, j.ID)
		if got.LastError != "error of "+j.ID || got.Status != skiplock.StatusQueued {
			t.Errorf("job %s: %s %q", j.ID, got.Status, got.LastError)
		}
	}
}
