package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

func init() { drivers[schema.LayoutBucketed] = newBucketedDriver }

// bucketedDriver runs lease mode: jobs are claimed under a lease, worked
// without holding a connection, and completed in a second short
// transaction. Workers that work one job at a time for a while (the
// latency scenario) go through a leaseRunner; otherwise each worker claims
// up to a batch itself and completes it in one statement (no work) or job
// by job.
type bucketedDriver struct {
	q     *bucketed.Queue
	batch int
	conns int
	// lease serves workers whose jobs take time (the latency scenario)
	// with coalesced claims and batched completions; nil when jobs take
	// no time (the burn-down), where each worker claims and completes a
	// whole batch itself.
	lease *leaseRunner
}

func newBucketedDriver(db *skiplock.DB, c *Config, counters *retry.Counters) (driver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: c.Schema, Retry: retryOptions(db, counters)})
	if err != nil {
		return nil, err
	}
	d := &bucketedDriver{q: q, batch: c.Batch, conns: c.Conns}
	if c.Work > 0 && c.Batch == 1 {
		d.lease = newLeaseRunner(q, c.Workers)
	}
	return d, nil
}

func (d *bucketedDriver) tables() []string { return []string{schema.JobsTable} }

func (d *bucketedDriver) enqueue(ctx context.Context, jobs []skiplock.NewJob) error {
	_, err := d.q.EnqueueMany(ctx, jobs)
	return err
}

// finish writes the completions still in hand; runJobs calls it once the
// workers have returned.
func (d *bucketedDriver) finish() {
	if d.lease != nil {
		d.lease.finish()
	}
}

func (d *bucketedDriver) step(ctx context.Context, work time.Duration, rec *recorder) (int, error) {
	if d.lease != nil {
		d.lease.start(ctx, rec, d.conns)
		return d.lease.step(ctx, work)
	}
	start := time.Now()
	jobs, err := d.q.Dequeue(ctx, DefaultQueue, d.batch)
	claim := time.Since(start)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	if work <= 0 {
		// No work: complete the whole claim in one statement.
		lost, err := d.q.CompleteMany(ctx, jobs)
		if err != nil {
			return len(jobs), err
		}
		for range lost {
			rec.fail(fmt.Errorf("complete: %w", skiplock.ErrLeaseLost))
		}
		for range len(jobs) - len(lost) {
			rec.job(claim, time.Since(start))
		}
		return len(jobs), nil
	}
	for i, job := range jobs {
		if err := sleepCtx(ctx, work); err != nil {
			// Stopped: give the rest back rather than let leases expire.
			d.q.ReleaseMany(context.WithoutCancel(ctx), jobs[i:]) //nolint:errcheck // best effort on the way out
			return len(jobs), err
		}
		if err := d.q.Complete(ctx, job); err != nil {
			rec.fail(fmt.Errorf("complete job: %w", err))
			continue
		}
		rec.job(claim, time.Since(start))
	}
	return len(jobs), nil
}
