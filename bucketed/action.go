package bucketed

import (
	"context"
	"fmt"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// CancelJob cancels the job with this id (decimal, as skiplock.Job.ID), without holding its lease: a
// Queued or Running job becomes Canceled and will not run (again). A
// Running job's worker sees its handler's context cancelled at its next
// heartbeat, and its completion is refused with skiplock.ErrLeaseLost. It
// returns an error wrapping skiplock.ErrNoJob for an unknown id, and a
// *skiplock.StateError for a job that already finished. Like RetryJob and
// DeleteJob, it is tried again on a serialization failure, up to 50 times
// unless Config.Retry.MaxAttempts is set.
func (q *Queue) CancelJob(ctx context.Context, id string) error {
	return q.byID(ctx, "cancel", q.sql.cancelByID, id, []string{"Queued", "Running"}, "", nil, func(ctx context.Context, tx skiplock.Tx, id int64) error {
		return q.settle(ctx, tx, nil, []int64{id}) // its dependents are cancelled with it
	})
}

// RetryJob puts a Failed or Canceled job back in the queue to run now,
// with its attempts reset. Errors as CancelJob's; a retry that would give
// a unique key to a second live job is refused with an error that says so.
func (q *Queue) RetryJob(ctx context.Context, id string) error {
	return q.byID(ctx, "retry", q.sql.retryByID, id, []string{"Failed", "Canceled"}, "", q.gate.BeforeRetry, func(ctx context.Context, tx skiplock.Tx, id int64) error {
		return q.gate.Requeue(ctx, tx, []int64{id}) // so are the dependents its failure cancelled
	})
}

// DeleteJob deletes a finished job (Success, Failed or Canceled). Errors
// as CancelJob's; a live job must be cancelled first.
func (q *Queue) DeleteJob(ctx context.Context, id string) error {
	return q.byID(ctx, "delete", q.sql.deleteByID, id, []string{"Success", "Failed", "Canceled"}, "cancel it first", nil, nil)
}

// actionAttempts is how many times an operator's action on one job is
// tried by default (Config.Retry.MaxAttempts unset) before a
// serialization failure is returned: more than the workers' writes get.
// A retry of a workflow job reads its dependencies and dependents, which
// the workers' completions of the same workflow keep writing while it
// runs (under SERIALIZABLE they conflict, on a small workflow, most
// times), and a person or a script waits for it, which one failure would
// send back to try again by hand.
const actionAttempts = 50

// byID runs one action statement and, when it changed nothing, reads the
// job's status in the same transaction to say why; before it and, when it
// changed the job, after it, before and after (if any) run in the same
// transaction.
func (q *Queue) byID(ctx context.Context, action, sql string, ids string, allowed []string, hint string,
	before func(ctx context.Context, tx skiplock.Querier, id int64) error, after func(ctx context.Context, tx skiplock.Tx, id int64) error) error {
	id, err := strconv.ParseInt(ids, 10, 64)
	if err != nil {
		// Not an id this layout gives out (a fanout job's, or a typo):
		// no bucketed job has it.
		return usage.NoJob(action, ids)
	}
	var stateErr error
	err = retry.Run(ctx, q.db, q.actionRetry, func(ctx context.Context, tx skiplock.Tx) error {
		stateErr = nil
		if before != nil {
			if err := before(ctx, tx, id); err != nil {
				return err
			}
		}
		n, err := tx.Exec(ctx, sql, id)
		if err != nil {
			if skiplock.SQLState(err) == "23505" {
				return usage.Errorf("cannot %s job %s: another job holds its unique key (Queued or Running, or in a state its insert named); wait for that one to finish, or delete one of them", action, ids)
			}
			return err
		}
		if n == 1 {
			if after != nil {
				return after(ctx, tx, id)
			}
			return nil
		}
		rows, err := tx.Query(ctx, q.sql.statusByID, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			stateErr = usage.NoJob(action, ids)
			return rows.Err()
		}
		var status string
		if err := rows.Scan(&status); err != nil {
			return err
		}
		stateErr = &skiplock.StateError{Action: action, ID: ids, State: status, Allowed: allowed, Hint: hint}
		return rows.Err()
	})
	if err = retry.Refused(err, stateErr); err == nil || err == stateErr || usage.Is(err) {
		return err
	}
	return fmt.Errorf("bucketed: %s job %s: %w", action, ids, err)
}
