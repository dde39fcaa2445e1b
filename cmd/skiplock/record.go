package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
)

// recorder writes the rows that let anyone check a work run with SQL.
// --record: one row per completed job into <schema>.work_log, always
// through the transaction that completes the job, so that a row commits
// exactly when the job's Success does; it carries the completing
// attempt's handler start and end. --record-attempts: one row per attempt
// into <schema>.work_attempt_log, written outside the job's transaction
// when the handler starts and finished when it returns, so that an attempt
// that failed, or whose worker died, is there too.
type recorder struct {
	one, many string // INSERT of one work_log row; of arrays of them
	prefix    string // host:pid:, before a fanout worker's index
	// spans holds, by job id, the handler's start and end of the last
	// attempt here that returned nil, for its work_log row: read, not
	// taken, since a completion's transaction may run again (a retried
	// serialization failure) and write the row again. Entries older than
	// spanKeep go once the map passes sweepAt entries (keep).
	spans      sync.Map
	spanCount  atomic.Int64
	spanSweeps atomic.Int64 // the count at which the next sweep runs
	// attempts writes work_attempt_log rows; nil without --record-attempts.
	attempts *attemptLog
}

// span is an attempt's handler start and end, on this worker's clock.
type span struct{ started, finished time.Time }

// times are the span's ends as SQL values: NULL for a span never taken.
func (s span) times() (started, finished *time.Time) {
	if s.started.IsZero() {
		return nil, nil
	}
	return &s.started, &s.finished
}

// attemptLog writes work_attempt_log rows over a pool of its own, so that
// they neither wait for the workers' connections nor join a job's
// transaction.
type attemptLog struct {
	db             *skiplock.DB
	insert, finish string
}

// The outcomes an attempt's row records.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomePanicked  = "panicked"
	outcomeCanceled  = "canceled"
)

// attemptLogConns bounds the attempt log's pool: its statements are short.
const attemptLogConns = 16

// newRecorder prepares the work run's recording: the work_log statements,
// and with o.RecordAttempts a pool for work_attempt_log. close releases it.
func newRecorder(ctx context.Context, e *env, o workOptions) (*recorder, error) {
	table := sqlident.Quote(o.Schema) + "." + sqlident.Quote(schema.WorkLogTable)
	host, _ := os.Hostname()
	w := &recorder{
		one:    "INSERT INTO " + table + ` ("job_id", "worker", "started_at", "finished_at") VALUES ($1, $2, $3, $4)`,
		many:   "INSERT INTO " + table + ` ("job_id", "worker", "started_at", "finished_at") SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TIMESTAMPTZ[], $4::TIMESTAMPTZ[])`,
		prefix: host + ":" + strconv.Itoa(os.Getpid()) + ":",
	}
	if !o.RecordAttempts {
		return w, nil
	}
	dsn, err := e.resolveDSN(ctx)
	if err != nil {
		return nil, err
	}
	oc, err := e.openConfig(int32(min(max(o.Workers, 2), attemptLogConns)))
	if err != nil {
		return nil, err
	}
	db, err := skiplock.Open(ctx, dsn, oc)
	if err != nil {
		return nil, fmt.Errorf("--record-attempts: %w", err)
	}
	attempts := sqlident.Quote(o.Schema) + "." + sqlident.Quote(schema.WorkAttemptLogTable)
	w.attempts = &attemptLog{
		db:     db,
		insert: "INSERT INTO " + attempts + ` ("id", "job_id", "attempt", "worker", "started_at") VALUES ($1, $2, $3, $4, $5)`,
		finish: "UPDATE " + attempts + ` SET "finished_at" = $2, "outcome" = $3 WHERE "id" = $1`,
	}
	return w, nil
}

// close releases the attempt log's pool.
func (w *recorder) close() {
	if w.attempts != nil {
		w.attempts.db.Close()
	}
}

// run runs one attempt of job (fn) and records it: its work_attempt_log
// row first, committed on its own before fn runs (a row that cannot be
// written fails the attempt, unrun, so that no attempt runs unrecorded),
// then its end and outcome; and the span of an attempt that returned nil,
// for the job's work_log row.
func (w *recorder) run(ctx context.Context, job *skiplock.Job, fn func() error) error {
	// One start for both rows, so that a work_log row joins its attempt's.
	started := time.Now()
	id, err := w.attempts.begin(ctx, job, w.workerName(ctx, job), started)
	if err != nil {
		return err
	}
	err = fn()
	finished := time.Now()
	if err == nil {
		w.keep(job.ID, span{started, finished})
	} else if _, ok := w.spans.LoadAndDelete(job.ID); ok {
		w.spanCount.Add(-1)
	}
	w.attempts.end(ctx, id, finished, err)
	return err
}

// workerName names the worker that runs job: a fanout worker goroutine by
// its index, a leased job by its lease owner.
func (w *recorder) workerName(ctx context.Context, job *skiplock.Job) string {
	if n, ok := fanout.WorkerIndex(ctx); ok {
		return w.prefix + strconv.Itoa(n)
	}
	if job.LeaseOwner != "" {
		return job.LeaseOwner
	}
	return w.prefix
}

// begin writes an attempt's row, started at started, and returns its id;
// nothing without --record-attempts.
func (a *attemptLog) begin(ctx context.Context, job *skiplock.Job, worker string, started time.Time) (string, error) {
	if a == nil {
		return "", nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	id := hex.EncodeToString(b[:])
	if _, err := a.db.Exec(ctx, a.insert, id, job.ID, job.Attempts, worker, started); err != nil {
		return "", fmt.Errorf("--record-attempts: record the start of attempt %d of job %s in %s (the handler did not run): %w", job.Attempts, job.ID, schema.WorkAttemptLogTable, err)
	}
	return id, nil
}

// end records an attempt's end and outcome, even after its context ended,
// trying again for up to attemptEndTimeout while the write fails (a
// database restart cuts it); a write that never lands is logged by nobody
// but leaves finished_at null, as a worker that died would.
func (a *attemptLog) end(ctx context.Context, id string, finished time.Time, err error) {
	if a == nil {
		return
	}
	outcome := outcomeSucceeded
	var p demoPanic
	switch {
	case err == nil:
	case errors.As(err, &p):
		outcome = outcomePanicked
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || skiplock.IsCancel(err):
		outcome = outcomeCanceled
	default:
		outcome = outcomeFailed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptEndTimeout)
	defer cancel()
	for {
		if _, err := a.db.Exec(ctx, a.finish, id, finished, outcome); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond): // the UPDATE may run again
		}
	}
}

// attemptEndTimeout bounds how long attemptLog.end keeps trying.
const attemptEndTimeout = 30 * time.Second

// recordFanout writes the row of a fanout job in its transaction, naming
// the worker goroutine that ran it.
func (w *recorder) recordFanout(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
	started, finished := w.span(job.ID).times()
	if _, err := tx.Exec(ctx, w.one, job.ID, w.workerName(ctx, job), started, finished); err != nil {
		return fmt.Errorf("record to %s: %w", schema.WorkLogTable, err)
	}
	return nil
}

// recordBucketed writes the rows of bucketed jobs in their completion's
// transaction (an OnComplete hook), naming each job's lease owner.
func (w *recorder) recordBucketed(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
	n := len(done)
	ids, owners, started, finished := make([]string, n), make([]string, n), make([]*time.Time, n), make([]*time.Time, n)
	for i, j := range done {
		ids[i], owners[i] = j.ID, j.LeaseOwner
		started[i], finished[i] = w.span(j.ID).times()
	}
	if _, err := tx.Exec(ctx, w.many, ids, owners, started, finished); err != nil {
		return fmt.Errorf("record to %s: %w", schema.WorkLogTable, err)
	}
	return nil
}

// span is the span of job's last attempt here that returned nil.
func (w *recorder) span(id string) span {
	s, _ := w.spans.Load(id)
	sp, _ := s.(span)
	return sp
}

// Span bookkeeping: a completion follows its handler within a lease, so
// spans older than spanKeep are no longer read; the map is swept of them
// once it holds more than minSpanSweep entries, and then again at twice
// what the sweep left.
const (
	spanKeep     = 10 * time.Minute
	minSpanSweep = 10000
)

// keep stores job id's span, sweeping old ones when the map has grown.
func (w *recorder) keep(id string, s span) {
	if _, replaced := w.spans.Swap(id, s); replaced {
		return
	}
	n := w.spanCount.Add(1)
	at := w.spanSweeps.Load()
	if n <= max(at, minSpanSweep) || !w.spanSweeps.CompareAndSwap(at, 2*n) {
		return
	}
	cutoff := time.Now().Add(-spanKeep)
	w.spans.Range(func(k, v any) bool {
		if v.(span).finished.Before(cutoff) && w.spans.CompareAndDelete(k, v) {
			w.spanCount.Add(-1)
		}
		return true
	})
	w.spanSweeps.Store(max(2*w.spanCount.Load(), minSpanSweep))
}
