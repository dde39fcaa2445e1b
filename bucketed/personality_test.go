package bucketed_test

import (
	"context"
	"errors"
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
		Workers: workers, Batch: 8, IdleMin: time.Millisecond, IdleMax: 20 * time.Millisecond,
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
