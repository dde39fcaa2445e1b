package planshape_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// shape is what a claim's plan must and must not show on one engine.
type shape struct {
	want    []string         // substrings of the plan, each at least once
	wantN   map[string]int   // substrings and how many times exactly
	refuse  []string         // substrings the plan must not contain
	refuseR []*regexp.Regexp // patterns no plan line may match
}

// rowBound is a row-value comparison in an index condition, which
// YugabyteDB would not push down to DocDB on an index with a hashed
// column (Dialect.RowBoundsNotPushed).
var rowBound = regexp.MustCompile(`(Index Cond|Storage Index Filter).*ROW\(`)

// bucketedShapes are the bucketed claim's expected plans. PostgreSQL and
// YugabyteDB: the per-bucket scans read jobs_dequeue in its order (no
// Sort: a sort reads a bucket's every claimable row) and lock through
// LockRows, the UPDATE finds its rows by primary key, and no scan reads
// the table whole; on YugabyteDB (claim_scalar_bounds) no index condition
// is a row comparison. CockroachDB (claim_key_join, "Expected plan" in
// bucketed.sql): a limited skip-locked scan of jobs_dequeue joined to the
// UPDATE by a lookup join on the primary key, and no full scan.
var bucketedShapes = map[skiplock.Engine]shape{
	skiplock.EnginePostgres: {
		want:   []string{"Update on jobs", "LockRows", "jobs_dequeue", "jobs_pkey"},
		refuse: []string{"Seq Scan on jobs", "Sort"},
	},
	skiplock.EngineYugabyte: {
		want:    []string{"Update on jobs", "LockRows", "jobs_dequeue", "jobs_pkey"},
		refuse:  []string{"Seq Scan on jobs", "Sort"},
		refuseR: []*regexp.Regexp{rowBound},
	},
	skiplock.EngineCockroach: {
		want:   []string{"update", "lookup join", "jobs@jobs_pkey", "jobs@jobs_dequeue", "limit", "locking wait policy: skip locked"},
		refuse: []string{"FULL SCAN"},
	},
}

// leaseWriteShapes are the bucketed lease writes' expected plans
// (complete, and the others written the same way): the rows are never
// found through the rescuer's partial index of Running jobs
// (jobs_lease_expiry), whose statistics call it empty here. By key or,
// on a table as small as this test's, by one scan feeding a hash join:
// the planner's choice by the table's real size.
var leaseWriteShapes = map[skiplock.Engine]shape{
	skiplock.EnginePostgres:  {refuse: []string{"jobs_lease_expiry"}},
	skiplock.EngineYugabyte:  {refuse: []string{"jobs_lease_expiry"}},
	skiplock.EngineCockroach: {refuse: []string{"jobs_lease_expiry", "FULL SCAN"}},
}

// fanoutShapes are the fanout claims' expected plans (fanout.sql): the
// claim of one shard (claim_shard), every engine's, one ordered
// primary-key range scan bounded to the shard, locking through its
// LockRows (on CockroachDB a limited skip-locked scan). Nothing read whole.
// The unions CockroachDB sends besides are checked in
// fanout_union_test.go.
var fanoutShapes = map[skiplock.Engine]shape{
	skiplock.EnginePostgres: {
		want:   []string{"job_queue_pkey", "job_attempt_pkey"},
		wantN:  map[string]int{"LockRows": 1},
		refuse: []string{"Seq Scan on job_queue", "Seq Scan on job_attempt", "Hash Join"},
	},
	skiplock.EngineYugabyte: {
		want:   []string{"job_queue_pkey", "job_attempt_pkey"},
		wantN:  map[string]int{"LockRows": 1},
		refuse: []string{"Seq Scan on job_queue", "Seq Scan on job_attempt", "Hash Join"},
	},
	skiplock.EngineCockroach: {
		want:   []string{"job_queue@job_queue_pkey", "limit", "locking wait policy: skip locked"},
		refuse: []string{"FULL SCAN"},
	},
}

// TestClaimPlanShapes explains both claims on the test server's engine,
// with a few thousand jobs queued and statistics collected, and checks
// their shapes.
func TestClaimPlanShapes(t *testing.T) {
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed, schema.LayoutFanout)
	d := db.Dialect()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Logf("engine: %s", d.Engine)

	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	fq, err := fanout.New(ctx, db, &fanout.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	// Three priorities for bucketed; fanout has none.
	jobs, flat := make([]skiplock.NewJob, 2000), make([]skiplock.NewJob, 2000)
	for i := range jobs {
		jobs[i] = skiplock.NewJob{Priority: i % 3, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		flat[i] = skiplock.NewJob{Payload: jobs[i].Payload}
	}
	for i := 0; i < len(jobs); i += 500 {
		if _, err := bq.EnqueueMany(ctx, jobs[i:i+500]); err != nil {
			t.Fatal(err)
		}
		if _, err := fq.EnqueueMany(ctx, flat[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	// Attempt rows of other jobs, in backoff: the fanout claim's backoff
	// test must stay a primary-key probe per row reached.
	if _, err := db.Exec(ctx, "INSERT INTO "+sqlident.Quote(name)+"."+sqlident.Quote(schema.JobAttemptTable)+
		` ("job_id", "attempts", "started_at", "retry_at") SELECT 'other-' || g::TEXT, 1, now(), now() + INTERVAL '1 hour' FROM generate_series(1, 5000) AS g`); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{schema.JobsTable, schema.JobQueueTable, schema.JobAttemptTable} {
		if _, err := db.Exec(ctx, "ANALYZE "+sqlident.Quote(name)+"."+sqlident.Quote(tbl)); err != nil {
			t.Logf("ANALYZE %s: %v (the plan is checked without fresh statistics)", tbl, err)
		}
	}

	t.Run("bucketed", func(t *testing.T) {
		explainBucketed(ctx, t, db, d, name, bucketedShapes[d.Engine])
	})
	if d.Engine == skiplock.EnginePostgres && d.Emulates == skiplock.PersonalityNone {
		// PostgreSQL runs YugabyteDB's claim too: its index conditions
		// must hold no row comparison there either.
		t.Run("bucketed_scalar_bounds", func(t *testing.T) {
			yb := *d
			yb.RowBoundsNotPushed = true
			explainBucketed(ctx, t, db, &yb, name, bucketedShapes[skiplock.EngineYugabyte])
		})
	}
	t.Run("bucketed_lease_write", func(t *testing.T) {
		// A completion of 200 jobs, with statistics that saw none Running:
		// the rows are found by primary key, not through the rescuer's
		// partial index of Running jobs.
		var ids, tokens []int64
		rows := testdb.Lines(ctx, t, db, "SELECT id FROM "+sqlident.Quote(name)+"."+sqlident.Quote(schema.JobsTable)+" ORDER BY id LIMIT 200")
		for _, r := range rows {
			var id int64
			if _, err := fmt.Sscan(r, &id); err != nil {
				t.Fatal(err)
			}
			ids, tokens = append(ids, id), append(tokens, 1)
		}
		sql := render(t, d, name, "bucketed/bucketed.sql", "complete")
		check(t, explain(ctx, t, db, sql, []any{ids, tokens}), leaseWriteShapes[d.Engine])
		if d.PlanCacheMode {
			// As the queue runs it, on its generic plan: the ids drive a
			// nested loop of primary-key lookups, so the rows are locked in
			// the ids' order (sorted), whatever the table's size.
			check(t, explainGeneric(ctx, t, db, sql, []any{ids, tokens}), shape{
				want:   []string{"Nested Loop", "jobs_pkey"},
				refuse: []string{"jobs_lease_expiry", "Hash Join", "Seq Scan on jobs"},
			})
		}
	})
	t.Run("bucketed_limits_take", func(t *testing.T) {
		// A limited queue's claim reads its slot and rate token rows by
		// key (a range under the queue's prefix, or the numbers listed),
		// never by scanning the tables: on the
		// distributed engines their rows are spread by a hash of the key.
		if err := bq.SetLimits(ctx, "default", bucketed.Limits{Concurrency: 50, Rate: 40, RatePeriod: time.Second}); err != nil {
			t.Fatal(err)
		}
		sql := render(t, d, name, "bucketed/bucketed.sql", "limits_take")
		want := shape{want: []string{"job_slot_pkey", "job_rate_token_pkey", "LockRows"}, refuse: []string{"Seq Scan on job_slot", "Seq Scan on job_rate_token"}}
		if d.Engine == skiplock.EngineCockroach {
			want = shape{want: []string{"job_slot@job_slot_pkey", "job_rate_token@job_rate_token_pkey", "locking wait policy: skip locked"}, refuse: []string{"FULL SCAN"}}
		}
		check(t, explain(ctx, t, db, sql, []any{"default", 10, 10}), want)
		// A Worker's permits are renewed by key too.
		renew := render(t, d, name, "bucketed/bucketed.sql", "permits_renew")
		want.want = slices.DeleteFunc(slices.Clone(want.want), func(s string) bool {
			return strings.Contains(s, "rate_token") || strings.Contains(s, "LockRows") || strings.Contains(s, "skip locked")
		})
		check(t, explain(ctx, t, db, renew, []any{"default", int64(1), []int32{1, 2, 3}, 30000.0}), want)
	})
	t.Run("bucketed_partitioned", func(t *testing.T) {
		// A partitioned queue's claim (partitions_take) finds its ready partitions by a loose
		// scan of jobs_partition (one probe each, never the queue's whole
		// backlog), takes their slots by key, and claims each partition's
		// jobs from jobs_partition in order.
		if err := bq.SetLimits(ctx, "parted", bucketed.Limits{Concurrency: 3, PartitionBy: "kind"}); err != nil {
			t.Fatal(err)
		}
		take := render(t, d, name, "bucketed/bucketed.sql", "partitions_take")
		want := shape{want: []string{"jobs_partition", "job_slot_pkey", "LockRows"}, refuse: []string{"Seq Scan on jobs", "Seq Scan on job_slot"}}
		if d.Engine == skiplock.EngineCockroach {
			want = shape{want: []string{"jobs@jobs_partition", "job_slot@job_slot_pkey"}, refuse: []string{"FULL SCAN"}}
		}
		check(t, explain(ctx, t, db, take, []any{"parted", 10, "", bucketed.MaxClaimPartitions}), want)
		block := "claim_partitioned"
		if d.KeyJoinDML {
			block = "claim_partitioned_key_join"
		}
		claim := render(t, d, name, "bucketed/bucketed.sql", block)
		// (The branches past the two partitions given fold to nothing.
		// Under the cockroach personality PostgreSQL may hash-join the
		// key-joined UPDATE to this small table; the branches are what
		// CockroachDB's plan shares.)
		want = shape{want: []string{"Index Scan using jobs_partition", "LockRows"}}
		if !d.KeyJoinDML {
			want.refuse = []string{"Seq Scan on jobs"}
		}
		if d.Engine == skiplock.EngineCockroach {
			want = shape{want: []string{"jobs@jobs_partition", "locking wait policy: skip locked"}, refuse: []string{"FULL SCAN"}}
		}
		check(t, explain(ctx, t, db, claim, []any{"parted", "owner", int64(1), 30.0, []string{"a", "b"}, []int32{2, 2}, int32(4)}), want)
	})
	if d.Engine == skiplock.EnginePostgres && d.Emulates == skiplock.PersonalityNone {
		// The cockroach personality sends CockroachDB's key-joined claim,
		// one branch with no bucket predicate, which CockroachDB reads from
		// its hash-sharded index in order. PostgreSQL's jobs_dequeue leads
		// with the bucket, so the personality's migration adds the merged
		// stand-in (schema.EmulationStandIns): without it the claim sorts
		// every queued row. Last, since it adds that index to the schema.
		t.Run("bucketed_key_join_emulated", func(t *testing.T) {
			edb, err := db.Emulating(skiplock.PersonalityCockroach, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := schema.Migrate(ctx, edb, &schema.MigrateConfig{Options: schema.Options{Schema: name}, Layouts: []schema.Layout{schema.LayoutBucketed}}); err != nil {
				t.Fatal(err)
			}
			explainBucketed(ctx, t, edb, edb.Dialect(), name, shape{
				want:   []string{"Update on jobs", "LockRows", "jobs_dequeue_merged", "jobs_pkey"},
				refuse: []string{"Seq Scan on jobs", "Sort"},
			})
			// In its transactions, as CockroachDB plans them, a claim of
			// 1,000 and a completion of 1,000 join by key (a lookup join):
			// left to its costs PostgreSQL hash-joins them to a scan of the
			// whole table, whose predicate lock at SERIALIZABLE covers the
			// table and conflicts with every writer.
			tx, err := edb.Begin(ctx, skiplock.TxOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // nothing was written
			byKey := shape{want: []string{"Nested Loop", "jobs_pkey"}, refuse: []string{"Hash Join", "Merge Join", "Seq Scan on jobs"}}
			claim := render(t, edb.Dialect(), name, "bucketed/bucketed.sql", bucketed.ClaimBlock(edb.Dialect()))
			check(t, explain(ctx, t, tx, claim, []any{"default", 1000, "planshape", int64(1), 30.0, []int16{0}, []int32{-32769}, []time.Time{time.Unix(0, 0).UTC()}, []int64{0}}), byKey)
			var ids, tokens []int64
			for _, r := range testdb.Lines(ctx, t, tx, "SELECT id FROM "+sqlident.Quote(name)+"."+sqlident.Quote(schema.JobsTable)+" ORDER BY id LIMIT 1000") {
				var id int64
				if _, err := fmt.Sscan(r, &id); err != nil {
					t.Fatal(err)
				}
				ids, tokens = append(ids, id), append(tokens, 1)
			}
			check(t, explain(ctx, t, tx, render(t, edb.Dialect(), name, "bucketed/bucketed.sql", "complete"), []any{ids, tokens}), byKey)
		})
	}
	t.Run("fanout", func(t *testing.T) {
		// Shard 0x80 from its head (no watermark) to the next shard's.
		sql := render(t, d, name, "fanout/fanout.sql", "claim_shard")
		check(t, explain(ctx, t, db, sql, []any{"80", "", "84", fq.Name()}), fanoutShapes[d.Engine])
	})
}

// explainBucketed explains the bucketed claim d selects, for a claim of
// ten jobs from every bucket with no watermark, and checks it against s.
func explainBucketed(ctx context.Context, t *testing.T, db *skiplock.DB, d *skiplock.Dialect, name string, s shape) {
	t.Helper()
	sql := render(t, d, name, "bucketed/bucketed.sql", bucketed.ClaimBlock(d))
	buckets := []int16{0}
	if !d.ShardedIndexFansOut {
		buckets = make([]int16, schema.DefaultBuckets)
		for i := range buckets {
			buckets[i] = int16(i)
		}
	}
	prio, at, ids := make([]int32, len(buckets)), make([]time.Time, len(buckets)), make([]int64, len(buckets))
	for i := range buckets {
		prio[i], at[i] = -32769, time.Unix(0, 0).UTC() // no watermark: every bucket from its head
	}
	args := []any{"default", 10, "planshape", int64(1), 30.0, buckets, prio, at, ids}
	check(t, explain(ctx, t, db, sql, args), s)
	if d.PlanCacheMode && bucketed.ClaimBlock(d) == "claim" {
		// The queue runs this claim on its generic plan
		// (TxOptions.GenericPlans): that plan must have the shape too.
		check(t, explainGeneric(ctx, t, db, sql, args), s)
	}
}

// explainGeneric returns the generic plan of sql, prepared and explained
// for args in a transaction that forces generic plans, as the queue runs
// it, and then rolled back.
func explainGeneric(ctx context.Context, t *testing.T, db *skiplock.DB, sql string, args []any) []string {
	t.Helper()
	tx, err := db.Begin(ctx, skiplock.TxOptions{GenericPlans: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing was written
	if _, err := tx.Exec(ctx, "PREPARE planshape_generic AS "+sql); err != nil {
		t.Fatal(err)
	}
	// EXPLAIN EXECUTE takes no bind parameters: the values go as literals.
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(t, a)
	}
	plan := testdb.Lines(ctx, t, tx, "EXPLAIN EXECUTE planshape_generic("+strings.Join(lits, ", ")+")")
	t.Logf("generic plan:\n%s", strings.Join(plan, "\n"))
	if _, err := tx.Exec(ctx, "DEALLOCATE planshape_generic"); err != nil {
		t.Fatal(err)
	}
	return plan
}

// literal writes one of the claim's test values as a SQL literal, which
// EXECUTE casts to the prepared statement's parameter type.
func literal(t *testing.T, v any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	array := func(n int, elem func(i int) string) string {
		out := make([]string, n)
		for i := range out {
			out[i] = elem(i)
		}
		return quote("{" + strings.Join(out, ",") + "}")
	}
	switch v := v.(type) {
	case string:
		return quote(v)
	case int, int64, float64:
		return fmt.Sprint(v)
	case []int16:
		return array(len(v), func(i int) string { return fmt.Sprint(v[i]) })
	case []int32:
		return array(len(v), func(i int) string { return fmt.Sprint(v[i]) })
	case []int64:
		return array(len(v), func(i int) string { return fmt.Sprint(v[i]) })
	case []time.Time:
		return array(len(v), func(i int) string { return `"` + v[i].Format(time.RFC3339Nano) + `"` })
	}
	t.Fatalf("no SQL literal for %T", v)
	return ""
}

// render renders one block of a registered .sql file as its package
// would for d and schemaName.
func render(t *testing.T, d *skiplock.Dialect, schemaName, path, block string) string {
	t.Helper()
	for _, src := range sqltext.Sources() {
		if src.Path != path {
			continue
		}
		all, err := src.File.Render(src.Vars(d, schemaName))
		if err != nil {
			t.Fatal(err)
		}
		if sql, ok := all[block]; ok {
			return sql
		}
		t.Fatalf("%s has no block %q", path, block)
	}
	t.Fatalf("%s is not registered", path)
	return ""
}

// explain returns the plan of sql with args, one line per row. EXPLAIN
// plans without running the statement, so the claim changes nothing.
func explain(ctx context.Context, t *testing.T, db skiplock.Querier, sql string, args []any) []string {
	t.Helper()
	plan := testdb.Lines(ctx, t, db, "EXPLAIN "+sql, args...)
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
	return plan
}

func check(t *testing.T, plan []string, s shape) {
	t.Helper()
	if s.want == nil && s.wantN == nil && s.refuse == nil {
		t.Fatal("no expected shape for this engine")
	}
	text := strings.Join(plan, "\n")
	for _, w := range s.want {
		if !strings.Contains(text, w) {
			t.Errorf("the plan lacks %q", w)
		}
	}
	for w, n := range s.wantN {
		if got := strings.Count(text, w); got != n {
			t.Errorf("the plan has %d of %q, want %d", got, w, n)
		}
	}
	for _, r := range s.refuse {
		if strings.Contains(text, r) {
			t.Errorf("the plan has %q", r)
		}
	}
	for _, re := range s.refuseR {
		for _, l := range plan {
			if re.MatchString(l) {
				t.Errorf("a plan line matches %s: %s", re, l)
			}
		}
	}
}
