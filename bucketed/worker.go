package bucketed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/internal/workloop"
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
	// in hand; 0 means Workers/4 (at least 1, at most 256), negative
	// none. Prefetched jobs are leased like running ones: the heartbeat
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
	// Batch was how many jobs a goroutine claimed at once.
	//
	// Deprecated: one producer claims for every goroutine (see Prefetch);
	// Batch > 1 with Prefetch 0 sets Prefetch to Workers*(Batch-1).
	Batch int
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
	// is the job's latency from request to committed completion (with
	// Batch > 1 it includes waiting behind the batch's earlier jobs). It
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
	// Logf hears failures: each failed attempt and each panic as it is
	// recorded (the job, its attempt and max_attempts, the error's first
	// line, when it runs again or that it is dead; a panic's first stack
	// frames), and the database's failures and recoveries. nil is silent.
	Logf func(format string, args ...any)
}

// DefaultPollInterval is the longest wait between a Worker's claims while
// its queue is empty, when WorkerConfig.PollInterval is 0.
const DefaultPollInterval = time.Second

// Worker runs a handler over a queue's jobs with a pool of goroutines
// (internal/workloop) fed by one producer (claims for the free goroutines
// plus a prefetch; one poll while idle), batched completions, heartbeats,
// panics turned into failures, graceful shutdown.
type Worker struct {
	q    *Queue
	cfg  WorkerConfig
	pool *workloop.Pool
	prod producer

	results  chan result
	stopping chan struct{} // closed by Stop: start no more jobs
	flushers sync.WaitGroup
	backlog  chan struct{} // a completer's batch filled to FlushSize: wakes a backlog completer
	flushed  chan struct{} // closed when the completers have drained results
	stopBeat chan struct{}
	bg       sync.WaitGroup // heartbeat
	maint    *maintenance.Service

	mu                   sync.Mutex
	inHand               map[*skiplock.Job]context.CancelFunc // claimed, not yet written back
	held                 map[*skiplock.Job]*heldRun           // held claims' jobs between their claim and hand (heldworker.go)
	heldWG               sync.WaitGroup                       // held claims not yet committed
	leases               map[*skiplock.Job]time.Time          // when each lease in hand holds until (see persist.go)
	started              bool
	stopOnce, finishOnce sync.Once

	claimed, completed, failed, released, lost, snoozed atomic.Int64
	// writeFails counts result writes that failed in a row; at
	// breakerAfter the producer stops claiming but for one job at a time
	// (see produce), so that a fault that refuses every result does not
	// run the queue's jobs again and again, spending their attempts.
	writeFails     atomic.Int64
	backlogFlushes atomic.Int64 // batches the backlog completers wrote
}

// WorkerStats counts what a Worker did. The fanout layout's WorkerStats
// use the same names for the same things (Completed, Failed).
type WorkerStats struct {
	// Claimed jobs, Completed (Success written), Failed (a failed attempt
	// written: retried later or dead), Released (given back unstarted or
	// interrupted by shutdown), Lost (the lease was lost before the result
	// was written; the result was dropped), Snoozed (given back to run
	// later by skiplock.Snooze, the attempt not counted).
	Claimed, Completed, Failed, Released, Lost, Snoozed int64
}

type outcome int

const (
	outComplete outcome = iota
	outFail
	outRelease
	outDrop
	outSnooze
)

type result struct {
	job            *skiplock.Job
	what           outcome
	err            error
	asked, claimed time.Time // for AfterComplete
}

// NewWorker checks cfg and returns a Worker; Start runs it.
func (q *Queue) NewWorker(cfg *WorkerConfig) (*Worker, error) {
	if cfg == nil || cfg.Handler == nil {
		return nil, usage.Errorf("bucketed worker: Handler is required")
	}
	c := *cfg
	if c.Queue == "" {
		c.Queue = q.cfg.Queue
	}
	if err := skiplock.ValidateQueueName(c.Queue); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{{"workers", &c.Workers, DefaultWorkers, 100000}, {"batch", &c.Batch, 1, MaxClaim}, {"flush size", &c.FlushSize, 1000, 100000}, {"prefetch", &c.Prefetch, 0, 100000}} {
		if f.name == "prefetch" && *f.v < 0 {
			continue
		}
		if *f.v < 0 || *f.v > f.max {
			return nil, usage.Errorf("bucketed worker: %s %d is out of range: use 1 to %d (0 for the default %d)", f.name, *f.v, f.max, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case c.Prefetch < 0:
		c.Prefetch = 0
	case c.Prefetch == 0 && c.Batch > 1:
		c.Prefetch = c.Workers * (c.Batch - 1)
	case c.Prefetch == 0:
		c.Prefetch = min(256, max(1, c.Workers/4))
	}
	if c.PollInterval < 0 || c.IdleMin < 0 || c.IdleMax < 0 || c.ErrorMin < 0 || c.ErrorMax < 0 {
		return nil, usage.Errorf("bucketed worker: poll interval and idle and error waits cannot be negative")
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
			return nil, usage.Errorf("bucketed worker: %s %d is out of range: use 1 to 1000 (0 for the default, %d here)", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Heartbeat < 0 {
		return nil, usage.Errorf("bucketed worker: heartbeat %v cannot be negative", c.Heartbeat)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = q.cfg.VisibilityTimeout / 3
	}
	if c.Heartbeat >= q.cfg.VisibilityTimeout {
		return nil, usage.Errorf("bucketed worker: heartbeat %v is not shorter than the visibility timeout %v: leases would lapse between beats", c.Heartbeat, q.cfg.VisibilityTimeout)
	}
	if c.Owner == "" {
		c.Owner = q.cfg.Owner
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.HeldClaims && !q.db.Dialect().HeldClaims {
		return nil, errHeldUnsupported(q.db.Dialect())
	}
	if c.HeldClaims {
		if err := heldServerVersion(q.db.Version()); err != nil {
			return nil, err
		}
	}
	if c.HeldClaims && poolMax < 2 {
		// A held claim holds one connection and records itself on another.
		return nil, usage.Errorf("bucketed worker: held claims need a pool of at least 2 connections (this one has %d): raise OpenConfig.MaxConns", poolMax)
	}
	return &Worker{q: q, cfg: c, inHand: map[*skiplock.Job]context.CancelFunc{}, leases: map[*skiplock.Job]time.Time{},
		held: map[*skiplock.Job]*heldRun{}}, nil
}

// Start launches the goroutines. ctx is the parent of every handler's
// context: cancelling it is a hard stop (prefer Stop).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("bucketed worker: already started (a Worker runs once, also after Stop): make another with Queue.NewWorker")
	}
	w.started = true
	w.mu.Unlock()
	if err := w.q.db.CheckWritable(ctx); err != nil {
		return fmt.Errorf("bucketed worker: %w", err)
	}
	if !w.cfg.NoMaintenance {
		svc, err := maintenance.Start(ctx, w.q.db, w.maintenanceConfig())
		if err != nil {
			return fmt.Errorf("bucketed worker: %w", err)
		}
		w.maint = svc
	}
	w.stopping = make(chan struct{})
	w.results = make(chan result, w.cfg.FlushSize)
	w.flushed = make(chan struct{})
	w.stopBeat = make(chan struct{})
	bgCtx := context.WithoutCancel(ctx)
	// Completers write results as they arrive; as many again write only
	// while results back up (see complete). Each kind ends once results
	// is closed and drained; the backlog ones once nothing can wake them.
	w.backlog = make(chan struct{}, w.cfg.Completers)
	var backlogged sync.WaitGroup
	for range w.cfg.Completers {
		w.flushers.Add(1)
		go w.complete(bgCtx, nil)
		backlogged.Add(1)
		go func() { defer backlogged.Done(); w.complete(bgCtx, w.backlog) }()
	}
	go func() {
		w.flushers.Wait()
		close(w.backlog)
		backlogged.Wait()
		close(w.flushed)
	}()
	w.bg.Add(1)
	go w.heartbeat(bgCtx)
	w.prod.init(w.cfg.Workers + w.cfg.Prefetch)
	// The goroutines never poll: they wait on the producer's channel.
	pool, err := workloop.Start(ctx, workloop.Config{Workers: w.cfg.Workers, Logf: w.cfg.Logf}, w.step)
	if err != nil {
		if w.maint != nil {
			w.maint.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
		}
		return err
	}
	go w.produce(pool.Context())
	w.mu.Lock()
	w.pool = pool
	w.mu.Unlock()
	return nil
}

// Stop stops claiming, gives back jobs claimed but not started, and waits
// for the jobs being handled to finish. When ctx ends first, their
// contexts are cancelled and their leases given back (Release), so other
// workers take them at once. Every result is written before Stop returns.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	pool := w.pool
	w.mu.Unlock()
	if pool == nil {
		return errors.New("bucketed worker: not started")
	}
	w.stopOnce.Do(func() { close(w.stopping) })
	err := pool.Stop(ctx)
	w.finishOnce.Do(func() {
		<-w.prod.done
		w.returnReady()
		w.heldWG.Wait()
		close(w.results)
		<-w.flushed
		close(w.stopBeat)
		w.bg.Wait()
		if w.maint != nil {
			if merr := w.maint.Stop(ctx); merr != nil && err == nil {
				err = merr
			}
		}
	})
	return err
}

// maintenanceConfig is the maintenance leader's configuration for this
// worker's schema.
func (w *Worker) maintenanceConfig() *maintenance.Config {
	var c maintenance.Config
	if w.cfg.Maintenance != nil {
		c = *w.cfg.Maintenance
	}
	c.Schema = w.q.cfg.Schema
	if c.Logf == nil {
		c.Logf = w.cfg.Logf
	}
	return &c
}

// Wait blocks until every handler goroutine has returned: after Stop, or
// once the context given to Start is cancelled. It returns at once for a
// Worker never started. Results are written back by Stop, which a hard
// stop still needs.
func (w *Worker) Wait() {
	w.mu.Lock()
	pool := w.pool
	w.mu.Unlock()
	if pool != nil {
		pool.Wait()
	}
}

// Stats reports what the worker has done so far.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Claimed: w.claimed.Load(), Completed: w.completed.Load(), Failed: w.failed.Load(),
		Released: w.released.Load(), Lost: w.lost.Load(), Snoozed: w.snoozed.Load()}
}

// step takes the next job from the producer and works it.
func (w *Worker) step(ctx context.Context, _ int) (bool, error) {
	asked := time.Now()
	var h handed
	var ok bool
	select {
	case h, ok = <-w.prod.ready:
	default:
		w.prod.hungry.Add(1)
		w.prod.poke()
		h, ok = <-w.prod.ready // closed when the producer returns: stop or hard stop
		w.prod.hungry.Add(-1)
	}
	if !ok {
		return false, nil
	}
	defer func() {
		w.prod.held.Add(-1)
		w.prod.poke()
	}()
	j := h.job
	if h.run != nil {
		w.stepHeld(ctx, h, asked)
		return true, nil
	}
	select {
	case <-w.stopping:
		// Stopping: a job not started goes back at once.
		w.results <- result{job: j, what: outRelease}
		return true, nil
	default:
	}
	jctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	w.inHand[j] = cancel
	w.mu.Unlock()
	err := workloop.Call(func() error { return w.cfg.Handler(jctx, j) })
	lostLease := jctx.Err() != nil && ctx.Err() == nil
	cancel()
	claimed := h.claimed
	if claimed.Before(asked) {
		claimed = asked // prefetched before this goroutine asked: no wait
	}
	switch {
	case lostLease:
		w.results <- result{job: j, what: outDrop}
	case err != nil && ctx.Err() != nil:
		// Interrupted by a hard stop: not the job's fault.
		w.results <- result{job: j, what: outRelease}
	case err != nil:
		if _, ok := skiplock.AsSnooze(err); ok {
			w.results <- result{job: j, what: outSnooze, err: err}
			break
		}
		w.results <- result{job: j, what: outFail, err: err}
	default:
		w.results <- result{job: j, what: outComplete, asked: asked, claimed: claimed}
	}
	return true, nil
}

// complete is a completer: it writes results in batches, taking
// whatever has arrived while its previous batch was being written. A
// completer with a gate (a backlog completer) writes one batch per
// signal on it: a completer whose batch filled to FlushSize signals, since
// results are then arriving faster than the steady completers write
// them. Fewer completers write bigger batches, and a completion costs
// much per statement, while many workers' results need the extra ones
// (docs/benchmarks.md, "Completers").
func (w *Worker) complete(ctx context.Context, gate <-chan struct{}) {
	if gate == nil {
		defer w.flushers.Done()
	}
	for {
		if gate != nil {
			if _, ok := <-gate; !ok {
				return
			}
		}
		r, ok := <-w.results
		if !ok {
			return
		}
		batch := []result{r}
	fill:
		for len(batch) < w.cfg.FlushSize {
			select {
			case r, ok := <-w.results:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if gate == nil && len(batch) == w.cfg.FlushSize {
			select {
			case w.backlog <- struct{}{}:
			default: // every backlog completer is already woken
			}
		}
		if gate != nil {
			w.backlogFlushes.Add(1)
		}
		w.flush(ctx, batch)
	}
}

// sortedResults are a batch of results sorted by what becomes of them.
type sortedResults struct {
	done     []*skiplock.Job
	doneRes  []result // done's results, for AfterComplete
	fails    []Failure
	backoffs []time.Duration // each failure's wait before its retry, parallel to fails
	snoozes  map[time.Duration][]*skiplock.Job
	rel      []*skiplock.Job // given back: not started, or interrupted by a hard stop
	drop     []*skiplock.Job // lease lost: nothing to write
}

// sortResults sorts batch by outcome, drawing each failure's backoff.
func (w *Worker) sortResults(batch []result) sortedResults {
	s := sortedResults{snoozes: map[time.Duration][]*skiplock.Job{}}
	for _, r := range batch {
		switch r.what {
		case outComplete:
			s.done = append(s.done, r.job)
			s.doneRes = append(s.doneRes, r)
		case outFail:
			f := Failure{Job: r.job, Err: r.err}
			s.fails = append(s.fails, f)
			s.backoffs = append(s.backoffs, w.q.retryIn(f))
		case outSnooze:
			d, _ := skiplock.AsSnooze(r.err)
			s.snoozes[d] = append(s.snoozes[d], r.job)
		case outRelease:
			s.rel = append(s.rel, r.job)
		case outDrop:
			s.drop = append(s.drop, r.job)
		}
	}
	return s
}

// afterCompleted calls AfterComplete for each completion written, those
// in lost excepted.
func (w *Worker) afterCompleted(doneRes []result, lost []*skiplock.Job) {
	if w.cfg.AfterComplete == nil || len(lost) >= len(doneRes) {
		return
	}
	gone := make(map[*skiplock.Job]bool, len(lost))
	for _, j := range lost {
		gone[j] = true
	}
	for _, r := range doneRes {
		if !gone[r.job] {
			w.cfg.AfterComplete(r.job, r.asked, r.claimed)
		}
	}
}

// wakeForRetries wakes the producer when the soonest of the failed jobs
// that will run again comes due.
func (w *Worker) wakeForRetries(fails []Failure, backoffs []time.Duration) {
	soonest := time.Duration(-1)
	for i, f := range fails {
		if f.Job.Attempts < f.Job.MaxAttempts && (soonest < 0 || backoffs[i] < soonest) {
			soonest = backoffs[i]
		}
	}
	if soonest >= 0 {
		w.wakeIn(soonest)
	}
}

func (w *Worker) flush(ctx context.Context, batch []result) {
	s := w.sortResults(batch)
	done, doneRes, fails, backoffs, snoozes, rel, drop := s.done, s.doneRes, s.fails, s.backoffs, s.snoozes, s.rel, s.drop
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A write that fails leaves its jobs Running; their leases expire and
	// other workers take them again (at least once).
	if len(done) > 0 {
		lost, _ := w.writeBack(ctx, "completion", OutcomeCompleted, done, func(ctx context.Context) ([]*skiplock.Job, error) {
			return w.q.CompleteManyWith(ctx, done, w.cfg.OnComplete)
		})
		w.completed.Add(int64(len(done) - len(lost)))
		w.afterCompleted(doneRes, lost)
	}
	if len(fails) > 0 {
		fj := make([]*skiplock.Job, len(fails))
		for i, f := range fails {
			fj[i] = f.Job
		}
		lost, err := w.writeBack(ctx, "failure", OutcomeFailed, fj, func(ctx context.Context) ([]*skiplock.Job, error) {
			return w.q.failMany(ctx, fails, backoffs)
		})
		w.failed.Add(int64(len(fails) - len(lost)))
		if err == nil {
			w.logFailures(fails, backoffs, lost)
			w.wakeForRetries(fails, backoffs)
		}
	}
	if len(rel) > 0 {
		lost, _ := w.writeBack(ctx, "release", OutcomeReleased, rel, func(ctx context.Context) ([]*skiplock.Job, error) { return w.q.ReleaseMany(ctx, rel) })
		w.released.Add(int64(len(rel) - len(lost)))
	}
	for d, jobs := range snoozes {
		lost, _ := w.writeBack(ctx, "snooze", OutcomeSnoozed, jobs, func(ctx context.Context) ([]*skiplock.Job, error) { return w.q.SnoozeMany(ctx, jobs, d) })
		w.snoozed.Add(int64(len(jobs) - len(lost)))
		if len(lost) < len(jobs) {
			w.wakeIn(d)
		}
	}
	w.lost.Add(int64(len(drop)))
	w.report(drop, drop, OutcomeLost)
	w.mu.Lock()
	for _, r := range batch {
		delete(w.inHand, r.job)
	}
	w.mu.Unlock()
	w.forget(batch)
}

// writeBack persists one kind of result for jobs (see persist) and
// returns the jobs whose result was not written: their lease was lost, or
// the write failed (logged, and returned; they run again when their
// leases expire). They are counted as lost.
func (w *Worker) writeBack(ctx context.Context, what string, o Outcome, jobs []*skiplock.Job, write func(ctx context.Context) ([]*skiplock.Job, error)) ([]*skiplock.Job, error) {
	var lost []*skiplock.Job
	err := w.persist(ctx, what, jobs, func(ctx context.Context) (err error) {
		lost, err = write(ctx)
		return err
	})
	if err != nil {
		if w.writeFails.Add(1) == breakerAfter {
			w.cfg.Logf("bucketed worker: %d result writes in a row failed, the last with: %v: claiming one job at a time until a result is written again", breakerAfter, err)
		}
		w.cfg.Logf("bucketed worker: %v%s (the jobs run again when their leases expire)", err, skiplock.Hint(err))
		if rj := rejectedJobs(err); rj != nil {
			lost = append(lost, rj...)
		} else {
			lost = jobs
		}
	}
	if err == nil && w.writeFails.Swap(0) >= breakerAfter {
		w.cfg.Logf("bucketed worker: results are written again: claiming as before")
	}
	w.lost.Add(int64(len(lost)))
	w.report(jobs, lost, o)
	return lost, err
}

// breakerAfter is how many result writes in a row must fail before the
// producer claims one job at a time (Worker.writeFails).
const breakerAfter = 3

// logFailures logs each failed attempt FailMany recorded (those not in
// lost) and each one it refused because the lease was lost.
func (w *Worker) logFailures(fails []Failure, backoffs []time.Duration, lost []*skiplock.Job) {
	gone := make(map[*skiplock.Job]bool, len(lost))
	for _, j := range lost {
		gone[j] = true
	}
	for i, f := range fails {
		j, what := f.Job, "failed"
		if skiplock.IsPanic(f.Err) {
			what = "panicked"
		}
		var next string
		switch {
		case gone[j]:
			next = "not recorded: its lease was lost, another worker has the job"
		case j.Attempts >= j.MaxAttempts:
			next = "no attempts left: the job is Failed (dead)"
		default:
			next = fmt.Sprintf("retry in %v", backoffs[i].Round(time.Millisecond))
		}
		msg := fmt.Sprintf("bucketed worker: job %s %s, attempt %d of %d: %s; %s", j.ID, what, j.Attempts, j.MaxAttempts, errtext.FirstLine(f.Err), next)
		if st := errtext.PanicFrames(f.Err, 3); st != "" {
			msg += "\n" + st
		}
		w.cfg.Logf("%s", msg)
	}
}

// heartbeat extends the leases of every job in hand, and cancels the
// handlers of jobs whose lease was lost.
func (w *Worker) heartbeat(ctx context.Context) {
	defer w.bg.Done()
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.stopBeat:
			return
		case <-t.C:
		}
		w.mu.Lock()
		jobs := make([]*skiplock.Job, 0, len(w.inHand))
		for j := range w.inHand {
			jobs = append(jobs, j)
		}
		w.mu.Unlock()
		if len(jobs) == 0 {
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, w.cfg.Heartbeat)
		beat := time.Now()
		// Retried while the leases hold, within one beat.
		var lost []*skiplock.Job
		err := w.persist(bctx, "heartbeat", jobs, func(ctx context.Context) (err error) {
			lost, err = w.q.ExtendMany(ctx, jobs, 0)
			return err
		})
		cancel()
		if err != nil && rejectedJobs(err) == nil {
			w.cfg.Logf("bucketed worker: heartbeat: %v", err)
			continue
		}
		if err != nil {
			w.cfg.Logf("bucketed worker: heartbeat: %v (those jobs' leases were not extended)", err)
		}
		w.noteLease(jobs, beat.Add(w.q.cfg.VisibilityTimeout), lost, rejectedJobs(err))
		w.mu.Lock()
		for _, j := range lost {
			if c, ok := w.inHand[j]; ok {
				c()
			}
		}
		w.mu.Unlock()
	}
}
