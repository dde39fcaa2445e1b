package bucketed_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// TestRefusedResultsStopTheClaims: while every result write fails (here
// OnComplete, as a dropped table would make it), a worker must not keep
// claiming and running jobs whose results are all thrown away, spending
// their attempts: after a few failed writes it claims one job at a time,
// says so, and claims as before once a result goes through. The handler
// runs are counted: a worker without the breaker claims every job again
// as its lease runs out, all through the fault; with it, the jobs run
// once each before it trips, then one probe at a growing interval.
func TestRefusedResultsStopTheClaims(t *testing.T) {
	t.Parallel()
	const jobs = 50
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, &bucketed.Config{VisibilityTimeout: time.Second})
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(jobs, "default")...)
	var refusing atomic.Bool
	refusing.Store(true)
	var runs atomic.Int64
	var atTrip atomic.Int64 // handler runs when the breaker first tripped
	atTrip.Store(-1)
	var logs testdb.Records
	logs.OnRecord = func(r testdb.Record) {
		if strings.Contains(r.Msg, "claiming one job at a time") {
			atTrip.CompareAndSwap(-1, runs.Load())
		}
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 8, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond, ErrorMin: 50 * time.Millisecond, ErrorMax: 500 * time.Millisecond,
		Handler: func(ctx context.Context, j *skiplock.Job) error { runs.Add(1); return nil },
		OnComplete: func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			if refusing.Load() {
				return errors.New("relation \"work_log\" does not exist (as if dropped)")
			}
			return nil
		},
		Maintenance: &maintenance.Config{RescueInterval: 100 * time.Millisecond},
		Logger:      logs.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	time.Sleep(4 * time.Second)                        // time under test: the fault lasts this long, and the runs in it are counted
	during := runs.Load()
	refusing.Store(false)
	// The database's own state: results written during the fault were
	// refused, so the worker's word is not the jobs'.
	testdb.WaitFor(t, "every job Success", 100*time.Second, func() bool {
		pending, err := q.Pending(ctx, "default")
		if err != nil {
			t.Fatalf("%v (%d runs)", err, runs.Load())
		}
		return !pending && count(t, db, "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" <> 'Success'`) == 0
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	total := runs.Load()
	tripped := atTrip.Load()
	t.Logf("%d handler runs while results were refused (%d when the breaker tripped), %d in all, for %d jobs", during, tripped, total, jobs)
	// Before it trips, the worker runs what it had claimed (how much
	// depends on how fast the first writes fail on a loaded machine);
	// after, the jobs it had prefetched, then one probe at a growing
	// interval (ErrorMin 50 ms to ErrorMax 500 ms: about a dozen in the
	// rest of the fault). A worker without the breaker claims every job
	// again each time its 1 s lease runs out: a few hundred runs.
	if tripped < 0 {
		t.Errorf("the breaker never tripped in 4 s of refused results (%d runs)", during)
	} else if after := during - tripped; after > 40 {
		t.Errorf("%d handler runs after the breaker tripped, in the rest of 4 s of refused results: the worker kept claiming", after)
	}
	if l := logs.String(); !strings.Contains(l, "claiming one job at a time") || !strings.Contains(l, "claiming as before") {
		t.Errorf("the worker did not say it slowed down and resumed:\n%s", l)
	}
}
