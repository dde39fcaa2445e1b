package bucketed_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestWorkerSeesSchemaMigratedAgain: a worker started on 4 buckets keeps
// running while the schema is dropped and migrated again with 16; every
// job enqueued afterwards is claimed (none starves in buckets 4 to 15),
// and the change is logged.
func TestWorkerSeesSchemaMigratedAgain(t *testing.T) {
	t.Parallel()
	db, name := testdb.MigratedOn(t, testdb.Open(t, nil), &schema.Options{Buckets: 4}, schema.LayoutBucketed)
	var logs testdb.Records
	q := queueOn(t, db, name, &bucketed.Config{LayoutRecheck: 200 * time.Millisecond, Logger: logs.Logger()})
	if q.Buckets() != 4 {
		t.Fatalf("Buckets() = %d, want 4", q.Buckets())
	}
	var done testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 4, NoMaintenance: true, IdleMax: 50 * time.Millisecond, ErrorMax: 100 * time.Millisecond, Logger: logs.Logger(),
		Handler: func(context.Context, *skiplock.Job) error { done.Add(1); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck // the counts are checked
	// The worker runs on the 4 buckets before the schema goes.
	testdb.WaitFor(t, "the worker's first polls", 30*time.Second, func() bool { return w.ClaimStatements() >= 3 })
	if _, err := db.Exec(ctx, "DROP SCHEMA "+sqlident.Quote(name)+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	mc := &schema.MigrateConfig{Layouts: []schema.Layout{schema.LayoutBucketed}}
	mc.Schema, mc.Buckets = name, 16
	if _, err := schema.Migrate(ctx, db, mc); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	if _, err := q.EnqueueMany(ctx, make([]skiplock.NewJob, n)); err != nil {
		t.Fatal(err)
	}
	if b := count(t, db, `SELECT count(DISTINCT "bucket") FROM `+jobsTable(name)); b != 16 {
		t.Fatalf("the jobs fill %d buckets, want 16", b)
	}
	start := time.Now()
	done.Reach(n, 60*time.Second) // the checks below say what is missing
	left := count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Queued'`)
	if done.Load() < n || left != 0 {
		t.Fatalf("%d of %d jobs handled, %d still Queued after %v: the worker kept its old bucket count; log:\n%s", done.Load(), n, left, time.Since(start).Round(time.Millisecond), logs.String())
	}
	t.Logf("all %d jobs claimed %v after the enqueue", n, time.Since(start).Round(time.Millisecond))
	changed := logs.Matching("bucket count changed")
	if q.Buckets() != 16 || len(changed) == 0 || changed[0].Attrs["buckets"] != "16" || changed[0].Attrs["was"] != "4" {
		t.Fatalf("Buckets() = %d, and the change was not logged:\n%s", q.Buckets(), logs.String())
	}
}
