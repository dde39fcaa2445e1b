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
// transaction. Runs with a batch of 1 run on client.Client
// (clientDriver); otherwise each worker claims up to a batch itself and
// completes it in one statement (no work) or job by job.
type bucketedDriver struct {
	q     *bucketed.Queue
	batch int
}

func newBucketedDriver(db *skiplock.DB, c *Config, counters *retry.Counters) (driver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: c.Schema, Retry: retryOptions(db, counters), DeleteCompleted: c.DeleteCompleted})
	if err != nil {
		return nil, err
	}
	d := &bucketedDriver{q: q, batch: c.Batch}
	if c.Batch == 1 && c.Scenario != ScenarioTombstones {
		return &clientDriver{driver: d, layout: schema.LayoutBucketed, c: c, db: db, counters: counters,
			pending: func(ctx context.Context) (bool, error) { return q.Pending(ctx, DefaultQueue) }}, nil
	}
	return d, nil
}

func (d *bucketedDriver) tables() []string { return []string{schema.JobsTable} }

func (d *bucketedDriver) enqueue(ctx context.Context, jobs []skiplock.NewJob) error {
	_, err := d.q.EnqueueMany(ctx, jobs)
	return err
}

func (d *bucketedDriver) burn(ctx context.Context) (int, time.Duration, error) {
	start := time.Now()
	jobs, err := d.q.Dequeue(ctx, DefaultQueue, d.batch)
	claim := time.Since(start)
	if err != nil || len(jobs) == 0 {
		return 0, claim, err
	}
	lost, err := d.q.CompleteMany(ctx, jobs)
	if err == nil && len(lost) > 0 {
		err = fmt.Errorf("complete: %d of %d jobs: %w", len(lost), len(jobs), skiplock.ErrLeaseLost)
	}
	return len(jobs), claim, err
}

func (d *bucketedDriver) step(ctx context.Context, work time.Duration, rec *recorder) (int, error) {
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
		if err := simulateWork(ctx, work); err != nil {
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
