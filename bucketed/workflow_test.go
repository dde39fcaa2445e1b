package bucketed_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/depgate"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// workflowOf inserts a workflow whose jobs are named by deps' keys, each
// depending on the names its value lists, and returns the jobs' ids.
func workflowOf(t *testing.T, db *skiplock.DB, q *bucketed.Queue, deps map[string][]string) map[string]int64 {
	t.Helper()
	ctx := ctxT(t)
	wf := skiplock.Workflow{Name: "test"}
	for name, ds := range deps {
		wf.Jobs = append(wf.Jobs, skiplock.WorkflowJob{ID: name, Job: skiplock.NewJob{Payload: []byte(`{}`)}, DependsOn: ds})
	}
	var res *bucketed.InsertedWorkflow
	if err := retry.Run(ctx, db, nil, func(ctx context.Context, tx skiplock.Tx) (err error) {
		res, err = q.InsertWorkflow(ctx, tx, wf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for name, id := range res.Jobs {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = n
	}
	return ids
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// workflowDB is a migrated schema under the test's personality, without
// injected ambiguous commits: these tests are about isolation, and an
// ambiguous commit of one of their steps would leave the step's outcome
// to guess.
func workflowDB(t *testing.T) (*skiplock.DB, string) {
	t.Helper()
	p, cfg := testdb.Emulation()
	if cfg != nil {
		c := *cfg
		c.AmbiguousCommitRate = 0
		cfg = &c
	}
	return testdb.MigratedOn(t, testdb.Open(t, &skiplock.OpenConfig{Emulate: p, Emulation: cfg}), nil, schema.LayoutBucketed)
}

// finishJob ends job id in tx as its completion would: status, then its
// dependents settled (depgate), in the same transaction.
func finishJob(ctx context.Context, tx skiplock.Tx, gate *depgate.Gate, s string, id int64, status skiplock.Status) error {
	if _, err := tx.Exec(ctx, `UPDATE `+jobsTable(s)+` SET "status" = $2::TEXT::`+sqlident.Quote(s)+"."+sqlident.Quote(schema.StatusType)+`, "finished_at" = now() WHERE "id" = $1`, id, string(status)); err != nil {
		return err
	}
	var err error
	if status == skiplock.StatusSuccess {
		_, err = gate.Settle(ctx, tx, []int64{id}, nil)
	} else {
		_, err = gate.Settle(ctx, tx, nil, []int64{id})
	}
	return err
}

// endJob ends job id in status (finishJob), its dependents settled, in a
// transaction of its own.
func endJob(t *testing.T, db *skiplock.DB, gate *depgate.Gate, s string, id int64, status skiplock.Status) {
	t.Helper()
	must(t, retry.Run(ctxT(t), db, nil, func(ctx context.Context, tx skiplock.Tx) error {
		return finishJob(ctx, tx, gate, s, id, status)
	}))
}

// waitState reads job id's status, deps_left (-1 for null) and
// canceled_by.
func waitState(t *testing.T, db *skiplock.DB, s string, id int64) (skiplock.Status, int64, string) {
	t.Helper()
	var st, by string
	var left int64
	if err := db.QueryRow(ctxT(t), `SELECT "status"::TEXT, COALESCE("deps_left", -1), COALESCE("canceled_by", '') FROM `+jobsTable(s)+` WHERE "id" = $1`, id).Scan(&st, &left, &by); err != nil {
		t.Fatal(err)
	}
	return skiplock.Status(st), left, by
}

// TestRetryMeetsCompletionInFlight: W depends on A and B. A failed for
// good and cancelled W; an operator retries A while B's completion is in
// flight. The retry counts what W waits for again, and B's settle must
// not pass W over: W must wait for A alone, whichever transaction goes
// first, under every personality's isolation. "completion first": B's
// completion has settled (passing W over: it was Canceled) but not
// committed when the retry starts. "retry first": B's completion took its
// snapshot before the retry committed, and settles after.
func TestRetryMeetsCompletionInFlight(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"completion first", "retry first"} {
		t.Run(strings.ReplaceAll(order, " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db, s := workflowDB(t)
			q := queueOn(t, db, s, nil)
			gate := depgate.New(s)
			ids := workflowOf(t, db, q, map[string][]string{"a": nil, "b": nil, "w": {"a", "b"}})
			endJob(t, db, gate, s, ids["a"], skiplock.StatusFailed)
			if st, _, by := waitState(t, db, s, ids["w"]); st != skiplock.StatusCanceled || by != "a" {
				t.Fatalf("after a failed, w is %s cancelled by %q, want Canceled by a", st, by)
			}
			retried := make(chan error, 1)
			launched := false // the retry, once: an attempt may fail before or after it
			must(t, retry.Run(ctx, db, nil, func(ctx context.Context, tx skiplock.Tx) error {
				var pid int32
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil { // the snapshot, under snapshot isolation
					return err
				}
				if !launched && order == "retry first" {
					launched = true
					retried <- q.RetryJob(ctx, bucketed.FormatID(ids["a"]))
				}
				if err := finishJob(ctx, tx, gate, s, ids["b"], skiplock.StatusSuccess); err != nil {
					return err
				}
				if !launched && order == "completion first" {
					launched = true
					go func() { retried <- q.RetryJob(context.WithoutCancel(ctx), bucketed.FormatID(ids["a"])) }()
					// The retry either finishes or waits for this
					// transaction (it writes b, which this one wrote).
					testdb.WaitFor(t, "the retry to finish or to wait for the completion", 30e9, func() bool {
						return len(retried) > 0 || count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE $1::INT4 = ANY(pg_blocking_pids(pid))`, pid) > 0
					})
				}
				return nil
			}))
			must(t, <-retried)
			st, left, _ := waitState(t, db, s, ids["w"])
			if st != skiplock.StatusQueued || left != 1 {
				t.Fatalf("after a's retry and b's success, w is %s waiting for %d dependencies, want Queued waiting for 1 (a)", st, left)
			}
			endJob(t, db, gate, s, ids["a"], skiplock.StatusSuccess)
			if st, left, _ := waitState(t, db, s, ids["w"]); st != skiplock.StatusQueued || left != -1 {
				t.Fatalf("after a's success, w is %s with deps_left %d, want Queued and released (null)", st, left)
			}
		})
	}
}

// TestRetryInWorkflowWaitsOnlyForWhatCanFinish: W depends on A and C, and
// both failed for good. A retry of W is refused (it would wait for ever)
// and changes nothing; a retry of A leaves W Canceled, now by C; a retry
// of C then queues W, waiting for both.
func TestRetryInWorkflowWaitsOnlyForWhatCanFinish(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := workflowDB(t)
	q := queueOn(t, db, s, nil)
	gate := depgate.New(s)
	ids := workflowOf(t, db, q, map[string][]string{"a": nil, "c": nil, "w": {"a", "c"}})
	for _, name := range []string{"a", "c"} {
		endJob(t, db, gate, s, ids[name], skiplock.StatusFailed)
	}
	err := q.RetryJob(ctx, bucketed.FormatID(ids["w"]))
	if !usage.Is(err) || !strings.Contains(err.Error(), `dependency "a"`) {
		t.Fatalf("retry of w, whose dependencies failed: %v, want a usage error naming a", err)
	}
	if st, _, by := waitState(t, db, s, ids["w"]); st != skiplock.StatusCanceled || by != "a" {
		t.Fatalf("after the refused retry, w is %s cancelled by %q, want unchanged (Canceled by a)", st, by)
	}
	must(t, q.RetryJob(ctx, bucketed.FormatID(ids["a"])))
	if st, _, by := waitState(t, db, s, ids["w"]); st != skiplock.StatusCanceled || by != "c" {
		t.Fatalf("after a's retry, w is %s cancelled by %q, want Canceled by c (still failed)", st, by)
	}
	must(t, q.RetryJob(ctx, bucketed.FormatID(ids["c"])))
	if st, left, by := waitState(t, db, s, ids["w"]); st != skiplock.StatusQueued || left != 2 || by != "" {
		t.Fatalf("after c's retry, w is %s waiting for %d (cancelled by %q), want Queued waiting for 2", st, left, by)
	}
	var se *skiplock.StateError
	if err := q.RetryJob(ctx, bucketed.FormatID(ids["w"])); !errors.As(err, &se) {
		t.Fatalf("retry of a waiting w: %v, want a StateError", err)
	}
}
