package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/startstop"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/internal/workloop"
	"github.com/skiplock/skiplock/maintenance"
)

// SpareConns is how many server connections a Worker's check keeps free
// beyond one per worker: for the process's other queries (enqueue, stats,
// the --until-empty probe) and PostgreSQL's superuser_reserved_connections
// (3 by default), which ordinary users cannot take.
const SpareConns = 5

// DefaultJobTimeout is a job's time budget when WorkerConfig.JobTimeout
// is 0.
const DefaultJobTimeout = 5 * time.Minute

// SessionMargin is what a fanout worker's sessions allow beyond the job
// budget before the server ends a transaction left idle: see
// SessionTimeout.
const SessionMargin = 10 * time.Second

// SessionTimeout is the idle_in_transaction_session_timeout (and
// statement_timeout) to open a fanout worker's pool with
// (skiplock.OpenConfig.IdleInTransactionTimeout and StatementTimeout)
// for a job budget of jobTimeout (0: DefaultJobTimeout): the budget plus
// SessionMargin. A job's transaction is open for as long as its handler
// runs, so a healthy worker never reaches it, and a stopped one (SIGSTOP,
// a debugger) loses its transactions and their locks that much later:
// other workers then run its jobs.
func SessionTimeout(jobTimeout time.Duration) time.Duration {
	if jobTimeout <= 0 {
		jobTimeout = DefaultJobTimeout
	}
	return jobTimeout + SessionMargin
}

// DefaultWorkers is how many jobs a Worker runs at once when
// WorkerConfig.Workers is 0, as in the bucketed layout.
const DefaultWorkers = 10

// WorkerConfig tunes a Worker. Handler is required.
type WorkerConfig struct {
	// Queue is the queue to work; "" means the Queue's Config.Queue.
	Queue string
	// Workers is how many jobs run at once; each holds one connection
	// while it processes. 0 means DefaultWorkers.
	Workers int
	// Handler does each job's work. Required.
	Handler Handler
	// JobTimeout is each job's time budget; 0 means DefaultJobTimeout,
	// or, where the engine bounds how long a job's transaction may stay
	// open (skiplock.Dialect.HoldLimit: CockroachDB's closed timestamp),
	// four fifths of HoldLimit. A budget longer than that is refused: such
	// a job's commit would fail at every try.
	// (Run longer jobs on the bucketed layout, whose leases hold no
	// transaction open.)
	// The handler's context ends when it runs out, and a handler that
	// returns after that fails its attempt (recorded like any failure).
	// A job holds its transaction, and the job's row lock, for as long as
	// its handler runs: open the worker's pool with SessionTimeout's
	// settings so that the server ends a transaction left idle longer
	// (a stopped process's), and other workers take its job.
	JobTimeout time.Duration
	// HoldLimit overrides the engine's skiplock.Dialect.HoldLimit, for a
	// CockroachDB cluster whose kv.closed_timestamp.target_duration is
	// not the default 3 s; 0 keeps the engine's.
	HoldLimit time.Duration
	// OnResult, when set, hears every Process call that claimed a job or
	// failed, with Process's error, from the worker's goroutine (keep it
	// quick): for counters and latency recording. Empty polls are not
	// reported.
	OnResult func(worker int, r *Result, err error)
	// PollInterval is the longest wait between polls while the queue is
	// empty (the wait starts at IdleMin and doubles); 0 means IdleMax, and
	// 1 s when that is 0 too. One idle goroutine polls, the others wait
	// for it to find work, so idling costs one statement per poll whatever
	// Workers is.
	PollInterval time.Duration
	// Wake, when set, ends the idle poll's wait at once: send on it
	// (without blocking) when jobs may have arrived.
	Wake <-chan struct{}
	// WaitWhenDrained makes the idle poller wait PollInterval after an
	// empty poll at once, instead of backing off from IdleMin, and poll
	// with the heads probe (one statement, no transaction) before it
	// claims: one statement per PollInterval while idle. For workers
	// whose new jobs come with a Wake (client.Client sets it).
	WaitWhenDrained bool
	// IdleMin, IdleMax, ErrorMin and ErrorMax tune the waits after an
	// empty poll or a failure; 0 means 10ms, 1s, 100ms and 10s. IdleMax
	// is the old name of PollInterval.
	IdleMin, IdleMax, ErrorMin, ErrorMax time.Duration
	// Maintenance tunes the schema's maintenance leader, which this worker
	// competes to be: one process per schema prunes old dead jobs (and,
	// with the bucketed layout, rescues expired leases; see package
	// maintenance). nil means its defaults.
	Maintenance *maintenance.Config
	// NoMaintenance keeps this worker out of the leader election, where
	// another part of the process (or another process) runs maintenance.
	NoMaintenance bool
	// Logger hears each failed attempt and each panic as it is recorded
	// (the job, queue, kind, attempt and max_attempts, the error's first
	// line, the backoff before it runs again or that it moved to
	// job_dead; a panic's first stack frames), each job buried because
	// workers that died used up its attempts, database failures and
	// recoveries, and skipped checks. nil is the Queue's Config.Logger.
	Logger *slog.Logger
}

// ConnLimitError says the server allows fewer connections than the
// workers need. Nothing was started.
type ConnLimitError struct {
	// Allowed is the server's max_connections.
	Allowed int
	// Workers is the number of workers asked for.
	Workers int
	// Needed is Workers, plus RecorderConns(Workers) that record attempts,
	// plus SpareConns.
	Needed int
}

// Error says what the server allows, what the run needs, and the fix.
func (e *ConnLimitError) Error() string {
	return fmt.Sprintf("server allows %d connections; %d fanout workers need %d (each holds one while it processes, plus the ones that record attempts and %d spare): raise max_connections, run fewer workers, or use the bucketed layout's leases",
		e.Allowed, e.Workers, e.Needed, SpareConns)
}

// Worker runs a Queue's jobs with a pool of goroutines: each loops on
// Process, backs off with jitter while the queue is empty or the database
// fails, and stops gracefully. Make one with Queue.NewWorker, then Start
// and Stop it, as in the bucketed layout.
type Worker struct {
	q   *Queue
	cfg WorkerConfig

	mu      sync.Mutex
	started bool
	svc     startstop.Service // runs the pool until Stop, then closes rec
	rec     *recorder         // counts attempts before handlers run
	chains  []chain           // each goroutine's next claim, sent with its last removal
	maint   *maintenance.Service
	// busy counts the goroutines claiming or running a job: the queue's
	// local limit (skiplock queues configure --local-concurrency) bounds
	// it.
	busy atomic.Int64

	completed, failed, dead, errored, snoozed, cancelled atomic.Int64
}

// WorkerStats count what a Worker has done so far. The bucketed layout's
// WorkerStats use the same names for the same things.
type WorkerStats struct {
	// Completed counts jobs processed and deleted.
	Completed int64
	// Failed counts handler failures (each rolled back and recorded).
	Failed int64
	// Dead counts failures that moved a job to job_dead (also in Failed).
	Dead int64
	// Errors counts Process calls that failed on the database.
	Errors int64
	// Snoozed counts jobs whose handler returned skiplock.Snooze.
	Snoozed int64
	// Cancelled counts jobs whose handler returned skiplock.Cancel, each
	// moved to job_dead (not in Failed or Dead).
	Cancelled int64
}

type workerKey struct{}

// WorkerIndex returns the 0-based number of the Worker goroutine running a
// handler, from the handler's ctx; ok is false outside a Worker.
func WorkerIndex(ctx context.Context) (w int, ok bool) {
	w, ok = ctx.Value(workerKey{}).(int)
	return w, ok
}

// NewWorker checks cfg and returns a Worker; Start runs it. It does not
// touch the database.
func (q *Queue) NewWorker(cfg *WorkerConfig) (*Worker, error) {
	if cfg == nil || cfg.Handler == nil {
		return nil, usage.Errorf("fanout worker: Handler is required")
	}
	c := *cfg
	if c.Queue == "" {
		c.Queue = q.cfg.Queue
	}
	if err := skiplock.ValidateQueueName(c.Queue); err != nil {
		return nil, err
	}
	if c.Workers < 0 || c.Workers > 100000 {
		return nil, usage.Errorf("fanout worker: workers %d is out of range: use 1 to 100000 (0 for the default %d)", c.Workers, DefaultWorkers)
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.JobTimeout < 0 {
		return nil, usage.Errorf("fanout worker: job timeout %v is negative: use 0 for the default (%v) or a positive duration", c.JobTimeout, DefaultJobTimeout)
	}
	if c.HoldLimit < 0 {
		return nil, usage.Errorf("fanout worker: hold limit %v is negative: use 0 for the engine's, or the cluster's kv.closed_timestamp.target_duration", c.HoldLimit)
	}
	hold := cmp.Or(c.HoldLimit, q.db.Dialect().HoldLimit)
	switch {
	case hold > 0 && c.JobTimeout == 0:
		c.JobTimeout = hold * 4 / 5
	case c.JobTimeout == 0:
		c.JobTimeout = DefaultJobTimeout
	case hold > 0 && c.JobTimeout > hold*4/5:
		return nil, usage.Errorf("fanout worker: job timeout %v is longer than this engine lets a job's transaction stay open (%v, four fifths of its closed-timestamp target %v, kv.closed_timestamp.target_duration): its commit would fail at every try. Use a job timeout of at most %v, set WorkerConfig.HoldLimit to the cluster's setting if it is longer, or run such jobs on the bucketed layout, whose leases hold no transaction open",
			c.JobTimeout, hold*4/5, hold, hold*4/5)
	}
	if c.Logger == nil {
		c.Logger = q.cfg.Logger
	}
	c.Logger = c.Logger.With("layout", "fanout", "queue", c.Queue)
	h, budget := c.Handler, c.JobTimeout
	c.Handler = func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		hctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		err := h(hctx, tx, job)
		if hctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("job %s ran out of its %v budget (WorkerConfig.JobTimeout): %w", job.ID, budget, errors.Join(err, hctx.Err()))
		}
		return err
	}
	return &Worker{q: q, cfg: c}, nil
}

// Start checks that the database can give every worker a connection, then
// starts the workers. The pool must allow at least
// Workers+RecorderConns(Workers) connections (skiplock.OpenConfig.MaxConns):
// one per worker, and the ones the Worker keeps to count attempts before
// handlers run; the server's max_connections must be at least that plus
// SpareConns (*ConnLimitError otherwise); servers
// without that setting (CockroachDB) skip the second check. Nothing is
// started when a check fails.
//
// ctx is the parent of every handler's context: cancelling it is a hard
// stop. Use Stop for a graceful one.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("fanout worker: already started (a Worker runs once, also after Stop): make another with Queue.NewWorker")
	}
	q, cfg := w.q, w.cfg
	if err := q.db.CheckWritable(ctx); err != nil {
		return fmt.Errorf("fanout worker: %w", err)
	}
	need := cfg.Workers + RecorderConns(cfg.Workers)
	if poolMax := q.db.Stats().Max; int(poolMax) < need {
		return usage.Errorf("fanout: the connection pool allows %d connections; each of %d workers holds one while it processes and %d more count attempts: open the DB with OpenConfig.MaxConns of at least %d",
			poolMax, cfg.Workers, need-cfg.Workers, need)
	}
	allowed, err := q.db.ServerMaxConnections(ctx)
	switch {
	case err != nil:
		// CockroachDB has no max_connections; its per-gateway limit is
		// unset by default.
		cfg.Logger.Info("cannot read the server's max_connections: skipping the connection check", logs.Err(err))
	case allowed < need+SpareConns:
		return &ConnLimitError{Allowed: allowed, Workers: cfg.Workers, Needed: need + SpareConns}
	}
	if !cfg.NoMaintenance {
		mc := maintenance.Config{}
		if cfg.Maintenance != nil {
			mc = *cfg.Maintenance
		}
		mc.Schema = q.cfg.Schema
		if mc.Logger == nil {
			mc.Logger = cfg.Logger
		}
		if w.maint, err = maintenance.Start(ctx, q.db, &mc); err != nil {
			return fmt.Errorf("fanout worker: %w", err)
		}
	}
	w.rec = newRecorder(q, cfg.Workers, cfg.Logger)
	w.chains = make([]chain, cfg.Workers)
	pool, err := workloop.Start(ctx, workloop.Config{
		Workers: cfg.Workers,
		IdleMin: cfg.IdleMin, IdleMax: cmp.Or(cfg.PollInterval, cfg.IdleMax),
		ErrorMin: cfg.ErrorMin, ErrorMax: cfg.ErrorMax,
		SharedIdle: true, Wake: cfg.Wake, WaitWhenDrained: cfg.WaitWhenDrained, Probe: w.idleProbe(),
		Logger: cfg.Logger,
	}, w.step)
	if err != nil {
		w.rec.close()
		if w.maint != nil {
			w.maint.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
		}
		return err
	}
	w.started = true
	return w.svc.StartDrain(ctx, func(stop, hard context.Context) {
		<-stop.Done()
		pool.Stop(hard) //nolint:errcheck // StopContext reports the hard stop
		for i := range w.chains {
			w.chains[i].drop() // a claim sent with the last removal: its job goes back
		}
		w.rec.close()
	})
}

// step processes one job for worker i. Under a local limit, a goroutine
// past it claims nothing (it idles as after an empty claim), and none
// chains its next claim to its last job's removal: the chained job could
// not wait for a place under the limit.
func (w *Worker) step(ctx context.Context, i int) (bool, error) {
	ch := &w.chains[i]
	if local := w.q.limitsOf(ctx, w.cfg.Queue).local; local > 0 {
		if w.busy.Add(1) > int64(local) {
			w.busy.Add(-1)
			ch.drop()
			return false, nil
		}
		defer w.busy.Add(-1)
		ch.drop()
		ch = nil
	}
	res, err := w.q.process(context.WithValue(ctx, workerKey{}, i), w.cfg.Queue, w.cfg.Handler, w.rec, ch)
	if err != nil {
		w.errored.Add(1)
	}
	if w.cfg.OnResult != nil && (res.Job != nil || err != nil) {
		w.cfg.OnResult(i, &res, err)
	}
	if res.Job == nil {
		return false, err
	}
	switch {
	case err != nil:
		// Counted above: a stop mid-job, a lost database, an ambiguous
		// commit.
	case res.Snoozed:
		w.snoozed.Add(1)
	case res.Cancelled:
		w.cancelled.Add(1)
		w.logFailure(&res)
	case res.HandlerErr == nil:
		w.completed.Add(1)
	default:
		w.failed.Add(1)
		if res.Dead {
			w.dead.Add(1)
		}
		w.logFailure(&res)
	}
	return true, err
}

// logFailure logs a failed attempt that Process recorded, or a job it
// moved to job_dead without running because workers that died had used up
// its attempts.
func (w *Worker) logFailure(res *Result) {
	j := res.Job
	if errors.Is(res.HandlerErr, ErrWorkerDied) {
		w.cfg.Logger.Error("job moved to job_dead without running: its attempts were used up by workers that died mid-job", logs.Job(j)...)
		return
	}
	next := fmt.Sprintf("retry in %v", res.RetryIn.Round(time.Millisecond))
	switch {
	case res.Cancelled:
		next = "cancelled by its handler: moved to job_dead"
	case res.Dead:
		next = "no attempts left: moved to job_dead"
	}
	logs.Failure(w.cfg.Logger, j, res.HandlerErr, res.Dead, next)
}

// Stop stops claiming jobs and waits for the jobs in flight to finish and
// commit. If ctx ends first, it cancels them (their transactions roll back
// and the jobs return to the queue, with no attempt counted) and returns
// ctx's error once they have returned.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return errors.New("fanout worker: not started: call Start first")
	}
	err := w.svc.StopContext(ctx)
	if w.maint != nil {
		if merr := w.maint.Stop(ctx); merr != nil && err == nil {
			err = merr
		}
	}
	return err
}

// Wait blocks until every worker goroutine has returned (after Stop, or a
// cancelled Start context). It returns at once for a Worker never started.
func (w *Worker) Wait() {
	if stopped := w.svc.Stopped(); stopped != nil {
		<-stopped
	}
}

// Stats reports what the workers have done so far.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Completed: w.completed.Load(), Failed: w.failed.Load(), Dead: w.dead.Load(), Errors: w.errored.Load(), Snoozed: w.snoozed.Load(), Cancelled: w.cancelled.Load()}
}

// idleProbe is the check an idle goroutine makes before it claims, with
// WaitWhenDrained while claims use the shards' watermarks:
// the heads probe alone when one is due (recorded as the queue's latest
// probe), else whether a job lies at or after the watermarks; one
// statement through the pool (the goroutine holds no job's connection).
// nil otherwise: it claims.
func (w *Worker) idleProbe() func(ctx context.Context) (bool, error) {
	q := w.q
	if !w.cfg.WaitWhenDrained || !q.marks.On() {
		return nil
	}
	return func(ctx context.Context) (found bool, err error) {
		ran, err := q.marks.ProbeIfDue(w.cfg.Queue, func() (err error) {
			found, err = q.probeHeads(ctx, q.db, w.cfg.Queue, q.marks.Start())
			return err
		})
		if ran {
			return found, err
		}
		// Between heads probes (a slow one holds the next back): is
		// anything at or after the watermarks?
		return q.existsAfterMarks(ctx, w.cfg.Queue)
	}
}
