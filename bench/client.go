package bench

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// clientDriver runs the latency scenario (jobs that take time, one per
// worker) on the library's client, client.Client: one queue of c.Workers
// workers of the run's layout, and a raw worker for kind "" (the bench
// enqueues jobs without a kind) that sleeps c.Work. What runs is what a
// user's Client runs. Bucketed: one producer claims for every goroutine,
// with a prefetch, so a goroutine that finishes a job takes the next one
// from memory, and completions are batched; the client shares a small
// pool (AllowSmallPool). Fanout: each worker claims, works and deletes a
// job in one transaction, holding its connection, with the idle
// goroutines sharing one poller. Notifications are off: every job is
// preloaded, so nothing is inserted to be woken for, and the listener
// would hold a connection. A job's latency runs from its goroutine asking
// for work to the commit of its completion (Config.AfterComplete), so
// waiting for a claim or a completion is measured; its dequeue time is
// the wait for the job (nothing for a prefetched one).
type clientDriver struct {
	driver
	layout   schema.Layout
	c        *Config
	db       *skiplock.DB
	counters *retry.Counters
	// pending is the bench's own check for jobs left (a run by job count
	// ends when it says no).
	pending func(ctx context.Context) (bool, error)

	// The Client prepare built, and its completions so far.
	cl        *client.Client
	completed atomic.Int64
}

// clientPoll is how often a run by job count checks its completion
// count, and pendingPoll how often it asks the database whether any job is
// left (for jobs that will not complete: lost, failed for good). The
// database check is the bench's own load on the server, so it is rare.
const (
	clientPoll  = 20 * time.Millisecond
	pendingPoll = time.Second
)

// prepare builds the Client (which reads the schema) and opens the
// pool's connections (warmPool), before the run's clock starts: as
// pgbench's tps leaves out its initial connection time.
func (d *clientDriver) prepare(ctx context.Context, rec *recorder) error {
	workers := client.NewWorkers()
	err := client.AddRawWorker(workers, "", func(ctx context.Context, _ *skiplock.Job) error { return simulateWork(ctx, d.c.Work) }, nil)
	if err != nil {
		return err
	}
	d.cl, err = client.New(ctx, d.db, &client.Config{
		Schema:  d.c.Schema,
		Queues:  map[string]client.QueueConfig{DefaultQueue: {Layout: d.layout, MaxWorkers: d.c.Workers, HeldClaims: d.c.HeldClaims}},
		Workers: workers, Notify: client.NotifyOff, JobTimeout: -1, AllowSmallPool: true,
		Retry: retryOptions(d.db, d.counters), DeleteCompleted: d.c.DeleteCompleted,
		AfterComplete: func(_ *skiplock.Job, asked, claimed time.Time) {
			rec.job(claimed.Sub(asked), time.Since(asked))
			d.completed.Add(1)
		},
		// Failed statements (claims, completions, heartbeats) are the
		// run's errors; the client's other lines ("recovered") are not.
		Logger: errorsOf(rec, nil),
	})
	if err != nil {
		return err
	}
	return warmPool(ctx, d.db)
}

// warmPool opens every connection of db's pool, all at once, before the
// run's clock starts, as pgbench connects all its clients first: a
// connection opened mid-run costs its claim several round trips (TCP,
// startup, authentication) behind --rtt.
func warmPool(ctx context.Context, db *skiplock.DB) error {
	n := int(db.Stats().Max)
	conns := make(chan skiplock.Conn, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := db.Acquire(uncounted(ctx))
			if err != nil {
				errs <- err
				return
			}
			conns <- c
		}()
	}
	var first error
	for range n {
		select {
		case c := <-conns:
			defer c.Release()
		case err := <-errs:
			first = cmp.Or(first, err)
		}
	}
	if first != nil {
		return fmt.Errorf("open the pool's connections: %w", first)
	}
	return nil
}

// runWorkers runs the Client prepare built until deadline (zero: until no
// job is Queued or Running), then stops it as pgbench -T stops: no new
// claims, the jobs in flight finish and are written. An interrupt (ctx)
// stops it at once: the jobs in hand are given back.
func (d *clientDriver) runWorkers(ctx context.Context, deadline time.Time, rec *recorder) error {
	cl, completed := d.cl, &d.completed
	// The handlers' parent outlives the run's context: Stop decides how
	// they end. (The bench's prepare set the queue's limits before the
	// preload.)
	if err := cl.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	waitErr := d.wait(ctx, deadline, completed)
	if err := cl.Stop(ctx); err != nil && ctx.Err() == nil {
		rec.fail(fmt.Errorf("stop: %w", err))
	}
	st, _ := cl.QueueStats(DefaultQueue)
	for range st.Lost {
		rec.fail(fmt.Errorf("complete: %w", skiplock.ErrLeaseLost))
	}
	if !deadline.IsZero() && st.Claimed >= int64(d.c.Jobs) {
		d.c.Logger.Warn("the workers claimed all the preloaded jobs before the deadline", "jobs", d.c.Jobs, logs.Err(ErrQueueDry))
	}
	return waitErr
}

// wait returns at deadline, when ctx ends, or (deadline zero) once every
// preloaded job completed or no job is left.
func (d *clientDriver) wait(ctx context.Context, deadline time.Time, completed *atomic.Int64) error {
	if !deadline.IsZero() {
		retry.Sleep(ctx, time.Until(deadline)) //nolint:errcheck // ctx ends the run
		return nil
	}
	checked := time.Now()
	for {
		if err := retry.Sleep(ctx, clientPoll); err != nil {
			return nil
		}
		if completed.Load() >= int64(d.c.Jobs) {
			return nil
		}
		if time.Since(checked) < pendingPoll {
			continue
		}
		checked = time.Now()
		// The bench's own poll, not the workers' statements.
		pending, err := d.pending(uncounted(ctx))
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
