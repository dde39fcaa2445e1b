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
