package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// Defaults for Config and QueueConfig.
const (
	// DefaultFetchPollInterval is how often an idle queue's producer
	// polls: the longest a job waits for pickup where no notification
	// arrives.
	DefaultFetchPollInterval = time.Second
	// DefaultJobTimeout bounds each attempt unless a kind or the Config
	// says otherwise.
	DefaultJobTimeout = time.Minute
	// DefaultMaxSnoozes is how often a job may snooze before a snooze
	// fails it instead.
	DefaultMaxSnoozes = 100
	// DefaultMaxWorkers is a queue's concurrency when its QueueConfig
	// leaves MaxWorkers at 0 and the client has workers.
	DefaultMaxWorkers = 10
	// notifyDebounce is the shortest time between two notifications of
	// one queue from one client. An insert within it does not notify:
	// the listeners' producers woke for the one before and poll again
	// within milliseconds while they find jobs (see the package doc).
	notifyDebounce = 20 * time.Millisecond
)

// Notify says whether a client uses LISTEN/NOTIFY.
type Notify int

// Notify settings.
const (
	// NotifyAuto uses notifications where the engine delivers them
	// (skiplock.Dialect.Notifications: PostgreSQL) and polls elsewhere.
	NotifyAuto Notify = iota
	// NotifyOff always polls: every idle producer sends one claim per
	// FetchPollInterval.
	NotifyOff
	// NotifyOn uses notifications whatever the engine says (YugabyteDB
	// with LISTEN/NOTIFY turned on); New fails if the server refuses
	// LISTEN.
	NotifyOn
)

// QueueConfig is one queue a client works or inserts into.
type QueueConfig struct {
	// Layout is the queue's layout: schema.LayoutBucketed ("" means it)
	// or schema.LayoutFanout, whose handlers run inside the job's
	// transaction (TxFromContext).
	Layout schema.Layout
	// MaxWorkers is how many jobs of the queue run at once in this
	// process; 0 means DefaultMaxWorkers when the client has workers. A
	// negative value declares the queue for inserts only.
	MaxWorkers int
	// Prefetch is how many jobs a bucketed queue claims beyond its free
	// workers (see bucketed.WorkerConfig.Prefetch); 0 means MaxWorkers/4
	// at first (at most 256), growing up to MaxWorkers while workers wait
	// for jobs of a backlog (not on a queue with a global or rate limit);
	// negative none. Fanout queues cannot
	// prefetch: a job is claimed in the transaction that works it.
	Prefetch int
	// HeldClaims holds each claim's transaction open while its jobs run
	// (bucketed.WorkerConfig.HeldClaims): one write per job instead of
	// two, for short jobs, on PostgreSQL. Bucketed queues only. A held
	// claim cannot count against a global limit (Limits): a queue with
	// one gives held claims nothing.
	HeldClaims bool
	// Limits are the queue's default concurrency limits, written at Start
	// when the database holds none for the queue (an operator's `skiplock
	// queues configure`, or QueueSetLimits, wins and stays). A fanout
	// queue takes Concurrency and LocalConcurrency only.
	Limits Limits
}

// Config configures a Client. Queues is required to work jobs; a client
// without workers only inserts.
type Config struct {
	// Schema holds the queue tables (skiplock migrate); "" means
	// schema.DefaultSchema.
	Schema string
	// Queues are the queues this client works (MaxWorkers >= 0, with
	// Workers set) or only inserts into (MaxWorkers < 0). Inserting into
	// a queue not listed uses the bucketed layout.
	Queues map[string]QueueConfig
	// Workers are the kinds this client runs. nil: the client only
	// inserts.
	Workers *Workers
	// FetchPollInterval is how often an idle queue polls; 0 means
	// DefaultFetchPollInterval. With notifications it is the safety net
	// for lost ones; without, it bounds pickup latency (a median of half
	// of it).
	FetchPollInterval time.Duration
	// Notify chooses LISTEN/NOTIFY (NotifyAuto: where the engine has it).
	Notify Notify
	// JobTimeout bounds each attempt of kinds that set no Timeout; 0
	// means DefaultJobTimeout, negative none.
	JobTimeout time.Duration
	// MaxSnoozes is how many times a job may snooze (skiplock.Snooze);
	// the next snooze fails the attempt instead. 0 means
	// DefaultMaxSnoozes.
	MaxSnoozes int
	// Middleware wraps inserts and work, outermost first.
	Middleware []Middleware
	// PeriodicJobs are enqueued on their schedules by the schema's
	// maintenance leader, among the started clients that have them (give
	// every process the same list). Needs maintenance (not NoMaintenance).
	PeriodicJobs []PeriodicJob
	// PeriodicCatchUp is how many missed ticks of one periodic job the
	// next leader enqueues after a gap (a failover, or every process
	// stopped), the latest ones; older ones are skipped. 0 means
	// DefaultPeriodicCatchUp: one run for the whole gap. Set more (say
	// 24 for an hourly report) when each missed tick must run.
	PeriodicCatchUp int
	// OnComplete, when set, runs inside each bucketed queue's completion
	// transaction with the jobs it completed (bucketed.WorkerConfig's
	// OnComplete): a record of the work written through tx commits
	// exactly once, with the jobs' Success. An error rolls the completion
	// back (the jobs run again when their leases expire); it may run more
	// than once for the same jobs when the transaction is retried, so use
	// only tx. A job's Queue says which queue it came from. Fanout queues
	// do not call it: their handlers write through TxFromContext.
	OnComplete func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error
	// VisibilityTimeout is the bucketed layout's lease (0: its default).
	VisibilityTimeout time.Duration
	// DeleteCompleted deletes bucketed jobs as they complete instead of
	// keeping them as Success until retention (bucketed.Config
	// .DeleteCompleted: one write per job less, and no history of
	// completed jobs). Fanout jobs are always deleted as they complete.
	DeleteCompleted bool
	// Retry tunes the retries of serialization failures (nil: defaults).
	Retry *retry.Options
	// Maintenance tunes the schema's maintenance leader, which the client
	// competes to be when it has workers (nil: its defaults).
	Maintenance *maintenance.Config
	// NoMaintenance keeps the client out of the leader election.
	NoMaintenance bool
	// Owner names this process in leases; "" means host:pid.
	Owner string
	// Logger hears failed attempts (with the job, queue, kind and
	// attempt as attributes), database failures and recoveries, leader
	// changes and skipped periodic ticks; nil is slog.Default(). Pass
	// slog.New(slog.DiscardHandler) for silence.
	Logger *slog.Logger
	// AfterComplete, when set, is called once for each job whose
	// completion committed, after the commit, with when its worker
	// goroutine asked for a job and when it got one: time.Since(asked) is
	// the job's latency from request to committed completion. Bucketed
	// queues: claimed is when the job was claimed, or asked when it was
	// prefetched (see bucketed.WorkerConfig.AfterComplete); it runs on a
	// completer goroutine. Fanout queues: asked is when the worker's
	// transaction began its claim (fanout.Result.Started), claimed when
	// the claim returned the job; it runs on the worker's goroutine.
	// Keep it quick.
	AfterComplete func(job *skiplock.Job, asked, claimed time.Time)
	// AllowSmallPool lets New accept a pool smaller than Connections: a
	// bucketed queue's statements hold a connection only while they run,
	// so its claims, completions and heartbeats can share fewer (at a
	// lower throughput). The pool must still hold every fanout worker's
	// connection and its queue's counting ones (fanout.RecorderConns), the
	// listener's, and one more.
	AllowSmallPool bool
	// Metrics, when set, receives the client's Prometheus metrics
	// (package metrics: make one with metrics.New per registry, and share
	// it between a process's clients). nil: none.
	Metrics *metrics.Metrics
	// MetricsSampleInterval is how often the maintenance leader samples
	// the queue gauges for Metrics; 0 means DefaultMetricsSampleInterval.
	MetricsSampleInterval time.Duration
}

// Middleware wraps the client's inserts and work. Either func may be nil.
// Each must call next (or return an error without it, which fails the
// insert or the attempt).
type Middleware struct {
	// Insert runs around every insert, before anything is written: it
	// may change the jobs (their Metadata, say, to carry a trace context).
	Insert func(ctx context.Context, jobs []*skiplock.NewJob, next func(ctx context.Context) error) error
	// Work runs around every attempt's handler.
	Work func(ctx context.Context, job *skiplock.Job, next func(ctx context.Context) error) error
}

// InsertOpts are one insert's options; zero fields mean the args' own
// InsertOpts, then the kind's KindOptions, then the defaults.
type InsertOpts struct {
	// Queue is the job's queue.
	Queue string
	// Priority orders jobs of a queue, lower first (bucketed).
	Priority int
	// RunAt delays the job (bucketed).
	RunAt time.Time
	// MaxAttempts is how many attempts the job gets.
	MaxAttempts int
	// UniqueKey makes the insert a no-op while a live job of the queue
	// holds the same key (bucketed: Queued or Running; fanout: in
	// job_queue).
	UniqueKey string
	// Unique makes the insert a no-op while a live job of the queue is the
	// same by its rules (kind, args, period): it makes the unique key,
	// so UniqueKey must be empty. See UniqueOpts.
	Unique *UniqueOpts
	// PartitionKey names the job's partition in a partitioned queue,
	// whatever the queue is partitioned by (bucketed;
	// docs/flow-control.md).
	PartitionKey string
	// Metadata is a JSON object carried with the job.
	Metadata json.RawMessage
}

// withDefaults validates c and returns a filled-in copy.
func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Schema == "" {
		out.Schema = schema.DefaultSchema
	}
	if err := sqlident.Validate("schema", out.Schema); err != nil {
		return out, err
	}
	switch {
	case out.FetchPollInterval < 0:
		return out, usage.Errorf("client: FetchPollInterval %v is negative: use a positive interval, or 0 for %v", out.FetchPollInterval, DefaultFetchPollInterval)
	case out.FetchPollInterval == 0:
		out.FetchPollInterval = DefaultFetchPollInterval
	}
	if out.JobTimeout == 0 {
		out.JobTimeout = DefaultJobTimeout
	}
	switch {
	case out.MaxSnoozes < 0:
		return out, usage.Errorf("client: MaxSnoozes %d is negative: use 0 for the default (%d)", out.MaxSnoozes, DefaultMaxSnoozes)
	case out.MaxSnoozes == 0:
		out.MaxSnoozes = DefaultMaxSnoozes
	}
	switch {
	case out.PeriodicCatchUp < 0:
		return out, usage.Errorf("client: PeriodicCatchUp %d is negative: use 0 for the default (%d)", out.PeriodicCatchUp, DefaultPeriodicCatchUp)
	case out.PeriodicCatchUp == 0:
		out.PeriodicCatchUp = DefaultPeriodicCatchUp
	}
	if len(out.PeriodicJobs) > 0 && out.NoMaintenance {
		return out, usage.Errorf("client: PeriodicJobs need the maintenance leader: leave NoMaintenance off")
	}
	if out.Notify < NotifyAuto || out.Notify > NotifyOn {
		return out, usage.Errorf("client: Notify %d is not a Notify setting", out.Notify)
	}
	out.Logger = logs.OrDefault(out.Logger)
	switch {
	case out.MetricsSampleInterval < 0:
		return out, usage.Errorf("client: MetricsSampleInterval %v is negative: use 0 for the default (%v)", out.MetricsSampleInterval, DefaultMetricsSampleInterval)
	case out.MetricsSampleInterval == 0:
		out.MetricsSampleInterval = DefaultMetricsSampleInterval
	}
	out.Retry = withRetryCounters(metricsink.Of(out.Metrics), out.Retry)
	queues := make(map[string]QueueConfig, len(out.Queues))
	for name, q := range out.Queues {
		if err := skiplock.ValidateQueueName(name); err != nil {
			return out, fmt.Errorf("client: Queues: %w", err)
		}
		switch q.Layout {
		case "":
			q.Layout = schema.LayoutBucketed
		case schema.LayoutBucketed, schema.LayoutFanout:
		default:
			return out, usage.Errorf("client: queue %q: layout %q: use %q or %q", name, q.Layout, schema.LayoutBucketed, schema.LayoutFanout)
		}
		if q.MaxWorkers == 0 {
			q.MaxWorkers = DefaultMaxWorkers
		}
		if q.MaxWorkers > 100000 {
			return out, usage.Errorf("client: queue %q: MaxWorkers %d: use at most 100000", name, q.MaxWorkers)
		}
		if q.Layout == schema.LayoutFanout && q.HeldClaims {
			return out, usage.Errorf("client: queue %q: HeldClaims is for bucketed queues (a fanout job is already claimed in the transaction that works it): leave it off", name)
		}
		if rest := q.Limits; q.Layout == schema.LayoutFanout {
			rest.Concurrency, rest.LocalConcurrency = 0, 0
			if !rest.IsZero() {
				return out, usage.Errorf("client: queue %q: a fanout queue keeps the global and local concurrency limits only (rates, partitions and sequences apply to bucketed queues): leave the others empty", name)
			}
		}
		if q.Limits.Concurrency < 0 || q.Limits.LocalConcurrency < 0 || q.Limits.Concurrency > bucketed.MaxConcurrency || q.Limits.LocalConcurrency > bucketed.MaxConcurrency {
			return out, usage.Errorf("client: queue %q: Limits %+v: use 0 (none) to %d", name, q.Limits, bucketed.MaxConcurrency)
		}
		if err := q.Limits.CheckRate(); err != nil {
			return out, fmt.Errorf("client: queue %q: %w", name, err)
		}
		if q.Layout == schema.LayoutFanout && q.Prefetch > 0 {
			return out, usage.Errorf("client: queue %q: fanout queues cannot prefetch (a job is claimed in the transaction that works it): leave Prefetch at 0", name)
		}
		queues[name] = q
	}
	out.Queues = queues
	if out.Workers == nil {
		for name, q := range queues {
			if q.MaxWorkers > 0 {
				return out, usage.Errorf("client: queue %q has MaxWorkers %d but the client has no Workers: register workers with client.AddWorker, or give the queue a negative MaxWorkers to only insert", name, q.MaxWorkers)
			}
		}
	}
	return out, nil
}

// worked lists the queues the client works, sorted.
func (c *Config) worked() []string {
	var out []string
	for name, q := range c.Queues {
		if q.MaxWorkers > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Connections is how many connections the client's pool needs for cfg:
// per bucketed queue a claim, the completers and the heartbeat; per
// fanout queue one per worker and those that count attempts
// (fanout.RecorderConns); one
// listener; two for maintenance; and two spare for inserts. Open the
// client's DB with skiplock.OpenConfig.MaxConns of at least this.
func (c *Config) Connections() int {
	n := 2 + 2 + 1
	if c == nil {
		return n
	}
	for _, q := range c.Queues {
		switch {
		case q.MaxWorkers < 0:
		case q.Layout == schema.LayoutFanout:
			w := cmp.Or(q.MaxWorkers, DefaultMaxWorkers)
			n += w + fanout.RecorderConns(w)
		default:
			n += 1 + 4 + 1
		}
	}
	return n
}

// minConnections is the smallest pool New accepts with AllowSmallPool:
// every fanout worker's connection and its queue's counting ones, the
// listener's, and one for everything else.
func (c *Config) minConnections(listener bool) int {
	n := 1
	if listener {
		n++
	}
	for _, q := range c.Queues {
		if w := q.MaxWorkers; w > 0 && q.Layout == schema.LayoutFanout {
			n += w + fanout.RecorderConns(w)
		}
	}
	return n
}
