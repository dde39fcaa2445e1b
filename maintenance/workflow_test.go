package maintenance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// TestWorkflowRowsFollowRetention: the leader deletes a workflow's row
// once it is older than the retention of completed jobs and none of its
// jobs is left, with its jobs' names (job_workflow_node); a workflow with
// a job left, or a younger one, stays.
func TestWorkflowRowsFollowRetention(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := context.Background()
	q := sqlident.Quote(s)
	// 1: old, its jobs gone; 2: old, a job left; 3: young, no job.
	if _, err := db.Exec(ctx, `INSERT INTO `+q+`."job_workflow" ("id", "name", "size", "created_at")
VALUES (1, 'gone', 1, now() - INTERVAL '48 hours'), (2, 'left', 1, now() - INTERVAL '48 hours'), (3, 'young', 1, now() - INTERVAL '1 hour')`); err != nil {
		t.Fatal(err)
	}
	var jobID int64
	if err := db.QueryRow(ctx, `INSERT INTO `+q+`."jobs" ("status", "workflow_id", "workflow_node") VALUES ('Queued', 2, 'a') RETURNING "id"`).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	// Workflow 1's job was deleted (its id is no job's); 2's is there.
	if _, err := db.Exec(ctx, `INSERT INTO `+q+`."job_workflow_node" ("workflow_id", "node", "job_id") VALUES (1, 'a', $1), (2, 'a', $2)`, jobID+1000, jobID); err != nil {
		t.Fatal(err)
	}
	var rounds atomic.Int64
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: s, BatchInterval: 10 * time.Millisecond,
		Retention: maintenance.Retention{Completed: 24 * time.Hour},
		AfterTask: func(task string, err error) {
			if task == "batcher" && err == nil {
				rounds.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background()) //nolint:errcheck // test cleanup
	left := func() map[string]bool {
		out := map[string]bool{}
		for _, id := range testdb.Lines(ctx, t, db, `SELECT "id"::TEXT FROM `+q+`."job_workflow"`) {
			out[id] = true
		}
		return out
	}
	testdb.WaitFor(t, "the pruned workflow's row to go", 30*time.Second, func() bool { return !left()["1"] })
	after := rounds.Load()
	testdb.WaitFor(t, "three more rounds of the batcher", 30*time.Second, func() bool { return rounds.Load() >= after+3 })
	if got := left(); !got["2"] || !got["3"] || got["1"] {
		t.Errorf("workflow rows left %v; want 2 (a job left) and 3 (young), not 1", got)
	}
	var names []int64
	rows, err := db.Query(ctx, `SELECT "workflow_id" FROM `+q+`."job_workflow_node" ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var w int64
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		names = append(names, w)
	}
	if fmt.Sprint(names) != "[2]" {
		t.Errorf("job names left for workflows %v; want [2] (1's went with it)", names)
	}
}
