package bucketed

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
)

// heldClaim is a claim held open (WorkerConfig.HeldClaims): its
// transaction holds the row locks of its jobs, which stay Queued, unwritten,
// while their handlers run; its commit writes each job's result once and
// deletes its hold row. The hold row, committed before the handlers start,
// is what outlives a worker that dies: the rescuer counts it as an attempt
// of each job it names (docs/design.md, "Held claims").
type heldClaim struct {
	tx       skiplock.Tx
	token    int64
	queue    string
	owner    string
	deadline time.Time       // the handlers' deadline; jobs not started by then are not run
	jobs     []*skiplock.Job // recorded in the hold row: the jobs to run
	release  func()          // frees the claim's slot (Queue.heldSlots)
}

// maxHeldClaimTries bounds the attempts at a held claim that fails with a
// retryable error (a deadlock with another claim, a lost connection); the
// producer backs off after that as after any failed claim.
const maxHeldClaimTries = 3

// claimHeld claims up to n jobs of queue for owner and holds them: the
// jobs are locked in a transaction left open, recorded in a hold row
// committed on its own, and returned with the claim. Their handlers must
// finish by the claim's deadline, budget from now. No jobs (nil, nil) when
// none is claimable.
func (q *Queue) claimHeld(ctx context.Context, queue string, n int, owner string, budget time.Duration) (*heldClaim, error) {
	p, err := q.claimSetup(ctx, queue, n, owner)
	if err != nil {
		return nil, err
	}
	p.LeaseSeconds = budget.Seconds()
	select {
	case q.heldSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release := func() { <-q.heldSlots }
	for try := 1; ; try++ {
		if try > 1 {
			p.Token = newToken() // a failed try's hold row may linger under the old one
		}
		h, err := q.claimHeldOnce(ctx, queue, p, budget)
		if h != nil {
			h.release = release
			return h, nil
		}
		if err == nil || try >= maxHeldClaimTries || retry.Classify(err) != retry.Retryable || ctx.Err() != nil {
			release()
			if err != nil {
				if skiplock.SQLState(err) == "42P01" { // undefined_table: job_hold
					return nil, fmt.Errorf("bucketed: held claim from %q: %w (held claims need bucketed migration 005: run skiplock migrate)", queue, err)
				}
				return nil, fmt.Errorf("bucketed: held claim from %q: %w", queue, err)
			}
			return nil, nil
		}
	}
}

func (q *Queue) claimHeldOnce(ctx context.Context, queue string, p claimParams, budget time.Duration) (*heldClaim, error) {
	began := time.Now()
	tx, err := q.db.Begin(ctx, skiplock.TxOptions{Isolation: q.genericRetry.Isolation, GenericPlans: q.genericRetry.GenericPlans})
	if err != nil {
		return nil, err
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tx.Rollback(rctx) //nolint:errcheck // a failed rollback closes the connection, which ends the transaction too
	}
	var holder int64 // this transaction's id, for the hold row
	claimed, err := claimRows(ctx, tx, q.sql.claimHeld, p.args(), &holder)
	if err != nil || len(claimed) == 0 {
		rollback()
		return nil, err
	}
	q.hints.update(queue, claimed)
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.id
	}
	var recorded *string // nil: every id recorded
	if err := q.db.QueryRow(ctx, q.sql.holdOpen, p.Token, queue, ids, holder).Scan(&recorded); err != nil {
		rollback()
		// The hold row may have committed before the error reached us: a
		// row no handler ran under must not count as an attempt.
		q.dropHold(ctx, p.Token)
		return nil, fmt.Errorf("record the claim: %w", err)
	}
	run := ids
	if recorded != nil {
		run = nil
		if err := json.Unmarshal([]byte(*recorded), &run); err != nil {
			rollback()
			q.dropHold(ctx, p.Token)
			return nil, fmt.Errorf("read the claim's record: %w", err)
		}
	}
	keep := make(map[int64]bool, len(run))
	for _, id := range run {
		keep[id] = true
	}
	h := &heldClaim{tx: tx, token: p.Token, queue: queue, owner: p.Owner, deadline: began.Add(budget)}
	slices.SortFunc(claimed, func(a, b claimedJob) int {
		return compareKey(int32(a.job.Priority), a.job.RunAt, a.id, int32(b.job.Priority), b.job.RunAt, b.id)
	})
	for _, c := range claimed {
		// A job another hold row names stays locked, unrun, until the
		// commit; the rescuer counts the dead holder's attempt first.
		if keep[c.id] {
			h.jobs = append(h.jobs, c.job)
		}
	}
	return h, nil
}

// dropHold deletes a hold row whose claim ran no handler, so that it counts
// no attempt; if that fails too, the rescuer counts one.
func (q *Queue) dropHold(ctx context.Context, token int64) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	q.db.Exec(dctx, q.sql.holdClose, token) //nolint:errcheck // best effort, see above
}

// finishHeld writes a held claim's results in its transaction and commits:
// Success (or deletion, with Config.DeleteCompleted) for done, a failed
// attempt for each failure (Failed once it was the last), snoozes, then the
// hold row's deletion. Jobs in none of them (released: not started, or
// interrupted by a hard stop) are left as they were, Queued with their
// attempt not counted. also runs in the transaction with the completed
// jobs (WorkerConfig.OnComplete). The results commit together or not at
// all: an error means none was written (the hold row then stays, so the
// rescuer counts the attempt and the jobs run again). An ambiguous commit
// is settled by the hold row: gone means committed.
func (q *Queue) finishHeld(ctx context.Context, h *heldClaim, r sortedResults, also func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error) (err error) {
	defer h.release()
	// Each write must take every job it names: the claim holds their
	// locks, so nothing else can have changed them. Counting rows, not
	// returning ids, saves the client a row per job.
	write := func(what string, want int, sql string, args ...any) error {
		n, err := execCount(ctx, h.tx, sql, args...)
		if err == nil && n != want {
			err = fmt.Errorf("wrote %d of the %d jobs this claim holds", n, want)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	err = func() error {
		if len(r.done) > 0 {
			ids, _, err := leaseArgs(r.done)
			if err != nil {
				return err
			}
			// A job with dependents is kept as Success even where
			// completions delete: settle reads its dependents after.
			deps := withDependents(r.done)
			keep, del := ids, []int64(nil)
			if q.cfg.DeleteCompleted {
				keep, del = deps, without(ids, deps)
			}
			if len(keep) > 0 {
				if err := write("completion", len(keep), q.sql.heldComplete, keep, h.owner, h.token); err != nil {
					return err
				}
			}
			if len(del) > 0 {
				if err := write("completion", len(del), q.sql.heldCompleteDelete, del); err != nil {
					return err
				}
			}
			if err := q.settle(ctx, h.tx, deps, nil); err != nil {
				return fmt.Errorf("completion: %w", err)
			}
			if also != nil {
				if err := also(ctx, h.tx, r.done); err != nil {
					return fmt.Errorf("completion: OnComplete: %w", err)
				}
			}
		}
		if len(r.fails) > 0 {
			ids, errs, delays, cancels := make([]int64, len(r.fails)), make([]string, len(r.fails)), make([]float64, len(r.fails)), make([]bool, len(r.fails))
			for i, f := range r.fails {
				id, err := JobID(f.Job)
				if err != nil {
					return err
				}
				ids[i], errs[i], delays[i], cancels[i] = id, errtext.Of(f.Err), r.backoffs[i].Seconds(), skiplock.IsCancel(f.Err)
			}
			if err := write("failure", len(ids), q.sql.heldFail, ids, h.owner, errs, delays, cancels); err != nil {
				return err
			}
			if err := q.settle(ctx, h.tx, nil, endsWithDependents(failedJobs(r.fails), ids, cancels)); err != nil {
				return fmt.Errorf("failure: %w", err)
			}
		}
		for d, jobs := range r.snoozes {
			ids, _, err := leaseArgs(jobs)
			if err != nil {
				return err
			}
			if err := write("snooze", len(ids), q.sql.heldSnooze, ids, d.Seconds()); err != nil {
				return err
			}
		}
		if _, err := h.tx.Exec(ctx, q.sql.holdClose, h.token); err != nil {
			return fmt.Errorf("close the claim's record: %w", err)
		}
		return nil
	}()
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		h.tx.Rollback(rctx) //nolint:errcheck // the statement's error is the one to report
		return fmt.Errorf("bucketed: held claim of %d jobs from %q: %w", len(h.jobs), h.queue, err)
	}
	if cerr := h.tx.Commit(ctx); cerr != nil {
		// Settled by the hold row, which the commit deletes.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var left int64
		if qerr := q.db.QueryRow(cctx, q.sql.holdExists, h.token).Scan(&left); qerr != nil || left > 0 {
			return fmt.Errorf("bucketed: held claim of %d jobs from %q: commit: %w", len(h.jobs), h.queue, cerr)
		}
	}
	return nil
}

// heldServerVersion checks the server's version() text for what held
// claims use: pg_current_xact_id and pg_xact_status of an xid8, PostgreSQL
// 13 and later. A text it cannot read passes (the first claim then says
// what is missing).
func heldServerVersion(version string) error {
	var major int
	if _, err := fmt.Sscanf(version, "PostgreSQL %d", &major); err != nil || major >= 13 {
		return nil
	}
	return usage.Errorf("bucketed worker: held claims need PostgreSQL 13 or later (pg_current_xact_id), and this server is %d: turn HeldClaims off or upgrade", major)
}

// errHeldUnsupported explains why a Worker refuses HeldClaims.
func errHeldUnsupported(d *skiplock.Dialect) error {
	return usage.Errorf("bucketed worker: held claims (WorkerConfig.HeldClaims) need PostgreSQL; %s keeps the lease claim: turn HeldClaims off", d.Rules())
}
