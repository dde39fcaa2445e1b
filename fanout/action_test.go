package fanout_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// TestActionsByID: a pending job is cancelled into job_dead, retried back
// into the queue with its attempts reset and run, and a dead job deleted;
// a running job (its row held by a worker's transaction) cannot be
// cancelled, and unknown ids and wrong places get clear errors.
func TestActionsByID(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, nil)
	ctx := context.Background()
	ids, err := fanout.EnqueueManyIDs(ctx, q, jobs(2))
	if err != nil {
		t.Fatal(err)
	}
	dead := table(s, schema.DeadJobTable)
	stateErr := func(err error, action, state string) {
		t.Helper()
		var se *skiplock.StateError
		if !errors.As(err, &se) || se.Action != action || se.State != state {
			t.Fatalf("%s: err = %v, want a StateError for a %s job", action, err, state)
		}
	}

	if err := q.CancelJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM `+dead+` WHERE "id" = $1 AND "last_error" LIKE 'cancelled%'`, ids[0]); n != 1 {
		t.Fatalf("cancelled job in job_dead: %d", n)
	}
	stateErr(q.CancelJob(ctx, ids[0]), "cancel", "dead")
	stateErr(q.DeleteJob(ctx, ids[1]), "delete", "pending")
	stateErr(q.RetryJob(ctx, ids[1]), "retry", "pending")

	// A running job: a worker's transaction holds its row.
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table(s, schema.JobQueueTable)+` WHERE "id" = $1 FOR UPDATE`, ids[1]); err != nil {
		t.Fatal(err)
	}
	stateErr(q.CancelJob(ctx, ids[1]), "cancel", "running")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Retry puts the cancelled job back with attempts 0; it then runs.
	if err := q.RetryJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for range 2 {
		r, err := q.Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			ran[job.ID] = job.Attempts
			return nil
		})
		if err != nil || r.Job == nil {
			t.Fatalf("process: %+v, %v", r, err)
		}
	}
	if ran[ids[0]] != 1 || ran[ids[1]] != 1 {
		t.Fatalf("attempts seen by the handler: %v, want 1 for both", ran)
	}

	// Delete a dead job; unknown ids say so.
	if err := q.CancelJob(ctx, ids[0]); !errors.Is(err, skiplock.ErrNoJob) || !strings.Contains(err.Error(), ids[0]) {
		t.Fatalf("cancel of a finished job: %v", err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+dead+` ("id", "last_error") VALUES ('gone', 'x')`); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteJob(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteJob(ctx, "gone"); !errors.Is(err, skiplock.ErrNoJob) {
		t.Fatalf("second delete: %v", err)
	}
	if err := q.RetryJob(ctx, ""); !usage.Is(err) {
		t.Fatalf("empty id: %v", err)
	}
}
