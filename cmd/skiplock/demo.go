package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// demoWork is the built-in handler's work on one attempt, whatever runs
// it: crash on --crash-on-payload, sleep --work, then fail a fraction
// --fail of the attempts (never a job's last: --fail alone kills no job),
// retried after --retry-backoff when it is set.
func demoWork(ctx context.Context, e *env, o workOptions, job *skiplock.Job) error {
	crashOn(e, o.CrashOn, job)
	if err := retry.Sleep(ctx, o.Work); err != nil {
		return err
	}
	if o.Fail <= 0 || job.Attempts >= job.MaxAttempts || rand.Float64() >= o.Fail {
		return nil
	}
	err := fmt.Errorf("demo handler: simulated failure of attempt %d of %d of job %s (--fail %g fails that fraction of attempts, never a job's last)",
		job.Attempts, job.MaxAttempts, job.ID, o.Fail)
	if o.RetryBackoff > 0 {
		return skiplock.RetryAfter(err, o.RetryBackoff)
	}
	return err
}

// recorder writes --record's rows: one per completed job into
// <schema>.work_log, always through the transaction that completes the
// job, so that a row commits exactly when the job's Success does.
type recorder struct {
	one, many string // INSERT of one row; of arrays of ids and owners
	prefix    string // host:pid:, before a fanout worker's index
}

// newRecorder prepares --record's statements for schemaName.
func newRecorder(schemaName string) *recorder {
	table := skiplock.QuoteIdent(schemaName) + "." + skiplock.QuoteIdent(schema.WorkLogTable)
	host, _ := os.Hostname()
	return &recorder{
		one:    "INSERT INTO " + table + ` ("job_id", "worker") VALUES ($1, $2)`,
		many:   "INSERT INTO " + table + ` ("job_id", "worker") SELECT * FROM unnest($1::TEXT[], $2::TEXT[])`,
		prefix: host + ":" + strconv.Itoa(os.Getpid()) + ":",
	}
}

// recordFanout writes the row of a fanout job in its transaction, naming
// the worker goroutine that ran it.
func (w *recorder) recordFanout(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
	n, _ := fanout.WorkerIndex(ctx)
	if _, err := tx.Exec(ctx, w.one, job.ID, w.prefix+strconv.Itoa(n)); err != nil {
		return fmt.Errorf("record to %s: %w", schema.WorkLogTable, err)
	}
	return nil
}

// recordBucketed writes the rows of bucketed jobs in their completion's
// transaction (an OnComplete hook), naming each job's lease owner.
func (w *recorder) recordBucketed(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
	ids, owners := make([]string, len(done)), make([]string, len(done))
	for i, j := range done {
		ids[i], owners[i] = j.ID, j.LeaseOwner
	}
	if _, err := tx.Exec(ctx, w.many, ids, owners); err != nil {
		return fmt.Errorf("record to %s: %w", schema.WorkLogTable, err)
	}
	return nil
}
