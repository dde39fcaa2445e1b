package planshape_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestFanoutShardUnionPlans explains the fanout layout's shard unions
// (fanout.sql: shards_after, heads_union, exists_after_union), the
// statements the CockroachDB dialect sends in place of the LATERAL claim,
// heads probe and exists_after, on the test server with a few thousand
// jobs queued. On PostgreSQL (and YugabyteDB) each branch is one range
// scan of job_queue's primary key, nothing is read whole, sorted, hashed
// or locked, both as planned for the values and as the generic plan a
// prepared statement may switch to. On CockroachDB (the expected shape
// beside each statement): no full scan, no window (the decorrelated
// LATERAL's row_number), no lock.
func TestFanoutShardUnionPlans(t *testing.T) {
	db, name := testdb.Migrated(t, nil, schema.LayoutFanout)
	d := db.Dialect()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]skiplock.NewJob, 2000)
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "ANALYZE "+sqlident.Quote(name)+"."+sqlident.Quote(schema.JobQueueTable)); err != nil {
		t.Logf("ANALYZE: %v (the plans are checked without fresh statistics)", err)
	}
	// Every shard from its head: lower bound the prefix (two hex digits,
	// fanout/shard.go), upper bound the next prefix, no exclusive bound.
	lo, hi := make([]string, schema.FanoutShards), make([]string, schema.FanoutShards)
	for s := range lo {
		lo[s] = fmt.Sprintf("%02x", s*256/schema.FanoutShards)
		if s > 0 {
			hi[s-1] = lo[s]
		}
	}
	hi[len(hi)-1] = "g"
	args := func(from int, after bool) []any {
		a := []any{q.Name()}
		for s := from; s < len(lo); s++ {
			a = append(a, lo[s], hi[s])
			if after {
				a = append(a, "")
			}
		}
		return a
	}
	for _, c := range []struct {
		block    string
		args     []any
		branches int
	}{
		{"shards_after", args(1, true), schema.FanoutShards - 1},
		{"heads_union", args(0, false), schema.FanoutShards},
		{"exists_after_union", args(0, false), schema.FanoutShards},
	} {
		t.Run(c.block, func(t *testing.T) {
			sql := render(t, d, name, "fanout/fanout.sql", c.block)
			plans := map[string][]string{"custom": testdb.Lines(ctx, t, db, "EXPLAIN "+sql, c.args...)}
			if d.PlanCacheMode {
				plans["generic"] = explainGeneric(ctx, t, db, sql, c.args)
			}
			for kind, plan := range plans {
				text := strings.Join(plan, "\n")
				t.Logf("%s plan:\n%s", kind, text)
				if d.Engine == skiplock.EngineCockroach {
					for _, bad := range []string{"FULL SCAN", "window", "row_number", "locking strength"} {
						if strings.Contains(text, bad) {
							t.Errorf("%s plan has %q", kind, bad)
						}
					}
					if !strings.Contains(text, "union all") || !strings.Contains(text, "job_queue@job_queue_pkey") {
						t.Errorf("%s plan is not a union of job_queue_pkey scans", kind)
					}
					continue
				}
				// A custom plan may read a branch the statistics put at one
				// row through a bitmap scan of that shard's range and sort it
				// (as PostgreSQL picks for the bucketed claim too:
				// docs/design.md, "Planning a prepared claim"): still one
				// range scan of the key. The plan the engine keeps reads each
				// shard in key order.
				scans := 0
				for _, l := range plan {
					if strings.Contains(l, "Index Scan using job_queue_pkey") || strings.Contains(l, "Index Only Scan using job_queue_pkey") ||
						(kind == "custom" && strings.Contains(l, "Bitmap Index Scan on job_queue_pkey")) {
						scans++
					}
				}
				if scans != c.branches {
					t.Errorf("%s plan: %d range scans of job_queue_pkey, want one per branch, %d", kind, scans, c.branches)
				}
				bads := []string{"Seq Scan on job_queue", "Seq Scan on job_attempt", "LockRows", "Hash", "Materialize"}
				if kind == "generic" {
					bads = append(bads, "Sort", "Bitmap")
				}
				for _, bad := range bads {
					if strings.Contains(text, bad) {
						t.Errorf("%s plan has %q", kind, bad)
					}
				}
			}
		})
	}
}
