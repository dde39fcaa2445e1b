package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestWorkflowThroughKills: a layered workflow of 300 jobs (10 layers of
// 30, each job depending on 2 of the layer before), inserted by `enqueue
// --workflow` and worked by two `work` processes of 16 workers with
// --fail 0.2 (never a job's last attempt), one SIGKILLed after 100 jobs
// are recorded; three jobs of layers 3 and 6 fail every attempt
// (--fail-on-payload) and so fail for good. From work_log (one row per
// completed job, with its handler's start and end on the workers' clock):
// every job ran after each of its dependencies had finished, and was
// recorded once; exactly the transitive dependents of the jobs that
// failed for good are Canceled, and every other job succeeded.
func TestWorkflowThroughKills(t *testing.T) {
	t.Parallel()
	const layers, width = 10, 30
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	dsn := testdb.DSN(t)
	cli(t, dsn, "--schema", name, "migrate", "--layout", "bucketed")

	type fileJob struct {
		ID          string            `json:"id"`
		Payload     map[string]string `json:"payload,omitempty"`
		Deps        []string          `json:"deps,omitempty"`
		MaxAttempts int               `json:"max_attempts,omitempty"`
	}
	doomed := map[string]bool{"l3-4": true, "l6-17": true, "l6-9": true}
	rng := rand.New(rand.NewPCG(3, 11))
	deps := map[string][]string{}
	var jobs []fileJob
	for l := range layers {
		for k := range width {
			id := fmt.Sprintf("l%d-%d", l, k)
			j := fileJob{ID: id}
			if l > 0 {
				a := rng.IntN(width)
				b := (a + 1 + rng.IntN(width-1)) % width
				j.Deps = []string{fmt.Sprintf("l%d-%d", l-1, a), fmt.Sprintf("l%d-%d", l-1, b)}
			}
			if doomed[id] {
				j.Payload, j.MaxAttempts = map[string]string{"fate": "doomed"}, 2
			}
			deps[id] = j.Deps
			jobs = append(jobs, j)
		}
	}
	b, err := json.Marshal(map[string]any{"name": "layers", "jobs": jobs})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "workflow.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, dsn, "--schema", name, "enqueue", "--workflow", path)

	// The maintenance leader, which puts the killed process's jobs back
	// once their leases expire, works another queue and is never killed.
	rescue := "--rescue-interval=200ms"
	leader := startWorker(t, dsn, workArgs(name, "bucketed", "--queue", "chaos_idle", "--workers", "1", rescue)...)
	defer leader.stop() //nolint:errcheck // its exit code is not the point
	waitLeader(t, db, name, leader.pid())
	args := workArgs(name, "bucketed", "--workers", "16", "--fail", "0.2", "--retry-backoff", "50ms", "--fail-on-payload", "doomed", rescue)
	procs := []*workerProc{startWorker(t, dsn, args...), startWorker(t, dsn, args...)}
	logsOnFailure(t, procs)
	waitRecorded(t, db, name, 100, time.Minute)
	procs[0].kill()
	s := sqlident.Quote(name)
	ctx := context.Background()
	testdb.WaitFor(t, "every job of the workflow to finish", 2*time.Minute, func() bool {
		var live int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+s+`."jobs" WHERE "status" IN ('Queued', 'Running')`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		return live == 0
	})
	procs[1].stop() //nolint:errcheck // the exit code after SIGTERM is not the point

	states := map[string]string{}
	rows, err := db.Query(ctx, `SELECT "workflow_node", "status"::TEXT FROM `+s+`."jobs"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, st string
		if err := rows.Scan(&n, &st); err != nil {
			t.Fatal(err)
		}
		states[n] = st
	}
	rows.Close()
	dead := map[string]bool{}
	for n, st := range states {
		if st == "Failed" {
			dead[n] = true
		}
	}
	cancelled := transitiveDependents(deps, dead)
	var succeeded int64
	for n := range deps {
		want := "Success"
		switch {
		case dead[n]:
			want = "Failed"
		case cancelled[n]:
			want = "Canceled"
		}
		if states[n] != want {
			t.Errorf("job %s is %s, want %s", n, states[n], want)
		}
		if want == "Success" {
			succeeded++
		}
	}
	if len(dead) != len(doomed) || len(cancelled) == 0 {
		t.Errorf("%d jobs failed for good (want the %d doomed), cancelling %d", len(dead), len(doomed), len(cancelled))
	}
	var rowsN, distinct, early, pairs int64
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s+`."work_log"), (SELECT count(DISTINCT "job_id") FROM `+s+`."work_log"),
  (SELECT count(*) FILTER (WHERE dw."job_id" IS NULL OR w."started_at" < dw."finished_at") FROM `+s+`."jobs" AS j
     JOIN `+s+`."work_log" AS w ON w."job_id" = j."id"::TEXT
     JOIN `+s+`."jobs" AS d ON d."workflow_id" = j."workflow_id" AND d."workflow_node" = ANY(j."depends_on")
     LEFT JOIN `+s+`."work_log" AS dw ON dw."job_id" = d."id"::TEXT),
  (SELECT count(*) FROM `+s+`."jobs" AS j JOIN `+s+`."jobs" AS d ON d."workflow_id" = j."workflow_id" AND d."workflow_node" = ANY(j."depends_on")
     WHERE j."status" = 'Success')`).Scan(&rowsN, &distinct, &early, &pairs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs: %d succeeded, %d failed for good, %d cancelled; %d dependency pairs checked", len(deps), succeeded, len(dead), len(cancelled), pairs)
	if rowsN != succeeded || distinct != succeeded {
		t.Errorf("work_log: %d rows for %d jobs; want each of the %d successful jobs once", rowsN, distinct, succeeded)
	}
	if early != 0 {
		t.Errorf("%d jobs started before one of their dependencies had finished (or without it recorded)", early)
	}
}

// transitiveDependents is every job that depends, directly or not, on one
// of roots.
func transitiveDependents(deps map[string][]string, roots map[string]bool) map[string]bool {
	out := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for n, ds := range deps {
			for _, d := range ds {
				if !out[n] && (roots[d] || out[d]) {
					out[n], changed = true, true
				}
			}
		}
	}
	return out
}
