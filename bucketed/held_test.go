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
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

func holdTable(name string) string {
	return sqlident.Quote(name) + "." + sqlident.Quote(schema.JobHoldTable)
}

// Held claims, many workers at once: three Workers (as three processes
// would: a Queue each) with HeldClaims work 3,000 jobs. Every handler run
// is counted by job: ordinary jobs run once; "fail" jobs fail their first
// attempt and run twice; "snooze" jobs snooze once and run twice, their
// attempt not counted. Every job ends Success with the attempts its runs
// make, every result was written, and no hold row is left.
func TestHeldClaimsRunEveryJobOnce(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete_completed=%v", del), func(t *testing.T) {
			t.Parallel()
			db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
			ctx := ctxT(t)
			const n = 3000
			jobs := make([]skiplock.NewJob, n)
			for i := range jobs {
				kind := "plain"
				switch i % 10 {
				case 3:
					kind = "fail"
				case 7:
					kind = "snooze"
				}
				jobs[i] = skiplock.NewJob{Queue: "held", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"k":%q}`, i, kind))}
			}
			mustEnqueue(t, queueOn(t, db, s, nil), jobs...)

			var mu sync.Mutex
			runs := map[string]int{}
			var completed testdb.Counter
			var workers []*bucketed.Worker
			for w := range 3 {
				q := queueOn(t, db, s, &bucketed.Config{VisibilityTimeout: 20 * time.Second, DeleteCompleted: del,
					RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
				wk, err := q.NewWorker(&bucketed.WorkerConfig{Queue: "held", Workers: 20, HeldClaims: true, NoMaintenance: w > 0,
					Maintenance: &maintenance.Config{RescueInterval: 50 * time.Millisecond},
					IdleMin:     time.Millisecond, PollInterval: 20 * time.Millisecond,
					Handler: func(ctx context.Context, job *skiplock.Job) error {
						mu.Lock()
						runs[job.ID]++
						run := runs[job.ID]
						mu.Unlock()
						if job.Status != skiplock.StatusRunning || job.Attempts < 1 {
							return fmt.Errorf("handed a job reading %s, attempt %d: want Running and the attempt counted", job.Status, job.Attempts)
						}
						switch {
						case strings.Contains(string(job.Payload), `"fail"`) && run == 1:
							return errors.New("first attempt fails")
						case strings.Contains(string(job.Payload), `"snooze"`) && run == 1:
							return skiplock.Snooze(5 * time.Millisecond)
						}
						return nil
					},
					AfterComplete: func(*skiplock.Job, time.Time, time.Time) { completed.Add(1) },
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := wk.Start(ctx); err != nil {
					t.Fatal(err)
				}
				workers = append(workers, wk)
			}
			completed.Reach(n, 90*time.Second) // the checks below say what is missing
			var st bucketed.WorkerStats
			for _, wk := range workers {
				if err := wk.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				s := wk.Stats()
				st.Completed += s.Completed
				st.Failed += s.Failed
				st.Snoozed += s.Snoozed
				st.Lost += s.Lost
			}
			if completed.Load() != n || st.Completed != n || st.Lost != 0 {
				t.Fatalf("completed %d (stats %+v) of %d jobs", completed.Load(), st, n)
			}
			if st.Failed != n/10 || st.Snoozed != n/10 {
				t.Errorf("recorded %d failed attempts and %d snoozes, want %d each", st.Failed, st.Snoozed, n/10)
			}
			mu.Lock()
			twice := 0
			for id, r := range runs {
				switch r {
				case 1:
				case 2:
					twice++
				default:
					t.Errorf("job %s ran %d times", id, r)
				}
			}
			mu.Unlock()
			if len(runs) != n || twice != 2*n/10 {
				t.Errorf("%d jobs ran, %d of them twice; want %d, %d twice (the failed and snoozed ones)", len(runs), twice, n, 2*n/10)
			}
			if left := count(t, db, `SELECT count(*) FROM `+holdTable(s)); left != 0 {
				t.Errorf("%d hold rows left after every claim committed", left)
			}
			if del {
				if left := count(t, db, `SELECT count(*) FROM `+jobsTable(s)); left != 0 {
					t.Errorf("%d jobs left; completed jobs are deleted", left)
				}
				return
			}
			// Attempts as the runs made them: a failure counts one, a snooze none.
			bad := count(t, db, `SELECT count(*) FROM `+jobsTable(s)+` WHERE "status" <> 'Success'
  OR "attempts" <> CASE WHEN "payload"->>'k' = 'fail' THEN 2 ELSE 1 END
  OR ("payload"->>'k' = 'snooze') <> (COALESCE(("metadata"->>'snoozes')::INT, 0) = 1)
  OR ("payload"->>'k' = 'fail') <> ("last_error" IS NOT NULL)`)
			if bad != 0 {
				t.Errorf("%d jobs whose status, attempts, snoozes or last error do not match their runs", bad)
			}
		})
	}
}

// A held claim's transaction that ends without a result (here: its
// connection is terminated while the handlers run) leaves its hold row:
// claims, held or leased, do not take the jobs until the rescuer has
// counted the attempt,
// then they run again with it counted; a job on its last attempt ends
// Failed, its error saying why.
func TestHeldClaimLostCountsTheAttempt(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	q := queueOn(t, db, s, &bucketed.Config{VisibilityTimeout: 20 * time.Second})
	mustEnqueue(t, q, skiplock.NewJob{Queue: "held", Payload: json.RawMessage(`"again"`), MaxAttempts: 3},
		skiplock.NewJob{Queue: "held", Payload: json.RawMessage(`"last"`), MaxAttempts: 1})

	started := make(chan *skiplock.Job, 2)
	release := make(chan struct{})
	wk, err := q.NewWorker(&bucketed.WorkerConfig{Queue: "held", Workers: 2, Prefetch: -1, HeldClaims: true, NoMaintenance: true,
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			started <- job
			<-release
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the held jobs did not start")
		}
	}
	if n := count(t, db, `SELECT count(*) FROM `+holdTable(s)); n < 1 {
		t.Fatalf("%d hold rows while the handlers run, want the claims' records", n)
	}
	// The claims' sessions die: their transactions roll back, the jobs are
	// Queued and unlocked, their attempts not yet counted.
	// Only this test's: their last statement, the held claim, names its
	// schema's jobs table (early: pg_stat_activity keeps the first 1 kB).
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`,
		jobsTable(s)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := wk.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := wk.Stats(); st.Completed != 0 || st.Lost != 2 {
		t.Fatalf("after the connections died: %+v, want 2 lost and none completed", st)
	}
	// Not claimable while the hold row stands.
	other := queueOn(t, db, s, nil)
	held, end, err := other.ClaimHeld(ctx, "held", 10)
	if err != nil || len(held) != 0 {
		t.Fatalf("a held claim took %d jobs whose attempt is not counted yet (%v), want none", len(held), err)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	// Nor by a lease claim: lease and held workers may share a queue.
	if jobs, err := other.Dequeue(ctx, "held", 10); err != nil || len(jobs) != 0 {
		t.Fatalf("a lease claim took %d jobs whose attempt is not counted yet (%v), want none", len(jobs), err)
	}
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: s, RescueInterval: 10 * time.Millisecond, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(ctx) //nolint:errcheck // test cleanup
	// The rescuer counts after its transaction commits: wait for both.
	testdb.WaitFor(t, "the rescuer to clear the hold rows and count them", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM `+holdTable(s)) == 0 && svc.Stats().HeldRescued >= 2
	})
	if got := svc.Stats().HeldRescued; got != 2 {
		t.Errorf("the rescuer counted %d held attempts, want 2", got)
	}
	row := func(payload string) (status string, attempts int, lastErr string) {
		t.Helper()
		if err := db.QueryRow(ctx, `SELECT "status"::TEXT, "attempts", COALESCE("last_error", '') FROM `+jobsTable(s)+` WHERE "payload" = $1::JSONB`,
			payload).Scan(&status, &attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		return
	}
	if st, a, e := row(`"again"`); st != "Queued" || a != 1 || !strings.Contains(e, "held claim ended without a result") {
		t.Errorf(`job "again": %s, %d attempts, %q; want Queued with 1 attempt counted and the reason`, st, a, e)
	}
	if st, a, e := row(`"last"`); st != "Failed" || a != 1 || !strings.Contains(e, "held claim ended without a result") {
		t.Errorf(`job "last" (max_attempts 1): %s, %d attempts, %q; want Failed`, st, a, e)
	}
	jobs := dequeueSoonAs(t, other, "held", "")
	if len(jobs) != 1 || string(jobs[0].Payload) != `"again"` || jobs[0].Attempts != 2 {
		t.Fatalf("after the rescue a claim took %v, want the job with attempts left, on its attempt 2", jobs)
	}
}

// A handler that outlives its held claim's deadline (the visibility
// timeout less its margin) is cancelled and its attempt recorded as
// failed, saying so; a job of the claim not started by then is left
// Queued with its attempt not counted.
func TestHeldClaimDeadline(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	q := queueOn(t, db, s, &bucketed.Config{VisibilityTimeout: time.Second, RetryBase: time.Hour, RetryMax: time.Hour})
	mustEnqueue(t, q, skiplock.NewJob{Queue: "held", Payload: json.RawMessage(`"slow"`)})
	var failed testdb.Counter
	wk, err := q.NewWorker(&bucketed.WorkerConfig{Queue: "held", Workers: 1, Prefetch: -1, HeldClaims: true, NoMaintenance: true,
		Heartbeat: 100 * time.Millisecond,
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			<-ctx.Done()
			return ctx.Err()
		},
		AfterResult: func(_ *skiplock.Job, o bucketed.Outcome) {
			if o == bucketed.OutcomeFailed {
				failed.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	failed.Reach(1, 30*time.Second) // the job's row, checked below, says what happened
	if err := wk.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var status, lastErr string
	var attempts int
	if err := db.QueryRow(ctx, `SELECT "status"::TEXT, "attempts", COALESCE("last_error", '') FROM `+jobsTable(s)).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "Queued" || attempts != 1 || !strings.Contains(lastErr, "held claim's deadline passed") {
		t.Fatalf("the overrunning job: %s, %d attempts, %q; want Queued (retried later) with its failed attempt and why", status, attempts, lastErr)
	}
}

// HeldClaims is refused where the engine does not offer it.
func TestHeldClaimsNeedPostgres(t *testing.T) {
	for _, e := range []skiplock.Engine{skiplock.EngineCockroach, skiplock.EngineYugabyte} {
		if e.Dialect().HeldClaims {
			t.Errorf("%s offers held claims; docs/design.md says only PostgreSQL does", e)
		}
	}
	if !skiplock.EnginePostgres.Dialect().HeldClaims {
		t.Error("PostgreSQL does not offer held claims")
	}
}
