package bucketed

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/retry"
)

// MaxErrorText bounds last_error, in bytes: longer error text is cut at a
// character boundary.
const MaxErrorText = errtext.MaxBytes

// leaseArgs turns jobs into the fence's id and token arrays, sorted by id
// so that concurrent batches (a heartbeat and a completion, say) lock
// shared rows in the same order and do not deadlock.
func leaseArgs(jobs []*skiplock.Job) ([]int64, []int64, error) {
	type lease struct{ id, token int64 }
	ls := make([]lease, len(jobs))
	for i, j := range jobs {
		id, err := JobID(j)
		if err != nil {
			return nil, nil, err
		}
		ls[i] = lease{id, j.LeaseToken}
	}
	slices.SortFunc(ls, func(a, b lease) int { return cmp.Compare(a.id, b.id) })
	ids, tokens := make([]int64, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.id, l.token
	}
	return ids, tokens, nil
}

// lostJobs returns the jobs whose id is not in done.
func lostJobs(jobs []*skiplock.Job, done []int64) []*skiplock.Job {
	got := make(map[int64]bool, len(done))
	for _, id := range done {
		got[id] = true
	}
	var lost []*skiplock.Job
	for _, j := range jobs {
		if id, _ := JobID(j); !got[id] {
			lost = append(lost, j)
		}
	}
	return lost
}

// one turns a batch call on one job into ErrLeaseLost.
func one(lost []*skiplock.Job, err error) error {
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return skiplock.ErrLeaseLost
	}
	return nil
}

// Complete marks a leased job Success (or deletes it, with
// Config.DeleteCompleted). It returns skiplock.ErrLeaseLost,
// and changes nothing, when the job is no longer Running under the job's
// lease token.
func (q *Queue) Complete(ctx context.Context, job *skiplock.Job) error {
	return one(q.CompleteMany(ctx, []*skiplock.Job{job}))
}

// CompleteMany marks leased jobs Success (or deletes them, with
// Config.DeleteCompleted) in one statement and returns the ones whose
// lease was lost (left unchanged). An ambiguous commit is resolved from
// the data: a lease that shows Success under its own token completed (a
// job gone, where completions delete). When the database rejects some
// jobs' data, the others are still completed and the error is a
// *BatchError naming the rejected ones.
func (q *Queue) CompleteMany(ctx context.Context, jobs []*skiplock.Job) (lost []*skiplock.Job, err error) {
	return q.CompleteManyWith(ctx, jobs, nil)
}

// CompleteManyWith is CompleteMany that also runs also(ctx, tx, done) in
// the completion's transaction with the jobs that did complete, so that a
// handler's effects (a results table, an outbox row) commit exactly when
// the completion does. also may run more than once (retries); it must
// only use tx. When the database rejects the data of the batch (also's
// included), it completes each half on its own, down to single jobs: the
// error is then a *BatchError naming the jobs it rejected, and the other
// jobs completed.
func (q *Queue) CompleteManyWith(ctx context.Context, jobs []*skiplock.Job, also func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error) ([]*skiplock.Job, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	return splitWrite("complete", jobs, self, func(jobs []*skiplock.Job) ([]*skiplock.Job, error) {
		return q.completeBatch(ctx, jobs, also)
	})
}

// completeBatch is CompleteManyWith's one transaction.
func (q *Queue) completeBatch(ctx context.Context, jobs []*skiplock.Job, also func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error) ([]*skiplock.Job, error) {
	ids, tokens, err := leaseArgs(jobs)
	if err != nil {
		return nil, err
	}
	var done []int64
	byID := make(map[int64]*skiplock.Job, len(jobs))
	for _, j := range jobs {
		id, _ := JobID(j)
		byID[id] = j
	}
	withDeps := leaseSplit{deps: map[int64]bool{}}
	for _, id := range withDependents(jobs) {
		withDeps.deps[id] = true
	}
	// also runs the caller's statements in the transaction: those keep
	// the server's plan choice.
	runTx := q.runGeneric
	if also != nil {
		runTx = q.run
	}
	run := func(ids, tokens []int64) error {
		return runTx(ctx, func(ctx context.Context, tx skiplock.Tx) error {
			var err error
			if done, err = q.completeIn(ctx, tx, ids, tokens, withDeps, also == nil); err != nil || also == nil || len(done) == 0 {
				return err
			}
			dj := make([]*skiplock.Job, len(done))
			for i, id := range done {
				dj[i] = byID[id]
			}
			return also(ctx, tx, dj)
		})
	}
	// An ambiguous commit is resolved from the data: leases showing
	// Success under their own token completed; the rest are sent again
	// (the fence makes that safe), up to ambiguousTries sends in all, rather
	// than left Running until their leases lapse and run again.
	var completed []int64
	for sent, pending := 1, jobs; ; sent++ {
		err = run(ids, tokens)
		if err == nil {
			completed = append(completed, done...)
			break
		}
		if !errors.As(err, new(*retry.AmbiguousCommitError)) || sent == ambiguousTries {
			break
		}
		var ok []int64
		if ok, err = q.completedOf(ctx, ids, tokens, withDeps); err != nil {
			break
		}
		completed = append(completed, ok...)
		if pending = lostJobs(pending, ok); len(pending) == 0 {
			break
		}
		ids, tokens, _ = leaseArgs(pending) // checked above
	}
	if err != nil {
		return nil, fmt.Errorf("bucketed: complete %d job(s): %w", len(jobs), err)
	}
	return lostJobs(jobs, completed), nil
}

// leaseSplit sorts a completion's leases into those of jobs with
// dependents (deps), which a workflow's completion must keep as Success
// (completeKept) and settle, and the others.
type leaseSplit struct {
	deps map[int64]bool
}

// byStatement runs plainSQL over the leases of ids and tokens that
// completions may delete, and keptSQL over the others: those of jobs with
// dependents, and every lease unless completions delete
// (Config.DeleteCompleted). It returns each statement's ids.
func (l leaseSplit) byStatement(ctx context.Context, q *Queue, db skiplock.Querier, plainSQL, keptSQL string, ids, tokens []int64) (plain, kept []int64, err error) {
	var keptIDs, keptTokens, plainIDs, plainTokens []int64
	for i, id := range ids {
		if l.deps[id] || !q.cfg.DeleteCompleted {
			keptIDs, keptTokens = append(keptIDs, id), append(keptTokens, tokens[i])
		} else {
			plainIDs, plainTokens = append(plainIDs, id), append(plainTokens, tokens[i])
		}
	}
	if len(plainIDs) > 0 {
		if plain, err = queryrows.Int64s(ctx, db, plainSQL, plainIDs, plainTokens); err != nil {
			return nil, nil, err
		}
	}
	kept, err = queryrows.Int64s(ctx, db, keptSQL, keptIDs, keptTokens)
	return plain, kept, err
}

// completeIn writes Success for the leases ids and tokens in tx, then
// settles the dependents of the jobs with dependents that it completed
// (settle): a dependency's completion and its dependents' release commit
// together. last: nothing follows in tx, so a completion with no
// dependents to settle travels with the commit (one round trip).
func (q *Queue) completeIn(ctx context.Context, tx skiplock.Tx, ids, tokens []int64, l leaseSplit, last bool) ([]int64, error) {
	if len(l.deps) == 0 {
		if last {
			ctx = txhook.Last(ctx)
		}
		return queryrows.Int64s(ctx, tx, q.sql.complete, ids, tokens)
	}
	done, kept, err := l.byStatement(ctx, q, tx, q.sql.complete, q.sql.completeKept, ids, tokens)
	if err != nil {
		return nil, err
	}
	done = append(done, kept...)
	var settle []int64
	for _, id := range kept {
		if l.deps[id] {
			settle = append(settle, id)
		}
	}
	if err := q.settle(ctx, tx, settle, nil); err != nil {
		return nil, err
	}
	return done, nil
}

// completedOf asks, after an ambiguous commit of completeIn, which of
// its leases did complete.
func (q *Queue) completedOf(ctx context.Context, ids, tokens []int64, l leaseSplit) ([]int64, error) {
	if len(l.deps) == 0 {
		return queryrows.Int64s(ctx, q.db, q.sql.completedWith, ids, tokens)
	}
	ok, kept, err := l.byStatement(ctx, q, q.db, q.sql.completedWith, q.sql.completedWithKept, ids, tokens)
	return append(ok, kept...), err
}

// Failure is one failed attempt for FailMany.
type Failure struct {
	Job *skiplock.Job
	// Err is the attempt's error; its text is kept in last_error.
	Err error
}

// Fail records a failed attempt of a leased job. The job is Queued again
// to run after an exponential backoff with jitter (Config.RetryBase
// doubling per attempt, at most Config.RetryMax), or, when its attempts
// have reached max_attempts, Failed: the dead state; or Canceled at once
// when cause is a skiplock.Cancel. last_error keeps cause's text either
// way. It returns skiplock.ErrLeaseLost, and changes
// nothing, when the job is no longer Running under its lease token.
func (q *Queue) Fail(ctx context.Context, job *skiplock.Job, cause error) error {
	return one(q.FailMany(ctx, []Failure{{Job: job, Err: cause}}))
}

// FailMany is Fail for a batch, in one statement. It returns the jobs
// whose lease was lost (left unchanged). When the database rejects some
// failures' data, the others are still written and the error is a
// *BatchError naming the rejected jobs.
func (q *Queue) FailMany(ctx context.Context, failures []Failure) ([]*skiplock.Job, error) {
	return q.failMany(ctx, failures, nil)
}

// failMany is FailMany with the backoffs drawn by the caller (a Worker,
// which logs them), parallel to failures; nil draws them here.
func (q *Queue) failMany(ctx context.Context, failures []Failure, backoffs []time.Duration) ([]*skiplock.Job, error) {
	if len(failures) == 0 {
		return nil, nil
	}
	items := make([]delayedFailure, len(failures))
	for i, f := range failures {
		if _, err := JobID(f.Job); err != nil {
			return nil, err
		}
		items[i] = delayedFailure{Failure: f}
		if backoffs != nil {
			items[i].delay = backoffs[i]
		} else {
			items[i].delay = q.retryIn(f)
		}
	}
	return splitWrite("fail", items, func(f delayedFailure) *skiplock.Job { return f.Job }, func(items []delayedFailure) ([]*skiplock.Job, error) {
		return q.failBatch(ctx, items)
	})
}

// delayedFailure is a failure with the backoff before its retry.
type delayedFailure struct {
	Failure
	delay time.Duration
}

// failBatch is FailMany's one statement.
func (q *Queue) failBatch(ctx context.Context, failures []delayedFailure) ([]*skiplock.Job, error) {
	// In id order, as leaseArgs sorts, so the arrays stay parallel.
	sorted := slices.Clone(failures)
	slices.SortStableFunc(sorted, func(a, b delayedFailure) int {
		x, _ := JobID(a.Job)
		y, _ := JobID(b.Job)
		return cmp.Compare(x, y)
	})
	jobs := make([]*skiplock.Job, len(sorted))
	texts, delays, cancels := make([]string, len(sorted)), make([]float64, len(sorted)), make([]bool, len(sorted))
	for i, f := range sorted {
		jobs[i] = f.Job
		texts[i] = errtext.Of(f.Err)
		delays[i] = f.delay.Seconds()
		cancels[i] = skiplock.IsCancel(f.Err)
	}
	ids, tokens, err := leaseArgs(jobs)
	if err != nil {
		return nil, err
	}
	// Their dependents are settled in the same transaction.
	ends := endsWithDependents(jobs, ids, cancels)
	var done []int64
	err = q.runFenced(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		var err error
		fctx := ctx
		if len(ends) == 0 {
			fctx = txhook.Last(ctx) // one round trip: nothing follows
		}
		if done, err = queryrows.Int64s(fctx, tx, q.sql.fail, ids, tokens, texts, delays, cancels); err != nil || len(ends) == 0 {
			return err
		}
		err = q.settle(ctx, tx, nil, intersect(ends, done))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bucketed: fail %d job(s): %w", len(jobs), err)
	}
	return lostJobs(jobs, done), nil
}

// retryIn is the wait before a failed job's next attempt: what its error
// asks for (skiplock.RetryAfter, a retry policy), else the backoff.
func (q *Queue) retryIn(f Failure) time.Duration {
	if d, ok := skiplock.RetryDelay(f.Err); ok {
		return d
	}
	return q.backoff(f.Job.Attempts)
}

// backoff is the wait before retrying after the attempts-th failure:
// RetryBase*2^(attempts-1) capped at RetryMax, drawn from its upper half
// (jitter that spreads retries without ever making them immediate).
func (q *Queue) backoff(attempts int) time.Duration {
	d := q.cfg.RetryBase << min(max(attempts-1, 0), 40)
	if d <= 0 || d > q.cfg.RetryMax {
		d = q.cfg.RetryMax
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Cancel marks a leased job Canceled: it will not run again. It returns
// skiplock.ErrLeaseLost, and changes nothing, when the job is no longer
// Running under its lease token.
func (q *Queue) Cancel(ctx context.Context, job *skiplock.Job) error {
	return one(q.fenced(ctx, "cancel", q.sql.cancel, endsJobs, []*skiplock.Job{job}))
}

// Release gives a leased job back: Queued at once, this attempt not
// counted. Workers release the jobs they claimed but did not start when
// they shut down.
func (q *Queue) Release(ctx context.Context, job *skiplock.Job) error {
	return one(q.ReleaseMany(ctx, []*skiplock.Job{job}))
}

// ReleaseMany is Release for a batch; it returns the jobs whose lease was
// already lost. Jobs the database rejects are named by a *BatchError; the
// others are released.
func (q *Queue) ReleaseMany(ctx context.Context, jobs []*skiplock.Job) ([]*skiplock.Job, error) {
	lost, err := q.fenced(ctx, "release", q.sql.release, keepsJobs, jobs)
	// A released job keeps its place in the order, before this process's
	// watermarks: the next claim looks for it from the heads.
	for _, j := range jobs {
		q.hints.ProbeSoon(j.Queue)
	}
	return lost, err
}

// SnoozeMany gives leased jobs back to run after d, their attempt not
// counted and their metadata's "snoozes" count raised (what a handler's
// skiplock.Snooze asks for). It returns the jobs whose lease was lost
// (left unchanged).
func (q *Queue) SnoozeMany(ctx context.Context, jobs []*skiplock.Job, d time.Duration) ([]*skiplock.Job, error) {
	lost, err := q.fenced(ctx, "snooze", q.sql.snooze, keepsJobs, jobs, max(d, 0).Seconds())
	for _, j := range jobs {
		q.hints.ProbeSoon(j.Queue) // a better priority than the watermark's may be back
	}
	return lost, err
}

// Whether a fenced write ends its jobs (fenced's ends): a job that ends
// settles its workflow dependents in the same transaction.
const (
	keepsJobs = false
	endsJobs  = true
)

// fenced runs a fenced write over jobs, split when the database rejects
// some jobs' data (see BatchError); ends says whether it ends them.
func (q *Queue) fenced(ctx context.Context, what, sql string, ends bool, jobs []*skiplock.Job, extra ...any) ([]*skiplock.Job, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	for _, j := range jobs {
		if _, err := JobID(j); err != nil {
			return nil, err
		}
	}
	return splitWrite(what, jobs, self, func(jobs []*skiplock.Job) ([]*skiplock.Job, error) {
		return q.fencedBatch(ctx, what, sql, ends, jobs, extra...)
	})
}

// fencedBatch is fenced's one statement.
func (q *Queue) fencedBatch(ctx context.Context, what, sql string, endsThem bool, jobs []*skiplock.Job, extra ...any) ([]*skiplock.Job, error) {
	ids, tokens, err := leaseArgs(jobs)
	if err != nil {
		return nil, err
	}
	var ends []int64 // the ended jobs that have dependents
	if endsThem {
		ends = withDependents(jobs)
	}
	var done []int64
	err = q.runFenced(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		var err error
		sctx := ctx
		if len(ends) == 0 {
			sctx = txhook.Last(ctx) // one round trip: nothing follows
		}
		if done, err = queryrows.Int64s(sctx, tx, sql, append([]any{ids, tokens}, extra...)...); err != nil || len(ends) == 0 {
			return err
		}
		err = q.settle(ctx, tx, nil, intersect(ends, done))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bucketed: %s %d job(s): %w", what, len(jobs), err)
	}
	return lostJobs(jobs, done), nil
}

// runFenced runs a lease-fenced write's transaction, and runs it again
// while its commit's outcome is unknown (an ambiguous commit), up to
// ambiguousTries runs: the fence makes a later run change nothing for the
// jobs an earlier commit changed (they read as lost then), and apply
// where that commit rolled back, instead of leaving those jobs Running
// until their leases lapse.
func (q *Queue) runFenced(ctx context.Context, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	return rerunAmbiguous(ambiguousTries, func() error { return q.runGeneric(ctx, fn) })
}

// Extend is the heartbeat: the job's lease now ends d from now (d <= 0
// means the visibility timeout), and job.LeaseExpiresAt says when. It
// returns skiplock.ErrLeaseLost when the job is no longer Running under
// its lease token: the worker should stop and drop the job.
func (q *Queue) Extend(ctx context.Context, job *skiplock.Job, d time.Duration) error {
	if d <= 0 {
		d = q.cfg.VisibilityTimeout
	}
	id, err := JobID(job)
	if err != nil {
		return err
	}
	var until *time.Time
	err = q.runGeneric(ctx, func(ctx context.Context, tx skiplock.Tx) error {
		until = nil
		rows, err := tx.Query(txhook.Last(ctx), q.sql.extend, []int64{id}, []int64{job.LeaseToken}, d.Seconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var got int64
			var t time.Time
			if err := rows.Scan(&got, &t); err != nil {
				return err
			}
			until = &t
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("bucketed: extend lease of job %d: %w", id, err)
	}
	if until == nil {
		return skiplock.ErrLeaseLost
	}
	job.LeaseExpiresAt = *until
	return nil
}

// ExtendMany extends the leases of jobs by d (<= 0: the visibility
// timeout) in one statement, without touching the Job values, and returns
// the jobs whose lease was lost. Jobs the database rejects are named by a
// *BatchError; the others' leases are extended.
func (q *Queue) ExtendMany(ctx context.Context, jobs []*skiplock.Job, d time.Duration) ([]*skiplock.Job, error) {
	if d <= 0 {
		d = q.cfg.VisibilityTimeout
	}
	return q.fenced(ctx, "extend", q.sql.extendIDs, keepsJobs, jobs, d.Seconds())
}

// RecordOutput stores output (JSON, at most skiplock.MaxOutputBytes) as
// the output of job, which this worker holds leased: JobGet, `skiplock
// jobs show` and the dashboard show it. Recorded again, the later output
// replaces the earlier; a failed attempt's output stays until a later
// attempt records its own. It returns skiplock.ErrLeaseLost when the
// lease is no longer the worker's, and a usage error for bad output.
func (q *Queue) RecordOutput(ctx context.Context, job *skiplock.Job, output json.RawMessage) error {
	return q.record(ctx, job, "output", output, nil)
}

// ReportProgress stores progress (JSON, at most skiplock.MaxOutputBytes)
// as the progress of job, which this worker holds leased, replacing what
// was reported before. Each call is one statement: report as often as a
// reader needs, not at every step of a loop. Errors as RecordOutput's.
func (q *Queue) ReportProgress(ctx context.Context, job *skiplock.Job, progress json.RawMessage) error {
	return q.record(ctx, job, "progress", nil, progress)
}

// ambiguousTries is how many times a worker's write of its own jobs (a
// completion, a recorded output or progress) is sent when each commit's
// outcome is unknown (an ambiguous commit) before it returns the error.
const ambiguousTries = 10

// record writes a running job's output or progress (record).
func (q *Queue) record(ctx context.Context, job *skiplock.Job, what string, output, progress json.RawMessage) error {
	v := output
	if v == nil {
		v = progress
	}
	if err := skiplock.CheckOutput(what, v); err != nil {
		return err
	}
	id, err := JobID(job)
	if err != nil {
		return err
	}
	var text [2]*string
	for i, v := range []json.RawMessage{output, progress} {
		if v != nil {
			s := string(v)
			text[i] = &s
		}
	}
	var n int
	write := func(ctx context.Context, tx skiplock.Tx) error {
		ids, err := queryrows.Int64s(txhook.Last(ctx), tx, q.sql.record, id, job.LeaseToken, text[0], text[1])
		n = len(ids)
		return err
	}
	// The write is idempotent (the same value under the same lease): after
	// an ambiguous commit it is sent again, rather than the handler told
	// that its output may or may not be recorded.
	err = rerunAmbiguous(ambiguousTries, func() error { return q.runGeneric(ctx, write) })
	if err != nil {
		return fmt.Errorf("bucketed: record the %s of job %s: %w", what, job.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("bucketed: record the %s of job %s: %w", what, job.ID, skiplock.ErrLeaseLost)
	}
	return nil
}
