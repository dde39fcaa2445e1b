package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// The enqueue scenario (runEnqueue) times inserts alone, into an emptied
// table: bulk sends Jobs no-op jobs through the layout's bulk API
// (bucketed.Queue.EnqueueMany, fanout.Queue.EnqueueMany), Batch jobs per
// call, from Workers callers; single inserts them one per call through
// client.Client.Insert from Workers goroutines, as an application's
// request handlers would. Jobs/s is Jobs over the time from the first
// call to the last return; every job is then counted in the table.

// ScenarioEnqueue is the enqueue scenario's name.
const ScenarioEnqueue = "enqueue"

// Enqueue modes (Config.EnqueueMode).
const (
	EnqueueBulk   = "bulk"
	EnqueueSingle = "single"
)

// Enqueue defaults.
const (
	// DefaultEnqueueBulkJobs and DefaultEnqueueSingleJobs are Jobs's
	// defaults per mode.
	DefaultEnqueueBulkJobs   = 200000
	DefaultEnqueueSingleJobs = 20000
	// DefaultEnqueueClients is single mode's default Workers.
	DefaultEnqueueClients = 50
)

// enqueueDefaults validates and fills in the enqueue scenario's Config.
func (c Config) enqueueDefaults() (Config, error) {
	o := c
	switch o.EnqueueMode {
	case "":
		o.EnqueueMode = EnqueueBulk
	case EnqueueBulk, EnqueueSingle:
	default:
		return o, usage.Errorf("--mode %q: the enqueue scenario's modes are bulk (the layout's bulk API) and single (one job per Insert)", o.EnqueueMode)
	}
	if o.Samples != 0 || o.Gap != 0 || o.PollInterval != 0 || o.NoNotify || o.SameClient || o.Baseline || o.Duration != 0 || o.Work != 0 {
		return o, usage.Errorf("the enqueue scenario takes --mode, --jobs, --clients, --batch, --layout, --conns, --rtt and --separate-begin: leave the other scenarios' flags out")
	}
	if o.Jobs < 0 || o.Workers < 0 || o.Batch < 0 || o.Conns < 0 {
		return o, usage.Errorf("--jobs, --clients, --batch and --conns cannot be negative")
	}
	if o.Layout == "" {
		o.Layout = schema.LayoutBucketed
	}
	l, err := schema.ParseLayout(string(o.Layout))
	if err != nil {
		return o, err
	}
	o.Layout = l
	bulk := o.EnqueueMode == EnqueueBulk
	if o.Jobs == 0 {
		o.Jobs = map[bool]int{true: DefaultEnqueueBulkJobs, false: DefaultEnqueueSingleJobs}[bulk]
	}
	if o.Workers == 0 {
		o.Workers = map[bool]int{true: 1, false: DefaultEnqueueClients}[bulk]
	}
	if o.Batch == 0 {
		o.Batch = preloadBatch
	}
	if o.Conns == 0 {
		o.Conns = o.Workers
	}
	if o.WorkflowRoots > 0 {
		// The insert reads the queue's partitioning on a connection of
		// its own while its transaction holds one.
		o.Conns = max(o.Conns, 2)
	}
	return o, o.commonDefaults()
}

// enqueueTables are the tables a layout's enqueue writes.
func enqueueTables(l schema.Layout) []string {
	if l == schema.LayoutFanout {
		return []string{schema.JobQueueTable, schema.JobAttemptTable}
	}
	return []string{schema.JobsTable}
}

// truncate empties the layout's tables (TRUNCATE: new files, no dead
// rows, as riverburn empties river_job).
func truncate(ctx context.Context, c *Config, admin *skiplock.DB) error {
	for _, t := range enqueueTables(c.Layout) {
		if _, err := admin.Exec(ctx, "TRUNCATE "+table(c, t)); err != nil {
			return fmt.Errorf("empty %s: %w", table(c, t), err)
		}
	}
	return nil
}

// runEnqueue runs the enqueue scenario.
func runEnqueue(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	rep.Mode, rep.Layout, rep.Workers = c.EnqueueMode, string(c.Layout), c.Workers
	rep.Settings.Preload, rep.Settings.Batch, rep.Settings.Conns = 0, c.Batch, c.Conns
	if c.EnqueueMode == EnqueueSingle {
		rep.Settings.Batch = 1
	}
	if err := truncate(ctx, c, admin); err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := truncate(ctx, c, admin); err != nil {
			c.Logger.Warn("leaving the schema with jobs in it", "schema", c.Schema, logs.Err(err))
		}
	}()
	pool, err := openPool(ctx, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	counters := &retry.Counters{}
	call, err := enqueueCall(ctx, c, pool, counters)
	if err != nil {
		return err
	}
	per := 1
	if c.EnqueueMode == EnqueueBulk {
		per = c.Batch
	}
	if c.WorkflowRoots > 0 {
		per = c.Jobs // one workflow, in one transaction
	}
	rec := newRecorder()
	var peak atomic.Int64
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	var next atomic.Int64 // jobs handed out
	var wg sync.WaitGroup
	stmts0 := c.stmts.load()
	start := time.Now()
	go rec.progress(progCtx, c.Out, c.Progress, start, pool, &peak)
	for w := 0; w < c.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				hi := next.Add(int64(per))
				n := min(int64(per), int64(c.Jobs)-(hi-int64(per)))
				if n <= 0 {
					return
				}
				t0 := time.Now()
				if err := call(ctx, int(n)); err != nil {
					rec.fail(err)
					return
				}
				rec.job(-1, time.Since(t0))
				rec.done.Add(n - 1) // job counted one
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	stopProgress()
	peakConns := int(max(peak.Load(), int64(pool.Stats().Total)))
	rec.fill(rep, secs, 0, counters, peakConns, c.stmts.load().since(stmts0))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench interrupted after %.1fs: %w", secs, err)
	}
	if rep.Errors > 0 {
		return fmt.Errorf("%d enqueue calls failed; the first: %s", rep.Errors, rep.ErrorSamples[0])
	}
	// Every job is in the table: the figure counts rows, not calls.
	var rows int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+table(c, enqueueTables(c.Layout)[0])).Scan(&rows); err != nil {
		return fmt.Errorf("count the enqueued jobs: %w", err)
	}
	if rows != int64(c.Jobs) {
		return fmt.Errorf("%d jobs enqueued but %d rows in %s", c.Jobs, rows, table(c, enqueueTables(c.Layout)[0]))
	}
	return nil
}

// enqueueCall returns what one caller runs to enqueue n jobs.
func enqueueCall(ctx context.Context, c *Config, pool *skiplock.DB, counters *retry.Counters) (func(ctx context.Context, n int) error, error) {
	if c.EnqueueMode == EnqueueSingle {
		cl, err := client.New(ctx, pool, &client.Config{
			Schema:        c.Schema,
			Queues:        map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: -1}},
			NoMaintenance: true,
			Retry:         &retry.Options{Counters: counters},
			Logger:        c.Logger,
		})
		if err != nil {
			return nil, err
		}
		opts := &client.InsertOpts{Queue: DefaultQueue}
		return func(ctx context.Context, _ int) error {
			_, err := cl.Insert(ctx, rawArgs{}, opts)
			return err
		}, nil
	}
	if c.WorkflowRoots > 0 {
		if c.EnqueueMode != EnqueueBulk || c.Workers != 1 {
			return nil, usage.Errorf("--workflow-roots: a workflow is inserted in one transaction: use --mode bulk and --clients 1")
		}
		return func(ctx context.Context, n int) error { return insertWorkflow(ctx, c, pool, n) }, nil
	}
	batch := make([]skiplock.NewJob, c.Batch)
	for i := range batch {
		batch[i] = skiplock.NewJob{Queue: DefaultQueue, Payload: []byte(`{}`)}
	}
	if c.Layout == schema.LayoutFanout {
		q, err := fanout.New(ctx, pool, &fanout.Config{Schema: c.Schema, Queue: DefaultQueue, EnqueueBatch: c.Batch, Retry: &retry.Options{Counters: counters}})
		if err != nil {
			return nil, err
		}
		return enqueuesOf(batch, q.EnqueueMany), nil
	}
	q, err := bucketed.New(ctx, pool, &bucketed.Config{Schema: c.Schema, EnqueueBatch: c.Batch, Retry: &retry.Options{Counters: counters}})
	if err != nil {
		return nil, err
	}
	return enqueuesOf(batch, q.EnqueueMany), nil
}

// enqueuesOf is a bulk call: the first n jobs of batch through a layout's
// EnqueueMany, whatever it returns besides the error.
func enqueuesOf[R any](batch []skiplock.NewJob, enqueueMany func(context.Context, []skiplock.NewJob) (R, error)) func(context.Context, int) error {
	return func(ctx context.Context, n int) error {
		_, err := enqueueMany(ctx, batch[:n])
		return err
	}
}
