package bucketed

import (
	"time"

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
	}
	return "unknown"
}

// report tells AfterResult the outcome of jobs, those in lost excepted
// (OutcomeLost for them).
func (w *Worker) report(jobs, lost []*skiplock.Job, o Outcome) {
	if w.cfg.AfterResult == nil {
		return
	}
	gone := make(map[*skiplock.Job]bool, len(lost))
	for _, j := range lost {
		gone[j] = true
	}
	for _, j := range jobs {
		if gone[j] {
			w.cfg.AfterResult(j, OutcomeLost)
		} else {
			w.cfg.AfterResult(j, o)
		}
	}
}

// claimedIn tells AfterClaim about a claim statement that returned jobs.
func (w *Worker) claimedIn(n int, took time.Duration) {
	if w.cfg.AfterClaim != nil && n > 0 {
		w.cfg.AfterClaim(n, took)
	}
}
