package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/workloop"
	"github.com/skiplock/skiplock/retry"
)

// Handler does one job's work inside the transaction that claimed it.
// Whatever it writes through tx commits together with the job's removal, or
// not at all. It must not commit or roll back tx (both return an error and
// change nothing). Returning an error (or
// panicking) rolls everything back and counts a failed attempt.
//
// The handler may run more than once for one job: after a failed attempt,
// and when the engine asks for the transaction to be retried (a
// serialization failure), in which case its writes were rolled back first.
// Effects outside the database therefore happen at least once, not exactly
// once.
type Handler func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error

// Result says what one Process call did.
type Result struct {
	// Job is the job claimed by the last transaction attempt; nil when the
	// queue had no unlocked job.
	Job *skiplock.Job
	// HandlerErr is the handler's error (a *skiplock.PanicError, with its
	// stack, for a panic) when the job failed. The job's work was rolled
	// back and the attempt recorded; nil when the job was processed and
	// deleted.
	HandlerErr error
	// Dead is true when that failure used the job's last attempt: the job
	// is now in job_dead.
	Dead bool
	// Claim is how long the claim statement took in the last transaction
	// attempt (the dequeue latency, BEGIN excluded).
	Claim time.Duration
	// Tries counts transaction attempts: 1 plus retries of serialization
	// failures and lost connections.
	Tries int
}

// errHandlerEndsTx is what a handler gets when it tries to end the
// transaction it was given.
var errHandlerEndsTx = errors.New("fanout: a handler must not commit or roll back its transaction: Process commits it with the job's removal, or rolls it back when the handler returns an error")

// handlerTx is the transaction a handler sees: it runs statements, but
// ending the transaction is Process's business, since the job's removal
// must commit with the handler's work.
type handlerTx struct{ skiplock.Tx }

func (handlerTx) Commit(context.Context) error   { return errHandlerEndsTx }
func (handlerTx) Rollback(context.Context) error { return errHandlerEndsTx }

// handlerError marks an error as the handler's, so that Process can tell
// it from a failure of its own statements. It unwraps, so a serialization
// failure the handler met in its own SQL is still retried by retry.Run.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return "handler: " + e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// Process claims one job of the queue and handles it, in one transaction:
// claim (FOR UPDATE SKIP LOCKED from a random start), h(ctx, tx, job),
// delete, commit. It holds one connection from the pool for the duration.
//
// It returns a zero Result (Job nil) and no error when no unlocked job
// exists. A handler failure is not an error of Process: the transaction is
// rolled back, the attempt recorded in a separate transaction (moving the
// job to job_dead once it has failed max_attempts times), and the Result
// carries the handler's error. Process returns an error when its own
// statements fail for good, when ctx ends, or as *retry.AmbiguousCommitError
// when the commit's outcome is unknown (see the package doc: the job's work
// and its removal committed together or not at all).
func (q *Queue) Process(ctx context.Context, h Handler) (Result, error) {
	return q.process(ctx, q.cfg.Queue, h)
}

// process is Process for the jobs of queue.
func (q *Queue) process(ctx context.Context, queue string, h Handler) (Result, error) {
	if h == nil {
		return Result{}, skiplock.Usagef("fanout: Process needs a handler")
	}
	var res Result
	err := retry.Run(ctx, q.holding, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		res = Result{Tries: res.Tries + 1}
		start := time.Now()
		job, err := q.claim(ctx, tx, queue)
		res.Claim = time.Since(start)
		if err != nil || job == nil {
			return err
		}
		res.Job = job
		if err := workloop.Call(func() error { return h(ctx, handlerTx{tx}, job) }); err != nil {
			return &handlerError{err: err}
		}
		n, err := tx.Exec(ctx, q.sql.del, job.ID)
		if skiplock.SQLState(err) == "25P02" {
			return &handlerError{err: fmt.Errorf("the handler returned no error but left its transaction aborted (it ignored a failed statement): %w", err)}
		}
		if err != nil {
			return err
		}
		if n != 1 {
			// Cannot happen while we hold the row lock; if it does, do
			// not commit the handler's work without the removal.
			return fmt.Errorf("job %s vanished while locked (the delete removed %d rows)", job.ID, n)
		}
		return nil
	})
	var he *handlerError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &he) && ctx.Err() == nil:
		res.HandlerErr = he.err
		dead, ferr := q.recordFailure(ctx, res.Job.ID, he.err)
		res.Dead = dead
		if ferr != nil {
			return res, fmt.Errorf("fanout: job %s failed (%v), and recording the failed attempt failed too: %w", res.Job.ID, he.err, ferr)
		}
		return res, nil
	case errors.As(err, &he):
		// Stopped mid-job (a hard stop): not the job's fault, so no
		// attempt is counted. The rollback put the job back.
		res.HandlerErr = he.err
		return res, fmt.Errorf("fanout: stopped while handling job %s (%v); it is back in the queue", res.Job.ID, ctx.Err())
	}
	return res, fmt.Errorf("fanout: process a job of queue %q: %w", queue, err)
}

// claim locks one job of queue, or returns nil when every job is locked
// or there is none.
func (q *Queue) claim(ctx context.Context, tx skiplock.Tx, queue string) (*skiplock.Job, error) {
	var job *skiplock.Job
	err := each(ctx, tx, q.sql.claim, []any{randomStart(), queue}, func(r skiplock.Rows) error {
		var (
			j              skiplock.Job
			payload        string
			attempts, maxA int32
			lastErr        *string
		)
		if err := r.Scan(&j.ID, &j.Queue, &payload, &attempts, &maxA, &lastErr, &j.CreatedAt); err != nil {
			return err
		}
		j.Payload = json.RawMessage(payload)
		j.Attempts = int(attempts) + 1 // the column counts failures; this claim is one more
		j.MaxAttempts = int(maxA)
		if lastErr != nil {
			j.LastError = *lastErr
		}
		j.Status = skiplock.StatusRunning
		j.RunAt = j.CreatedAt
		job = &j
		return nil
	})
	return job, err
}

// recordFailure counts a failed attempt of job id, after the rollback, and
// moves the job to job_dead when it has used its attempts. It finds the job
// gone when another worker has processed it since, and then does nothing.
//
// The UPDATE waits if another worker claimed the job in the moment since
// the rollback: when that worker commits, the job is gone and nothing is
// counted (it succeeded); when it rolls back, both failures count.
func (q *Queue) recordFailure(ctx context.Context, id string, cause error) (dead bool, err error) {
	msg := errtext.Of(cause)
	err = retry.Run(ctx, q.db, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		dead = false
		found := false
		var attempts, maxA int32
		err := each(ctx, tx, q.sql.fail, []any{id, msg}, func(r skiplock.Rows) error {
			found = true
			return r.Scan(&attempts, &maxA)
		})
		if err != nil || !found || attempts < maxA {
			return err
		}
		n, err := tx.Exec(ctx, q.sql.bury, id)
		dead = n == 1
		return err
	})
	return dead, err
}

// randomStart is a random point in the text UUID key space, where a claim
// starts looking. It need not be a valid UUID, only spread like the keys.
func randomStart() string {
	a, b := rand.Uint64(), rand.Uint64()
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}
