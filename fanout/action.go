package fanout

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// LookupJob reads one job by id, for tools and tests: a pending job from
// job_queue (Status Queued, whether or not a worker is running it, which a
// read without locks cannot tell; Attempts counts the attempts started,
// a running one included; RunAt is its creation time, or, once an attempt
// has started, the end of the backoff that attempt's failure sets), or a
// dead one from job_dead (Status Failed, cancelled jobs included: their
// LastError says so). The id may
// belong to any queue of the schema. It returns an error wrapping
// skiplock.ErrNoJob when no job has the id (a job that succeeded left no
// row), and a usage error when the id is not a fanout job id.
func (q *Queue) LookupJob(ctx context.Context, id string) (*skiplock.Job, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, q.sql.lookup, id)
	if err != nil {
		return nil, fmt.Errorf("fanout: lookup %s: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("fanout: lookup %s: %w", id, err)
		}
		return nil, fmt.Errorf("%w: id %s", skiplock.ErrNoJob, id)
	}
	var (
		counted *int64
		retryAt *time.Time
		dead    bool
	)
	j, err := scanJob(rows, nil, &counted, &retryAt, &dead)
	if err != nil {
		return nil, fmt.Errorf("fanout: lookup %s: %w", id, err)
	}
	j.Attempts-- // scanJob counts the attempt a claim is starting
	if dead {
		j.Status = skiplock.StatusFailed
		return j, nil
	}
	j.Status = skiplock.StatusQueued
	if counted != nil {
		j.Attempts = max(j.Attempts, int(*counted))
	}
	if retryAt != nil {
		j.RunAt = *retryAt
	}
	return j, nil
}

// checkID refuses text that no fanout job id has: ids are 32 hex digits
// (schema.FanoutIDDefault), or UUIDs for jobs enqueued before those.
func checkID(id string) error {
	hex := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789abcdefABCDEF") == ""
	}
	ok := len(id) == 32 && hex(id)
	if p := strings.Split(id, "-"); len(id) == 36 && len(p) == 5 {
		ok = len(p[0]) == 8 && len(p[1]) == 4 && len(p[2]) == 4 && len(p[3]) == 4 && len(p[4]) == 12 &&
			hex(p[0]) && hex(p[1]) && hex(p[2]) && hex(p[3]) && hex(p[4])
	}
	if !ok {
		return usage.Errorf("job id %q is not a fanout job id (32 hex digits, or a UUID)", id)
	}
	return nil
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
	if err = retry.Refused(err, stateErr); err == nil || err == stateErr {
		return err
	}
	return fmt.Errorf("fanout: %s job %s: %w", action, id, err)
}
