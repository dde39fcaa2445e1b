package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestMetricsSamplePlan explains the bucketed queue sample over a table
// whose history (Success rows) dwarfs its live jobs: on PostgreSQL each
// count reads its partial index (Queued, Running) and the oldest is one
// probe of jobs_dequeue per bucket; nothing reads the table whole. (On
// CockroachDB the key-join block reads the hash-sharded index, checked by
// internal/enginematrix's engines; this test runs where the test server
// is PostgreSQL.) The sample's answer is checked against plain counts.
func TestMetricsSamplePlan(t *testing.T) {
	db, name := testdb.Migrated(t, nil, schema.LayoutBucketed)
	if db.Engine() != skiplock.EnginePostgres {
		t.Skipf("plan shapes here are PostgreSQL's; the engine is %s", db.Engine())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jobs := sqlident.Quote(name) + `."jobs"`
	for _, sql := range []string{
		`INSERT INTO ` + jobs + ` ("queue", "status", "finished_at") SELECT 'a', 'Success', now() FROM generate_series(1, 50000)`,
		`INSERT INTO ` + jobs + ` ("queue", "status", "run_at") SELECT 'a', 'Queued', now() - g * INTERVAL '1 second' FROM generate_series(1, 300) AS g`,
		`INSERT INTO ` + jobs + ` ("queue", "status", "run_at") SELECT 'a', 'Queued', now() + INTERVAL '1 hour' FROM generate_series(1, 20)`,
		`INSERT INTO ` + jobs + ` ("queue", "status", "lease_expires_at") SELECT 'a', 'Running', now() + INTERVAL '1 minute' FROM generate_series(1, 7)`,
		`ANALYZE ` + jobs,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	sql, err := renderMetricsSQL(db.Dialect(), name)
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(testdb.Lines(ctx, t, db, "EXPLAIN "+sql["sample_bucketed"], "a", MetricsSampleCap), "\n")
	t.Logf("plan:\n%s", plan)
	for _, want := range []string{"jobs_dequeue", "jobs_lease_expiry"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan does not read %s", want)
		}
	}
	if strings.Contains(plan, "Seq Scan on jobs") {
		t.Errorf("the plan reads the jobs table whole")
	}
	var queued, running int64
	var oldest *time.Time
	var now time.Time
	if err := db.QueryRow(ctx, sql["sample_bucketed"], "a", MetricsSampleCap).Scan(&queued, &running, &oldest, &now); err != nil {
		t.Fatal(err)
	}
	var wantOldest time.Time
	if err := db.QueryRow(ctx, `SELECT min("run_at") FROM `+jobs+` WHERE "status" = 'Queued' AND "run_at" <= now()`).Scan(&wantOldest); err != nil {
		t.Fatal(err)
	}
	if queued != 320 || running != 7 || oldest == nil || !oldest.Equal(wantOldest) {
		t.Fatalf("sample: queued %d running %d oldest %v; want 320, 7, %v", queued, running, oldest, wantOldest)
	}
	// The cap bounds each count.
	if err := db.QueryRow(ctx, sql["sample_bucketed"], "a", 100).Scan(&queued, &running, &oldest, &now); err != nil {
		t.Fatal(err)
	}
	if queued != 100 || running != 7 {
		t.Fatalf("capped sample: queued %d running %d; want 100, 7", queued, running)
	}
}
