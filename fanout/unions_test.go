package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/schema"
)

// TestShardUnionsOnCockroachOnly: the CockroachDB dialect selects the
// shard unions (no LATERAL anywhere, no lock but claim_shard's), one
// branch per shard after the start one for shards_after and one per shard
// for the heads probe and exists_after, each branch with its own
// parameters; PostgreSQL and YugabyteDB keep the LATERAL forms.
func TestShardUnionsOnCockroachOnly(t *testing.T) {
	t.Parallel()
	param := regexp.MustCompile(`\$(\d+)`)
	maxParam := func(sql string) int {
		n := 0
		for _, m := range param.FindAllStringSubmatch(sql, -1) {
			k, _ := strconv.Atoi(m[1])
			n = max(n, k)
		}
		return n
	}
	for _, e := range []skiplock.Engine{skiplock.EnginePostgres, skiplock.EngineYugabyte} {
		st := fanout.Statements(e.Dialect(), schema.DefaultSchema)
		if !strings.Contains(st["claim"], "LATERAL") || !strings.Contains(st["heads"], "LATERAL") || !strings.Contains(st["exists_after"], "LATERAL") {
			t.Errorf("%s: the claim, heads probe and exists_after are not the LATERAL forms", e)
		}
		if _, ok := st["shards_after"]; ok {
			t.Errorf("%s sends shards_after", e)
		}
	}
	st := fanout.Statements(skiplock.EngineCockroach.Dialect(), schema.DefaultSchema)
	if _, ok := st["claim"]; ok {
		t.Error("CockroachDB sends the LATERAL claim")
	}
	for name, sql := range st {
		if strings.Contains(sql, "LATERAL") {
			t.Errorf("CockroachDB's %s has a LATERAL", name)
		}
	}
	for name, want := range map[string]struct{ branches, params int }{
		"shards_after": {schema.FanoutShards - 1, 1 + 3*(schema.FanoutShards-1)},
		"heads":        {schema.FanoutShards, 1 + 2*schema.FanoutShards},
		"exists_after": {schema.FanoutShards, 1 + 2*schema.FanoutShards},
	} {
		sql := st[name]
		if got := strings.Count(sql, "UNION ALL") + 1; got != want.branches {
			t.Errorf("CockroachDB's %s has %d branches, want %d", name, got, want.branches)
		}
		if got := maxParam(sql); got != want.params {
			t.Errorf("CockroachDB's %s takes $1..$%d, want $%d", name, got, want.params)
		}
		if strings.Contains(sql, "FOR UPDATE") {
			t.Errorf("CockroachDB's %s locks", name)
		}
	}
	if !strings.Contains(st["claim_shard"], "FOR UPDATE SKIP LOCKED") {
		t.Error("claim_shard does not lock")
	}
}

// TestCockroachFormsClaimStatements counts the statements a claim sends,
// with each engine's forms run on PostgreSQL: a busy queue's claim is one
// statement (claim_shard) with either; a drained queue's empty claim two
// (claim_shard, then the LATERAL claim or shards_after); with the unions,
// a shard whose only job another session holds adds a claim_shard that
// finds nothing, and a paused queue's claim stops after shards_after.
func TestCockroachFormsClaimStatements(t *testing.T) {
	t.Parallel()
	eachForms(t, testClaimStatements)
}

func testClaimStatements(t *testing.T, crdbForms bool) {
	// No heads probe after the first claim's.
	q, db, s := setup(t, 0, &fanout.Config{HintMaxAge: time.Hour})
	if crdbForms {
		fanout.UseDialect(q, fanout.CockroachForms(q))
	}
	if fanout.UsesUnions(q) != crdbForms {
		t.Fatalf("the Queue sends the shard unions: %v, want %v", fanout.UsesUnions(q), crdbForms)
	}
	ctx := context.Background()
	tbl := table(s, schema.JobQueueTable)
	// Four jobs in every shard, so that every start shard has one.
	for sh := range schema.FanoutShards {
		for k := range 4 {
			id := fanout.ShardPrefix(sh) + fmt.Sprintf("%030d", k+1)
			if _, err := db.Exec(ctx, "INSERT INTO "+tbl+" (id, queue) VALUES ($1, $2)", id, q.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// claim runs one claim in a transaction it rolls back: the job stays,
	// below its shard's watermark.
	claim := func() (*skiplock.Job, int) {
		t.Helper()
		tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
		job, n, err := fanout.ClaimCounted(ctx, q, tx)
		if err != nil {
			t.Fatal(err)
		}
		return job, n
	}
	if job, _ := claim(); job == nil { // the heads probe runs here
		t.Fatal("the first claim found nothing")
	}
	// One claim per start shard (the starts are round-robin).
	for i := range schema.FanoutShards {
		if job, n := claim(); job == nil || n != 1 {
			t.Fatalf("busy claim %d: job %v, %d statements; want a job and 1", i, job, n)
		}
	}
	if _, err := db.Exec(ctx, "DELETE FROM "+tbl); err != nil {
		t.Fatal(err)
	}
	for i := range schema.FanoutShards {
		if job, n := claim(); job != nil || n != 2 {
			t.Fatalf("drained claim %d: job %v, %d statements; want none and 2", i, job, n)
		}
	}

	// One job, held by another session, above its shard's watermark.
	held := fanout.ShardPrefix(5) + strings.Repeat("f", 30)
	if _, err := db.Exec(ctx, "INSERT INTO "+tbl+" (id, queue) VALUES ($1, $2)", held, q.Name()); err != nil {
		t.Fatal(err)
	}
	holder, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT id FROM "+tbl+" WHERE id = $1 FOR UPDATE", held); err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for range schema.FanoutShards {
		job, n := claim()
		if job != nil {
			t.Fatalf("a claim took job %s, which another session holds", job.ID)
		}
		counts[n]++
	}
	want := map[int]int{2: schema.FanoutShards}
	if crdbForms {
		// From every start but the held job's shard, shards_after lists
		// that shard and claim_shard finds it locked.
		want = map[int]int{2: 1, 3: schema.FanoutShards - 1}
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("claims while a job is held, by statements sent: %v, want %v", counts, want)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if job, _ := claim(); job == nil || job.ID != held {
		t.Fatalf("after the holder let go: job %v, want %s", job, held)
	}

	// A paused queue: no claim_shard per listed shard.
	if _, err := db.Exec(ctx, "INSERT INTO "+table(s, schema.QueueStateTable)+" (name, paused) VALUES ($1, true)", q.Name()); err != nil {
		t.Fatal(err)
	}
	for i := range schema.FanoutShards {
		if job, n := claim(); job != nil || n != 2 {
			t.Fatalf("claim %d of a paused queue: job %v, %d statements; want none and 2", i, job, n)
		}
	}
	t.Logf("statements per claim: busy 1, drained 2, with a held job %v", counts)
}

// TestHasQueuedNeverEmptyWhileJobsLeft: while 16 workers work 2,000 jobs,
// a fifth of them failing once (so that they wait out a backoff below the
// watermarks, the last jobs left), HasQueued is asked again and again;
// whenever it says the queue is empty, the queue must be empty (jobs only
// leave it during the run, so a job counted after a "no" was there at the
// "no"). With each engine's forms and CockroachDB's, run on PostgreSQL.
func TestHasQueuedNeverEmptyWhileJobsLeft(t *testing.T) {
	t.Parallel()
	eachForms(t, testHasQueuedNeverEmpty)
}

func testHasQueuedNeverEmpty(t *testing.T, crdbForms bool) {
	const workers, n = 16, 2000
	// Backoffs long enough that the failed jobs wait below the watermarks
	// while the others drain: then nothing is left at or after them.
	q, db, s := setup(t, int32(workers+fanout.RecorderConns(workers)), &fanout.Config{HintMaxAge: 50 * time.Millisecond, RetryBase: 500 * time.Millisecond, RetryMax: time.Second})
	if crdbForms {
		fanout.UseDialect(q, fanout.CockroachForms(q))
	}
	ctx := context.Background()
	if _, err := q.EnqueueMany(ctx, jobs(n)); err != nil {
		t.Fatal(err)
	}
	var failed sync.Map
	var completed atomic.Int64
	w, err := q.NewWorker(&fanout.WorkerConfig{
		Workers: workers,
		Handler: func(_ context.Context, _ skiplock.Tx, job *skiplock.Job) error {
			h := fnv.New32a()
			h.Write([]byte(job.ID))
			if _, again := failed.LoadOrStore(job.ID, true); h.Sum32()%5 == 0 && !again {
				return errors.New("injected failure")
			}
			return nil
		},
		OnResult: func(_ int, r *fanout.Result, err error) {
			if r.Job != nil && err == nil && r.HandlerErr == nil {
				completed.Add(1)
			}
		},
		IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond,
		Logger: logs.To(t.Logf),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck // stopped below; this is for a failed test
	yes := 0
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatalf("the queue did not drain in 3 minutes: %d completed; HasQueued said yes %d times", completed.Load(), yes)
		}
		ok, err := q.HasQueued(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			yes++
			continue
		}
		if left := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); left != 0 {
			t.Fatalf("HasQueued said the queue is empty with %d jobs left (%d completed)", left, completed.Load())
		}
		break
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if yes == 0 || completed.Load() != n {
		t.Fatalf("HasQueued said yes %d times; %d of %d jobs completed", yes, completed.Load(), n)
	}
	t.Logf("HasQueued: %d yes while jobs were left, then no on the empty queue", yes)
}
