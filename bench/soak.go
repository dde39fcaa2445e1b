package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// The soak scenario (runSoak): steady state over time. Producers enqueue
// while workers work, from an empty queue, with retention at a short age
// so that the pruner deletes finished jobs during the run, as a
// long-running deployment's would. Producers: Producers goroutines on an
// insert-only client.Client of their own pool (as another process
// inserts: the workers hear of new jobs through notifications where the
// engine has them, or their poll), each inserting one job per
// client.Client.Insert as fast as it can (Rate 0, "max"), or its share of
// Rate jobs/s (a producer behind its schedule inserts the jobs due in one
// InsertMany). Workers: a client.Client with one queue of Workers no-op
// workers on the bench's counted pool, which is also the schema's
// maintenance leader (the rescuer and the pruner, Retention.Completed
// SoakRetention, every soakPruneInterval). Each job's end-to-end latency
// runs from its insert's return (its commit, noted by the producer with
// the job's id) to its completion's commit (client.Config.AfterComplete).
// Per window (Window, a minute by default): jobs enqueued and completed
// per second, end-to-end latency, and at the window's end the layout's
// tables' size with their indexes and TOAST (pg_total_relation_size),
// their rows, and their dead tuples (pg_stat_user_tables.n_dead_tup). At
// the deadline the producers stop; the workers then drain what is left
// (at most soakDrainTimeout) before the client stops, so that every job
// enqueued is accounted for: completed, or left in the table (SoakSummary).

// Soak defaults and settings.
const (
	// DefaultSoakDuration is the soak's run (the goals are stated over ten
	// minutes).
	DefaultSoakDuration = 10 * time.Minute
	// DefaultSoakWindow is the soak's reporting interval.
	DefaultSoakWindow = time.Minute
	// DefaultSoakProducers is how many goroutines insert.
	DefaultSoakProducers = 16
	// DefaultSoakWorkers is the working client's MaxWorkers.
	DefaultSoakWorkers = 100
	// SoakRetention is how long finished jobs are kept during a soak: short,
	// so that the pruner deletes them while it runs.
	SoakRetention = 30 * time.Second
	// soakPruneInterval, soakPruneBatch and soakPruneBatches set the
	// pruner: up to 10 x 2,000 rows every 2 s (10,000 jobs/s), beyond
	// what 2 cores complete, so that it keeps up.
	soakPruneInterval = 2 * time.Second
	soakPruneBatch    = 2000
	soakPruneBatches  = 10
	// soakDrainTimeout bounds the drain after the deadline.
	soakDrainTimeout = time.Minute
	// soakMaxCatchUp bounds the jobs one InsertMany of a producer behind
	// its rate carries.
	soakMaxCatchUp = 500
	// MaxSoakProducers bounds Config.Producers (each holds a connection).
	MaxSoakProducers = 1000
)

// SoakMinute is one window of the soak scenario (a minute unless
// Config.Window says otherwise). Sizes and dead tuples are read at the
// window's end.
type SoakMinute struct {
	// Seconds is the window's length (the last one may be shorter).
	Seconds       float64 `json:"seconds"`
	Enqueued      int64   `json:"enqueued"`
	Completed     int64   `json:"completed"`
	EnqueuedPerS  float64 `json:"enqueued_per_s"`
	CompletedPerS float64 `json:"completed_per_s"`
	// E2EMS is from each job's insert commit to its completion commit, for
	// the jobs completed in the window.
	E2EMS Summary `json:"e2e_ms"`
	// TableBytes is the layout's tables with their indexes and TOAST
	// (pg_total_relation_size); Rows their rows (finished ones waiting
	// for the pruner included); DeadTuples their n_dead_tup. -1 where the
	// engine does not tell.
	TableBytes int64 `json:"table_bytes"`
	Rows       int64 `json:"rows"`
	DeadTuples int64 `json:"dead_tuples"`
	// Backlog is jobs enqueued and not yet completed at the window's end.
	Backlog int64 `json:"backlog"`
}

// SoakSummary is the soak scenario's settings and totals.
type SoakSummary struct {
	// Rate is the producers' target in jobs/s; 0 is as fast as they can.
	Rate       float64 `json:"rate"`
	Producers  int     `json:"producers"`
	WindowS    float64 `json:"window_s"`
	RetentionS float64 `json:"retention_s"`
	// Enqueued and Completed count the whole run, drain included; Left is
	// what the layout's table still held unfinished after the workers
	// stopped (Enqueued = Completed + Left when nothing was lost).
	Enqueued  int64 `json:"enqueued"`
	Completed int64 `json:"completed"`
	Left      int64 `json:"left"`
	// DrainS is how long the workers took after the deadline to complete
	// the jobs still queued.
	DrainS float64 `json:"drain_s"`
	// Unmatched counts completions of ids no producer noted as inserted:
	// a job completed twice would be one (0 when all is well).
	Unmatched int64 `json:"unmatched"`
}

// soakHooks let a test see every job inserted and every handler run, and
// shorten the retention and the pruner's interval (0: the soak's).
type soakHooks struct {
	inserted                 func(ids []string)
	handled                  func(id string)
	retention, pruneInterval time.Duration
}

// soakDefaults checks and fills the soak scenario's settings.
func (o *Config) soakDefaults() error {
	switch {
	case o.Samples != 0 || o.Gap != 0 || o.PollInterval != 0 || o.NoNotify || o.SameClient:
		return usage.Errorf("--samples, --gap, --poll-interval, --no-notify and --same-client are the pickup scenario's: leave them out of soak")
	case o.Work != 0 || o.Jobs != 0 || o.Batch != 0:
		return usage.Errorf("the soak scenario enqueues no-op jobs while it works them, with no preload: leave --work, --jobs and --batch out")
	case o.Baseline:
		return usage.Errorf("the soak scenario has no pgbench baseline: leave --baseline out")
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return usage.Errorf("--rate %v: use a positive jobs/s, or max", o.Rate)
	case o.Producers < 0 || o.Window < 0 || o.Duration < 0:
		return usage.Errorf("--producers, --window and --duration cannot be negative")
	case o.Producers > MaxSoakProducers:
		return usage.Errorf("--producers %d: the limit is %d (each holds a connection)", o.Producers, MaxSoakProducers)
	}
	if o.Duration == 0 {
		o.Duration = DefaultSoakDuration
	}
	if o.Window == 0 {
		o.Window = DefaultSoakWindow
	}
	if o.Window > o.Duration {
		return usage.Errorf("--window %v is longer than --duration %v: use a window of at most the run (a minute by default), e.g. --duration 6s --window 2s", o.Window, o.Duration)
	}
	if o.Producers == 0 {
		o.Producers = DefaultSoakProducers
	}
	if o.Workers == 0 {
		o.Workers = DefaultSoakWorkers
	}
	return nil
}

// soakOnly refuses the soak scenario's settings in the others.
func (o *Config) soakOnly() error {
	if o.Scenario != ScenarioSoak && (o.Rate != 0 || o.Producers != 0 || o.Window != 0) {
		return usage.Errorf("--rate, --producers and --window are the soak scenario's: leave them out of %s", o.Scenario)
	}
	return nil
}

// soakConns is the least the working pool needs: the client's
// connections (fanout: one per worker, and the listener's).
func soakConns(c *Config) int {
	cfg := client.Config{Queues: map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: c.Workers}}}
	if c.Mode == ModeLease {
		return 0 // the bench's pool (AllowSmallPool) is enough
	}
	return cfg.Connections()
}

// soakTables are the tables a layout's jobs live in, whose size and dead
// tuples the soak reports.
func soakTables(l schema.Layout) []string {
	if l == schema.LayoutFanout {
		return []string{schema.JobQueueTable, schema.JobAttemptTable, schema.DeadJobTable}
	}
	return []string{schema.JobsTable}
}

// soakTracker notes each job's insert commit by id and times it to its
// completion; safe for concurrent use.
type soakTracker struct {
	mu sync.Mutex
	// pending holds jobs inserted and not completed; early, completions
	// that arrived before their producer noted the insert (its commit
	// comes before its return, so a job may be worked in between: its
	// latency is then recorded as 0) or of an id completed twice.
	pending, early map[string]time.Time
	window, all    *Histogram
	enq, done      atomic.Int64
}

func newSoakTracker() *soakTracker {
	return &soakTracker{pending: map[string]time.Time{}, early: map[string]time.Time{}, window: NewHistogram(), all: NewHistogram()}
}

// inserted notes jobs whose insert committed by at.
func (t *soakTracker) inserted(ids []string, at time.Time) {
	t.mu.Lock()
	for _, id := range ids {
		if done, ok := t.early[id]; ok {
			delete(t.early, id)
			t.record(max(done.Sub(at), 0))
			continue
		}
		t.pending[id] = at
	}
	t.mu.Unlock()
	t.enq.Add(int64(len(ids)))
}

// completed notes a job's completion committed at at.
func (t *soakTracker) completed(id string, at time.Time) {
	t.mu.Lock()
	// Counted under mu, with its latency: a window's cut (cut) then never
	// sees the latency without the completion.
	t.done.Add(1)
	if ins, ok := t.pending[id]; ok {
		delete(t.pending, id)
		t.record(at.Sub(ins))
	} else {
		t.early[id] = at
	}
	t.mu.Unlock()
}

// cut ends a window: the counts so far and the window's latencies, read
// together under mu.
func (t *soakTracker) cut() (enq, done int64, e2e Summary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.enq.Load(), t.done.Load(), t.window.Reset().Summary()
}

func (t *soakTracker) record(d time.Duration) {
	t.window.Record(d)
	t.all.Record(d)
}

// unmatched is how many completions no insert has claimed.
func (t *soakTracker) unmatched() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.early))
}

// soakArgs is the soak's job: kind "", run by the raw worker.
type soakArgs struct{}

// Kind is "": the jobs the bench enqueues carry no kind.
func (soakArgs) Kind() string { return "" }

// runSoak runs the soak scenario (see above).
func runSoak(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	if err := empty(ctx, c, admin); err != nil {
		return err
	}
	defer emptyAfter(ctx, c, admin)
	if err := resetLimits(ctx, c, admin); err != nil {
		return err
	}
	// The tables start at their empty size: a previous run's DELETEs
	// leave their pages (and dead tuples) behind, which the first
	// windows' sizes would carry.
	tables := soakTables(c.Layout)
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = table(c, t)
	}
	if _, err := admin.Exec(ctx, "TRUNCATE "+strings.Join(quoted, ", ")); err != nil {
		return fmt.Errorf("soak: empty the tables: %w", err)
	}
	pool, err := openPool(ctx, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	insDB, err := skiplock.Open(openCtx, c.DSN, c.openConfig(int32(c.Producers)))
	cancel()
	if err != nil {
		return fmt.Errorf("open the producers' pool: %w", err)
	}
	defer insDB.Close()

	rec := newRecorder()
	tr := newSoakTracker()
	counters := &retry.Counters{}
	hooks := c.soakHooks
	retention, pruneEvery := SoakRetention, soakPruneInterval
	if hooks != nil && hooks.retention > 0 {
		retention = hooks.retention
	}
	if hooks != nil && hooks.pruneInterval > 0 {
		pruneEvery = hooks.pruneInterval
	}
	workers := client.NewWorkers()
	err = client.AddRawWorker(workers, "", func(_ context.Context, job *skiplock.Job) error {
		if hooks != nil && hooks.handled != nil {
			hooks.handled(job.ID)
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	cl, err := client.New(ctx, pool, &client.Config{
		Schema:  c.Schema,
		Queues:  map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: c.Workers}},
		Workers: workers, JobTimeout: -1, AllowSmallPool: true,
		Retry: retryOptions(pool, counters),
		Maintenance: &maintenance.Config{PruneInterval: pruneEvery, BatchSize: soakPruneBatch, MaxBatches: soakPruneBatches,
			Retention: maintenance.Retention{Completed: retention, Canceled: retention, Failed: retention, Dead: retention}},
		AfterComplete: func(job *skiplock.Job, _, _ time.Time) { tr.completed(job.ID, time.Now()) },
		Logger:        errorsOf(rec, nil),
	})
	if err != nil {
		return err
	}
	producer, err := client.New(ctx, insDB, &client.Config{
		Schema: c.Schema,
		Queues: map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: -1}},
		Retry:  retryOptions(insDB, counters),
		Logger: errorsOf(rec, nil),
	})
	if err != nil {
		return fmt.Errorf("producers' client: %w", err)
	}
	// The handlers' parent outlives the run's context: Stop decides how
	// they end.
	if err := cl.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			cl.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // an interrupted run: the error is the one to report
		}
	}()

	stmts0 := c.stmts.load()
	start := time.Now()
	deadline := start.Add(c.Duration)
	var pwg sync.WaitGroup
	for p := range c.Producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			soakProduce(ctx, c, producer, tr, rec, hooks, start, deadline, p)
		}()
	}
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go soakProgress(progCtx, c.Out, c.Progress, start, tr)

	lastEnq, lastDone := int64(0), int64(0)
	for from := start; from.Before(deadline); {
		to := from.Add(c.Window)
		if to.After(deadline) {
			to = deadline
		}
		if err := retry.Sleep(ctx, time.Until(to)); err != nil {
			break
		}
		enq, done, e2e := tr.cut()
		secs := to.Sub(from).Seconds()
		m := SoakMinute{Seconds: secs, Enqueued: enq - lastEnq, Completed: done - lastDone,
			E2EMS: e2e, Backlog: enq - done}
		m.EnqueuedPerS, m.CompletedPerS = float64(m.Enqueued)/secs, float64(m.Completed)/secs
		m.TableBytes, m.Rows, m.DeadTuples = soakTableStats(ctx, c, admin, tables)
		rep.Minutes = append(rep.Minutes, m)
		lastEnq, lastDone, from = enq, done, to
	}
	pwg.Wait()
	secs := time.Since(start).Seconds()
	stopProgress()

	// Drain: every job enqueued completes (or the timeout says why not).
	drainStart := time.Now()
	for ctx.Err() == nil && tr.done.Load() < tr.enq.Load() && time.Since(drainStart) < soakDrainTimeout {
		retry.Sleep(ctx, 10*time.Millisecond) //nolint:errcheck // ctx ends the loop
	}
	drain := time.Since(drainStart)
	stopped = true
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	if err := cl.Stop(sctx); err != nil && ctx.Err() == nil {
		rec.fail(fmt.Errorf("stop: %w", err))
	}
	cancel()
	st, _ := cl.QueueStats(DefaultQueue)
	for range st.Lost {
		rec.fail(fmt.Errorf("complete: %w", skiplock.ErrLeaseLost))
	}

	// The totals count the drain: every job enqueued, over the time to
	// the last completion.
	rec.fill(rep, secs+drain.Seconds(), 0, counters, int(pool.Stats().Total), counts{})
	rep.Jobs = tr.done.Load()
	rep.setStatements(c.stmts.load().since(stmts0))
	rep.setInFlight()
	if rep.Seconds > 0 {
		rep.JobsPerS = float64(rep.Jobs) / rep.Seconds
	}
	rep.LatencyMS = tr.all.Summary()
	rep.Soak = &SoakSummary{Rate: c.Rate, Producers: c.Producers, WindowS: c.Window.Seconds(), RetentionS: retention.Seconds(),
		Enqueued: tr.enq.Load(), Completed: tr.done.Load(), DrainS: drain.Seconds(), Unmatched: tr.unmatched()}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench interrupted after %.1fs and %d jobs: %w", secs, rep.Jobs, err)
	}
	left, err := soakLeft(ctx, c, admin)
	if err != nil {
		return err
	}
	rep.Soak.Left = left
	if rep.Jobs == 0 && rep.Errors > 0 {
		return fmt.Errorf("no job completed in %.1fs (%d errors); the first: %s", secs, rep.Errors, rep.ErrorSamples[0])
	}
	return nil
}

// soakProduce is producer p's loop until deadline: one Insert at a time
// as fast as it can (c.Rate 0), or its share of c.Rate, the jobs due at
// once when behind.
func soakProduce(ctx context.Context, c *Config, cl *client.Client, tr *soakTracker, rec *recorder, hooks *soakHooks, start, deadline time.Time, p int) {
	rate := c.Rate / float64(c.Producers)
	// Producers start spread over one interval, not in step.
	offset := time.Duration(0)
	if rate > 0 {
		offset = time.Duration(float64(time.Second) / rate * float64(p) / float64(c.Producers))
	}
	opts := &client.InsertOpts{Queue: DefaultQueue}
	var sent int64
	params := make([]client.InsertParams, 0, soakMaxCatchUp)
	ids := make([]string, 0, soakMaxCatchUp)
	failing := 0
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		n := int64(1)
		if rate > 0 {
			due := int64(now.Sub(start.Add(offset)).Seconds()*rate) + 1 - sent
			if due <= 0 {
				next := start.Add(offset).Add(time.Duration(float64(sent) / rate * float64(time.Second)))
				retry.Sleep(ctx, min(time.Until(next), time.Until(deadline))) //nolint:errcheck // ctx ends the loop
				continue
			}
			n = min(due, soakMaxCatchUp)
		}
		ids = ids[:0]
		var err error
		if n == 1 {
			var res *client.InsertResult
			if res, err = cl.Insert(ctx, soakArgs{}, opts); err == nil {
				ids = append(ids, res.ID)
			}
		} else {
			params = params[:0]
			for range n {
				params = append(params, client.InsertParams{Args: soakArgs{}, Opts: opts})
			}
			var res []*client.InsertResult
			if res, err = cl.InsertMany(ctx, params); err == nil {
				for _, r := range res {
					ids = append(ids, r.ID)
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			rec.fail(fmt.Errorf("insert: %w", err))
			if failing++; failing >= maxFailing {
				return // the report carries the errors
			}
			retry.Sleep(ctx, 50*time.Millisecond) //nolint:errcheck // ctx ends the loop
			continue
		}
		failing = 0
		tr.inserted(ids, time.Now())
		if hooks != nil && hooks.inserted != nil {
			hooks.inserted(ids)
		}
		sent += n
	}
}

// soakProgress prints a line every interval until ctx ends.
func soakProgress(ctx context.Context, out io.Writer, every time.Duration, start time.Time, tr *soakTracker) {
	if every <= 0 || out == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastEnq, lastDone := start, int64(0), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			enq, done := tr.enq.Load(), tr.done.Load()
			secs := now.Sub(last).Seconds()
			fmt.Fprintf(out, "progress: %.1f s, enqueued %.1f jobs/s, completed %.1f jobs/s, backlog %d\n", //nolint:errcheck // best effort
				now.Sub(start).Seconds(), float64(enq-lastEnq)/secs, float64(done-lastDone)/secs, enq-done)
			last, lastEnq, lastDone = now, enq, done
		}
	}
}

// soakTableStats reads the layout's tables' total size, rows and dead
// tuples; -1 each where the engine does not tell (logged).
func soakTableStats(ctx context.Context, c *Config, admin *skiplock.DB, tables []string) (size, rows, dead int64) {
	size, rows, dead = -1, -1, -1
	// The planner's and statistics views' names, not the bench's: the
	// tables are matched by schema and name as text.
	err := admin.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::INT8, COALESCE(sum(s.n_dead_tup), 0)::INT8
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relname = ANY($2::TEXT[]) AND c.relkind = 'r'`, c.Schema, tables).Scan(&size, &dead)
	if err != nil {
		c.Logger.Warn("soak: reading the table size and dead tuples failed", logs.Err(err))
		size, dead = -1, -1
	}
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = "(SELECT count(*) FROM " + table(c, t) + ")"
	}
	if err := admin.QueryRow(ctx, "SELECT ("+strings.Join(parts, " + ")+")::INT8").Scan(&rows); err != nil {
		c.Logger.Warn("soak: counting rows failed", logs.Err(err))
		rows = -1
	}
	return size, rows, dead
}

// soakLeft counts the jobs still unfinished in the layout's table after
// the workers stopped.
func soakLeft(ctx context.Context, c *Config, admin *skiplock.DB) (int64, error) {
	sql := "SELECT count(*) FROM " + table(c, schema.JobQueueTable)
	if c.Layout != schema.LayoutFanout {
		sql = "SELECT count(*) FROM " + table(c, schema.JobsTable) + ` WHERE "status"::TEXT IN ('` +
			string(skiplock.StatusQueued) + `', '` + string(skiplock.StatusRunning) + `')`
	}
	var n int64
	if err := admin.QueryRow(ctx, sql).Scan(&n); err != nil {
		return 0, fmt.Errorf("soak: count the jobs left: %w", err)
	}
	return n, nil
}

// writeSoak writes the soak scenario's windows and its goals' ratios.
func (r *Report) writeSoak(b *strings.Builder) {
	s := r.Soak
	if s == nil {
		return
	}
	rate := "max"
	if s.Rate > 0 {
		rate = strconv.FormatFloat(s.Rate, 'f', -1, 64) + " jobs/s"
	}
	fmt.Fprintf(b, "\nsoak: rate %s from %d producers, windows of %v, retention %v\n", rate, s.Producers,
		time.Duration(s.WindowS*float64(time.Second)), time.Duration(s.RetentionS*float64(time.Second)))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tseconds\tenqueued/s\tcompleted/s\te2e p50\tp99 ms\tbacklog\ttable+index MB\trows\tdead tuples\t")
	for i, m := range r.Minutes {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t%d\t%s\t%d\t%d\t\n", i+1, m.Seconds, m.EnqueuedPerS, m.CompletedPerS,
			ms(m.E2EMS.P50), ms(m.E2EMS.P99), m.Backlog, mib(m.TableBytes), m.Rows, m.DeadTuples)
	}
	tw.Flush()
	fmt.Fprintf(b, "enqueued %d, completed %d, left %d, drained in %.1f s, unmatched completions %d\n", s.Enqueued, s.Completed, s.Left, s.DrainS, s.Unmatched)
	if n := len(r.Minutes); n >= 2 {
		first, last := r.Minutes[0], r.Minutes[n-1]
		if first.CompletedPerS > 0 {
			fmt.Fprintf(b, "last window's completed/s / first's: %.2f (goal: >= 0.90)\n", last.CompletedPerS/first.CompletedPerS)
		}
		if second := r.Minutes[1]; second.TableBytes > 0 {
			fmt.Fprintf(b, "last window's table+index size / the second's: %.2fx (goal: <= 1.5x)\n", float64(last.TableBytes)/float64(second.TableBytes))
		}
		if first.E2EMS.P99 > 0 {
			fmt.Fprintf(b, "last window's e2e p99 / first's: %.2fx (goal: <= 2x)\n", last.E2EMS.P99/first.E2EMS.P99)
		}
	}
}

// mib formats bytes in MiB ("-" when unknown).
func mib(b int64) string {
	if b < 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}
