package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// driver is what the latency and throughput scenarios need from a
// layout, through its public API.
type driver interface {
	// enqueue adds one batch of jobs.
	enqueue(ctx context.Context, jobs []skiplock.NewJob) error
	// step claims up to the configured batch of jobs, works on each for
	// work, completes them, and records each in rec. It returns how many
	// jobs it claimed: 0 when none was free.
	step(ctx context.Context, work time.Duration, rec *recorder) (int, error)
	// burn claims up to the configured batch of no-op jobs and completes
	// them, returning how many it claimed (0 when none was free) and how
	// long the claim took (the tombstones scenario).
	burn(ctx context.Context) (int, time.Duration, error)
	// tables are the tables the layout's jobs live in (for ANALYZE).
	tables() []string
}

// workerRunner is a driver that runs the layout's own worker pool
// (client.Client) instead of runJobs' goroutines calling step:
// runWorkers works jobs until deadline (zero: until none is left),
// records each in rec, and returns once the jobs in flight are written.
type workerRunner interface {
	// prepare does what comes before the run's clock starts (building
	// the pool, opening its connections), recording into rec.
	prepare(ctx context.Context, rec *recorder) error
	runWorkers(ctx context.Context, deadline time.Time, rec *recorder) error
}

// newDriver makes a layout's driver on the workers' pool.
type newDriver func(db *skiplock.DB, c *Config, counters *retry.Counters) (driver, error)

var drivers = map[schema.Layout]newDriver{}

// retryOptions are the retry options the layouts get: the engine's queue
// isolation, and the run's counters.
func retryOptions(db *skiplock.DB, counters *retry.Counters) *retry.Options {
	return &retry.Options{Isolation: db.Dialect().DefaultIsolation, Counters: counters}
}

// prepare empties the bench tables, opens the workers' pool, makes the
// layout's driver and preloads c.Jobs jobs. done closes the pool and
// empties the tables again.
func prepare(ctx context.Context, c *Config, admin *skiplock.DB, layout schema.Layout) (*skiplock.DB, driver, *retry.Counters, func(), error) {
	mk, ok := drivers[layout]
	if !ok {
		return nil, nil, nil, nil, fmt.Errorf("layout %s is not available in this build", layout)
	}
	if err := empty(ctx, c, admin); err != nil {
		return nil, nil, nil, nil, err
	}
	pool, err := openPool(ctx, c)
	if err != nil {
		emptyAfter(ctx, c, admin)
		return nil, nil, nil, nil, err
	}
	done := func() { pool.Close(); emptyAfter(ctx, c, admin) }
	counters := &retry.Counters{}
	drv, err := mk(pool, c, counters)
	if err == nil {
		// Before the jobs go in, so that they go in partitioned as the
		// run asks, with no rewrite of their partitions.
		err = resetLimits(ctx, c, admin)
	}
	if err == nil {
		err = preload(ctx, c, admin, c.Jobs, drv.enqueue, drv.tables()...)
	}
	if err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return pool, drv, counters, done, nil
}

// runJobs runs the latency or throughput scenario.
func runJobs(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	pool, drv, counters, done, err := prepare(ctx, c, admin, c.Layout)
	if err != nil {
		return err
	}
	defer done()

	rec := newRecorder()
	var peak atomic.Int64
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	writes0, writesOK := markWrites(ctx, admin, c, drv.tables())
	if r, ok := drv.(workerRunner); ok {
		if err := r.prepare(ctx, rec); err != nil {
			return err
		}
	}
	stmts0 := c.stmts.load()
	start := time.Now()
	go rec.progress(progCtx, c.Out, c.Progress, start, pool, &peak)
	var deadline time.Time
	if c.Duration > 0 {
		deadline = start.Add(c.Duration)
		rec.windowEnd = deadline
	}
	// A burn-down (no duration) ends when no job is left to claim; a timed
	// run stops claiming at the deadline and lets the jobs in flight
	// finish, as pgbench -T does.
	var dry atomic.Int64
	var wg sync.WaitGroup
	workers := c.Workers
	if r, ok := drv.(workerRunner); ok {
		workers = 0 // they are the driver's
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.runWorkers(ctx, deadline, rec); err != nil && ctx.Err() == nil {
				rec.fail(err)
			}
		}()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failing := 0
			for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
				n, err := drv.step(ctx, c.Work, rec)
				if err == nil {
					failing = 0
				}
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					rec.fail(err)
					if failing++; failing >= maxFailing {
						return // the report carries the errors
					}
					retry.Sleep(ctx, 50*time.Millisecond+rand.N(50*time.Millisecond)) //nolint:errcheck // ctx ends the loop
				case n == 0 && deadline.IsZero():
					return
				case n == 0:
					dry.Add(1)
					retry.Sleep(ctx, 10*time.Millisecond) //nolint:errcheck // ctx ends the loop
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	stopProgress()
	peakConns := int(max(peak.Load(), int64(pool.Stats().Total)))
	rec.fill(rep, secs, c.Duration, counters, peakConns, c.stmts.load().since(stmts0))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench interrupted after %.1fs and %d jobs: %w", secs, rep.Jobs, err)
	}
	if writesOK && c.Scenario == ScenarioThroughput {
		pool.Close() // its backends report their statistics as they exit
		rep.Writes = writesSince(ctx, admin, c, drv.tables(), writes0, rep.Jobs)
	}
	if rep.Jobs == 0 && rep.Errors > 0 {
		return fmt.Errorf("no job completed in %.1fs (%d errors); the first: %s", secs, rep.Errors, rep.ErrorSamples[0])
	}
	if dry.Load() > 0 {
		c.Logger.Warn("workers found no free job", "times", dry.Load(), logs.Err(ErrQueueDry))
	}
	return nil
}

// maxFailing is how many errors in a row make a worker give up, so that a
// broken setup ends the run instead of spinning.
const maxFailing = 20

// emptyAfter leaves the bench schema empty after a run (best effort).
func emptyAfter(ctx context.Context, c *Config, admin *skiplock.DB) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := empty(ctx, c, admin); err != nil {
		c.Logger.Warn("leaving the schema with jobs in it", "schema", c.Schema, logs.Err(err))
	}
}

// lockSQL is the scalable-job-queue article's lock-only statement made correct, the same as
// scripts/lock.sql: the locking clause on each branch that reads
// job_queue, from a random start ($1) with wrap-around.
func lockSQL(c *Config) string {
	q := table(c, schema.JobQueueTable)
	return `SELECT "id" FROM (SELECT "id" FROM ` + q + ` WHERE "id" >= $1 ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) "fanout_from_start"` +
		` UNION ALL SELECT "id" FROM (SELECT "id" FROM ` + q + ` WHERE "id" < $1 ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) "fanout_wrap" LIMIT 1`
}

// runLock runs the lock scenario: each client holds one connection and
// runs BEGIN; lock one row; COMMIT until the deadline.
func runLock(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	pool, _, counters, done, err := prepare(ctx, c, admin, schema.LayoutFanout)
	if err != nil {
		return err
	}
	defer done()
	sql := lockSQL(c)
	opts := retryOptions(pool, counters)
	rec := newRecorder()
	var peak atomic.Int64
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	var empties atomic.Int64
	stmts0 := c.stmts.load()
	start := time.Now()
	deadline := start.Add(c.Duration)
	rec.windowEnd = deadline
	go rec.progress(progCtx, c.Out, c.Progress, start, pool, &peak)
	var pidMu sync.Mutex
	var pids []int32
	workersDone := make(chan struct{})
	go stuckWatchdog(ctx, admin, workersDone, deadline, func() []int32 {
		pidMu.Lock()
		defer pidMu.Unlock()
		return append([]int32(nil), pids...)
	})
	var wg sync.WaitGroup
	for w := 0; w < c.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				rec.fail(err)
				return
			}
			defer conn.Release()
			pidMu.Lock()
			pids = append(pids, int32(conn.PID()))
			pidMu.Unlock()
			// The transactions run under a context that is never
			// cancelled: with a cancellable one, pgx arms and disarms a
			// cancel watcher around every statement, a tenth of the
			// client's CPU in this scenario, which the server then lacks
			// (pgbench has no such cost). The loop checks ctx between
			// transactions, so an interrupt ends the run within one
			// (millisecond) transaction; a stuck one is cancelled on the
			// server by stuckWatchdog.
			txCtx := context.WithoutCancel(ctx)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				var claim time.Duration
				err := retry.Run(txCtx, conn, opts, func(ctx context.Context, tx skiplock.Tx) error {
					s := time.Now()
					rows, err := tx.Query(ctx, sql, randomKey())
					if err != nil {
						return err
					}
					found := rows.Next()
					rows.Close()
					claim = time.Since(s)
					if err := rows.Err(); err != nil {
						return err
					}
					if !found {
						empties.Add(1)
					}
					return nil
				})
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					rec.fail(err)
					continue
				}
				rec.job(claim, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	close(workersDone)
	secs := time.Since(start).Seconds()
	stopProgress()
	rec.fill(rep, secs, c.Duration, counters, int(max(peak.Load(), int64(pool.Stats().Total))), c.stmts.load().since(stmts0))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench interrupted after %.1fs: %w", secs, err)
	}
	if n := empties.Load(); n > 0 {
		c.Logger.Warn("transactions found no row to lock", "transactions", n, logs.Err(ErrQueueDry))
	}
	return nil
}

// Watchdog grace periods: how long workers whose statements run without a
// cancellable context get to return after an interrupt, or after the
// deadline, before their statements are cancelled on the server.
const (
	stopGrace     = 2 * time.Second
	deadlineGrace = 30 * time.Second
)

// stuckWatchdog cancels, on the server, the statements of the connections
// pids lists when the workers have not returned stopGrace after ctx ends
// or deadlineGrace after the deadline: workers that run their statements
// under a context that is never cancelled (to spare pgx's per-statement
// cancel watcher) can still be interrupted. Best effort: an engine without
// pg_cancel_backend just waits.
func stuckWatchdog(ctx context.Context, admin *skiplock.DB, done <-chan struct{}, deadline time.Time, pids func() []int32) {
	late := time.NewTimer(time.Until(deadline) + deadlineGrace)
	defer late.Stop()
	select {
	case <-done:
		return
	case <-late.C:
	case <-ctx.Done():
		select {
		case <-done:
			return
		case <-time.After(stopGrace):
		}
	}
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := admin.Exec(cctx, "SELECT pg_cancel_backend(p) FROM unnest($1::int4[]) AS p", pids())
		cancel()
		if err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(stopGrace):
		}
	}
}

// randomKey is a random start in the text UUID key space, as pgbench's
// scripts draw it (eight hex digits).
func randomKey() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// runBaseline runs the article's script through pgbench on the same database
// with the same clients and duration, and puts it next to rep.
func runBaseline(ctx context.Context, c *Config, admin *skiplock.DB, path string, rep *Report) error {
	mk, ok := drivers[schema.LayoutFanout]
	if !ok {
		return fmt.Errorf("the baseline needs the fanout layout, which is not available in this build")
	}
	if err := empty(ctx, c, admin); err != nil {
		return err
	}
	defer emptyAfter(ctx, c, admin)
	drv, err := mk(admin, c, nil)
	if err != nil {
		return err
	}
	// c.DSN goes through the --rtt proxy when there is one: pgbench's
	// round trips are emulated as ours are.
	clients := c.baselineClients()
	if c.Scenario == ScenarioThroughput && c.Layout == schema.LayoutBucketed {
		return runClaimCompleteBaseline(ctx, c, admin, path, rep)
	}
	run := &pgbenchRun{Path: path, DSN: c.DSN, Schema: c.Schema, Clients: clients, Duration: c.Duration, Work: c.Work, Out: c.Out}
	if c.Progress > 0 {
		run.Progress = c.Progress
	}
	jobs := c.Jobs
	switch c.Scenario {
	case ScenarioLatency:
		run.Script = "latency.sql"
	case ScenarioLock:
		run.Script = "lock.sql"
	case ScenarioThroughput:
		run.Script = "throughput.sql"
	}
	if run.Duration == 0 {
		// A job count: each client runs its share, and exactly that many
		// jobs are there (pgbench's \gset fails on an empty queue).
		run.TxPerClient = (jobs + clients - 1) / clients
		jobs = run.TxPerClient * clients
	}
	if err := preload(ctx, c, admin, jobs, drv.enqueue, drv.tables()...); err != nil {
		return err
	}
	c.Logger.Info("baseline: pgbench", "clients", clients, "script", run.Script)
	res, hist, err := run.Run(ctx)
	if err != nil {
		return err
	}
	setBaseline(c, rep, res, hist, schema.LayoutFanout, ModeTx)
	return nil
}

// setBaseline puts pgbench's result next to rep, with their ratios.
func setBaseline(c *Config, rep *Report, res pgbenchResult, hist *Histogram, layout schema.Layout, mode string) {
	b := &Report{Tool: "pgbench", Scenario: c.Scenario, Layout: string(layout), Mode: mode, Workers: res.Clients, RTTMS: ms64(c.RTT),
		Jobs: res.Processed, JobsPerS: res.TPS, Errors: res.Failed, Connections: res.Clients,
		Retries: Retries{BySQLState: map[string]int64{}}}
	if res.TPS > 0 {
		b.Seconds = float64(res.Processed) / res.TPS
	}
	b.LatencyMS = hist.Summary()
	if b.LatencyMS.Count == 0 {
		b.LatencyMS.Avg = res.LatencyMS
	}
	if c.Scenario == ScenarioLatency && c.Work > 0 {
		eff := b.JobsPerS / c.idealRate()
		b.Efficiency = &eff
	}
	rep.Baseline = b
	if rep.Engine != nil {
		rep.Engine.Pgbench = res.Version
	}
	if b.JobsPerS > 0 {
		ratio := rep.JobsPerS / b.JobsPerS
		rep.Ratio = &ratio
		if rep.WindowJobsPerS != nil {
			// pgbench's tps already counts only what finished in -T.
			b.WindowJobsPerS = &b.JobsPerS
			wr := *rep.WindowJobsPerS / b.JobsPerS
			rep.WindowRatio = &wr
		}
	}
}

// claimCompleteBatch is how many jobs one claimcomplete.sql statement
// takes, and claimCompleteClients how many pgbench clients run it.
const (
	claimCompleteBatch   = 100
	claimCompleteClients = 8
)

// runClaimCompleteBaseline is a bucketed burn-down's baseline: the SQL
// limit, claimcomplete.sql through pgbench on the same table and index,
// claimCompleteClients clients each claiming and completing up to
// claimCompleteBatch jobs of a random bucket per statement. Buckets run
// dry at different times, so pgbench runs its transactions in rounds
// until no job is Queued; the rate is the jobs completed over the time
// from the first round's start to the last completion (finished_at), so
// that the empty statements of a round's tail do not count.
func runClaimCompleteBaseline(ctx context.Context, c *Config, admin *skiplock.DB, path string, rep *Report) error {
	if err := empty(ctx, c, admin); err != nil {
		return err
	}
	defer emptyAfter(ctx, c, admin)
	drv, err := drivers[schema.LayoutBucketed](admin, c, nil)
	if err != nil {
		return err
	}
	if err := preload(ctx, c, admin, c.Jobs, drv.enqueue, drv.tables()...); err != nil {
		return err
	}
	jobs := table(c, schema.JobsTable)
	var buckets string
	if err := admin.QueryRow(ctx, `SELECT "value" FROM `+table(c, schema.SettingTable)+` WHERE "name" = 'bucketed.buckets'`).Scan(&buckets); err != nil {
		return fmt.Errorf("read the bucket count: %w", err)
	}
	run := &pgbenchRun{Path: path, DSN: c.DSN, Schema: c.Schema, Script: "claimcomplete.sql", Clients: claimCompleteClients, Out: c.Out,
		Vars: map[string]string{"buckets": buckets, "queue": DefaultQueue}}
	if c.Progress > 0 {
		run.Progress = c.Progress
	}
	c.Logger.Info("baseline: pgbench", "clients", claimCompleteClients, "script", "claimcomplete.sql", "jobs_per_statement", claimCompleteBatch)
	var start time.Time
	if err := admin.QueryRow(ctx, "SELECT now()").Scan(&start); err != nil {
		return err
	}
	writes0, writesOK := markWrites(ctx, admin, c, drv.tables())
	var total pgbenchResult
	hist := NewHistogram()
	left := int64(c.Jobs)
	for round := 0; left > 0; round++ {
		if round == 20 {
			return fmt.Errorf("baseline: %d jobs still Queued after %d pgbench rounds", left, round)
		}
		// Twice the statements the jobs left need, shared by the clients.
		run.TxPerClient = int(2*left/claimCompleteBatch/claimCompleteClients) + 1
		res, h, err := run.Run(ctx)
		if err != nil {
			return err
		}
		total.Clients, total.Version, total.Failed = res.Clients, res.Version, total.Failed+res.Failed
		hist.Merge(h)
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE "status" = 'Queued'`).Scan(&left); err != nil {
			return err
		}
	}
	var done int64
	var last time.Time
	if err := admin.QueryRow(ctx, `SELECT count(*), max("finished_at") FROM `+jobs+` WHERE "status" = 'Success'`).Scan(&done, &last); err != nil {
		return err
	}
	total.Processed = done
	if secs := last.Sub(start).Seconds(); secs > 0 {
		total.TPS = float64(done) / secs
	}
	setBaseline(c, rep, total, hist, schema.LayoutBucketed, ModeLease)
	if writesOK {
		rep.Baseline.Writes = writesSince(ctx, admin, c, drv.tables(), writes0, done)
	}
	return nil
}

// benchLimits are the bench queue's limits: --concurrency, per partition
// of --partitions (by key) where it is given.
func benchLimits(c *Config) bucketed.Limits {
	l := bucketed.Limits{Concurrency: c.Concurrency}
	if c.Partitions > 0 {
		l.PartitionBy = "key"
	}
	return l
}

// resetLimits sets the bench queue's limits (benchLimits), on either
// layout (fanout's claims keep the global limit too), clearing what a
// previous run left: a bench throughput --concurrency would otherwise
// send every claim of the next run down the limited path.
func resetLimits(ctx context.Context, c *Config, admin *skiplock.DB) error {
	q, err := bucketed.New(ctx, admin, &bucketed.Config{Schema: c.Schema})
	if err != nil {
		return err
	}
	return q.SetLimits(ctx, DefaultQueue, benchLimits(c))
}
