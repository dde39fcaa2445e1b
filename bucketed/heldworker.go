package bucketed

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// heldMode is the claim mode of a Worker with HeldClaims: it claims
// through Queue.claimHeld, each claim's jobs are handed to the goroutines
// as leased ones are, but their results go back to their claim (heldRun),
// not to the completer, and the claim's transaction writes them all and
// commits once the last is in. No heartbeat: the transaction's row locks
// hold the jobs, and the claim's deadline bounds the handlers.
type heldMode struct {
	q      *Queue
	cfg    *WorkerConfig
	tally  *tally
	runner *runner             // whose context the claims' handlers run under
	wakeIn func(time.Duration) // the producer's: a job put back comes due
	open   sync.WaitGroup      // claims not yet committed
	// limited says, once, that a queue with a global limit gives held
	// claims nothing: a held job is not Running, so no slot could count it.
	limited sync.Once
}

// heldRun is a held claim being worked: the results that have arrived
// and how many are still out.
type heldRun struct {
	claim *heldClaim
	// ctx is the claim's handlers': it ends at the claim's deadline, or
	// at a hard stop.
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	results []result
	pending int
}

// budget is how long a held claim's handlers may run: the visibility
// timeout less the lease margin, so that the claim commits before the
// server ends a transaction idle that long (OpenConfig's
// idle_in_transaction_session_timeout, set to the visibility timeout).
func (m *heldMode) budget() time.Duration {
	return m.q.cfg.VisibilityTimeout - leaseMargin(m.q.cfg.VisibilityTimeout)
}

// inFlight: one held claim at a time. Each holds a connection while its
// jobs run, and takes another to record itself; claims overlapping would
// wait on each other's connections (Queue.heldSlots bounds the claims
// open, not those still being made).
func (m *heldMode) inFlight() int { return 1 }

// claim takes a held claim of up to n jobs and hands them out with it.
func (m *heldMode) claim(ctx context.Context, n int) ([]handed, bool, error) {
	limits := m.q.limitsFor(ctx, m.cfg.Queue) // for the producer's capacity too
	h, err := m.q.claimHeld(ctx, m.cfg.Queue, n, m.cfg.Owner, m.budget())
	if err == nil && (h == nil || len(h.jobs) == 0) && limits.limited() {
		m.limited.Do(func() {
			m.cfg.Logger.Warn("the queue has a global concurrency limit or a rate limit, which held claims cannot count: they claim nothing there; work it without HeldClaims, or remove the limit",
				"queue", m.cfg.Queue)
		})
	}
	if err != nil || h == nil {
		return nil, false, err
	}
	if len(h.jobs) == 0 {
		// Every job it locked is a dead holder's, not yet counted: commit
		// the empty claim at once.
		m.commit(&heldRun{claim: h})
		return nil, false, nil
	}
	// One context for the claim's handlers, not one each: a deadline's
	// timer per job is dear in a burn-down.
	hctx, cancel := context.WithDeadline(m.runner.context(), h.deadline)
	run := &heldRun{claim: h, ctx: hctx, cancel: cancel, pending: len(h.jobs)}
	m.open.Add(1)
	hs := make([]handed, len(h.jobs))
	for i, j := range h.jobs {
		hs[i] = handed{job: j, run: run}
	}
	return hs, false, nil
}

// work runs a held job's handler (as the leased mode's work does) and
// gives its result to its claim. A job whose claim's deadline passed
// before it started is not run: it stays Queued, its attempt not counted.
func (m *heldMode) work(ctx context.Context, h handed, asked time.Time) {
	j, run := h.job, h.run
	if run.ctx.Err() != nil || !time.Now().Before(run.claim.deadline) {
		m.result(run, result{job: j, what: outRelease})
		return
	}
	err := workloop.Call(func() error { return m.cfg.Handler(run.ctx, j) })
	overran := errors.Is(run.ctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	switch {
	case err != nil && ctx.Err() != nil:
		m.result(run, result{job: j, what: outRelease}) // a hard stop: not the job's fault
	case err != nil && overran:
		m.result(run, result{job: j, what: outFail, err: errHeldOverran{err}})
	case err != nil:
		if _, ok := skiplock.AsSnooze(err); ok {
			m.result(run, result{job: j, what: outSnooze, err: err})
			break
		}
		m.result(run, result{job: j, what: outFail, err: err})
	default:
		m.result(run, result{job: j, what: outComplete, asked: asked, claimed: h.claimed})
	}
}

// giveBack gives a job not started back to its claim, as released.
func (m *heldMode) giveBack(h handed) {
	m.result(h.run, result{job: h.job, what: outRelease})
}

// result records a held job's result; the last one commits the claim.
func (m *heldMode) result(run *heldRun, r result) {
	run.mu.Lock()
	run.results = append(run.results, r)
	run.pending--
	last := run.pending == 0
	run.mu.Unlock()
	if last {
		go func() {
			defer m.open.Done()
			m.commit(run)
		}()
	}
}

// commit writes a held claim's results and commits it, then counts and
// reports them as the completer does for leased jobs: all written, or,
// when the claim's transaction failed, none (lost).
func (m *heldMode) commit(run *heldRun) {
	if run.cancel != nil {
		run.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := m.q.sortResults(run.results)
	err := m.q.finishHeld(ctx, run.claim, s, m.cfg.OnComplete)
	if err != nil {
		m.cfg.Logger.Warn("writing held claims' results failed: the rescuer counts the attempt and the jobs run again", "jobs", len(run.results), logs.Err(err))
	}
	t := m.tally
	// written is how many of jobs were written, and lost those that were not.
	written := func(jobs []*skiplock.Job) (int64, []*skiplock.Job) {
		if err != nil {
			t.lost.Add(int64(len(jobs)))
			return 0, jobs
		}
		return int64(len(jobs)), nil
	}
	n, lost := written(s.done)
	t.completed.Add(n)
	t.report(s.done, lost, OutcomeCompleted)
	t.afterCompleted(s.doneRes, lost)
	_, lost = written(failedJobs(s.fails))
	t.failed(s.fails, lost)
	if err == nil {
		t.logFailures(s.fails, s.backoffs, nil)
		wakeForRetries(s.fails, s.backoffs, m.wakeIn)
	}
	for d, jobs := range s.snoozes {
		n, lost = written(jobs)
		t.snoozed.Add(n)
		t.report(jobs, lost, OutcomeSnoozed)
		if err == nil {
			m.wakeIn(d)
		}
	}
	// Given back: nothing to write, and nothing written.
	t.released.Add(int64(len(s.rel)))
	t.report(s.rel, nil, OutcomeReleased)
}

// close waits for the claims still open to commit.
func (m *heldMode) close() {
	m.open.Wait()
}

// errHeldOverran is a handler's error after its held claim's deadline
// cancelled it.
type errHeldOverran struct{ err error }

// Error says the deadline passed, then what the handler returned.
func (e errHeldOverran) Error() string {
	return "the held claim's deadline passed while the job ran (held claims are for short jobs: turn WorkerConfig.HeldClaims off for long ones): " + e.err.Error()
}

// Unwrap is the handler's error.
func (e errHeldOverran) Unwrap() error { return e.err }
