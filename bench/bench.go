// Package bench is skiplock's load driver: the articles' benchmark scenarios
// run through the queue layouts' public APIs, with latency kept in a
// constant-memory histogram, progress lines while running, a report for
// people and for machines, and an optional pgbench baseline of the article's
// own script on the same database.
//
// Scenarios (docs/benchmarks.md, "The benchmark scenarios"):
//
//   - latency: the scalable-job-queue article's pgbench test. Preload jobs; each of W workers
//     loops: claim one job, work on it for D, complete it. Lease mode runs
//     a client.Client's bucketed queue over a small pool: its producer
//     claims for the free workers plus a prefetch, and a few completers
//     write finished jobs in one statement each (see clientDriver); no
//     worker holds a connection while it works. Tx mode runs a
//     client.Client's fanout queue, where a worker holds one connection
//     for the whole job, claiming, working and deleting it in one
//     transaction.
//   - lock: the scalable-job-queue article's lock-only test. W clients each run BEGIN; lock one
//     job from a random start (FOR UPDATE SKIP LOCKED); COMMIT, deleting
//     nothing.
//   - throughput: a burn-down like River's `river bench -n`: preload N no-op
//     jobs, work them all, report jobs/s, on a client.Client (lease mode:
//     1,000 workers by default, whose producer claims for all the free
//     ones at once; tx mode: a fanout queue). With --batch above 1 each
//     worker instead claims a batch in one Dequeue and completes it in one
//     CompleteMany, the layout's own calls.
//   - tombstones: a burn-down of N jobs by one claimer while a side
//     connection holds a snapshot open for the whole run, so that
//     PostgreSQL can remove no dead row version or index entry, as
//     YugabyteDB's history retention and CockroachDB's GC TTL keep theirs;
//     claim latency and index tuples read per claim are reported per
//     window of the run, then for empty claims on the drained queue and on
//     a fresh table (see runTombstones).
//   - pickup: how fast idle workers start a new job, and what they cost
//     while idle. A client.Client with W idle workers (default 10) on one
//     queue; N times (--samples, default 50): wait an idle gap (--gap,
//     default 1 s, plus a random part of the poll interval), insert one
//     job through a second, insert-only Client on its own small pool (as
//     another process would: the pickup goes
//     through LISTEN/NOTIFY or the poll, not the in-process wake; with
//     --same-client through the working Client itself), and time from the
//     Insert call's return (its commit) to the handler's start: pickup_ms.
//     The working client's statements over the gaps, counted at the
//     skiplock.Pool seam, are idle_statements_per_s (its queue's:
//     producer, listener, heartbeat) and
//     idle_maintenance_statements_per_s (the schema's maintenance
//     service, one per process whatever its queues, run by the bench on
//     the same pool). --no-notify (client.NotifyOff) shows the polling
//     path: pickup then waits for the next poll (--poll-interval, default
//     1 s), half of it at the median. See runPickup.
//   - soak: steady state over time. Producers enqueue (--rate, or as fast
//     as they can) while a client.Client works, from an empty queue, with
//     retention short enough that the pruner runs during the soak; per
//     window (a minute): jobs/s in and out, end-to-end latency, the
//     tables' size and dead tuples. See runSoak.
//
// Every scenario takes an emulated network round trip (Config.RTT): the
// bench's connections then go through an in-process loopback proxy that
// adds half of it in each direction, and the report gives the statements
// the queue clients sent per job worked, so that a design's cost on a
// distributed engine's round trips shows on one machine.
//
// Timed runs stop claiming at the deadline and let the jobs in flight
// finish: jobs/s counts them over the time to the last completion.
// pgbench -T instead drops the transactions still running at the end and
// divides by the window; the report gives that count too
// (Report.WindowJobsPerS), so the two tools can be compared either way.
// Both leave out connection set-up: the pool is opened before the clock
// starts, as pgbench's "without initial connection time" does.
//
// A bench empties and refills the layouts' tables in its own schema
// (Config.Schema, "skiplock_bench" from the CLI): never point it at a
// schema that holds real jobs.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// Scenario names.
const (
	ScenarioLatency    = "latency"
	ScenarioLock       = "lock"
	ScenarioThroughput = "throughput"
	ScenarioTombstones = "tombstones"
	ScenarioPickup     = "pickup"
	ScenarioSoak       = "soak"
)

// Mode names: how a worker holds its job.
const (
	// ModeLease claims a job under a lease and completes it later, holding
	// a connection only for each statement (bucketed).
	ModeLease = "lease"
	// ModeTx processes the job inside the transaction that locked it,
	// holding the connection throughout (fanout).
	ModeTx = "tx"
)

// DefaultSchema is where the CLI's benches run.
const DefaultSchema = "skiplock_bench"

// DefaultQueue is the queue the benches fill.
const DefaultQueue = "bench"

// Upper bounds of Config's counts, so that none wraps in a pool size or
// asks for more memory than a machine has. Jobs has none: preloading
// streams them in batches.
const (
	// MaxWorkers bounds Config.Workers and Config.Conns.
	MaxWorkers = 10_000
	// MaxBatch bounds Config.Batch, the jobs one claim takes.
	MaxBatch = 10_000
)

// Drivers: what runs a scenario's jobs (Settings.Driver).
const (
	// DriverClient is client.Client, as an application runs it.
	DriverClient = "client"
	// DriverBatch is the layout's own calls: each worker claims a batch
	// and completes it.
	DriverBatch = "batch"
	// DriverStatements is the scenario's own statements (lock: the
	// article's lock-only transaction; tombstones: the layout's claim
	// on one connection).
	DriverStatements = "statements"
)

// baselineClients is how many clients pgbench runs with --baseline: one
// per worker, but at most throughputBaselineClients for a burn-down (the
// client's many goroutines are not connections; pgbench's clients each
// hold one).
func (c *Config) baselineClients() int {
	if c.Scenario == ScenarioThroughput {
		return min(c.Workers, throughputBaselineClients)
	}
	return c.Workers
}

// driverName says what runs c's jobs.
func (c *Config) driverName() string {
	switch {
	case c.Scenario == ScenarioLock || c.Scenario == ScenarioTombstones:
		return DriverStatements
	case c.Batch > 1:
		return DriverBatch
	}
	return DriverClient
}

// throughputClientWorkers is the throughput scenario's default workers in
// lease mode, where it runs on the client.
const throughputClientWorkers = 1000

// throughputBaselineClients bounds the pgbench clients of a throughput
// baseline (each holds a connection).
const throughputBaselineClients = 10

// SpareConns is what a run needs beyond its workers' connections: the
// bench's own control connections (preload, stats) and headroom.
const SpareConns = 5

// Config is one bench run. Zero fields take the scenario's defaults (see
// withDefaults).
type Config struct {
	// Scenario is latency, lock or throughput.
	Scenario string
	// Layout is bucketed or fanout; Mode is lease or tx. Each implies the
	// other (bucketed leases, fanout processes in the transaction); give
	// either.
	Layout schema.Layout
	Mode   string
	// Workers is the number of concurrent workers (lock: clients).
	Workers int
	// Work is how long a latency job "processes" (default 1s).
	Work time.Duration
	// Duration bounds the run (latency and lock default 30s); 0 in the
	// latency scenario with Jobs set runs until Jobs are done.
	Duration time.Duration
	// Jobs is how many jobs to preload (throughput: the burn-down size,
	// default 100,000; latency: default enough for Duration, and the
	// count to stop at when Duration is 0; lock: default 100,000 rows to
	// lock).
	Jobs int
	// Batch is how many jobs one claim takes (lease mode; default 1,
	// tombstones 200). Latency and throughput runs with a batch of 1 run
	// on client.Client, whose producer sizes its claims itself; a batch
	// above 1 runs the layout's own calls instead: each worker claims up
	// to Batch jobs in one Dequeue and completes them in one CompleteMany
	// (no work) or one by one.
	Batch int
	// Conns is the worker pool's size: lease mode default min(Workers, 50);
	// tx mode and lock use one per worker (Conns, if set, must allow it).
	Conns int
	// Progress is the interval between progress lines (default 5s); a
	// negative value turns them off.
	Progress time.Duration
	// Baseline also runs the article's script through pgbench.
	Baseline bool
	// DeleteCompleted deletes bucketed jobs as they complete
	// (bucketed.Config.DeleteCompleted) instead of keeping them as Success.
	DeleteCompleted bool
	// HeldClaims runs the client's bucketed queue with held claims
	// (client.QueueConfig.HeldClaims): claims hold their transactions open
	// while the jobs run, and write each job once.
	HeldClaims bool
	// Concurrency, when positive, is the bench queue's global concurrency
	// limit (client.Limits), set before the run (bucketed, on the
	// client); 0 removes one a previous run left.
	Concurrency int
	// Partitions, when positive, spreads the preloaded jobs over that many
	// partitions by key, in turn, and partitions the queue by key
	// (client.Limits.PartitionBy), Concurrency then per partition
	// (bucketed, on the client).
	Partitions int
	// WorkflowRoots, when positive, makes the jobs one workflow
	// (client.Client.InsertWorkflow) of that many roots, every other job
	// depending on one of them in turn: the throughput scenario preloads
	// it (the burn-down then releases the leaves as the roots complete),
	// and the enqueue scenario's bulk mode inserts it in one transaction
	// (bucketed).
	WorkflowRoots int
	// SeparateBegin sends each transaction's BEGIN as its own round trip,
	// as pgbench's scripts do; by default the workers' pool pipelines it
	// with the transaction's first statement
	// (unless skiplock.OpenConfig.SeparateBegin).
	SeparateBegin bool

	// Samples, Gap, PollInterval, NoNotify and SameClient are the pickup
	// scenario's (runPickup): how many jobs it times, the idle wait
	// before each insert (default 1s), the working client's
	// FetchPollInterval (default client.DefaultFetchPollInterval),
	// notifications off (client.NotifyOff: the polling path), and the
	// jobs inserted through the working client itself (its in-process
	// wake) instead of a second client.
	Samples      int
	Gap          time.Duration
	PollInterval time.Duration
	NoNotify     bool
	SameClient   bool

	// Rate, Producers and Window are the soak scenario's (runSoak): the
	// producers' jobs/s in all (0: as fast as they can), how many insert,
	// and the reporting interval (default DefaultSoakWindow).
	Rate      float64
	Producers int
	Window    time.Duration
	// soakHooks let a test see the soak's inserts and handler runs.
	soakHooks *soakHooks
	// EnqueueMode is the enqueue scenario's: bulk or single (enqueue.go).
	EnqueueMode string

	// RTT, when positive, is an emulated network round trip: every
	// connection of the run (pgbench's too) goes through a loopback proxy
	// that holds each chunk RTT/2 in each direction, without limiting
	// bandwidth.
	RTT time.Duration

	// DSN is the database; Engine forces an engine ("" detects it).
	DSN    string
	Engine skiplock.Engine
	// Emulate runs the bench on PostgreSQL under another engine's rules
	// (skiplock.OpenConfig.Emulate, tuned by Emulation); reports name the
	// personality and say the run was emulated.
	Emulate   skiplock.Personality
	Emulation *skiplock.EmulateConfig
	// ListenDSN is the listener's direct DSN when DSN goes through a
	// transaction pooler (skiplock.OpenConfig.ListenDSN).
	ListenDSN string
	// Schema is the bench's own schema (emptied and refilled!); "" is
	// DefaultSchema. Run creates it and marks it as the bench's; it refuses
	// an existing schema without that mark, which may hold real queues.
	Schema string
	// Out hears progress lines; nil is silent.
	Out io.Writer
	// Logger hears what the bench is doing (preloading, migrating) and
	// the workers' failures; nil is silent.
	Logger *slog.Logger

	// stmts counts the statements sent through the workers' pool (set by
	// openPool).
	stmts *stmtCounter
}

// Validate checks cfg as Run would, without connecting, so that a usage
// problem is reported before a server is started.
func Validate(cfg *Config) error {
	_, err := cfg.withDefaults()
	return err
}

// withDefaults validates c and fills in the scenario's defaults.
func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	switch o.Scenario {
	case ScenarioLatency, ScenarioLock, ScenarioThroughput, ScenarioTombstones:
		if o.Samples != 0 || o.Gap != 0 || o.PollInterval != 0 || o.NoNotify || o.SameClient {
			return o, usage.Errorf("--samples, --gap, --poll-interval, --no-notify and --same-client are the pickup scenario's: leave them out of %s", o.Scenario)
		}
	case ScenarioPickup:
		if err := o.pickupDefaults(); err != nil {
			return o, err
		}
	case ScenarioSoak:
		if err := o.soakDefaults(); err != nil {
			return o, err
		}
	case ScenarioEnqueue:
		return o.enqueueDefaults() // all of its defaults (enqueue.go)
	default:
		return o, usage.Errorf("unknown scenario %q: use latency, lock, throughput or tombstones (the load tests), pickup (idle workers picking up one job), soak (enqueue and work at once, over time) or enqueue (inserts alone)", o.Scenario)
	}
	if err := o.soakOnly(); err != nil {
		return o, err
	}
	if o.RTT < 0 {
		return o, usage.Errorf("--rtt %v cannot be negative: use 0 (no proxy) or a round trip such as 2ms", o.RTT)
	}
	if o.Concurrency < 0 || o.Concurrency > bucketed.MaxConcurrency {
		return o, usage.Errorf("--concurrency %d: use 0 (no limit) to %d", o.Concurrency, bucketed.MaxConcurrency)
	}
	if o.Partitions < 0 || o.Partitions > bucketed.MaxConcurrency {
		return o, usage.Errorf("--partitions %d: use 0 (none) to %d", o.Partitions, bucketed.MaxConcurrency)
	}
	if o.WorkflowRoots < 0 || o.WorkflowRoots > skiplock.MaxWorkflowJobs {
		return o, usage.Errorf("--workflow-roots %d: use 0 (plain jobs) to %d", o.WorkflowRoots, skiplock.MaxWorkflowJobs)
	}
	if o.WorkflowRoots > 0 && (o.Layout == schema.LayoutFanout || o.Partitions > 0 || (o.Scenario != ScenarioThroughput && o.Scenario != ScenarioEnqueue)) {
		return o, usage.Errorf("--workflow-roots %d: workflows are bucketed jobs, for the throughput and enqueue scenarios, without --partitions", o.WorkflowRoots)
	}
	if o.Layout != "" {
		l, err := schema.ParseLayout(string(o.Layout))
		if err != nil {
			return o, err
		}
		o.Layout = l
	}
	switch o.Mode {
	case "", ModeLease, ModeTx:
	default:
		return o, usage.Errorf("--mode %q: use lease (bucketed) or tx (fanout)", o.Mode)
	}
	if o.Scenario == ScenarioLock {
		// The scalable-job-queue article's lock test reads the fanout table; there is no lease.
		if o.Layout == schema.LayoutBucketed || o.Mode == ModeLease {
			return o, usage.Errorf("the lock scenario is the scalable-job-queue article's lock-only test on the fanout table: use --layout fanout (or leave --layout and --mode out)")
		}
		o.Layout, o.Mode = schema.LayoutFanout, ModeTx
	}
	switch {
	case o.Layout == "" && o.Mode == "":
		o.Layout, o.Mode = schema.LayoutBucketed, ModeLease
	case o.Layout == "":
		o.Layout = map[string]schema.Layout{ModeLease: schema.LayoutBucketed, ModeTx: schema.LayoutFanout}[o.Mode]
	case o.Mode == "":
		o.Mode = map[schema.Layout]string{schema.LayoutBucketed: ModeLease, schema.LayoutFanout: ModeTx}[o.Layout]
	}
	if want := map[schema.Layout]string{schema.LayoutBucketed: ModeLease, schema.LayoutFanout: ModeTx}[o.Layout]; o.Mode != want {
		return o, usage.Errorf("--layout %s works in --mode %s, not %s: the bucketed layout leases jobs, the fanout layout processes them inside the claiming transaction", o.Layout, want, o.Mode)
	}
	if o.Layout == schema.LayoutFanout && o.Partitions > 0 {
		return o, usage.Errorf("--partitions %d: fanout queues keep the global and local concurrency limits only (partitions apply to bucketed queues); use --layout bucketed, or leave --partitions out", o.Partitions)
	}
	if o.Scenario == ScenarioTombstones {
		// One claimer on one connection: the index statistics read per
		// window are then its claims' alone.
		switch {
		case o.Workers > 1:
			return o, usage.Errorf("--workers %d: the tombstones scenario claims on one connection, so that the index statistics it reads are its claims' alone; leave --workers out", o.Workers)
		case o.Duration != 0 || o.Work != 0:
			return o, usage.Errorf("the tombstones scenario burns down --jobs with no-op jobs: leave --duration and --work out")
		case o.Baseline:
			return o, usage.Errorf("the tombstones scenario has no pgbench baseline: leave --baseline out")
		}
		if o.Conns > 1 {
			return o, usage.Errorf("--conns %d: the tombstones scenario claims on one connection; leave --conns out", o.Conns)
		}
		o.Workers = 1
	}
	if o.Workers == 0 {
		o.Workers = map[string]int{ScenarioLatency: 500, ScenarioLock: 15, ScenarioThroughput: 10}[o.Scenario]
		if o.Scenario == ScenarioThroughput && o.Mode == ModeLease && o.Batch <= 1 {
			// The client's goroutines each take one no-op job: its
			// producer claims for all of them at once (River's bench is
			// tuned the same way, with 1,000 workers).
			o.Workers = throughputClientWorkers
		}
	}
	if o.Workers < 1 {
		return o, usage.Errorf("--workers %d: use at least 1", o.Workers)
	}
	if o.Work < 0 || o.Duration < 0 || o.Jobs < 0 || o.Batch < 0 || o.Conns < 0 {
		return o, usage.Errorf("--work, --duration, --jobs, --batch and --conns cannot be negative")
	}
	if o.Workers > MaxWorkers || o.Conns > MaxWorkers || o.Batch > MaxBatch {
		return o, usage.Errorf("--workers %d, --conns %d, --batch %d: the limits are %d workers and connections, and %d jobs per claim", o.Workers, o.Conns, o.Batch, MaxWorkers, MaxBatch)
	}
	if o.Scenario == ScenarioLatency && o.Work == 0 {
		o.Work = time.Second
	}
	if o.Scenario != ScenarioLatency {
		o.Work = 0
	}
	if o.Duration == 0 && !(o.Scenario == ScenarioLatency && o.Jobs > 0) && o.Scenario != ScenarioThroughput && o.Scenario != ScenarioTombstones && o.Scenario != ScenarioPickup {
		o.Duration = 30 * time.Second
	}
	switch o.Scenario {
	case ScenarioThroughput:
		if o.Jobs == 0 {
			o.Jobs = 100_000
		}
	case ScenarioLock:
		if o.Jobs == 0 {
			o.Jobs = 100_000
		}
	case ScenarioTombstones:
		if o.Jobs == 0 {
			o.Jobs = 200_000
		}
	case ScenarioLatency:
		if o.Jobs == 0 {
			// Enough for the whole run at the ideal rate, with a margin, so
			// that the queue never runs dry.
			// (Capped, so that a tiny --work with a huge --duration cannot
			// overflow int.)
			o.Jobs = int(min(math.Ceil(o.idealRate()*o.Duration.Seconds()*1.25), 1e12)) + 2*o.Workers
		}
	}
	if o.Batch == 0 {
		o.Batch = 1
		if o.Scenario == ScenarioTombstones && o.Mode == ModeLease {
			// Few workers with big claims beat many with small ones: each
			// claim and completion is one statement (measured: 10 x 200
			// about twice 50 x 100 on 2 cores).
			o.Batch = 200
		}
	}
	if o.Batch > 1 && o.Mode == ModeTx {
		return o, usage.Errorf("--batch %d: tx mode (fanout) processes one job per transaction; leave --batch out or use --mode lease", o.Batch)
	}
	need := o.Workers
	if o.Mode == ModeTx && o.Scenario != ScenarioLock {
		// fanout's Process counts each attempt over a second connection
		// while the job's transaction holds the first: one more than the
		// workers, so that the count never waits for a worker's.
		need++
		if o.Scenario != ScenarioTombstones {
			// The client's fanout.Worker counts over RecorderConns
			// instead of that one, and the client has one for its other
			// statements (its idle probe, maintenance).
			need += fanout.RecorderConns(o.Workers)
		}
	}
	if o.Mode == ModeLease && o.Scenario != ScenarioLock {
		need = min(o.Workers, 50)
		if o.Conns > 0 {
			need = o.Conns
		}
	} else if o.Conns > 0 && o.Conns < need {
		return o, usage.Errorf("--conns %d with %d workers: %s holds one connection per worker (fanout: and one more to count attempts); use --conns %d or more, or --mode lease", o.Conns, o.Workers, o.what(), need)
	}
	o.Conns = need
	if o.Scenario == ScenarioPickup {
		o.Conns = pickupConns(&o)
	}
	if o.Scenario == ScenarioSoak {
		o.Conns = max(o.Conns, soakConns(&o))
	}
	return o, o.commonDefaults()
}

// commonDefaults fills in what every scenario shares: the progress
// interval, the schema (checked) and the log.
func (o *Config) commonDefaults() error {
	if o.Progress == 0 {
		o.Progress = 5 * time.Second
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if err := sqlident.Validate("schema", o.Schema); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// what names the run's connection use for messages.
func (c *Config) what() string {
	if c.Scenario == ScenarioLock {
		return "the lock scenario"
	}
	return "--mode " + c.Mode
}

// idealRate is the latency scenario's ideal jobs/s: every worker busy on
// work all the time (0 when there is no work).
func (c *Config) idealRate() float64 {
	if c.Work <= 0 {
		return 0
	}
	return float64(c.Workers) / c.Work.Seconds()
}

// recorder collects a run's measurements; safe for concurrent use.
type recorder struct {
	jobs, deq   *Histogram // the whole run
	ijobs, ideq *Histogram // since the last progress line
	done        atomic.Int64
	errors      atomic.Int64
	// windowEnd, when set (timed runs), is the end of the --duration
	// window; inWindow counts the jobs finished by then, as pgbench -T
	// counts (it drops the transactions still running at the end).
	windowEnd time.Time
	inWindow  atomic.Int64
	mu        sync.Mutex
	samples   []string
}

func newRecorder() *recorder {
	return &recorder{jobs: NewHistogram(), deq: NewHistogram(), ijobs: NewHistogram(), ideq: NewHistogram()}
}

// job records one finished job: its claim took deq (a negative deq means
// unmeasured) and the whole job total.
func (r *recorder) job(deq, total time.Duration) {
	r.jobs.Record(total)
	r.ijobs.Record(total)
	if deq >= 0 {
		r.deq.Record(deq)
		r.ideq.Record(deq)
	}
	r.done.Add(1)
	if !r.windowEnd.IsZero() && !time.Now().After(r.windowEnd) {
		r.inWindow.Add(1)
	}
}

// maxErrorSamples bounds the distinct error texts a report keeps.
const maxErrorSamples = 5

func (r *recorder) fail(err error) {
	r.errors.Add(1)
	msg := err.Error()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) >= maxErrorSamples {
		return
	}
	for _, s := range r.samples {
		if s == msg {
			return
		}
	}
	r.samples = append(r.samples, msg)
}

// progress prints a line every interval until ctx ends, pgbench -P style,
// and samples the pool's open connections every 100ms for the peak.
func (r *recorder) progress(ctx context.Context, out io.Writer, every time.Duration, start time.Time, pool skiplock.Pool, peak *atomic.Int64) {
	sample := time.NewTicker(100 * time.Millisecond)
	defer sample.Stop()
	var tick <-chan time.Time
	if every > 0 && out != nil {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	last := start
	for {
		select {
		case <-ctx.Done():
			return
		case <-sample.C:
			if pool != nil {
				n := int64(pool.Stats().Total)
				for cur := peak.Load(); n > cur && !peak.CompareAndSwap(cur, n); cur = peak.Load() {
				}
			}
		case now := <-tick:
			j, d := r.ijobs.Reset().Summary(), r.ideq.Reset().Summary()
			secs := now.Sub(last).Seconds()
			last = now
			line := fmt.Sprintf("progress: %.1f s, %.1f jobs/s, lat %s ms p99 %s ms", now.Sub(start).Seconds(), float64(j.Count)/secs, ms(j.Avg), ms(j.P99))
			if d.Count > 0 {
				line += fmt.Sprintf(", claim p99 %s ms", ms(d.P99))
			}
			line += fmt.Sprintf(", %d errors, %d conns\n", r.errors.Load(), peak.Load())
			io.WriteString(out, line) //nolint:errcheck // progress is best effort
		}
	}
}

// fill puts the recorder's totals into rep; statements is what the queue
// clients sent while the jobs were worked.
func (r *recorder) fill(rep *Report, secs float64, window time.Duration, counters *retry.Counters, conns int, statements counts) {
	rep.Jobs = r.done.Load()
	rep.setStatements(statements)
	rep.Seconds = secs
	rep.setInFlight()
	if secs > 0 {
		rep.JobsPerS = float64(rep.Jobs) / secs
	}
	if !r.windowEnd.IsZero() && window > 0 {
		w := float64(r.inWindow.Load()) / window.Seconds()
		rep.WindowJobsPerS = &w
	}
	rep.LatencyMS, rep.DequeueMS = r.jobs.Summary(), r.deq.Summary()
	rep.Errors = r.errors.Load()
	r.mu.Lock()
	rep.ErrorSamples = append([]string(nil), r.samples...)
	r.mu.Unlock()
	rep.Retries = Retries{BySQLState: map[string]int64{}}
	if counters != nil {
		rep.Retries.Total = counters.Retries()
		rep.Retries.BySQLState = counters.RetriesBySQLState()
	}
	rep.Connections = conns
}

// Run runs one bench and returns its report. Usage problems are
// usage errors; a server with too few connections for the run is
// refused before anything starts.
func Run(ctx context.Context, cfg *Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.DSN == "" {
		return nil, usage.Errorf("bench: no DSN: pass one, or let the CLI start the embedded PostgreSQL")
	}
	if c.RTT > 0 {
		proxy, dsn, err := startRTTProxy(c.DSN, c.RTT)
		if err != nil {
			return nil, fmt.Errorf("--rtt: start the loopback proxy: %w", err)
		}
		defer proxy.Close()
		c.DSN = dsn
		c.Logger.Info("--rtt: every connection goes through a loopback proxy", "rtt", c.RTT, "proxy", proxy.Addr(), "each_way", c.RTT/2)
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	admin, err := skiplock.Open(openCtx, c.DSN, c.openConfig(2))
	cancel()
	if err != nil {
		return nil, err
	}
	defer admin.Close()

	pgbenchPath, pgbenchErr := "", error(nil)
	if c.Baseline {
		pgbenchPath, pgbenchErr = FindPgbench()
	}
	if err := checkConnections(ctx, admin, &c, pgbenchErr == nil); err != nil {
		return nil, err
	}
	if err := ownSchema(ctx, admin, &c); err != nil {
		return nil, err
	}
	rep := &Report{
		Tool: "skiplock", Scenario: c.Scenario, Layout: string(c.Layout), Mode: c.Mode, Workers: c.Workers,
		RTTMS:   ms64(c.RTT),
		Machine: DescribeMachine(), Engine: DescribeEngine(ctx, admin),
		Settings: &Settings{Schema: c.Schema, Queue: DefaultQueue, WorkS: c.Work.Seconds(), DurationS: c.Duration.Seconds(),
			Preload: c.Jobs, Batch: c.Batch, Driver: c.driverName(), Conns: c.Conns, ProgressS: max(c.Progress, 0).Seconds(), Baseline: c.Baseline,
			PipelineBegin:   !c.SeparateBegin && admin.Engine() != skiplock.EngineYugabyte,
			DeleteCompleted: c.DeleteCompleted && c.Layout == schema.LayoutBucketed,
			HeldClaims:      c.HeldClaims && c.Layout == schema.LayoutBucketed,
			Concurrency:     c.Concurrency,
			Partitions:      c.Partitions,
			WorkflowRoots:   c.WorkflowRoots,
			IdealJobsS:      c.idealRate()},
	}
	switch c.Scenario {
	case ScenarioLock:
		err = runLock(ctx, &c, admin, rep)
	case ScenarioTombstones:
		err = runTombstones(ctx, &c, admin, rep)
	case ScenarioEnqueue:
		err = runEnqueue(ctx, &c, admin, rep)
	case ScenarioPickup:
		rep.Settings.Samples, rep.Settings.GapS, rep.Settings.PollIntervalS = c.Samples, c.Gap.Seconds(), c.PollInterval.Seconds()
		rep.Settings.Notify, rep.Settings.SameClient = !c.NoNotify && admin.Dialect().Notifications, c.SameClient
		err = runPickup(ctx, &c, admin, rep)
	case ScenarioSoak:
		err = runSoak(ctx, &c, admin, rep)
	default:
		err = runJobs(ctx, &c, admin, rep)
	}
	rep.PeakRSSBytes = PeakRSS()
	if err != nil {
		return rep, err
	}
	if c.Scenario == ScenarioLatency && c.Work > 0 {
		eff := rep.JobsPerS / c.idealRate()
		rep.Efficiency = &eff
	}
	if !c.Baseline {
		return rep, nil
	}
	if pgbenchErr != nil {
		rep.BaselineSkipped = pgbenchErr.Error()
		c.Logger.Warn("baseline skipped", logs.Err(pgbenchErr))
		return rep, nil
	}
	if err := runBaseline(ctx, &c, admin, pgbenchPath, rep); err != nil {
		return rep, fmt.Errorf("baseline: %w", err)
	}
	return rep, nil
}

// ownerSetting marks, in a schema's skiplock_setting table, a schema that
// the bench created, and so may empty.
const ownerSetting = "bench.owner"

// ownSchema makes sure the run's schema is the bench's own: a schema that
// does not exist yet is created and marked as the bench's; an existing one
// must carry the mark. Any other schema, which may hold real queues, is
// refused with a usage error before anything is changed. A DefaultSchema
// left by versions of the bench that did not mark their schema is adopted:
// the bench has always created it for itself.
func ownSchema(ctx context.Context, admin *skiplock.DB, c *Config) error {
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)", c.Schema).Scan(&exists); err != nil {
		return fmt.Errorf("bench: look for schema %s: %w", c.Schema, err)
	}
	if exists {
		settings, err := schema.ReadSettings(ctx, admin, c.Schema)
		if settings[ownerSetting] == "" && (c.Schema != DefaultSchema || err != nil) {
			return usage.Errorf("schema %q was not created by skiplock bench, and a bench empties the schema it runs in (jobs, dead jobs, work_log): "+
				"run it in a schema of its own: leave --schema out (the bench then uses %s) or name a schema that does not exist yet, such as --schema %s",
				c.Schema, DefaultSchema, benchName(c.Schema))
		}
	}
	if _, err := schema.Migrate(ctx, admin, &schema.MigrateConfig{Options: schema.Options{Schema: c.Schema}, Logger: c.Logger}); err != nil {
		return fmt.Errorf("bench: migrate schema %s: %w", c.Schema, err)
	}
	// A run under --emulate cockroach left its stand-in indexes in the
	// schema every run shares: a run under PostgreSQL's own rules drops
	// them, or its claims would plan on them.
	for _, drop := range schema.DropEmulationStandIns(admin.Dialect(), c.Schema) {
		if _, err := admin.Exec(ctx, drop); err != nil {
			return fmt.Errorf("bench: drop the cockroach personality's stand-in index from schema %s: %w", c.Schema, err)
		}
	}
	mark := fmt.Sprintf(`INSERT INTO %s ("name", "value") VALUES ($1, $2) ON CONFLICT ("name") DO NOTHING`, table(c, schema.SettingTable))
	if _, err := admin.Exec(ctx, mark, ownerSetting, "skiplock bench: emptied and refilled by every run"); err != nil {
		return fmt.Errorf("bench: mark schema %s as the bench's: %w", c.Schema, err)
	}
	return nil
}

// benchName suggests a schema name for a bench next to name.
func benchName(name string) string {
	if len(name)+len("_bench") > sqlident.MaxLen {
		return DefaultSchema
	}
	return name + "_bench"
}

// checkConnections fails early when the server cannot give the run the
// connections it needs, with the CLI contract's message.
func checkConnections(ctx context.Context, db *skiplock.DB, c *Config, baseline bool) error {
	allowed, err := db.ServerMaxConnections(ctx)
	if err != nil {
		return err
	}
	var inUse int
	// Connections others hold count against the limit too (ours: 1).
	if err := db.QueryRow(ctx, "SELECT count(*)::int4 FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&inUse); err != nil {
		inUse = 1 // engines without pg_stat_activity's backend_type
	}
	others := max(inUse-1, 0)
	busy := ""
	if others > 0 {
		busy = fmt.Sprintf(" and %d are in use", others)
	}
	need := c.Conns + SpareConns
	if need > allowed-others {
		fix := "raise max_connections or use --mode lease"
		what := fmt.Sprintf("%s with %d workers", c.what(), c.Workers)
		if c.Mode == ModeLease && c.Scenario != ScenarioLock {
			what = fmt.Sprintf("--mode lease with --conns %d", c.Conns)
			fix = "raise max_connections or lower --conns"
		}
		return usage.Errorf("server allows %d connections%s; %s needs %d: %s", allowed, busy, what, need, fix)
	}
	if clients := c.baselineClients(); baseline && clients+SpareConns > allowed-others {
		return usage.Errorf("server allows %d connections%s; --baseline runs pgbench with %d clients, which needs %d: raise max_connections or drop --baseline",
			allowed, busy, clients, clients+SpareConns)
	}
	return nil
}

// openPool opens the workers' pool and opens every connection before the
// clock starts, as pgbench does ("without initial connection time").
func openPool(ctx context.Context, c *Config) (*skiplock.DB, error) {
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := skiplock.Open(openCtx, c.DSN, c.openConfig(int32(c.Conns)))
	if err != nil {
		return nil, err
	}
	c.stmts = countStatements(db)
	conns := make([]skiplock.Conn, 0, c.Conns)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for i := 0; i < c.Conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn, err := db.Acquire(openCtx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				return
			}
			conns = append(conns, cn)
		}()
	}
	wg.Wait()
	for _, cn := range conns {
		cn.Release()
	}
	if firstErr != nil {
		db.Close()
		return nil, fmt.Errorf("open %d connections: %w", c.Conns, firstErr)
	}
	return db, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// table is a bench table's quoted name.
func table(c *Config, name string) string {
	return sqlident.Quote(c.Schema) + "." + sqlident.Quote(name)
}

// empty removes every job from the bench schema's queue tables, with
// TRUNCATE (new files, as riverburn empties river_job): a DELETE left
// every earlier run's rows dead in the table and its indexes until
// autovacuum came, so each run burned down through more bloat than the
// one before it (8 million dead rows, 1.4 GB, after a few dozen runs) and
// rounds of the same build slowed one after another.
func empty(ctx context.Context, c *Config, db *skiplock.DB) error {
	var tables []string
	for _, t := range []string{schema.JobsTable, schema.JobHoldTable, schema.JobQueueTable, schema.JobAttemptTable, schema.DeadJobTable, schema.WorkLogTable} {
		tables = append(tables, table(c, t))
	}
	if _, err := db.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
		return fmt.Errorf("empty %s: %w", strings.Join(tables, ", "), err)
	}
	return nil
}

// preloadBatch is how many jobs one enqueue call carries.
const preloadBatch = 5000

// preload enqueues n no-op jobs through enqueue (the layout's own batch
// enqueue), then refreshes the planner's statistics.
func preload(ctx context.Context, c *Config, db *skiplock.DB, n int, enqueue func(ctx context.Context, jobs []skiplock.NewJob) error, tables ...string) error {
	start := time.Now()
	if c.WorkflowRoots > 0 {
		if err := insertWorkflow(ctx, c, db, n); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
		n = 0 // done
	}
	job := skiplock.NewJob{Queue: DefaultQueue, Payload: []byte(`{}`)}
	batch := make([]skiplock.NewJob, 0, preloadBatch)
	for done := 0; done < n; {
		k := min(preloadBatch, n-done)
		batch = batch[:0]
		for i := 0; i < k; i++ {
			if c.Partitions > 0 {
				job.PartitionKey = strconv.Itoa((done + i) % c.Partitions)
			}
			batch = append(batch, job)
		}
		if err := enqueue(ctx, batch); err != nil {
			return fmt.Errorf("preload: after %d of %d jobs: %w", done, n, err)
		}
		done += k
	}
	for _, t := range tables {
		if _, err := db.Exec(ctx, "ANALYZE "+table(c, t)); err != nil {
			c.Logger.Warn("analyze failed (continuing)", "table", t, logs.Err(err))
		}
	}
	c.Logger.Info("preloaded", "jobs", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// ErrQueueDry says the queue ran out of jobs before the run's end.
var ErrQueueDry = errors.New("the queue ran dry before the end of the run: raise --jobs")

// openConfig is how the bench opens a pool of maxConns connections on the
// configured engine or personality.
func (c *Config) openConfig(maxConns int32) *skiplock.OpenConfig {
	return &skiplock.OpenConfig{Engine: c.Engine, Emulate: c.Emulate, Emulation: c.Emulation, ListenDSN: c.ListenDSN, MaxConns: maxConns, SeparateBegin: c.SeparateBegin}
}
