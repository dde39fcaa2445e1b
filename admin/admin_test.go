package admin_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// TestListPagesAcrossLayouts: 40 bucketed and 40 fanout jobs, some
// dead; pages of 7 visit every job exactly once, the bucketed jobs
// newest first, then the fanout jobs newest first; filters by
// queue, kind and state (any case) select the right ones; show returns
// the payload and the error history; actions report what they could not
// do.
func TestListPagesAcrossLayouts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, s := testdb.Migrated(t, nil)
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	fq, err := fanout.New(ctx, db, &fanout.Config{Schema: s, Queue: "f"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := bq.Enqueue(ctx, skiplock.NewJob{Queue: "b", Kind: fmt.Sprint("k", i%2), Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		if _, err := fq.Enqueue(ctx, skiplock.NewJob{Kind: "k0", Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// Five bucketed jobs fail for good, five fanout jobs die.
	jobs, err := bq.Dequeue(ctx, "b", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if _, err := db.Exec(ctx, `UPDATE `+sqlident.Quote(s)+`."jobs" SET "max_attempts" = 1 WHERE "id" = $1`, mustID(t, j)); err != nil {
			t.Fatal(err)
		}
		j.MaxAttempts = 1
		if err := bq.Fail(ctx, j, errors.New("boom")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE `+sqlident.Quote(s)+`."job_queue" SET "max_attempts" = 1
WHERE "id" IN (SELECT "id" FROM `+sqlident.Quote(s)+`."job_queue" ORDER BY "id" LIMIT 5)`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := fq.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return errors.New("bang") }); err != nil {
			t.Fatal(err)
		}
	}
	// Process takes jobs from random starts: whichever it took, those with
	// max_attempts 1 died; the others were retried and stay queued.
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var prev time.Time
	var prevLayout schema.Layout
	after := ""
	for page := 0; ; page++ {
		got, err := a.List(ctx, admin.Filter{Limit: 7, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, j := range got {
			if j.Layout != prevLayout {
				// Bucketed jobs first, then fanout's: each layout's
				// listing follows one of its indexes.
				if prevLayout == schema.LayoutFanout || (prevLayout == "" && j.Layout == schema.LayoutFanout) {
					t.Fatalf("page %d: job %s (%s) after a %q job: want every bucketed job, then every fanout job", page, j.ID, j.Layout, prevLayout)
				}
				prevLayout, prev = j.Layout, time.Time{}
			}
			if !prev.IsZero() && j.CreatedAt.After(prev) {
				t.Fatalf("page %d: job %s created %v after the one before it (%v): not newest first", page, j.ID, j.CreatedAt, prev)
			}
			prev = j.CreatedAt
			seen[j.ID]++
		}
		after = got[len(got)-1].ID
	}
	if len(seen) != 80 {
		t.Fatalf("paging saw %d distinct jobs, want 80", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %s listed %d times", id, n)
		}
	}
	for _, tc := range []struct {
		f    admin.Filter
		want int
	}{
		{admin.Filter{State: "Failed", Limit: 100}, 5 + deadCount(t, db, s)},
		{admin.Filter{State: "DEAD", Layout: schema.LayoutFanout, Limit: 100}, deadCount(t, db, s)},
		{admin.Filter{Queue: "b", Kind: "k1", Limit: 100}, 20},
		{admin.Filter{Queue: "f", State: "queued", Limit: 100}, 40 - deadCount(t, db, s)},
		{admin.Filter{State: "running", Limit: 100}, 0},
	} {
		got, err := a.List(ctx, tc.f)
		if err != nil || len(got) != tc.want {
			t.Errorf("%+v: %d jobs (%v), want %d", tc.f, len(got), err, tc.want)
		}
	}
	if _, err := a.List(ctx, admin.Filter{State: "sleeping"}); !usage.Is(err) {
		t.Errorf("an unknown state: want a usage error, got %v", err)
	}
	failed, _ := a.List(ctx, admin.Filter{State: "failed", Layout: schema.LayoutBucketed, Limit: 1})
	j, err := a.Show(ctx, failed[0].ID)
	if err != nil || len(j.Errors) != 1 || j.Errors[0].Error != "boom" || j.Errors[0].Attempt != 1 || string(j.Payload) == "" {
		t.Fatalf("show %s: %+v, %v", failed[0].ID, j, err)
	}
	// Retry the failed one (done), again (its state refuses), an unknown id.
	outs := a.DoAll(ctx, admin.Retry, []string{j.ID, j.ID, "999999"})
	var se *skiplock.StateError
	if outs[0].Err != nil || !errors.As(outs[1].Err, &se) || !admin.IsNoJob(outs[2].Err) {
		t.Fatalf("retry outcomes: %+v", outs)
	}
	if _, err := a.Show(ctx, "no-such-uuid"); !admin.IsNoJob(err) {
		t.Fatalf("show of an unknown fanout id: %v", err)
	}
}

func mustID(t *testing.T, j *skiplock.Job) int64 {
	id, err := bucketed.JobID(j)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func deadCount(t *testing.T, db *skiplock.DB, s string) int {
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+sqlident.Quote(s)+`."job_dead"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type pauseArgs struct{ N int }

func (pauseArgs) Kind() string { return "pause" }

// TestPauseStopsClaims: while a queue is paused (both layouts), the job
// already running finishes, inserts still work, and no worker claims
// another job over many polls; resuming lets every job run.
func TestPauseStopsClaims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 40})
	db, s := testdb.MigratedOn(t, db, nil)
	started := make(chan string, 100)
	release := make(chan struct{})
	var ran atomic.Int64
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[pauseArgs](func(ctx context.Context, j *client.Job[pauseArgs]) error {
		started <- j.Queue
		if j.Args.N == 0 {
			<-release // the first job is in flight when the queue is paused
		}
		ran.Add(1)
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: 20 * time.Millisecond,
		Queues: map[string]client.QueueConfig{"b": {MaxWorkers: 2, Prefetch: -1}, "f": {Layout: schema.LayoutFanout, MaxWorkers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // checked by the counts
	for _, q := range []string{"b", "f"} {
		if _, err := c.Insert(ctx, pauseArgs{N: 0}, &client.InsertOpts{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	<-started
	for _, q := range []string{"b", "f"} {
		if err := a.SetPaused(ctx, q, true); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 5; i++ {
			if _, err := c.Insert(ctx, pauseArgs{N: i}, &client.InsertOpts{Queue: q}); err != nil {
				t.Fatalf("insert into a paused queue: %v", err)
			}
		}
	}
	close(release) // the jobs in flight finish
	testdb.WaitFor(t, "the 2 jobs in flight to finish", 30*time.Second, func() bool { return ran.Load() >= 2 })
	time.Sleep(500 * time.Millisecond) // time under test: no claim in 500 ms of 20 ms polls
	if n := ran.Load(); n != 2 || len(started) != 0 {
		t.Fatalf("paused: %d jobs ran and %d more started, want the 2 in flight only", n, len(started))
	}
	qs, err := a.Queues(ctx)
	if err != nil || len(qs) != 2 || !qs[0].Paused || !qs[1].Paused || qs[0].Counts["queued"] != 5 {
		t.Fatalf("queues while paused: %+v, %v", qs, err)
	}
	for _, q := range []string{"b", "f"} {
		if err := a.SetPaused(ctx, q, false); err != nil {
			t.Fatal(err)
		}
	}
	testdb.WaitFor(t, "all 12 jobs run after the resume", 30*time.Second, func() bool { return ran.Load() >= 12 })
}
