package bench

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

func init() { drivers[schema.LayoutFanout] = newFanoutDriver }

// fanoutDriver runs tx mode: Process claims a job, the handler "works" on
// it inside the claiming transaction (holding its connection, as seed
// 003's pg_sleep does), and the job is deleted in the same commit.
type fanoutDriver struct {
	q *fanout.Queue
}

func newFanoutDriver(db *skiplock.DB, c *Config, counters *retry.Counters) (driver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: c.Schema, Queue: DefaultQueue, Retry: retryOptions(db, counters)})
	if err != nil {
		return nil, err
	}
	d := &fanoutDriver{q: q}
	if c.Scenario != ScenarioTombstones {
		return &clientDriver{driver: d, layout: schema.LayoutFanout, c: c, db: db, counters: counters, pending: q.HasQueued}, nil
	}
	return d, nil
}

func (d *fanoutDriver) tables() []string { return []string{schema.JobQueueTable} }

func (d *fanoutDriver) enqueue(ctx context.Context, jobs []skiplock.NewJob) error {
	_, err := d.q.EnqueueMany(ctx, jobs)
	return err
}

func (d *fanoutDriver) burn(ctx context.Context) (int, time.Duration, error) {
	res, err := d.q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return nil })
	if err != nil || res.Job == nil {
		return 0, res.Claim, err
	}
	if res.HandlerErr != nil {
		return 1, res.Claim, res.HandlerErr
	}
	return 1, res.Claim, nil
}

func (d *fanoutDriver) step(ctx context.Context, work time.Duration, rec *recorder) (int, error) {
	start := time.Now()
	res, err := d.q.Process(ctx, func(ctx context.Context, _ skiplock.Tx, _ *skiplock.Job) error {
		return simulateWork(ctx, work)
	})
	if err != nil {
		return 0, err
	}
	if res.Job == nil {
		return 0, nil
	}
	if res.HandlerErr != nil {
		rec.fail(res.HandlerErr)
		return 1, nil
	}
	rec.job(res.Claim, time.Since(start))
	return 1, nil
}
