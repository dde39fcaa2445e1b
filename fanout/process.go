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
	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
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
	// stack, for a panic) when the job failed. The job's work was rolled back and the
	// attempt recorded; nil when the job was processed and deleted.
	// It wraps ErrWorkerDied when the job was moved to job_dead without
	// running (see Dead).
	HandlerErr error
	// Dead is true when that failure used the job's last attempt, or the
	// job's attempts were already used up by workers that died (then
	// HandlerErr wraps ErrWorkerDied and the handler did not run), or the
	// handler cancelled the job (Cancelled): the job is now in job_dead.
	Dead bool
	// Cancelled is true when the handler returned skiplock.Cancel: its
	// work was rolled back, its attempt counted, and the job moved to
	// job_dead at once, whatever attempts it had left (Dead is set too).
	Cancelled bool
	// RetryIn is the backoff a recorded failure set when the job has
	// attempts left, or a snooze's delay: no claim takes the job before it
	// ends. 0 otherwise.
	RetryIn time.Duration
	// Snoozed is true when the handler returned skiplock.Snooze: its work
	// was rolled back, its attempt given back, and the job waits RetryIn
	// (HandlerErr is nil).
	Snoozed bool
	// Claim is how long the claim statement took in the last transaction
	// attempt (the dequeue latency, BEGIN excluded).
	Claim time.Duration
	// Started is when Process began (before its first transaction), and
	// Claimed when the last attempt's claim returned the job: after a
	// completed Process, time.Since(Started) is the job's latency from
	// request to committed removal.
	Started, Claimed time.Time
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

// ErrWorkerDied is the error in Result.HandlerErr (wrapped) when a job
// was moved to job_dead without running: its attempts were used up,
// the last one by a worker that recorded no result, because its process
// died, was killed or lost its connection mid-job (or stalled until
// another worker took the job over). The dead row's last_error says so.
var ErrWorkerDied = errors.New("fanout: the job's last attempt ended without a recorded result: its worker died, was killed or lost its connection mid-job")

// exactAttempts: a claim reads the job's count so far in its statement's
// snapshot, which can predate a count that committed just before the
// claim locked the job (an attempt that failed in that moment; READ
// COMMITTED takes the snapshot at the statement's start). The attempt
// about to start is then one later than the claim says. An attempt whose
// number as read is within exactAttempts of max_attempts therefore waits
// for its count's answer before its handler runs, so that the last two
// attempts run with their true number and none runs past max_attempts;
// earlier ones run while their count travels, and their handler's
// Job.Attempts can read one low in that race (the count stored is exact).
const exactAttempts = 2

// giveBackTimeout bounds the statement that takes back an attempt's count
// after a hard stop or before a transaction retry.
const giveBackTimeout = 10 * time.Second

// Process claims one job of the queue and handles it, in one transaction:
// claim (FOR UPDATE SKIP LOCKED from the shards' watermarks, stepping over
// jobs waiting out a backoff), count the attempt in job_attempt (a separate
// autocommit statement, so the count survives a rollback or a dead
// worker), h(ctx, tx, job), delete, commit. It holds one connection from
// the pool for the duration and briefly takes a second one for the
// count; a Worker counts through a connection of its own instead.
//
// It returns a zero Result (Job nil) and no error when no unlocked job is
// ready. A handler failure is not an error of Process: the transaction is
// rolled back, the failure recorded in a separate transaction (moving the
// job to job_dead once it has used max_attempts attempts, otherwise
// setting its backoff), and the Result carries the handler's error. A job
// whose count exceeds its max_attempts (its last attempt's worker died) is
// moved to job_dead without running, with Dead set and HandlerErr
// wrapping ErrWorkerDied. Process returns an error when its own statements
// fail for good, when ctx ends, or as *retry.AmbiguousCommitError when the
// commit's outcome is unknown and the data does not show that it
// committed (see the package doc: the job's work and its removal
// committed together or not at all).
func (q *Queue) Process(ctx context.Context, h Handler) (Result, error) {
	return q.process(ctx, q.cfg.Queue, h, poolCounter{q}, nil)
}

// process is Process for the jobs of queue, counting attempts through c.
// With ch, a Worker goroutine's, its claim begins in the transaction the
// last job's removal chained (if any), and its removal chains the next.
func (q *Queue) process(ctx context.Context, queue string, h Handler, c counter, ch *chain) (Result, error) {
	if h == nil {
		return Result{}, usage.Errorf("fanout: Process needs a handler")
	}
	res := Result{Started: time.Now()}
	// The queue's limits before the transaction begins: a first read of
	// them waits, and must wait holding no connection (the transaction
	// holds one, and the read needs another from the same pool) and in no
	// transaction whose snapshot a statement has fixed (at SERIALIZABLE or
	// REPEATABLE READ its claim would read the limit as it was before).
	q.limitsOf(ctx, queue)
	var count *counting   // the last attempt's count, on its way
	var elsewhere []int32 // slots a claim found held by other processes
	claimed := func(ctx context.Context, tx skiplock.Tx) (err error) {
		res = Result{Tries: res.Tries + 1, Started: res.Started}
		count = nil
		start := time.Now()
		var job *skiplock.Job
		plan, ok := ch.take()
		if ok {
			job, err = q.claimFrom(ctx, tx, queue, plan)
		} else {
			job, plan, err = q.claim(ctx, tx, queue, ch.lastSlot(), elsewhere)
		}
		ch.keepSlot(&plan, job != nil)
		res.Claimed = time.Now()
		res.Claim = res.Claimed.Sub(start)
		if err == nil && job == nil && plan.limited {
			return q.slotElsewhere(ctx, tx, queue, plan.slot, &elsewhere)
		}
		if err != nil || job == nil {
			return err
		}
		// A Worker's idle goroutines need not wait for this job's handler:
		// the polling passes on now.
		workloop.Found(ctx)
		if plan.limited {
			q.holdSlot(queue, plan.slot)
			defer q.freeSlot(queue, plan.slot)
		}
		res.Job = job
		defer func() {
			if err != nil && (!errors.As(err, new(*handlerError)) || ctx.Err() != nil || retry.Classify(err) == retry.Retryable) {
				// The job goes back at once, below this Queue's
				// watermark: the next claim probes the heads. (A failed
				// attempt waits out its backoff first: ProbeBy below.)
				q.marks.ProbeSoon(queue)
			}
		}()
		// The count goes out before the handler runs and is answered while
		// it runs: off the job's path, yet sent by a worker that the
		// handler kills. job.Attempts is the attempt about to start, as
		// the claim read the count so far.
		if count, err = q.countAhead(ctx, c, job.ID); err != nil {
			return fmt.Errorf("count attempt of job %s before its handler runs: %w", job.ID, err)
		}
		if job.Attempts >= job.MaxAttempts-exactAttempts {
			// The last attempts wait for their count (see exactAttempts):
			// no attempt may run past max_attempts (past it, the last
			// attempt's worker died: the job goes to job_dead without
			// running), and the handler of the last ones sees their true
			// number.
			n, err := count.wait()
			if err != nil {
				return fmt.Errorf("count attempt of job %s before its handler runs: %w", job.ID, err)
			}
			if job.Attempts = n; n > job.MaxAttempts {
				res.Dead = true
				return q.buryLost(ctx, tx, job)
			}
		}
		err = q.handle(ctx, tx, h, job, ch, queue)
		if err == nil {
			return nil
		}
		// The rollback unlocks the job's row: its count must have landed
		// by then, so that a claim after it sees the count (whose
		// retry_at holds the job off until the failure is recorded) and
		// starts the attempt after this one.
		n, cerr := count.wait()
		if cerr == nil {
			job.Attempts = n
		}
		if errors.As(err, new(*txLostError)) {
			// The server unlocked the job before this handler stopped:
			// another claim may have counted since, so the attempt stays
			// counted (as a worker's that died).
			return err
		}
		if ctx.Err() != nil || retry.Classify(err) == retry.Retryable {
			// A hard stop or a transaction the engine will run again is
			// not the job's failure: take its count back while this
			// transaction still holds the job's row, so that no other
			// claim can have counted since.
			if cerr != nil {
				return fmt.Errorf("%w (its attempt count failed, so whether the attempt counts is not known: %v)", err, cerr)
			}
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
			defer cancel()
			if gerr := q.giveBackAttempt(gctx, c, job.ID); gerr != nil {
				return fmt.Errorf("%w (taking back its attempt count failed too, so the attempt counts: %v)", err, gerr)
			}
		}
		return err
	}
	err := retry.Run(ctx, ch.begin(q.holding), q.cfg.Retry, claimed)
	for errors.Is(err, errSlotElsewhere) {
		// Another process holds the slot the claim named: a new
		// transaction names another (under SERIALIZABLE this one must not
		// go on to hold a job after reading a row another holds: see
		// slot_take).
		err = retry.Run(ctx, q.holding, q.cfg.Retry, claimed)
	}
	if count != nil && res.Job != nil && err != nil {
		// An ambiguous commit's resolution reads the count: it must have
		// landed, and its number is the attempt's (a failed attempt's
		// was waited for before its rollback).
		if n, cerr := count.wait(); cerr == nil {
			res.Job.Attempts = n
		}
	}
	var amb *retry.AmbiguousCommitError
	if errors.As(err, &amb) && res.Job != nil && q.committed(ctx, res.Job) {
		// Only a transaction whose job was handled (or moved to
		// job_dead) commits: it did, so its Result stands.
		err = nil
	}
	var he *handlerError
	if err != nil && res.Job != nil && !errors.As(err, &he) {
		q.marks.ProbeSoon(queue) // a failed or unknown commit: the job may be back
	}
	if err == nil && res.Job != nil {
		// Processed or moved to job_dead, and committed: its count can go,
		// once it has landed.
		q.forgetCounted(ctx, c, count, res.Job.ID)
	}
	switch {
	case err == nil:
		if res.Dead {
			res.HandlerErr = fmt.Errorf("attempt %d of %d: %w", res.Job.Attempts, res.Job.MaxAttempts, ErrWorkerDied)
		}
		return res, nil
	case errors.As(err, &he) && ctx.Err() == nil:
		if d, ok := skiplock.AsSnooze(he.err); ok {
			res.Snoozed, res.RetryIn = true, d
			if serr := q.recordSnooze(ctx, res.Job.ID, d); serr != nil {
				return res, fmt.Errorf("fanout: job %s snoozed, and recording the snooze failed (the attempt counts): %w", res.Job.ID, serr)
			}
			return res, nil
		}
		res.HandlerErr = he.err
		dead, retryIn, ferr := q.recordFailure(ctx, res.Job.ID, res.Job.Attempts, he.err)
		res.RetryIn = retryIn
		res.Dead = dead
		res.Cancelled = dead && skiplock.IsCancel(he.err)
		if !dead {
			// Claimable again once its backoff ends, below this Queue's
			// watermark (or at once if recording failed): look then.
			q.marks.ProbeBy(queue, time.Now().Add(retryIn))
		}
		if ferr != nil {
			return res, fmt.Errorf("fanout: job %s failed (%v), and recording the failed attempt failed too: %w", res.Job.ID, he.err, ferr)
		}
		return res, nil
	case errors.As(err, &he):
		// Stopped mid-job (a hard stop): not the job's fault, so its
		// count was taken back. The rollback put the job back.
		res.HandlerErr = he.err
		return res, fmt.Errorf("fanout: stopped while handling job %s (%v); it is back in the queue", res.Job.ID, ctx.Err())
	}
	res.Dead = false // a move to job_dead that did not commit (or may not have)
	return res, fmt.Errorf("fanout: process a job of queue %q: %w", queue, err)
}

// errSlotElsewhere ends a limited claim's transaction that came back
// empty because another process holds the slot it named; process tries
// another in a new one.
var errSlotElsewhere = errors.New("fanout: the claim's concurrency slot is held by another process")

// slotElsewhere decides what a limited claim that came back empty in tx
// reports: nil (no job) when the slot it named was its own or free, or
// when it has passed over slotTries slots held elsewhere, or there is no
// other to try; otherwise errSlotElsewhere, with the slot added to
// elsewhere.
func (q *Queue) slotElsewhere(ctx context.Context, tx skiplock.Tx, queue string, slot int32, elsewhere *[]int32) error {
	limit := q.peekLimits(queue).global
	if len(*elsewhere) >= slotTries || limit == 0 {
		return nil
	}
	taken, err := q.slotTakenElsewhere(ctx, tx, queue, slot)
	if err != nil || !taken {
		return err
	}
	*elsewhere = append(*elsewhere, slot)
	if q.pickSlot(queue, limit, *elsewhere) < 0 {
		return nil // every slot is held: the limit is reached
	}
	return errSlotElsewhere
}

// forgetCounted drops job id's count, once count (nil: none sent) has
// landed. It rarely waits: the count went out before the handler, a
// round trip before the commit's answer came back.
func (q *Queue) forgetCounted(ctx context.Context, c counter, count *counting, id string) {
	if count != nil {
		if _, err := count.wait(); err != nil {
			return // nothing counted, or a row the pruner removes
		}
	}
	c.forget(ctx, id)
}

// committed resolves an ambiguous commit of job's transaction from the
// data (committed in fanout.sql): the job gone while its count is still
// the one this attempt made, read twice, resolveRecheck apart. Once: if
// this transaction rolled back, another worker may have claimed the job
// and committed its removal before its own count, sent ahead on another
// connection, landed (the count is off the job's path), and the job
// would read as gone with this attempt's count; the second read sees
// that count land, or the row dropped after that worker's commit. It
// reports false when it cannot tell: the error stands then, and the job,
// if it is back, runs again.
func (q *Queue) committed(ctx context.Context, job *skiplock.Job) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for read := range 2 {
		if read > 0 {
			betweenResolveReads()
			if retry.Sleep(ctx, resolveRecheck) != nil {
				return false
			}
		}
		var ok bool
		if err := q.db.QueryRow(ctx, q.sql.committed, job.ID, job.Attempts).Scan(&ok); err != nil || !ok {
			return false
		}
	}
	return true
}

// resolveRecheck is how long committed waits before it reads again: far
// longer than a count sent before a handler ran takes to land after the
// removal that followed that handler, and paid only on an ambiguous
// commit.
const resolveRecheck = 250 * time.Millisecond

// betweenResolveReads runs after committed's first read: a test's seam,
// which lands the other worker's count there.
var betweenResolveReads = func() {}

// handle runs the handler on a claimed and counted job, then deletes the
// job in the same transaction (its count is dropped after the commit:
// forget). With ch, the removal's network write also begins the next
// transaction with a claim of queue (chain).
func (q *Queue) handle(ctx context.Context, tx skiplock.Tx, h Handler, job *skiplock.Job, ch *chain, queue string) error {
	hctx, watch := watchTx(ctx, tx)
	err := workloop.Call(func() error { return h(hctx, watchedTx{handlerTx{tx}, watch}, job) })
	if lost := watch.stop(); lost != nil {
		// Whatever the handler returned, its transaction is gone.
		q.cfg.Logger.Warn("fanout: a job's transaction ended while its handler ran; the handler's context was cancelled, and the job runs again",
			"job", job.ID, "queue", queue, "kind", job.Kind, "attempt", job.Attempts, logs.Err(lost))
		return lost
	}
	if err != nil {
		return &handlerError{err: err}
	}
	// The removal is the transaction's last statement: its COMMIT goes
	// in the same round trip (txhook.Last), and with ch the next claim
	// after it. When it fails, the server skipped that COMMIT (and what
	// followed) and Process rolls back.
	n, err := tx.Exec(q.then(ctx, ch, queue), q.sql.del, job.ID)
	ch.sent()
	if skiplock.SQLState(err) == "25P02" {
		return &handlerError{err: fmt.Errorf("the handler returned no error but left its transaction aborted (it ignored a failed statement): %w", err)}
	}
	if err != nil {
		return err
	}
	if n != 1 {
		// Cannot happen while we hold the row lock. Were it to, the
		// COMMIT has gone with the delete all the same: the error says
		// so, and a failure recorded for the job finds it gone.
		return fmt.Errorf("job %s vanished while locked (the delete removed %d rows)", job.ID, n)
	}
	return nil
}

// lostPrefix begins the last_error of a job bury_lost moved to job_dead;
// amend_dead recognizes it.
const lostPrefix = "no result was recorded for attempt "

// buryLost moves a claimed job whose attempts are used up to job_dead,
// without running it, in the claim's transaction. Its last attempt left
// no failure behind: its worker died.
func (q *Queue) buryLost(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
	msg := fmt.Sprintf(lostPrefix+"%d of %d: its worker died, was killed or lost its connection mid-job (or its failure was not recorded yet when this claim found the attempts used up)",
		job.MaxAttempts, job.MaxAttempts)
	if job.LastError != "" {
		msg += "; the last recorded error: " + job.LastError
	}
	n, err := tx.Exec(txhook.Last(ctx), q.sql.buryLost, job.ID, errtext.Of(errors.New(msg))) // the transaction's last
	if err == nil && n != 1 {
		err = fmt.Errorf("job %s vanished while locked (moving it to job_dead moved %d rows)", job.ID, n)
	}
	return err
}

// scanJob reads a claimed job's columns (jobColumns), after the shard's
// ordinal into n when n is not nil, and into extra the columns the
// statement returns after them.
func scanJob(r skiplock.Rows, n *int64, extra ...any) (*skiplock.Job, error) {
	var (
		j              skiplock.Job
		payload, meta  string
		attempts, maxA int32
		lastErr        *string
	)
	dest := []any{&j.ID, &j.Queue, &payload, &attempts, &maxA, &lastErr, &j.CreatedAt, &j.Kind, &meta}
	if n != nil {
		dest = append([]any{n}, dest...)
	}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	j.Payload, j.Metadata = json.RawMessage(payload), json.RawMessage(meta)
	j.Attempts = int(attempts) + 1 // replaced by the attempt's count before the handler sees it
	j.MaxAttempts = int(maxA)
	if lastErr != nil {
		j.LastError = *lastErr
	}
	j.Status = skiplock.StatusRunning
	j.RunAt = j.CreatedAt
	return &j, nil
}

// recordFailure records the failed attempt number n of job id, after the
// rollback: last_error, attempts, and either the backoff before the next
// attempt or, when the job has used its attempts or its handler cancelled
// it (skiplock.Cancel), its move to job_dead. It
// finds the job gone when another worker has processed it since (and then
// does nothing), or has moved it to job_dead because its count said its
// attempts were used up (and then gives the dead row this error).
//
// The first statement waits if another worker claimed the job in the
// moment since the rollback: when that worker commits, the job is gone and
// nothing is recorded (it succeeded); when it rolls back, both failures
// are recorded, each with its own attempt number.
func (q *Queue) recordFailure(ctx context.Context, id string, n int, cause error) (dead bool, retryIn time.Duration, err error) {
	msg := errtext.Of(cause)
	err = retry.Run(ctx, q.db, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		dead, retryIn = false, 0
		found := false
		var attempts, maxA int32
		err := each(ctx, tx, q.sql.fail, []any{id, msg, int32(min(n, 1<<31-1))}, func(r skiplock.Rows) error {
			found = true
			return r.Scan(&attempts, &maxA)
		})
		if err != nil {
			return err
		}
		if !found {
			// Processed since, or buried by a claim that found the
			// attempts used up before this failure was recorded: then
			// the dead row gets this attempt's error (that claim's
			// worker reports the job dead).
			_, err := tx.Exec(ctx, q.sql.amendDead, id, msg, lostPrefix)
			return err
		}
		if attempts < maxA && !skiplock.IsCancel(cause) {
			retryIn = q.backoff(int(attempts))
			if d, ok := skiplock.RetryDelay(cause); ok {
				retryIn = d
			}
			_, err = tx.Exec(ctx, q.sql.backoff, id, retryIn.Seconds())
			return err
		}
		k, err := tx.Exec(ctx, q.sql.bury, id)
		dead = k == 1
		return err
	})
	return dead, retryIn, err
}

// recordSnooze records a snoozed attempt after its rollback: the job's
// row lock first (waiting for a worker that claimed it since), then its
// attempt given back and its wait set.
func (q *Queue) recordSnooze(ctx context.Context, id string, d time.Duration) error {
	return retry.Run(ctx, q.db, q.cfg.Retry, func(ctx context.Context, tx skiplock.Tx) error {
		n, err := tx.Exec(ctx, q.sql.snoozeJob, id)
		if err != nil || n == 0 {
			return err // gone: processed since by another worker
		}
		_, err = tx.Exec(ctx, q.sql.snoozeAttempt, id, d.Seconds())
		return err
	})
}

// backoff is the wait before the next attempt after the attempts-th
// failed: RetryBase*2^(attempts-1) capped at RetryMax, drawn from its
// upper half (jitter that spreads retries without ever making them
// immediate), as the bucketed layout's. The count statement draws the same
// in SQL for an attempt that may die with its worker.
func (q *Queue) backoff(attempts int) time.Duration {
	d := q.cfg.RetryBase << min(max(attempts-1, 0), 40)
	if d <= 0 || d > q.cfg.RetryMax {
		d = q.cfg.RetryMax
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}
