package bucketed

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/startstop"
)

// completer writes the results of a leased Worker's jobs back in
// batches, fenced by their leases: Completers goroutines write results as
// they arrive, and as many again write only while results back up (see
// complete). It ends once the runner has closed results and every result
// is written.
type completer struct {
	svc     startstop.Service
	q       *Queue
	cfg     *WorkerConfig
	results <-chan result // the runner's
	book    *leaseBook
	tally   *tally
	breaker *breaker
	wakeIn  func(time.Duration) // the producer's: a job put back comes due
	written func()              // the producer's: a batch's jobs are finished with, their slots free

	backlog        chan struct{} // a steady completer's batch filled to FlushSize: wakes a backlog completer
	backlogFlushes atomic.Int64  // batches the backlog completers wrote
}

// start launches the completers.
func (c *completer) start(ctx context.Context) error {
	c.backlog = make(chan struct{}, c.cfg.Completers)
	return c.svc.Start(ctx, c.run)
}

// stop waits for the completers to write every result: call it once
// results is closed.
func (c *completer) stop(context.Context) error {
	c.svc.Stop()
	return nil
}

// run is the completer's loop. Stop cuts no write short: the completers
// write under a context that it does not cancel, and return when results
// is closed and drained; the backlog ones, once nothing can wake them.
func (c *completer) run(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	var steady, backlogged sync.WaitGroup
	for range c.cfg.Completers {
		steady.Go(func() { c.complete(ctx, nil) })
		backlogged.Go(func() { c.complete(ctx, c.backlog) })
	}
	steady.Wait()
	close(c.backlog) // the steady completers were its senders
	backlogged.Wait()
}

// complete is a completer: it writes results in batches, taking
// whatever has arrived while its previous batch was being written. A
// completer with a gate (a backlog completer) writes one batch per
// signal on it: a completer whose batch filled to FlushSize signals, since
// results are then arriving faster than the steady completers write
// them. Fewer completers write bigger batches, and a completion costs
// much per statement, while many workers' results need the extra ones
// (docs/benchmarks.md, "Completers").
func (c *completer) complete(ctx context.Context, gate <-chan struct{}) {
	for {
		if gate != nil {
			if _, ok := <-gate; !ok {
				return
			}
		}
		r, ok := <-c.results
		if !ok {
			return
		}
		batch := []result{r}
	fill:
		for len(batch) < c.cfg.FlushSize {
			select {
			case r, ok := <-c.results:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if gate == nil && len(batch) == c.cfg.FlushSize {
			select {
			case c.backlog <- struct{}{}:
			default: // every backlog completer is already woken
			}
		}
		if gate != nil {
			c.backlogFlushes.Add(1)
		}
		c.flush(ctx, batch)
	}
}

// flush writes one batch in parts (releaseParts): the results of jobs
// with no workflow dependents first, then those of jobs with dependents
// in groups of a bounded release each, so that a completion releasing a
// large fan-out does not hold back the rest of its batch, and no one
// transaction updates a whole fan-out. The parts are written one after
// another: releasing beside the claims (other goroutines, a wake for
// each part's released jobs) was slower (docs/benchmarks.md,
// "Workflows").
func (c *completer) flush(ctx context.Context, batch []result) {
	plain, parts := releaseParts(batch)
	if len(plain) > 0 {
		c.flushPart(ctx, plain)
	}
	for _, part := range parts {
		c.flushPart(ctx, part)
	}
}

// releasePart is about how many dependents one transaction of a
// completer's batch settles: a job's completion and its dependents'
// release commit together, so a job is never split, and one with more
// dependents settles alone.
const releasePart = 2000

// releaseParts splits batch into the results of jobs without dependents
// (plain) and groups of those with dependents, each group's dependents
// adding up to no more than releasePart, unless one job has more.
func releaseParts(batch []result) (plain []result, parts [][]result) {
	if !slices.ContainsFunc(batch, func(r result) bool { return r.job.Dependents > 0 }) {
		return batch, nil
	}
	var group []result
	n := 0
	for _, r := range batch {
		d := r.job.Dependents
		if d == 0 {
			plain = append(plain, r)
			continue
		}
		if len(group) > 0 && n+d > releasePart {
			parts = append(parts, group)
			group, n = nil, 0
		}
		group, n = append(group, r), n+d
	}
	if len(group) > 0 {
		parts = append(parts, group)
	}
	return plain, parts
}

// flushPart writes one part of a batch: each kind of result in one
// statement, counted and told to the hooks as it commits.
func (c *completer) flushPart(ctx context.Context, batch []result) {
	s := c.q.sortResults(batch)
	done, doneRes, fails, backoffs, snoozes, rel, drop := s.done, s.doneRes, s.fails, s.backoffs, s.snoozes, s.rel, s.drop
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := c.tally
	// A write that fails leaves its jobs Running; their leases expire and
	// other workers take them again (at least once).
	if len(done) > 0 {
		lost, _ := c.writeBack(ctx, "completion", OutcomeCompleted, done, func(ctx context.Context) ([]*skiplock.Job, error) {
			return c.q.CompleteManyWith(ctx, done, c.cfg.OnComplete)
		})
		t.completed.Add(int64(len(done) - len(lost)))
		t.afterCompleted(doneRes, lost)
	}
	if len(fails) > 0 {
		lost, err := c.writeBack(ctx, "failure", 0, failedJobs(fails), func(ctx context.Context) ([]*skiplock.Job, error) {
			return c.q.failMany(ctx, fails, backoffs)
		})
		t.failed(fails, lost)
		if err == nil {
			t.logFailures(fails, backoffs, lost)
			wakeForRetries(fails, backoffs, c.wakeIn)
		}
	}
	if len(rel) > 0 {
		lost, _ := c.writeBack(ctx, "release", OutcomeReleased, rel, func(ctx context.Context) ([]*skiplock.Job, error) { return c.q.ReleaseMany(ctx, rel) })
		t.released.Add(int64(len(rel) - len(lost)))
	}
	for d, jobs := range snoozes {
		lost, _ := c.writeBack(ctx, "snooze", OutcomeSnoozed, jobs, func(ctx context.Context) ([]*skiplock.Job, error) { return c.q.SnoozeMany(ctx, jobs, d) })
		t.snoozed.Add(int64(len(jobs) - len(lost)))
		if len(lost) < len(jobs) {
			c.wakeIn(d)
		}
	}
	t.lost.Add(int64(len(drop)))
	t.report(drop, drop, OutcomeLost)
	c.book.written(batch)
	c.written()
}

// writeBack persists one kind of result for jobs (see persist) and
// returns the jobs whose result was not written: their lease was lost, or
// the write failed (logged, and returned; they run again when their
// leases expire). They are counted as lost.
func (c *completer) writeBack(ctx context.Context, what string, o Outcome, jobs []*skiplock.Job, write func(ctx context.Context) ([]*skiplock.Job, error)) ([]*skiplock.Job, error) {
	var lost []*skiplock.Job
	err := c.book.persist(ctx, what, jobs, func(ctx context.Context) (err error) {
		lost, err = write(ctx)
		return err
	})
	if err != nil {
		c.breaker.failed(err, c.cfg.Logger)
		c.cfg.Logger.Warn("writing results failed: the jobs run again when their leases expire", "what", what, "jobs", len(jobs), logs.Err(err))
		if rj := rejectedJobs(err); rj != nil {
			lost = append(lost, rj...)
		} else {
			lost = jobs
		}
	} else {
		c.breaker.wrote(c.cfg.Logger)
	}
	c.tally.lost.Add(int64(len(lost)))
	if o != 0 {
		c.tally.report(jobs, lost, o)
	} // 0: the caller reports (failures: tally.failed)
	return lost, err
}

// breaker counts the result writes that failed in a row: at breakerAfter
// the producer claims but one job at a time (see produce), so that a
// fault that refuses every result does not run the queue's jobs again
// and again, spending their attempts.
type breaker struct {
	fails atomic.Int64
}

// breakerAfter is how many result writes in a row must fail before the
// producer claims one job at a time.
const breakerAfter = 3

// tripped reports whether the producer should claim one job at a time.
func (b *breaker) tripped() bool {
	return b.fails.Load() >= breakerAfter
}

// failed counts a failed result write.
func (b *breaker) failed(err error, log *slog.Logger) {
	if b.fails.Add(1) == breakerAfter {
		log.Error("result writes keep failing: claiming one job at a time until a result is written again", "failed_in_a_row", breakerAfter, logs.Err(err))
	}
}

// wrote counts a result write that went through.
func (b *breaker) wrote(log *slog.Logger) {
	if b.fails.Swap(0) >= breakerAfter {
		log.Info("results are written again: claiming as before")
	}
}
