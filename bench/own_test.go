package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// TestRunsOnlyInItsOwnSchema: a schema the bench did not create is refused
// untouched, even one with no jobs; a schema it created is reused.
func TestRunsOnlyInItsOwnSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, name := testdb.Migrated(t, nil)
	if _, err := db.Exec(ctx, `INSERT INTO `+sqlident.Quote(name)+`."jobs" ("payload") SELECT '{}' FROM generate_series(1, 10)`); err != nil {
		t.Fatal(err)
	}
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioThroughput, Workers: 2, Jobs: 20})
	c.Schema = name
	_, err := bench.Run(ctx, c)
	if !usage.Is(err) || !strings.Contains(err.Error(), "was not created by skiplock bench") || !strings.Contains(err.Error(), "--schema "+name+"_bench") {
		t.Fatalf("bench in a queue schema: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("%d of 10 jobs left (%v)", n, err)
	}
	settings, err := schema.ReadSettings(ctx, db, name)
	if err != nil || len(settings) != 2 {
		t.Fatalf("the refused schema's settings changed: %v %v", settings, err)
	}

	// Its own schema: created, marked, and run in again.
	c, _ = config(t, bench.Config{Scenario: bench.ScenarioThroughput, Workers: 2, Jobs: 20})
	for i := 0; i < 2; i++ {
		if rep := run(t, c); rep.Jobs != 20 {
			t.Fatalf("run %d: %d jobs, want 20", i, rep.Jobs)
		}
	}
}
