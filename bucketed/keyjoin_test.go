package bucketed_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// keyJoinClaim picks the claim out of the rendered statements: the one
// UPDATE that sets status Running.
func keyJoinClaim(t *testing.T, stmts []string) string {
	t.Helper()
	for _, s := range stmts {
		if strings.Contains(s, `SET "status" = 'Running'`) {
			return s
		}
	}
	t.Fatal("no claim among the rendered statements")
	return ""
}

// TestCockroachPermittedClaimGolden pins the claim CockroachDB gets for
// jobs that run under a Worker's permits (-update rewrites it; the file is
// parsed with CockroachDB's grammar by internal/crdbcheck): the key-joined
// claim with the permits' gate, which reads the queue's row and the slots
// past its limit by key.
func TestCockroachPermittedClaimGolden(t *testing.T) {
	t.Parallel()
	claim := bucketed.PermittedClaim(skiplock.EngineCockroach.Dialect(), schema.DefaultSchema) + ";\n"
	checkGolden(t, "CockroachDB", "testdata/cockroach_permitted_claim.sql", claim)
	for _, need := range []string{`WHERE j."id" = c.id`, `"qs"."concurrency" <= $10::INT4`, `"qs"."rate_limit" IS NOT NULL`} {
		if !strings.Contains(claim, need) {
			t.Errorf("the CockroachDB permitted claim lacks %q", need)
		}
	}
}

// TestCockroachClaimGolden pins the claim CockroachDB gets, rendered for
// the default schema (go test -run TestCockroachClaimGolden -update
// rewrites it), and checks the shape docs/engines.md ("Claims on
// CockroachDB") asks for: an UPDATE ... FROM a limited, locked subquery,
// joined by key; no ANY(ARRAY(...)), no LATERAL. PostgreSQL and YugabyteDB
// keep ANY(ARRAY(...)) and the per-bucket LATERAL.
func TestCockroachClaimGolden(t *testing.T) {
	t.Parallel()
	all := bucketed.Statements(skiplock.EngineCockroach.Dialect(), schema.DefaultSchema)
	claim := keyJoinClaim(t, all) + ";\n"
	checkGolden(t, "CockroachDB", "testdata/cockroach_claim.sql", claim)
	for _, bad := range []string{"ANY(ARRAY(", "LATERAL"} {
		for _, s := range all {
			if strings.Contains(s, bad) {
				t.Errorf("a CockroachDB statement uses %s:\n%s", bad, s)
			}
		}
	}
	if strings.Contains(claim, "unnest(") {
		t.Errorf("the CockroachDB claim unnests the bucket list")
	}
	for _, need := range []string{`FROM (`, `LIMIT $2 FOR UPDATE SKIP LOCKED) AS b`, `WHERE j."id" = c.id`} {
		if !strings.Contains(claim, need) {
			t.Errorf("the CockroachDB claim lacks %q", need)
		}
	}
	for _, e := range []skiplock.Engine{skiplock.EnginePostgres, skiplock.EngineYugabyte} {
		c := keyJoinClaim(t, bucketed.Statements(e.Dialect(), schema.DefaultSchema))
		if !strings.Contains(c, "ANY(ARRAY(") || !strings.Contains(c, "CROSS JOIN LATERAL") {
			t.Errorf("%s lost its ANY(ARRAY(...)) claim:\n%s", e, c)
		}
	}
}

// checkGolden compares an engine's rendered claim with its golden file,
// rewriting the file instead under -update.
func checkGolden(t *testing.T, engine, golden, claim string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(claim), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if claim != string(want) {
		t.Errorf("the %s claim differs from %s (rerun with -update if the change is meant):\n%s", engine, golden, claim)
	}
}

// keyJoinQueue is a queue on PostgreSQL that sends the CockroachDB shapes:
// the key-joined claim and delete, one branch over every bucket.
func keyJoinQueue(t *testing.T, cfg *bucketed.Config) (*bucketed.Queue, *skiplock.DB, string) {
	t.Helper()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, cfg)
	d := *db.Dialect()
	d.KeyJoinDML, d.ShardedIndexFansOut = true, true
	bucketed.UseDialect(q, &d)
	return q, db, name
}

// TestKeyJoinClaimOnPostgres runs the CockroachDB claim on PostgreSQL:
// concurrent claims of n never return or change more than n rows, every
// job is claimed exactly once, and a claim takes a worse priority while a
// better one is claimable only for as long as the heads probe allows (see
// the ledger's grace below).
func TestKeyJoinClaimOnPostgres(t *testing.T) {
	t.Parallel()
	q, db, name := keyJoinQueue(t, &bucketed.Config{VisibilityTimeout: time.Hour})
	ctx := ctxT(t)
	const total = 400
	var jobs []skiplock.NewJob
	for i := range total {
		jobs = append(jobs, skiplock.NewJob{Priority: (i * 7) % 4, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	mustEnqueue(t, q, jobs...)
	var mu sync.Mutex
	seen := map[string]int{}
	ledger := newPriorityLedger()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := 1 + (w*5)%13
				started := time.Now()
				got, err := q.Dequeue(ctx, "default", n)
				ended := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) > n {
					t.Errorf("a claim of %d returned %d", n, len(got))
				}
				if len(got) == 0 {
					if count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" = 'Queued'`) == 0 {
						return
					}
					continue
				}
				if err := ledger.after(ctx, db, jobsTable(name), got, started, ended); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, j := range got {
					seen[j.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The CockroachDB claim's locking scan may lock rows past the best
	// priority and drop them above its LIMIT; a concurrent claim skips
	// them and its watermark passes them, so they wait for the next heads
	// probe: the priority rule holds within HintMaxAge here.
	ledger.verifyWithin(t, bucketed.DefaultHintMaxAge+2*time.Second)
	if len(seen) != total {
		t.Fatalf("claimed %d distinct jobs of %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s claimed %d times", id, n)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM `+jobsTable(name)+` WHERE "status" <> 'Running' OR "attempts" <> 1`); n != 0 {
		t.Errorf("%d jobs are not Running with one attempt", n)
	}
}

// TestKeyJoinClaimNeverExceedsN pushes PostgreSQL's planner toward nested
// loops, as TestBatchClaimNeverExceedsN does for the ANY(ARRAY(...))
// claim: the key-joined claim must still change exactly the rows it
// returns. (On PostgreSQL the LIMIT subquery sits on the outer side of the
// join; this shows that it does not run more than once here.)
func TestKeyJoinClaimNeverExceedsN(t *testing.T) {
	t.Parallel()
	q, db, name := keyJoinQueue(t, nil)
	mustEnqueue(t, q, nJobs(300, "default")...)
	claimNeverExceedsN(t, q, db, name)
}

// TestKeyJoinClaimLeasesScheduleAndHints: with the CockroachDB claim, an
// expired lease is not claimed (the rescuer puts back the job with
// attempts left, which is then claimed, and fails the exhausted one); a
// scheduled job waits for its time; and a job of a better priority than
// the watermark, enqueued by this Queue, is found at once (its enqueue
// makes the next claim probe the heads).
func TestKeyJoinClaimLeasesScheduleAndHints(t *testing.T) {
	t.Parallel()
	q, db, name := keyJoinQueue(t, &bucketed.Config{VisibilityTimeout: time.Hour})
	ctx := ctxT(t)
	mustEnqueue(t, q, skiplock.NewJob{MaxAttempts: 1, Payload: []byte(`"last"`)}, skiplock.NewJob{MaxAttempts: 2, Payload: []byte(`"again"`)})
	held, err := q.Dequeue(ctx, "default", 2)
	if err != nil || len(held) != 2 {
		t.Fatalf("dequeue: %d, %v", len(held), err)
	}
	if _, err := db.Exec(ctx, `UPDATE `+jobsTable(name)+` SET "lease_expires_at" = now() - INTERVAL '1 second'`); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Dequeue(ctx, "default", 2); err != nil || len(got) != 0 {
		t.Fatalf("a claim took %d expired leases (%v): that is the rescuer's work", len(got), err)
	}
	rescue(t, db, name)
	again := dequeueSoon(t, q, "")
	if len(again) != 1 || string(again[0].Payload) != `"again"` || again[0].Attempts != 2 {
		t.Fatalf("after the rescue: claimed %d; want only the job with attempts left", len(again))
	}

	later := time.Now().Add(time.Hour)
	mustEnqueue(t, q, skiplock.NewJob{Queue: "sched", RunAt: later})
	if got, err := q.Dequeue(ctx, "sched", 1); err != nil || len(got) != 0 {
		t.Fatalf("a job scheduled an hour ahead was claimed: %d, %v", len(got), err)
	}

	mustEnqueue(t, q, nJobs(10, "hint")...)
	for i := range 10 {
		mustEnqueue(t, q, skiplock.NewJob{Queue: "hint", Priority: 5, Payload: []byte(fmt.Sprintf(`{"p5":%d}`, i))})
	}
	if _, err := db.Exec(ctx, `UPDATE `+jobsTable(name)+` SET "priority" = 5 WHERE "queue" = 'hint'`); err != nil {
		t.Fatal(err)
	}
	first, err := q.Dequeue(ctx, "hint", 3)
	if err != nil || len(first) != 3 || q.HintsSet("hint") == 0 {
		t.Fatalf("first claim: %d jobs, %d hints, %v", len(first), q.HintsSet("hint"), err)
	}
	urgent := mustEnqueueOne(ctx, t, q, skiplock.NewJob{Queue: "hint", Priority: 0})
	got, err := q.Dequeue(ctx, "hint", 1)
	if err != nil || len(got) != 1 || got[0].ID != urgent {
		t.Fatalf("after a priority-0 job arrived behind a priority-5 hint: claimed %+v, %v; want job %s", got, err, urgent)
	}
}

func mustEnqueueOne(ctx context.Context, t *testing.T, q *bucketed.Queue, j skiplock.NewJob) string {
	t.Helper()
	e, err := q.Enqueue(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// TestYugabyteClaimHasNoRowComparison: the claim YugabyteDB gets bounds its
// scans with single-column comparisons only, which DocDB pushes down on an
// index with a hashed column (a row comparison it would not: see
// Dialect.RowBoundsNotPushed), while PostgreSQL keeps the row comparison.
func TestYugabyteClaimHasNoRowComparison(t *testing.T) {
	t.Parallel()
	const row = `("priority", "run_at", "id") >`
	yb := keyJoinClaim(t, bucketed.Statements(skiplock.EngineYugabyte.Dialect(), schema.DefaultSchema))
	if strings.Contains(yb, row) {
		t.Errorf("the YugabyteDB claim compares rows:\n%s", yb)
	}
	for _, need := range []string{`"run_at" >= h.t`, `"priority" > h.p`, `"run_at" >= CASE WHEN`} {
		if !strings.Contains(yb, need) {
			t.Errorf("the YugabyteDB claim lacks the pushed-down bound %q", need)
		}
	}
	if pg := keyJoinClaim(t, bucketed.Statements(skiplock.EnginePostgres.Dialect(), schema.DefaultSchema)); !strings.Contains(pg, row) {
		t.Errorf("the PostgreSQL claim lost its row comparison:\n%s", pg)
	}
}
