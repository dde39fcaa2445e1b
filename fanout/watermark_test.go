package fanout_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// okHandler succeeds at once.
func okHandler(context.Context, skiplock.Tx, *skiplock.Job) error { return nil }

// TestIDsAreShardThenTime: new ids are 32 hex digits, a shard then the
// time, so that within a shard a later enqueue sorts after an earlier one.
func TestIDsAreShardThenTime(t *testing.T) {
	t.Parallel()
	q, _, _ := setup(t, 0, nil)
	ctx := context.Background()
	shape := regexp.MustCompile(`^[0-9a-f]{32}$`)
	first, err := fanout.EnqueueManyIDs(ctx, q, jobs(300))
	if err != nil {
		t.Fatal(err)
	}
	later, err := fanout.EnqueueManyIDs(ctx, q, jobs(300))
	if err != nil {
		t.Fatal(err)
	}
	newest := map[int]string{}
	for _, id := range first {
		if !shape.MatchString(id) {
			t.Fatalf("id %q is not 32 hex digits", id)
		}
		newest[fanout.ShardOf(id)] = max(newest[fanout.ShardOf(id)], id)
	}
	for _, id := range later {
		if old, ok := newest[fanout.ShardOf(id)]; ok && id <= old {
			t.Fatalf("a later id %s sorts before an earlier one of its shard, %s", id, old)
		}
	}
}

// TestJobBelowWatermarkIsFound: once claims have set watermarks, a job
// that sorts below one (here a row written with the lowest id of a
// watermarked shard, as a late commit or a rolled-back attempt would sit)
// is claimed (the stated bound, max(HintMaxAge, 9 x the last probe) plus
// a probe, is logged, not asserted: timings on a shared machine are
// noise), and HasQueued reports it while it waits. A drain then leaves
// nothing, a pre-existing random UUID and a job retried from job_dead
// included. With the engine's own statements and with CockroachDB's (the
// shard unions: heads_union, exists_after_union, shards_after), both run
// on the test server.
func TestJobBelowWatermarkIsFound(t *testing.T) {
	t.Parallel()
	eachForms(t, testJobBelowWatermarkIsFound)
}

// eachForms runs test as two parallel subtests: with the engine's own
// statements and with CockroachDB's (fanout.CockroachForms) on this
// engine.
func eachForms(t *testing.T, test func(t *testing.T, crdbForms bool)) {
	for _, crdbForms := range []bool{false, true} {
		t.Run(formsName(crdbForms), func(t *testing.T) {
			t.Parallel()
			test(t, crdbForms)
		})
	}
}

// formsName names a subtest by the statements it runs: the engine's own,
// or CockroachDB's (fanout.CockroachForms) on this engine.
func formsName(crdbForms bool) string {
	if crdbForms {
		return "cockroach_forms"
	}
	return "own_forms"
}

func testJobBelowWatermarkIsFound(t *testing.T, crdbForms bool) {
	const maxAge = 300 * time.Millisecond
	q, db, s := setup(t, 0, &fanout.Config{HintMaxAge: maxAge})
	if crdbForms {
		fanout.UseDialect(q, fanout.CockroachForms(q))
	}
	ctx := context.Background()
	if _, err := q.EnqueueMany(ctx, jobs(40)); err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for range 20 {
		res, err := q.Process(ctx, okHandler)
		if err != nil || res.Job == nil {
			t.Fatalf("claim: %+v %v", res, err)
		}
		claimed = append(claimed, res.Job.ID)
	}
	if fanout.MarksSet(q, q.Name()) == 0 {
		t.Fatal("no watermark after 20 claims")
	}
	// Below the watermark of the last claimed job's shard.
	low := fanout.ShardPrefix(fanout.ShardOf(claimed[len(claimed)-1])) + fmt.Sprintf("%030d", 0)
	tbl := table(s, schema.JobQueueTable)
	insertedAt := time.Now()
	if _, err := db.Exec(ctx, "INSERT INTO "+tbl+" (id, queue) VALUES ($1, $2)", low, q.Name()); err != nil {
		t.Fatal(err)
	}
	// The bound is max(HintMaxAge, 9 x the last probe) plus a probe: wall
	// time on a loaded machine says little about it, so the test waits
	// long and only logs how long it took.
	testdb.WaitFor(t, fmt.Sprintf("a claim of a job below a watermark (HintMaxAge %v)", maxAge), 40*maxAge, func() bool {
		for {
			res, err := q.Process(ctx, okHandler)
			if err != nil {
				t.Fatal(err)
			}
			if res.Job == nil || res.Job.ID == low {
				return res.Job != nil
			}
		}
	})
	t.Logf("a job below a watermark was claimed after %v (HintMaxAge %v)", time.Since(insertedAt), maxAge)
	// HasQueued never says no while a job waits below the watermarks.
	drain(t, q)
	if _, err := db.Exec(ctx, "INSERT INTO "+tbl+" (id, queue) VALUES ($1, $2)", low, q.Name()); err != nil {
		t.Fatal(err)
	}
	if ok, err := q.HasQueued(ctx); err != nil || !ok {
		t.Fatalf("HasQueued = %v, %v with a job below the watermarks", ok, err)
	}
	// A random UUID from before migration 003, and a job back from
	// job_dead with its old id: both sort below watermarks.
	uuid := "00000000-0000-4000-8000-000000000001"
	if _, err := db.Exec(ctx, "INSERT INTO "+tbl+" (id, queue) VALUES ($1, $2)", uuid, q.Name()); err != nil {
		t.Fatal(err)
	}
	dead := enqueueOne(t, q, db, s, skiplock.NewJob{MaxAttempts: 1})
	testdb.WaitFor(t, "the job with one attempt in job_dead", 30*time.Second, func() bool {
		res, err := q.Process(ctx, func(_ context.Context, _ skiplock.Tx, j *skiplock.Job) error {
			if j.ID == dead {
				return fmt.Errorf("dies")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job != nil && res.Job.ID == dead && res.Dead
	})
	if err := q.RetryJob(ctx, dead); err != nil {
		t.Fatal(err)
	}
	drain(t, q)
	if n := count(t, db, "SELECT count(*) FROM "+tbl); n != 0 {
		t.Fatalf("%d jobs left after the drain", n)
	}
	// Nothing left: HasQueued says so. (It may say yes for up to
	// HintMaxAge after the last job is gone; but drain's last HasQueued
	// already said no, so no positive answer is held.)
	if ok, err := q.HasQueued(ctx); err != nil || ok {
		t.Fatalf("HasQueued = %v, %v on an empty queue", ok, err)
	}
}

// drain processes jobs until HasQueued reports none, failing the test
// if that takes long.
func drain(t *testing.T, q *fanout.Queue) {
	t.Helper()
	ctx := context.Background()
	testdb.WaitFor(t, "the queue to drain", 20*time.Second, func() bool {
		for {
			res, err := q.Process(ctx, okHandler)
			if err != nil {
				t.Fatal(err)
			}
			if res.Job == nil {
				break
			}
		}
		more, err := q.HasQueued(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return !more
	})
}
