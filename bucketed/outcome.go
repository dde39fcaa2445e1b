package bucketed

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
)

// Outcome is what a Worker did with a job's result
// (WorkerConfig.AfterResult).
type Outcome int

// Outcomes of a job's result.
const (
	// OutcomeCompleted: the job's Success committed.
	OutcomeCompleted Outcome = iota + 1
	// OutcomeFailed: a failed attempt was recorded; the job runs again
	// after its backoff, or is Failed when job.Attempts reached
	// job.MaxAttempts.
	OutcomeFailed
	// OutcomeSnoozed: the job was given back to run later
	// (skiplock.Snooze), its attempt not counted.
	OutcomeSnoozed
	// OutcomeReleased: the job was given back unstarted or interrupted
	// by a stop.
	OutcomeReleased
	// OutcomeLost: nothing was written: the lease was lost first (it
	// expired, or the job was cancelled), or the write failed; the job
	// runs again when its lease expires.
	OutcomeLost
	// OutcomeCancelled: the handler returned skiplock.Cancel, and the job
	// is Canceled, its attempt counted.
	OutcomeCancelled
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OutcomeCompleted:
		return "completed"
	case OutcomeFailed:
		return "failed"
	case OutcomeSnoozed:
		return "snoozed"
	case OutcomeReleased:
		return "released"
	case OutcomeLost:
		return "lost"
	case OutcomeCancelled:
		return "cancelled"
	}
	return "unknown"
}

// outcome is what a handler's run asks to write for its job.
type outcome int

const (
	outComplete outcome = iota
	outFail
	outRelease
	outDrop
	outSnooze
)

// result is a job's result on its way from the runner to be written: to
// the completer (a leased job) or to its claim (a held one).
type result struct {
	job            *skiplock.Job
	what           outcome
	err            error
	asked, claimed time.Time // for AfterComplete
}

// sortedResults are a batch of results sorted by what becomes of them.
type sortedResults struct {
	done     []*skiplock.Job
	doneRes  []result // done's results, for AfterComplete
	fails    []Failure
	backoffs []time.Duration // each failure's wait before its retry, parallel to fails
	snoozes  map[time.Duration][]*skiplock.Job
	rel      []*skiplock.Job // given back: not started, or interrupted by a hard stop
	drop     []*skiplock.Job // lease lost: nothing to write
}

// sortResults sorts batch by outcome, drawing each failure's backoff.
func (q *Queue) sortResults(batch []result) sortedResults {
	s := sortedResults{snoozes: map[time.Duration][]*skiplock.Job{}}
	for _, r := range batch {
		switch r.what {
		case outComplete:
			s.done = append(s.done, r.job)
			s.doneRes = append(s.doneRes, r)
		case outFail:
			f := Failure{Job: r.job, Err: r.err}
			s.fails = append(s.fails, f)
			s.backoffs = append(s.backoffs, q.retryIn(f))
		case outSnooze:
			d, _ := skiplock.AsSnooze(r.err)
			s.snoozes[d] = append(s.snoozes[d], r.job)
		case outRelease:
			s.rel = append(s.rel, r.job)
		case outDrop:
			s.drop = append(s.drop, r.job)
		}
	}
	return s
}

// failedJobs are the jobs of fails.
func failedJobs(fails []Failure) []*skiplock.Job {
	fj := make([]*skiplock.Job, len(fails))
	for i, f := range fails {
		fj[i] = f.Job
	}
	return fj
}

// WorkerStats counts what a Worker did. The fanout layout's WorkerStats
// use the same names for the same things (Completed, Failed).
type WorkerStats struct {
	// Claimed jobs, Completed (Success written), Failed (a failed attempt
	// written: retried later or dead), Released (given back unstarted or
	// interrupted by shutdown), Lost (the lease was lost before the result
	// was written; the result was dropped), Snoozed (given back to run
	// later by skiplock.Snooze, the attempt not counted), Cancelled
	// (Canceled by their handler's skiplock.Cancel, not in Failed).
	Claimed, Completed, Failed, Released, Lost, Snoozed, Cancelled int64
}

// tally counts what became of a Worker's jobs (WorkerStats) and tells
// the hooks (AfterClaim, AfterResult, AfterComplete). The producer, the
// completer and the held claims' commits all count here.
type tally struct {
	cfg                                                             *WorkerConfig
	claimed, completed, failedN, released, lost, snoozed, cancelled atomic.Int64
}

// stats are the counts so far.
func (t *tally) stats() WorkerStats {
	return WorkerStats{Claimed: t.claimed.Load(), Completed: t.completed.Load(), Failed: t.failedN.Load(),
		Released: t.released.Load(), Lost: t.lost.Load(), Snoozed: t.snoozed.Load(), Cancelled: t.cancelled.Load()}
}

// claimedIn tells AfterClaim about a claim statement that returned jobs.
func (t *tally) claimedIn(n int, took time.Duration) {
	if t.cfg.AfterClaim != nil && n > 0 {
		t.cfg.AfterClaim(n, took)
	}
}

// lostSet is lost as a set.
func lostSet(lost []*skiplock.Job) map[*skiplock.Job]bool {
	gone := make(map[*skiplock.Job]bool, len(lost))
	for _, j := range lost {
		gone[j] = true
	}
	return gone
}

// report tells AfterResult the outcome of jobs, those in lost excepted
// (OutcomeLost for them).
func (t *tally) report(jobs, lost []*skiplock.Job, o Outcome) {
	if t.cfg.AfterResult == nil {
		return
	}
	gone := lostSet(lost)
	for _, j := range jobs {
		if gone[j] {
			t.cfg.AfterResult(j, OutcomeLost)
		} else {
			t.cfg.AfterResult(j, o)
		}
	}
}

// failed counts and reports failures written, those in lost excepted
// (reported lost): a handler's cancel as OutcomeCancelled, the others as
// OutcomeFailed.
func (t *tally) failed(fails []Failure, lost []*skiplock.Job) {
	var failed, cancelled []*skiplock.Job
	gone := lostSet(lost)
	for _, f := range fails {
		n := &t.failedN
		if skiplock.IsCancel(f.Err) {
			cancelled, n = append(cancelled, f.Job), &t.cancelled
		} else {
			failed = append(failed, f.Job)
		}
		if !gone[f.Job] {
			n.Add(1)
		}
	}
	t.report(failed, lost, OutcomeFailed)
	t.report(cancelled, lost, OutcomeCancelled)
}

// afterCompleted calls AfterComplete for each completion written, those
// in lost excepted.
func (t *tally) afterCompleted(doneRes []result, lost []*skiplock.Job) {
	if t.cfg.AfterComplete == nil || len(lost) >= len(doneRes) {
		return
	}
	gone := lostSet(lost)
	for _, r := range doneRes {
		if !gone[r.job] {
			t.cfg.AfterComplete(r.job, r.asked, r.claimed)
		}
	}
}

// logFailures logs each failed attempt written (those not in lost) and
// each one refused because the lease was lost.
func (t *tally) logFailures(fails []Failure, backoffs []time.Duration, lost []*skiplock.Job) {
	gone := lostSet(lost)
	for i, f := range fails {
		j := f.Job
		var next string
		dead := false
		switch {
		case gone[j]:
			next = "not recorded: its lease was lost, another worker has the job"
		case skiplock.IsCancel(f.Err):
			next, dead = "cancelled by its handler: the job is Canceled", true
		case j.Attempts >= j.MaxAttempts:
			next, dead = "no attempts left: the job is Failed (dead)", true
		default:
			next = fmt.Sprintf("retry in %v", backoffs[i].Round(time.Millisecond))
		}
		logs.Failure(t.cfg.Logger, j, f.Err, dead, next)
	}
}

// wakeForRetries calls wakeIn (the producer's) for when the soonest of the
// failed jobs that will run again comes due: no notification announces
// such a job.
func wakeForRetries(fails []Failure, backoffs []time.Duration, wakeIn func(time.Duration)) {
	soonest := time.Duration(-1)
	for i, f := range fails {
		if f.Job.Attempts < f.Job.MaxAttempts && !skiplock.IsCancel(f.Err) && (soonest < 0 || backoffs[i] < soonest) {
			soonest = backoffs[i]
		}
	}
	if soonest >= 0 {
		wakeIn(soonest)
	}
}
