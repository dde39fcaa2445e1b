package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestRetriedJobsCompleteUnderEveryPersonality runs jobs whose first
// attempt fails under each engine's isolation: the claim's transaction
// must not read or write anything another connection writes while it
// holds the job (the attempt count), or at SERIALIZABLE (CockroachDB) and
// snapshot isolation (YugabyteDB without its READ COMMITTED flag) the
// delete fails as a serialization conflict at every try and the job runs
// again and again. Every job must end done, its effect committed once,
// and no handler may run after its job's success.
func TestRetriedJobsCompleteUnderEveryPersonality(t *testing.T) {
	t.Parallel()
	for _, p := range append([]skiplock.Personality{skiplock.PersonalityNone}, skiplock.Personalities...) {
		name := string(p)
		if p == skiplock.PersonalityNone {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// No injected errors here: the conflicts are the engine's own.
			runRetriedJobs(t, &skiplock.OpenConfig{MaxConns: 12, Emulate: p, Emulation: &skiplock.EmulateConfig{}}, 50, 4, 1)
		})
	}
}

// TestEveryJobOnceUnderThePersonality: the personality goal, 32 workers,
// a tenth of the jobs failing their first attempt, on whatever rules the
// suite runs under (SKIPLOCK_TEST_EMULATE: each engine's isolation, and
// CockroachDB's injected retry errors and ambiguous commits): every job's
// effect committed exactly once, and no handler run after its success.
func TestEveryJobOnceUnderThePersonality(t *testing.T) {
	t.Parallel()
	n := 2000
	if os.Getenv("SKIPLOCK_TEST_SCALE") == "full" {
		n = 20000
	}
	runRetriedJobs(t, &skiplock.OpenConfig{MaxConns: int32(32 + fanout.RecorderConns(32) + 2)}, n, 32, 10)
}

// runRetriedJobs enqueues n jobs, one in failEvery of which fails its
// first attempt, and works them with workers goroutines on a DB opened
// with cfg, then checks that every job's effect committed once and that
// nothing ran after a success.
func runRetriedJobs(t *testing.T, cfg *skiplock.OpenConfig, n, workers, failEvery int) {
	t.Helper()
	if cfg.Emulate == skiplock.PersonalityNone && cfg.Emulation != nil && *cfg.Emulation == (skiplock.EmulateConfig{}) {
		cfg.Emulation = nil
	}
	db := testdb.Open(t, cfg)
	_, s := testdb.MigratedOn(t, db, nil, schema.LayoutFanout)
	q, err := fanout.New(context.Background(), db, &fanout.Config{Schema: s, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := enqueueIDs(t, q, db, s, jobs(n))
	failing := map[string]bool{}
	for i, id := range ids {
		failing[id] = i%failEvery == 0
	}
	var runs runCounter
	var total, afterSuccess atomic.Int64
	var succeeded sync.Map
	record := recordHandler(s)
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: workers,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			total.Add(1)
			if _, done := succeeded.Load(job.ID); done {
				afterSuccess.Add(1)
			}
			if runs.add(job.ID) == 1 && failing[job.ID] {
				return errors.New("first attempt fails")
			}
			return record(ctx, tx, job)
		},
		OnResult: func(_ int, r *fanout.Result, err error) {
			if err == nil && r.Job != nil && r.HandlerErr == nil && !r.Snoozed {
				succeeded.Store(r.Job.ID, true)
			}
		},
		IdleMin: time.Millisecond, IdleMax: 5 * time.Millisecond,
		Logger: testdb.Logger(t),
	})
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck // a failed test's worker
	waitEmpty(t, q, 10*time.Minute, func() string {
		return fmt.Sprintf("%s; %d jobs left", fmtCounts(w.Stats(), total.Load()), count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)))
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	logged := count(t, db, "SELECT count(*) FROM "+table(s, schema.WorkLogTable)+" WHERE job_id = ANY($1)", ids)
	distinct := count(t, db, "SELECT count(DISTINCT job_id) FROM "+table(s, schema.WorkLogTable)+" WHERE job_id = ANY($1)", ids)
	dead := count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable))
	if logged != int64(n) || distinct != int64(n) || dead != 0 {
		t.Errorf("work_log has %d rows for %d distinct jobs, job_dead %d: want one row per job of %d, none dead", logged, distinct, dead, n)
	}
	if afterSuccess.Load() != 0 {
		t.Errorf("%d handler runs after their job's success", afterSuccess.Load())
	}
	most := int64(0)
	for _, id := range ids {
		most = max(most, runs.get(id))
	}
	t.Logf("%s: %s; most runs of one job %d", db.EngineVersion(), fmtCounts(w.Stats(), total.Load()), most)
}

// TestCockroachReleaseGate: fanout's claims take SKIP LOCKED over durable
// locks, which CockroachDB refuses before 24.1. New says so, naming the
// release and the feature, instead of failing at the first claim.
func TestCockroachReleaseGate(t *testing.T) {
	t.Parallel()
	_, s := testdb.Migrated(t, nil, schema.LayoutFanout)
	for _, tc := range []struct {
		version string
		refused bool
	}{{"v23.2.5", true}, {"23.1", true}, {"v24.1.0", false}, {"25.2", false}} {
		db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, Emulate: skiplock.PersonalityCockroach, Emulation: &skiplock.EmulateConfig{Version: tc.version}})
		_, err := fanout.New(context.Background(), db, &fanout.Config{Schema: s})
		var re *skiplock.ReleaseError
		switch {
		case tc.refused && !errors.As(err, &re):
			t.Errorf("CockroachDB %s: New returned %v, want a *skiplock.ReleaseError", tc.version, err)
		case tc.refused && (re.Need != "24.1" || !strings.Contains(err.Error(), "24.1") || !strings.Contains(err.Error(), "SKIP LOCKED")):
			t.Errorf("CockroachDB %s: error %q does not name the release needed and the feature", tc.version, err)
		case !tc.refused && err != nil:
			t.Errorf("CockroachDB %s: %v", tc.version, err)
		}
	}
}

// TestCockroachBoundsJobTimeout: on CockroachDB a job's transaction that
// stays open past the closed-timestamp target fails its commit at every
// try, so a fanout worker's job budget defaults below it, and a longer
// one is refused with the bound in the error.
func TestCockroachBoundsJobTimeout(t *testing.T) {
	t.Parallel()
	_, s := testdb.Migrated(t, nil, schema.LayoutFanout)
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 2, Emulate: skiplock.PersonalityCockroach})
	q, err := fanout.New(context.Background(), db, &fanout.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil }
	if _, err := q.NewWorker(&fanout.WorkerConfig{Handler: noop}); err != nil {
		t.Errorf("the default budget: %v", err)
	}
	_, err = q.NewWorker(&fanout.WorkerConfig{Handler: noop, JobTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "2.4s") || !strings.Contains(err.Error(), "kv.closed_timestamp.target_duration") {
		t.Errorf("a 10 s budget: %v, want a refusal naming the 2.4s bound and the setting", err)
	}
	if _, err := q.NewWorker(&fanout.WorkerConfig{Handler: noop, JobTimeout: 10 * time.Second, HoldLimit: 15 * time.Second}); err != nil {
		t.Errorf("a 10 s budget on a cluster whose target is 15 s: %v", err)
	}
}
