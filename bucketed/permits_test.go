package bucketed_test

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// countSlotWrites adds a trigger to the schema's job_slot that counts
// every row written there (updates and inserts) into a table of its own,
// and returns a function that reads the count.
func countSlotWrites(t *testing.T, db *skiplock.DB, name string) func() int64 {
	t.Helper()
	ctx := ctxT(t)
	counter := sqlident.Quote(name) + `."slot_writes"`
	fn := sqlident.Quote(name) + `."count_slot_write"`
	for _, stmt := range []string{
		`CREATE TABLE ` + counter + ` (n BIGINT NOT NULL)`,
		`INSERT INTO ` + counter + ` VALUES (0)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE ` + counter + ` SET n = n + 1; RETURN NEW; END $$`,
		`CREATE TRIGGER count_slot_write AFTER INSERT OR UPDATE ON ` + slotTable(name) + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return func() int64 { return count(t, db, `SELECT n FROM `+counter) }
}

// TestPermitsStartJobsWithoutSlotWrites: a Worker of a queue with a
// global limit of 4 holds its slots as permits, and starts 300 jobs under
// them with a handful of writes to the slot table (each permit written
// once, given back once), where a slot written per job would be 300 at
// least. The limit holds (never more than 4 handlers at once, and 4
// reached), every job runs once, and once the queue is drained the
// Worker gives its permits back while it still runs.
func TestPermitsStartJobsWithoutSlotWrites(t *testing.T) {
	t.Parallel()
	const total, limit = 300, 4
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{VisibilityTimeout: 30 * time.Second}
	q := queueOn(t, db, name, cfg)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	writes := countSlotWrites(t, db, name)
	mustEnqueue(t, q, nJobs(total, "default")...)
	var g testdb.Gauge
	var done atomic.Int64
	var runs sync.Map
	handler := func(ctx context.Context, j *skiplock.Job) error {
		g.Enter()
		defer g.Leave()
		c, _ := runs.LoadOrStore(j.ID, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		time.Sleep(2 * time.Millisecond) // the job's work: it holds its permit meanwhile
		done.Add(1)
		return nil
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: 8, Prefetch: 4, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool { return done.Load() == total })
	testdb.WaitFor(t, "the permits given back by the idle Worker", 30*time.Second, func() bool {
		st, err := q.LimitsOf(ctx, "default")
		return err == nil && st.SlotsHeld == 0
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if m := g.Most(); m != limit {
		t.Errorf("at most %d handlers ran at once; want the limit, %d, reached and never passed", m, limit)
	}
	runs.Range(func(id, c any) bool {
		if n := c.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
		return true
	})
	// Each permit is written when taken and when given back; a claim may
	// take a permit again after the queue looked drained for a moment.
	if n := writes(); n > 6*limit {
		t.Errorf("%d writes to the slot table for %d jobs under a limit of %d; want permits written a few times each, not a slot per job", n, total, limit)
	}
}

// TestPermitsOutliveLongJobs: under a limit of 1, a Worker's job runs for
// over twice its permit's life (a visibility timeout of 2 s and
// heartbeats every 250 ms: a permit written or renewed holds 2.75 s);
// its heartbeats renew the permit, so a second Worker, on a Queue of its
// own as another process would be, starts nothing until the job is done,
// and then the next job.
func TestPermitsOutliveLongJobs(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{VisibilityTimeout: 2 * time.Second}
	q := queueOn(t, db, name, cfg)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, nJobs(1, "default")...)
	firstStarted := make(chan struct{})
	var g testdb.Gauge
	var started atomic.Int64
	handler := func(ctx context.Context, j *skiplock.Job) error {
		g.Enter()
		defer g.Leave()
		if started.Add(1) == 1 {
			close(firstStarted)
			select {
			case <-time.After(6 * time.Second): // over two permits' lives
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	wcfg := bucketed.WorkerConfig{Workers: 2, Heartbeat: 250 * time.Millisecond, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond, Handler: handler}
	first := wcfg
	a, err := q.NewWorker(&first)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-firstStarted
	mustEnqueue(t, q, nJobs(3, "default")...)
	second := wcfg
	b, err := queueOn(t, db, name, cfg).NewWorker(&second)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Success'`) == 4
	})
	for _, w := range []*bucketed.Worker{a, b} {
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if m, n := g.Most(), started.Load(); m != 1 || n != 4 {
		t.Errorf("%d handlers at once, %d starts; want 1 (the limit: the long job's permit renewed past its life) and 4 (each job once)", m, n)
	}
}

// TestLoweredLimitHoldsWorkersPermits: four jobs run under a limit of 4
// on a Worker holding four permits; the limit is lowered to 2 by another
// process, and the four finish one at a time, 300 ms apart, in id order,
// the order in which their claim gave them slots 0 to 3: the first two
// free permits within the new limit while jobs still run past it. From then on
// no handler starts while 2 or more run: not under a permit past the new
// limit, nor under one within it while a job runs past it (the claims'
// gate and the slots past the limit see to it at once, whatever the
// Worker last read). Then the rest run, each once.
func TestLoweredLimitHoldsWorkersPermits(t *testing.T) {
	t.Parallel()
	const total = 12
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 20})
	_, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	cfg := &bucketed.Config{VisibilityTimeout: 30 * time.Second}
	q := queueOn(t, db, name, cfg)
	ctx := ctxT(t)
	if err := q.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, nJobs(total, "default")...)
	var running, started, done, over atomic.Int64
	var lowered atomic.Bool
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	handler := func(ctx context.Context, j *skiplock.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		if lowered.Load() && n > 2 {
			over.Add(1)
		}
		if started.Add(1) <= 4 {
			gate := make(chan struct{})
			mu.Lock()
			gates[j.ID] = gate
			mu.Unlock()
			<-gate
		}
		done.Add(1)
		return nil
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: 8, IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "four jobs running", 30*time.Second, func() bool { return running.Load() == 4 })
	if err := queueOn(t, db, name, cfg).SetLimits(ctx, "default", bucketed.Limits{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	lowered.Store(true)
	mu.Lock()
	ids := slices.SortedFunc(maps.Keys(gates), func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	mu.Unlock()
	for _, id := range ids {
		close(gates[id])
		time.Sleep(300 * time.Millisecond) // room for a claim that should not start a job
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool { return done.Load() == total })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d handlers started with 2 or more running after the limit was lowered to 2", n)
	}
	if n := started.Load(); n != total {
		t.Errorf("%d starts; want %d, each job once", n, total)
	}
}
