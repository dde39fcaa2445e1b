package bucketed

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// A Worker with HeldClaims claims through Queue.claimHeld: each claim's
// jobs are handed to the goroutines as leased ones are, but their results
// go back to their claim (heldRun), not to the completers, and the claim's
// transaction writes them all and commits once the last is in. No
// heartbeat: the transaction's row locks hold the jobs, and the claim's
// deadline bounds the handlers.

// heldRun is a held claim being worked: the results that have arrived
// and how many are still out.
type heldRun struct {
	claim   *heldClaim
	ctx     context.Context // the handlers': ends at the claim's deadline, or at a hard stop
	cancel  context.CancelFunc
	mu      sync.Mutex
	results []result
	pending int
}

// heldBudget is how long a held claim's handlers may run: the visibility
// timeout less the lease margin, so that the claim commits before the
// server ends a transaction idle that long (OpenConfig's
// idle_in_transaction_session_timeout, set to the visibility timeout).
func (w *Worker) heldBudget() time.Duration {
	return w.q.cfg.VisibilityTimeout - w.leaseMargin()
}

// claimJobs claims up to n jobs for the producer: leased, or held.
func (w *Worker) claimJobs(ctx context.Context, n int) ([]*skiplock.Job, error) {
	if !w.cfg.HeldClaims {
		return w.q.DequeueAs(ctx, w.cfg.Queue, n, w.cfg.Owner)
	}
	h, err := w.q.claimHeld(ctx, w.cfg.Queue, n, w.cfg.Owner, w.heldBudget())
	if err != nil || h == nil {
		return nil, err
	}
	if len(h.jobs) == 0 {
		// Every job it locked is a dead holder's, not yet counted: commit
		// the empty claim at once.
		w.finishRun(&heldRun{claim: h})
		return nil, nil
	}
	// One context for the claim's handlers, not one each: a deadline's
	// timer per job cost an eighth of the client's CPU in a burn-down.
	hctx, cancel := context.WithDeadline(ctx, h.deadline)
	run := &heldRun{claim: h, ctx: hctx, cancel: cancel, pending: len(h.jobs)}
	w.mu.Lock()
	for _, j := range h.jobs {
		w.held[j] = run // until hand puts it in the job's handed
	}
	w.mu.Unlock()
	w.heldWG.Add(1)
	return h.jobs, nil
}

// stepHeld works a held job (as step does a leased one) and gives its
// result to its claim. A job whose claim's deadline passed before it
// started is not run: it stays Queued, its attempt not counted.
func (w *Worker) stepHeld(ctx context.Context, h handed, asked time.Time) {
	j, run := h.job, h.run
	select {
	case <-w.stopping:
		w.heldResult(run, result{job: j, what: outRelease})
		return
	default:
	}
	if run.ctx.Err() != nil || !time.Now().Before(run.claim.deadline) {
		w.heldResult(run, result{job: j, what: outRelease})
		return
	}
	err := workloop.Call(func() error { return w.cfg.Handler(run.ctx, j) })
	overran := errors.Is(run.ctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	claimed := h.claimed
	if claimed.Before(asked) {
		claimed = asked
	}
	switch {
	case err != nil && ctx.Err() != nil:
		w.heldResult(run, result{job: j, what: outRelease}) // a hard stop: not the job's fault
	case err != nil && overran:
		w.heldResult(run, result{job: j, what: outFail, err: errHeldOverran{err}})
	case err != nil:
		if _, ok := skiplock.AsSnooze(err); ok {
			w.heldResult(run, result{job: j, what: outSnooze, err: err})
			break
		}
		w.heldResult(run, result{job: j, what: outFail, err: err})
	default:
		w.heldResult(run, result{job: j, what: outComplete, asked: asked, claimed: claimed})
	}
}

// errHeldOverran is a handler's error after its held claim's deadline
// cancelled it.
type errHeldOverran struct{ err error }

func (e errHeldOverran) Error() string {
	return "the held claim's deadline passed while the job ran (held claims are for short jobs: turn WorkerConfig.HeldClaims off for long ones): " + e.err.Error()
}

func (e errHeldOverran) Unwrap() error { return e.err }

// heldResult records a held job's result; the last one finishes the claim.
func (w *Worker) heldResult(run *heldRun, r result) {
	run.mu.Lock()
	run.results = append(run.results, r)
	run.pending--
	last := run.pending == 0
	run.mu.Unlock()
	if last {
		go func() {
			defer w.heldWG.Done()
			w.finishRun(run)
		}()
	}
}

// finishRun writes a held claim's results and commits it, then counts and
// reports them as flush does for leased jobs: all written, or, when the
// claim's transaction failed, none (lost).
func (w *Worker) finishRun(run *heldRun) {
	if run.cancel != nil {
		run.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := w.sortResults(run.results)
	err := w.q.finishHeld(ctx, run.claim, s, w.cfg.OnComplete)
	if err != nil {
		w.cfg.Logf("bucketed worker: %v (the rescuer counts the attempt; the jobs run again)", err)
	}
	// written is how many of jobs were written, and lost those that were not.
	written := func(jobs []*skiplock.Job) (int64, []*skiplock.Job) {
		if err != nil {
			w.lost.Add(int64(len(jobs)))
			return 0, jobs
		}
		return int64(len(jobs)), nil
	}
	n, lost := written(s.done)
	w.completed.Add(n)
	w.report(s.done, lost, OutcomeCompleted)
	w.afterCompleted(s.doneRes, lost)
	fj := make([]*skiplock.Job, len(s.fails))
	for i, f := range s.fails {
		fj[i] = f.Job
	}
	n, lost = written(fj)
	w.failed.Add(n)
	w.report(fj, lost, OutcomeFailed)
	if err == nil {
		w.logFailures(s.fails, s.backoffs, nil)
		w.wakeForRetries(s.fails, s.backoffs)
	}
	for d, jobs := range s.snoozes {
		n, lost = written(jobs)
		w.snoozed.Add(n)
		w.report(jobs, lost, OutcomeSnoozed)
		if err == nil {
			w.wakeIn(d)
		}
	}
	// Given back: nothing to write, and nothing written.
	w.released.Add(int64(len(s.rel)))
	w.report(s.rel, nil, OutcomeReleased)
}
