package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// demoWork is the built-in handler's work on one attempt, whatever runs
// it: crash on --crash-on-payload, sleep --work, then panic in a fraction
// --panic of the attempts and fail a fraction --fail of them (never a
// job's last: neither alone kills a job), retried after --retry-backoff
// when it is set.
func demoWork(ctx context.Context, e *env, o workOptions, job *skiplock.Job) error {
	crashOn(e, o.CrashOn, job)
	err := demoOutcome(ctx, o, job)
	o.Runs.note(e, job, err)
	var p demoPanic
	if errors.As(err, &p) {
		// After the note: --runs-log counts the panicked run too.
		panic(string(p))
	}
	return err
}

// demoPanic is an attempt --panic picked: demoWork panics with it.
type demoPanic string

func (p demoPanic) Error() string { return string(p) }

// demoOutcome sleeps --work and decides whether this attempt panics or
// fails.
func demoOutcome(ctx context.Context, o workOptions, job *skiplock.Job) error {
	if err := retry.Sleep(ctx, o.Work); err != nil {
		return err
	}
	if o.Panic > 0 && job.Attempts < job.MaxAttempts && rand.Float64() < o.Panic {
		return demoPanic(fmt.Sprintf("demo handler: simulated panic in attempt %d of %d of job %s (--panic %g panics in that fraction of attempts, never a job's last)",
			job.Attempts, job.MaxAttempts, job.ID, o.Panic))
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

// runsLog is --runs-log: a file that gets one line per handler run,
// "<job id> <attempt> ok|failed", so that a test counts every run of every
// process, killed ones included, against what the database recorded.
type runsLog struct {
	f *os.File
}

// openRunsLog opens path for appending, creating it.
func openRunsLog(path string) (*runsLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--runs-log: %w", err)
	}
	return &runsLog{f: f}, nil
}

// note appends one run's line; on a nil log it does nothing. One write per
// line: O_APPEND keeps the lines of concurrent writers and processes whole.
func (r *runsLog) note(e *env, job *skiplock.Job, err error) {
	if r == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	if _, werr := r.f.WriteString(job.ID + " " + strconv.Itoa(job.Attempts) + " " + outcome + "\n"); werr != nil {
		e.logf("--runs-log: %v", werr)
	}
}

// close closes the file.
func (r *runsLog) close() { r.f.Close() } //nolint:errcheck // appends are unbuffered: nothing is lost at close

// recorder writes --record's rows: one per completed job into
// <schema>.work_log, always through the transaction that completes the
// job, so that a row commits exactly when the job's Success does.
type recorder struct {
	one, many string // INSERT of one row; of arrays of ids and owners
	prefix    string // host:pid:, before a fanout worker's index
}

// newRecorder prepares --record's statements for schemaName.
func newRecorder(schemaName string) *recorder {
	table := sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.WorkLogTable)
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
