package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestAmbiguousCommitResolvedFromTheData: under the cockroach personality
// with every COMMIT answered "result is ambiguous" (half after
// committing, half after rolling back), Process reports each job whose
// transaction committed exactly once, as a completion, and returns the
// ambiguous error only for transactions that rolled back (their jobs come
// back and run again). Without the resolution, a committed job would be
// reported as unknown and never heard of again.
func TestAmbiguousCommitResolvedFromTheData(t *testing.T) {
	t.Parallel()
	q, _, s := setup(t, 8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 30
	if _, err := q.EnqueueMany(ctx, make([]skiplock.NewJob, n)); err != nil {
		t.Fatal(err)
	}
	edb, err := skiplock.Open(ctx, testdb.DSN(t), &skiplock.OpenConfig{MaxConns: 8, Emulate: skiplock.PersonalityCockroach,
		Emulation: &skiplock.EmulateConfig{AmbiguousCommitRate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(edb.Close)
	eq, err := fanout.New(ctx, edb, &fanout.Config{Schema: s, RetryBase: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reported := map[string]int{}
	unknown := 0 // transactions of a claimed job whose rollback Process could not rule out
	for {
		if ctx.Err() != nil {
			t.Fatalf("reported %d of %d jobs in a minute (%d unknown outcomes)", len(reported), n, unknown)
		}
		res, err := eq.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil })
		switch {
		case res.Job == nil:
			// No job claimed (those left wait out their backoff); the
			// empty transaction's commit may be ambiguous too.
		case err != nil:
			unknown++ // it rolled back: the job is back
		default:
			reported[res.Job.ID]++
		}
		left, qerr := q.HasQueued(ctx)
		if qerr != nil {
			t.Fatal(qerr)
		}
		if !left {
			break
		}
	}
	if len(reported) != n {
		t.Errorf("the queue is empty with %d of %d jobs reported (%d unknown outcomes): a committed job was reported as unknown", len(reported), n, unknown)
	}
	for id, times := range reported {
		if times != 1 {
			t.Errorf("job %s reported %d times", id, times)
		}
	}
	t.Logf("%d of %d jobs reported; %d rolled-back transactions returned the ambiguous error", len(reported), n, unknown)
}

// TestAmbiguousResolutionWaitsForALateCount: an attempt whose COMMIT's
// outcome is unknown reads as committed when its job is gone and the
// job's count is still its own. If it rolled back and another worker took
// the job, that worker may commit the job's removal before its own count
// (sent ahead on another connection) lands: the first read then says
// committed. The resolution reads again a moment later, where the count
// has landed, and says not committed; a count that stays as it was still
// reads as committed. Not parallel: the seam between the reads is the
// package's.
func TestAmbiguousResolutionWaitsForALateCount(t *testing.T) {
	q, db, s := setup(t, 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const attempt = 3
	for _, tc := range []struct {
		name      string
		lands     bool // the other worker's count lands between the reads
		committed bool
	}{{"another worker's count lands late", true, false}, {"the count stays this attempt's", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := idOf(q.Enqueue(ctx, skiplock.NewJob{}))
			if err != nil {
				t.Fatal(err)
			}
			// The job's removal committed (by whichever worker), its
			// count at this attempt's.
			if _, err := db.Exec(ctx, "DELETE FROM "+table(s, "job_queue")+" WHERE id = $1", id); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(ctx, "INSERT INTO "+table(s, "job_attempt")+" (job_id, attempts, started_at, retry_at) VALUES ($1, $2, now(), now())", id, attempt); err != nil {
				t.Fatal(err)
			}
			between := func() {
				if tc.lands {
					if _, err := db.Exec(ctx, "UPDATE "+table(s, "job_attempt")+" SET attempts = attempts + 1 WHERE job_id = $1", id); err != nil {
						t.Error(err)
					}
				}
			}
			if got := fanout.Committed(ctx, q, &skiplock.Job{ID: id, Attempts: attempt}, between); got != tc.committed {
				t.Fatalf("resolved as committed: %v, want %v", got, tc.committed)
			}
		})
	}
}
