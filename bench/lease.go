package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/retry"
)

// leaseDriver runs the latency scenario in lease mode (jobs that take
// time, one per worker) on the library's own worker, bucketed.Worker,
// with c.Workers goroutines over the small pool: its producer (one
// claimer for every goroutine, with a prefetch, so a goroutine that
// finishes a job takes the next one from memory) and batched completions
// are what a user's Worker gets. A job's latency runs from its goroutine
// asking for work to the commit of its completion
// (WorkerConfig.AfterComplete), so waiting for a claim or a completion is
// measured; its dequeue time is the goroutine's wait for a job (nothing
// when one was prefetched).
type leaseDriver struct {
	*bucketedDriver
	c *Config
}

// leasePoll is how often a run by job count checks whether any job is
// left.
const leasePoll = 20 * time.Millisecond

// runWorkers runs the Worker until deadline (zero: until no job is Queued
// or Running), then stops it as pgbench -T stops: no new claims, the jobs
// in flight finish and are written. An interrupt (ctx) stops it at once:
// the jobs in hand are given back.
func (d *leaseDriver) runWorkers(ctx context.Context, deadline time.Time, rec *recorder) error {
	w, err := d.q.NewWorker(&bucketed.WorkerConfig{
		Queue: DefaultQueue, Workers: d.c.Workers, Batch: 1,
		Handler: func(ctx context.Context, _ *skiplock.Job) error { return retry.Sleep(ctx, d.c.Work) },
		AfterComplete: func(_ *skiplock.Job, asked, claimed time.Time) {
			rec.job(claimed.Sub(asked), time.Since(asked))
		},
		// Failed statements (claims, completions, heartbeats) are the
		// run's errors; the worker's other lines ("recovered") are not.
		Logf: func(format string, args ...any) {
			for _, a := range args {
				if err, ok := a.(error); ok {
					rec.fail(err)
					return
				}
			}
		},
	})
	if err != nil {
		return err
	}
	// The handlers' parent outlives the run's context: Stop decides how
	// they end.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	waitErr := d.wait(ctx, deadline)
	if err := w.Stop(ctx); err != nil && ctx.Err() == nil {
		rec.fail(fmt.Errorf("stop: %w", err))
	}
	st := w.Stats()
	for range st.Lost {
		rec.fail(fmt.Errorf("complete: %w", skiplock.ErrLeaseLost))
	}
	if !deadline.IsZero() && st.Claimed >= int64(d.c.Jobs) {
		d.c.Logf("warning: the workers claimed all %d preloaded jobs before the deadline: %v", d.c.Jobs, ErrQueueDry)
	}
	return waitErr
}

// wait returns at deadline, when ctx ends, or (deadline zero) once no
// job is left.
func (d *leaseDriver) wait(ctx context.Context, deadline time.Time) error {
	if !deadline.IsZero() {
		retry.Sleep(ctx, time.Until(deadline)) //nolint:errcheck // ctx ends the run
		return nil
	}
	for {
		if err := retry.Sleep(ctx, leasePoll); err != nil {
			return nil
		}
		// The bench's own poll, not the workers' statements.
		pending, err := d.q.Pending(uncounted(ctx), DefaultQueue)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("checking for jobs left: %w", err)
		case !pending:
			return nil
		}
	}
}
