package fanout

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// CancelJob cancels a pending job by id: it moves to job_dead with
// last_error "cancelled by an operator", and can be retried from there. A
// job a worker is running cannot be cancelled: it runs inside that
// worker's transaction, which commits (the job is done) or rolls back (it
// is pending again) with its handler; CancelJob then returns a
// *skiplock.StateError saying it is running. An unknown id gives an error
// wrapping skiplock.ErrNoJob. The id may belong to any queue of the
// schema.
func (q *Queue) CancelJob(ctx context.Context, id string) error {
	return q.byID(ctx, "cancel", q.sql.cancelByID, id, "pending (not running)", map[string][2]string{
		"pending": {"running", "its worker's transaction holds it and ends with its handler; retry or delete it from job_dead if it fails"},
		"dead":    {"dead", "retry or delete it"},
	})
}

// RetryJob puts a dead job back in its queue with its attempts reset.
// Errors as CancelJob's; a pending job cannot be retried.
// The job keeps its id, which sorts below the claims' watermarks: this
// Queue's next claim probes the heads (other processes find it within
// their HintMaxAge).
func (q *Queue) RetryJob(ctx context.Context, id string) error {
	err := q.byID(ctx, "retry", q.sql.retryByID, id, "dead", map[string][2]string{"pending": {"pending", "it is still in the queue"}})
	if err == nil {
		q.marks.ProbeAllSoon()
	}
	return err
}

// DeleteJob deletes a dead job. Errors as CancelJob's; a pending job must
// be cancelled first. (A fanout job that succeeded left no row to delete.)
func (q *Queue) DeleteJob(ctx context.Context, id string) error {
	return q.byID(ctx, "delete", q.sql.deleteByID, id, "dead", map[string][2]string{"pending": {"pending", "cancel it first"}})
}

// byID runs one action and, when it changed nothing, finds where the job
// is, in the same transaction, to say why.
// why maps where the job is to the state and hint the error shows.
func (q *Queue) byID(ctx context.Context, action, sql, id, allowed string, why map[string][2]string) error {
	if id == "" {
		return usage.Errorf("cannot %s a job without an id", action)
	}
	var stateErr error
	err := retry.Run(ctx, q.db, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		stateErr = nil
		n, err := tx.Exec(ctx, sql, id)
		if err != nil || n == 1 {
			return err
		}
		rows, err := tx.Query(ctx, q.sql.whereByID, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			stateErr = usage.NoJob(action, id)
			return rows.Err()
		}
		var where string
		if err := rows.Scan(&where); err != nil {
			return err
		}
		state, hint := where, ""
		if w, ok := why[where]; ok {
			state, hint = w[0], w[1]
		}
		stateErr = &skiplock.StateError{Action: action, ID: id, State: state, Allowed: []string{allowed}, Hint: hint}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("fanout: %s job %s: %w", action, id, err)
	}
	return stateErr
}
