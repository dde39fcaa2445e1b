package bucketed

import (
	"context"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
)

// Handler works one job. A nil error completes it; an error (or a panic,
// turned into an error) fails the attempt. ctx ends when the worker is
// hard-stopped or the job's lease is lost: return then.
type Handler func(ctx context.Context, job *skiplock.Job) error

// DefaultWorkers is how many goroutines run the handler when
// WorkerConfig.Workers is 0, as in the fanout layout.
const DefaultWorkers = 10

// WorkerConfig tunes a Worker. Handler is required.
type WorkerConfig struct {
	// Queue is the queue to work; "" means the Queue's Config.Queue
	// (skiplock.DefaultQueue unless set).
	Queue string
	// Workers is how many goroutines run the handler; 0 means
	// DefaultWorkers.
	Workers int
	// Handler works each job.
	Handler Handler
	// Prefetch is how many jobs the worker claims beyond its free
	// goroutines, so that a goroutine finishing a job finds the next one
	// in hand; negative means none. 0 means a prefetch of its own: it
	// starts at Workers/4 (at least 1, at most 256) and grows, up to
	// Workers (under SERIALIZABLE, where a leased Worker's claims go one
	// at a time, up to twice Workers), each time goroutines
	// waited for a claim's jobs while the queue had more than the claims
	// took: their jobs finish together (they started together), more at
	// once than the prefetch holds. It does not grow on a queue with a
	// global or rate limit, whose claims count a prefetched job as
	// started. Prefetched jobs are leased like running ones: the heartbeat
	// keeps their leases and Stop gives them back. Their claim counted an
	// attempt: if the process dies before such a job starts, the rescuer
	// puts it back with that attempt used (on its last attempt, Failed).
	Prefetch int
	// PollInterval is the longest wait between claims while the queue is
	// empty (the wait starts at IdleMin and doubles); 0 means
	// DefaultPollInterval. However many goroutines wait, one statement
	// polls.
	PollInterval time.Duration
	// Wake, when set, ends an idle wait at once: send on it (without
	// blocking) when jobs may have arrived, e.g. from a notification.
	Wake <-chan struct{}
	// WaitWhenDrained makes a claim that drains the queue wait for Wake
	// (or PollInterval) instead of polling again from IdleMin: while
	// idle, one statement per PollInterval. For workers whose new jobs
	// come with a Wake (a notification listener, the process's own
	// inserts: client.Client sets it), or whose idle cost matters more
	// than the pickup of jobs that nothing announces. Jobs this worker
	// puts back (snoozes, retries) wake it when due either way.
	WaitWhenDrained bool
	// Completers is how many goroutines write results as they arrive; 0
	// means an eighth of the queue's pool, at least 1 and at most 2. As
	// many again write while results back up (a batch filled to
	// FlushSize), so fewer, bigger batches are written until the load
	// needs more.
	Completers int
	// FlushSize bounds how many results one completion statement carries;
	// 0 means 1000. Each completer writes whatever has arrived while it
	// was busy in its next statement, so batches grow with load and a
	// lone result waits for nobody.
	FlushSize int
	// Heartbeat is how often the leases of jobs in hand are extended; 0
	// means a third of the visibility timeout.
	Heartbeat time.Duration
	// Owner is the lease owner recorded on the jobs this worker claims
	// (one claim serves several goroutines); "" means the queue's
	// Config.Owner.
	Owner string
	// OnComplete, when set, runs inside each completion transaction with
	// the jobs that transaction completed (those whose lease held), so a
	// record of the work commits exactly once with the completion, and
	// follow-up jobs enqueued through tx (Queue.EnqueueIn or EnqueueTx)
	// commit exactly when the jobs' Success does. An error rolls the
	// whole completion back: the jobs stay Running and run again when
	// their leases expire. It may run more than once for the same jobs
	// when the transaction is retried; use only tx.
	OnComplete func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error
	// AfterComplete, when set, is called once for each job whose Success
	// committed, after the commit, with when its goroutine asked for work
	// (before the claim) and when the claim returned it: time.Since(asked)
	// is the job's latency from request to committed completion (with a
	// Prefetch it includes waiting behind the jobs claimed before it). It
	// runs on a completer goroutine: keep it quick.
	AfterComplete func(job *skiplock.Job, asked, claimed time.Time)
	// AfterResult, when set, is called once for each job whose result
	// this worker wrote back or dropped, after the write committed (or
	// failed), with what became of it: for counters. It runs on a
	// completer goroutine: keep it quick.
	AfterResult func(job *skiplock.Job, o Outcome)
	// AfterClaim, when set, is called after each claim statement that
	// returned jobs, with their number and the statement's duration. It
	// runs on the claiming goroutine: keep it quick.
	AfterClaim func(n int, took time.Duration)
	// Maintenance tunes the schema's maintenance leader, which this worker
	// competes to be: one process per schema rescues expired leases (a job
	// with no attempts left becomes Failed) and prunes finished jobs (see
	// package maintenance). nil means its defaults.
	Maintenance *maintenance.Config
	// NoMaintenance keeps this worker out of the leader election, where
	// another part of the process (or another process) runs maintenance
	// for the schema. Some process must: without the rescuer, a job whose
	// worker died on its last attempt stays Running.
	NoMaintenance bool
	// IdleMin is the first wait after an empty claim (0 means 10 ms);
	// IdleMax is the old name of PollInterval, used when that is 0.
	// ErrorMin and ErrorMax bound the backoff while the database fails (0
	// means 100 ms and 10 s).
	IdleMin, IdleMax, ErrorMin, ErrorMax time.Duration
	// HeldClaims holds each claim's transaction open while its jobs run,
	// instead of leasing them: the claim locks the jobs and writes nothing
	// to them, and one commit per claim writes each job's result, its one
	// write (a lease claim writes each job twice: Running, then its
	// result). A hold row naming the claim's jobs is committed before
	// their handlers start; if the worker dies (or the commit fails), the
	// maintenance rescuer counts it as an attempt of each job, which runs
	// again, so a job that kills its worker still ends Failed after
	// max_attempts. For short jobs: a claim's results commit together once
	// its last job is done, each open claim holds a connection, and a
	// handler must finish within the visibility timeout less a margin of a
	// fifth of it (at most 5 s) from its claim, or its context is cancelled
	// and the attempt fails. No heartbeat. Jobs in hand read as Queued to
	// others (the admin, the dashboard). Lease and held workers may share
	// a queue. PostgreSQL 13 and later (Dialect.HeldClaims); see
	// docs/design.md, "Held claims".
	HeldClaims bool
	// Logger hears failures: each failed attempt and each panic as it is
	// recorded (the job, queue, kind, attempt and max_attempts, the
	// error's first line, when it runs again or that it is dead; a panic's
	// first stack frames), and the database's failures and recoveries.
	// nil is the Queue's Config.Logger.
	Logger *slog.Logger

	// prefetchMax is the most the prefetch grows to: Prefetch when it was
	// given, set with the defaults.
	prefetchMax int
	// prefetchGrows says Prefetch was left to the Worker (0).
	prefetchGrows bool
}

// DefaultPollInterval is the longest wait between a Worker's claims while
// its queue is empty, when WorkerConfig.PollInterval is 0.
const DefaultPollInterval = time.Second

// workerConfig checks cfg and returns it with its defaults filled in.
func (q *Queue) workerConfig(cfg *WorkerConfig) (WorkerConfig, error) {
	if cfg == nil || cfg.Handler == nil {
		return WorkerConfig{}, usage.Errorf("bucketed worker: Handler is required")
	}
	c := *cfg
	if c.Queue == "" {
		c.Queue = q.cfg.Queue
	}
	if err := skiplock.ValidateQueueName(c.Queue); err != nil {
		return WorkerConfig{}, err
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{{"workers", &c.Workers, DefaultWorkers, 100000}, {"flush size", &c.FlushSize, 1000, 100000}, {"prefetch", &c.Prefetch, 0, 100000}} {
		if f.name == "prefetch" && *f.v < 0 {
			continue
		}
		if *f.v < 0 || *f.v > f.max {
			return WorkerConfig{}, usage.Errorf("bucketed worker: %s %d is out of range: use 1 to %d (0 for the default %d)", f.name, *f.v, f.max, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case c.Prefetch < 0:
		c.Prefetch = 0
	case c.Prefetch == 0:
		c.Prefetch = min(256, max(1, c.Workers/4))
		c.prefetchMax = max(c.Prefetch, c.Workers)
		c.prefetchGrows = true
	}
	c.prefetchMax = max(c.prefetchMax, c.Prefetch)
	if c.PollInterval < 0 || c.IdleMin < 0 || c.IdleMax < 0 || c.ErrorMin < 0 || c.ErrorMax < 0 {
		return WorkerConfig{}, usage.Errorf("bucketed worker: poll interval and idle and error waits cannot be negative")
	}
	if c.PollInterval == 0 {
		c.PollInterval = c.IdleMax
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.IdleMin == 0 {
		c.IdleMin = min(10*time.Millisecond, c.PollInterval)
	}
	if c.ErrorMin == 0 {
		c.ErrorMin = 100 * time.Millisecond
	}
	if c.ErrorMax == 0 {
		c.ErrorMax = 10 * time.Second
	}
	// The completion helpers default to shares of the pool
	// they draw on.
	poolMax := int(q.db.Stats().Max)
	if poolMax <= 0 {
		poolMax = 8
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"completers", &c.Completers, min(2, max(1, poolMax/8))}} {
		if *f.v < 0 || *f.v > 1000 {
			return WorkerConfig{}, usage.Errorf("bucketed worker: %s %d is out of range: use 1 to 1000 (0 for the default, %d here)", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Heartbeat < 0 {
		return WorkerConfig{}, usage.Errorf("bucketed worker: heartbeat %v cannot be negative", c.Heartbeat)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = q.cfg.VisibilityTimeout / 3
	}
	if c.Heartbeat >= q.cfg.VisibilityTimeout {
		return WorkerConfig{}, usage.Errorf("bucketed worker: heartbeat %v is not shorter than the visibility timeout %v: leases would lapse between beats", c.Heartbeat, q.cfg.VisibilityTimeout)
	}
	if c.Owner == "" {
		c.Owner = q.cfg.Owner
	}
	if c.Logger == nil {
		c.Logger = q.cfg.Logger
	}
	c.Logger = c.Logger.With("layout", "bucketed", "queue", c.Queue)
	if c.HeldClaims && !q.db.Dialect().HeldClaims {
		return WorkerConfig{}, errHeldUnsupported(q.db.Dialect())
	}
	if c.HeldClaims {
		if err := heldServerVersion(q.db.Version()); err != nil {
			return WorkerConfig{}, err
		}
	}
	if c.HeldClaims && poolMax < 2 {
		// A held claim holds one connection and records itself on another.
		return WorkerConfig{}, usage.Errorf("bucketed worker: held claims need a pool of at least 2 connections (this one has %d): raise OpenConfig.MaxConns", poolMax)
	}
	return c, nil
}
