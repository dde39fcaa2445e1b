package bucketed_test

import (
	"context"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// Dequeue runs the claim on its generic plan where the engine can say so
// (Dialect.PlanCacheMode): on a queue with rows in its statistics,
// PostgreSQL's own choice re-planned it at every call (docs/design.md,
// "Planning a prepared claim"). Claims full, short and empty, on one
// connection, and not one custom plan of the claim; the completions too
// (their generic plan locks rows in id order).
func TestDequeueUsesGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 1})
	if !db.Dialect().PlanCacheMode {
		t.Skipf("%s has no plan_cache_mode", db.Dialect().Engine)
	}
	db, name := testdb.MigratedOn(t, db, nil, schema.LayoutBucketed)
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]skiplock.NewJob, 500)
	for i := range jobs {
		jobs[i] = skiplock.NewJob{Payload: []byte(`{}`)}
	}
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "ANALYZE "+sqlident.Quote(name)+"."+sqlident.Quote(schema.JobsTable)); err != nil {
		t.Fatal(err)
	}
	claimed, calls := 0, 0
	for ; calls < 12; calls++ {
		got, err := q.Dequeue(ctx, skiplock.DefaultQueue, 50)
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(got)
		if len(got) > 0 {
			if lost, err := q.CompleteMany(ctx, got); err != nil || len(lost) > 0 {
				t.Fatalf("CompleteMany: %d lost, %v", len(lost), err)
			}
		}
	}
	if claimed != len(jobs) {
		t.Fatalf("claimed %d of %d jobs in %d calls", claimed, len(jobs), calls)
	}
	var generic, custom int64
	if err := db.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", q.ClaimSQL()).Scan(&generic, &custom); err != nil {
		t.Fatalf("the claim is not a prepared statement of the one connection: %v", err)
	}
	// The one connection ran the claim once more, as New warmed it
	// (skiplock.DB.Warm), on the same generic plan.
	if custom != 0 || generic != int64(calls)+1 {
		t.Errorf("the claim ran %d times on its generic plan and was planned %d times for its values; want %d (and the warm-up) and 0", generic, custom, calls)
	}
	if err := db.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", q.CompleteSQL()).Scan(&generic, &custom); err != nil {
		t.Fatalf("the completion is not a prepared statement of the one connection: %v", err)
	}
	if custom != 0 || generic != int64(len(jobs)/50) {
		t.Errorf("the completion ran %d times on its generic plan and was planned %d times for its values; want %d and 0", generic, custom, len(jobs)/50)
	}
}
