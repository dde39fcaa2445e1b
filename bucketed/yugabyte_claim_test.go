package bucketed_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestYugabyteClaimGolden pins the claim YugabyteDB gets
// (claim_scalar_bounds), rendered for the default schema (go test -run
// TestYugabyteClaimGolden -update rewrites it), and checks what keeps its
// round trips down (docs/engines.md, "Round trips of a claim on
// YugabyteDB"): best asks for a bucket's second probe only when the first
// finds nothing (COALESCE) and skips the first where there is no watermark
// (CASE), rather than taking the min of both probes of every bucket.
func TestYugabyteClaimGolden(t *testing.T) {
	t.Parallel()
	claim := keyJoinClaim(t, bucketed.Statements(skiplock.EngineYugabyte.Dialect(), schema.DefaultSchema)) + ";\n"
	checkGolden(t, "YugabyteDB", "testdata/yugabyte_claim.sql", claim)
	for _, need := range []string{"SELECT COALESCE(", "CASE WHEN h.p >= -32768 THEN (SELECT", "FOR UPDATE SKIP LOCKED) AS b\n  LIMIT $2))"} {
		if !strings.Contains(claim, need) {
			t.Errorf("the YugabyteDB claim lacks %q", need)
		}
	}
	if strings.Contains(claim, "UNION ALL") {
		t.Errorf("the YugabyteDB claim's best runs both probes of every bucket (UNION ALL under min)")
	}
}

// scanLine is an index scan in EXPLAIN ANALYZE's text: which index, and
// how often it ran ("never executed" when it did not).
var scanLine = regexp.MustCompile(`Index (?:Only )?Scan using (\w+) on \w+.*?(?:loops=(\d+)\)|never executed)`)

// TestYugabyteClaimReadsOnPostgres runs the YugabyteDB claim on PostgreSQL
// with EXPLAIN ANALYZE and counts the index scans that ran: each would be
// a DocDB read RPC (an estimate from the plan; PostgreSQL shows the loops,
// not the RPCs). With watermarks set at a level that still has jobs in
// every bucket, best reads once per bucket (not twice), and a claim of
// one job scans one bucket; with no watermark at all, best still reads
// once per bucket.
func TestYugabyteClaimReadsOnPostgres(t *testing.T) {
	t.Parallel()
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	q := queueOn(t, db, name, nil)
	d := *db.Dialect()
	d.RowBoundsNotPushed = true
	ctx := ctxT(t)
	mustEnqueue(t, q, nJobs(400, "default")...)
	claim := keyJoinClaim(t, bucketed.Statements(&d, name))
	buckets := make([]int16, schema.DefaultBuckets)
	for i := range buckets {
		buckets[i] = int16(i)
	}
	n := len(buckets)
	for _, tc := range []struct {
		name      string
		watermark bool
	}{{"no watermarks", false}, {"watermarks at the level with jobs", true}} {
		prio, at, ids := make([]int32, n), make([]time.Time, n), make([]int64, n)
		for i := range prio {
			prio[i], at[i] = -32769, time.Unix(0, 0).UTC()
			if tc.watermark {
				prio[i] = 0 // nJobs enqueues at priority 0, run_at now: every bucket's level 0 has jobs after this
			}
		}
		plan := explainAnalyze(ctx, t, db, claim, []any{"default", 1, "reads", int64(7), 30.0, buckets, prio, at, ids})
		t.Logf("%s:\n%s", tc.name, plan)
		probes, claimed := 0, 0
		for _, m := range scanLine.FindAllStringSubmatch(plan, -1) {
			if m[1] != "jobs_dequeue" || m[2] == "" {
				continue
			}
			loops, err := strconv.Atoi(m[2])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(m[0], "Index Only Scan") {
				probes += loops
			} else {
				claimed += loops
			}
		}
		if probes != n {
			t.Errorf("%s: best read %d times for %d buckets, want one read per bucket:\n%s", tc.name, probes, n, plan)
		}
		if claimed != 1 {
			t.Errorf("%s: a claim of one job scanned %d buckets, want 1:\n%s", tc.name, claimed, plan)
		}
	}
}

// explainAnalyze runs sql under EXPLAIN ANALYZE in a transaction it rolls
// back, and returns the plan's text.
func explainAnalyze(ctx context.Context, t *testing.T, db *skiplock.DB, sql string, args []any) string {
	t.Helper()
	tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to keep
	return strings.Join(testdb.Lines(ctx, t, tx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+sql, args...), "\n")
}
