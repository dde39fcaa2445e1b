package skiplocktest

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/schema"
)

// Worker runs jobs of one kind, one at a time, through a real client, as
// rivertest.Worker does: Work inserts the job as the client inserts it
// (the kind's options, the args' InsertOpts, the insert middleware, the
// queue's layout), starts a client that works the job's queue, waits for
// the handler's first attempt and stops the client, which writes the
// result as it always does (Success, a failed attempt, a snooze). The
// handler therefore gets the context a client gives it: the work
// middleware, the kind's timeout, and on a fanout queue the job's
// transaction (client.TxFromContext).
//
// The job is committed before it runs (a client claims it in its own
// transaction), so Work takes no caller's transaction. While Work runs,
// the job's queue must hold no other live job in the schema, and no
// other client may work it, or the client would claim that job too (and
// another client this one): give each test its own schema (Schema) or
// each job its own queue. A job scheduled for later (RunAt) runs when it
// is due, as it would in production. A job that would run again after
// Work (a failed attempt with attempts left, a snooze) is cancelled once
// its result is read (bucketed: Canceled; fanout: moved to job_dead), so
// that no client runs it later and its queue is free for the next Work.
type Worker[T client.Args] struct {
	db     *skiplock.DB
	cfg    client.Config  // the caller's, with the worker's Workers
	insert *client.Client // inserts only, with cfg
}

// NewWorker returns a Worker over db with cfg (nil: the defaults;
// Schema, Queues' layouts, Middleware, JobTimeout, MaxSnoozes, OnComplete
// and the rest apply as in a client). w, with opts (may be nil), is
// registered as the worker of T's kind in place of cfg.Workers; with w nil,
// cfg.Workers runs the jobs. The client's log goes to tb.Logf (Logger)
// unless cfg.Logger is set.
func NewWorker[T client.Args](tb TB, db *skiplock.DB, cfg *client.Config, w client.Worker[T], opts *client.KindOptions) *Worker[T] {
	tb.Helper()
	out := &Worker[T]{db: db}
	if cfg != nil {
		out.cfg = *cfg
	}
	if w != nil {
		ws := client.NewWorkers()
		if err := client.AddWorker(ws, w, opts); err != nil {
			tb.Fatalf("skiplocktest.NewWorker: %v", err)
			return nil
		}
		out.cfg.Workers = ws
	}
	if out.cfg.Workers == nil {
		tb.Fatalf("skiplocktest.NewWorker: no worker: pass one, or a Config whose Workers has one for %T", *new(T))
		return nil
	}
	if out.cfg.Logger == nil {
		out.cfg.Logger = Logger(tb)
	}
	c := out.config("", "")
	var err error
	if out.insert, err = client.New(context.Background(), db, &c); err != nil {
		tb.Fatalf("skiplocktest.NewWorker: %v", err)
		return nil
	}
	return out
}

// config is the worker's client configuration: every declared queue for
// inserts only, but queue worked alone, one job at a time, without
// prefetch, maintenance, periodic jobs or notifications (an insert through
// the client wakes its own workers).
func (w *Worker[T]) config(queue string, layout schema.Layout) client.Config {
	c := w.cfg
	c.Queues = make(map[string]client.QueueConfig, len(w.cfg.Queues)+1)
	for name, q := range w.cfg.Queues {
		q.MaxWorkers = -1
		c.Queues[name] = q
	}
	if queue != "" {
		q := c.Queues[queue]
		q.Layout, q.MaxWorkers, q.Prefetch = layout, 1, 0
		if layout != schema.LayoutFanout {
			q.Prefetch = -1
		}
		c.Queues[queue] = q
	}
	c.Notify = client.NotifyOff
	c.NoMaintenance, c.PeriodicJobs = true, nil
	// One fanout worker's connections suffice: the pool need not hold
	// what the declared queues would need if they were all worked.
	c.AllowSmallPool = true
	return c
}

// Outcome is what became of a job Work ran.
type Outcome string

// The outcomes.
const (
	// OutcomeCompleted: the job succeeded (bucketed: Success, or deleted
	// with DeleteCompleted; fanout: deleted).
	OutcomeCompleted Outcome = "completed"
	// OutcomeFailed: the attempt failed with attempts left: the job
	// would run again after its backoff (Work then cancels it).
	OutcomeFailed Outcome = "failed"
	// OutcomeDead: the attempt failed and was the job's last (bucketed:
	// Failed; fanout: moved to job_dead).
	OutcomeDead Outcome = "dead"
	// OutcomeSnoozed: the handler returned skiplock.Snooze, within
	// Config.MaxSnoozes: the job would run again after the delay, the
	// attempt not counted (Work then cancels it).
	OutcomeSnoozed Outcome = "snoozed"
)

// WorkResult is what Work did.
type WorkResult[T client.Args] struct {
	// Job is the job as its handler got it: claimed, Attempts counting
	// this attempt, Args decoded.
	Job *client.Job[T]
	// Err is what the handler returned, through Config.Middleware: nil,
	// its error (a *skiplock.PanicError for a panic) or a snooze. The
	// client may still turn it into another failure (the kind's timeout,
	// MaxSnoozes): Row.LastError has the one recorded.
	Err error
	// Outcome is what the client wrote.
	Outcome Outcome
	// Row is the job's row after the result was written (job_dead's for
	// a dead fanout job), before Work cancelled a job that would run
	// again; nil when the row is gone (a completed fanout job, or a
	// bucketed one with DeleteCompleted).
	Row *skiplock.Job
}

// workWait bounds Work's wait for the handler when ctx has no deadline.
const workWait = time.Minute

// Work inserts a job with args and opts (nil: none) and runs it as the
// client would, see Worker. It returns nil after a failure of tb's that
// returns (a fake TB).
func (w *Worker[T]) Work(ctx context.Context, tb TB, args T, opts *client.InsertOpts) *WorkResult[T] {
	tb.Helper()
	res, err := w.insert.Insert(ctx, args, opts)
	if err != nil {
		tb.Fatalf("skiplocktest: Work: insert the job: %v", err)
		return nil
	}
	if res.Duplicate {
		tb.Fatalf("skiplocktest: Work: a live job of queue %q holds the job's unique key, so none was inserted: give it another key", res.Queue)
		return nil
	}
	settled := false
	defer func() {
		if !settled {
			// Best effort: leave no live job behind for a later client.
			w.cancel(context.WithoutCancel(ctx), res) //nolint:errcheck // the failure reported is the one to fix
		}
	}()
	name := schemaOrDefault(w.cfg.Schema)
	if n, err := w.others(ctx, res); err != nil || n > 0 {
		tb.Fatalf("skiplocktest: Work: queue %q of schema %s holds %d other live jobs (%v), which the worker's client would claim too: give the test a schema of its own (skiplocktest.Schema) or the job a queue of its own (InsertOpts.Queue)", res.Queue, name, n, err)
		return nil
	}
	cfg := w.config(res.Queue, res.Layout)
	run := &attempt{id: res.ID, done: make(chan struct{}), extra: make(chan struct{})}
	// Outermost: it sees the handler's result through the caller's middleware.
	cfg.Middleware = append([]client.Middleware{{Work: run.work}}, cfg.Middleware...)
	c, err := client.New(ctx, w.db, &cfg)
	if err != nil {
		tb.Fatalf("skiplocktest: Work: %v", err)
		return nil
	}
	if err := c.Start(ctx); err != nil {
		tb.Fatalf("skiplocktest: Work: %v", err)
		return nil
	}
	wait := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, workWait)
		defer cancel()
	}
	select {
	case <-run.done:
	case <-run.extra:
		select {
		case <-run.done: // the job's own next attempt
		default:
			stop(ctx, c, nil) //nolint:errcheck // a hard stop reports the cancellation
			tb.Fatalf("skiplocktest: Work: the client claimed another job of queue %q before job %s, one inserted while Work ran: give the job a queue of its own (InsertOpts.Queue)", res.Queue, res.ID)
			return nil
		}
	case <-wait.Done():
		stop(ctx, c, nil) //nolint:errcheck // a hard stop reports the cancellation
		tb.Fatalf("skiplocktest: Work: the client did not run job %s of queue %q (%v): is it scheduled for later (RunAt), or the queue paused?", res.ID, res.Queue, wait.Err())
		return nil
	}
	if err := stop(ctx, c, run.extra); err != nil {
		tb.Fatalf("skiplocktest: Work: %v", err)
		return nil
	}
	out := &WorkResult[T]{Job: &client.Job[T]{Job: &run.job}, Err: run.err}
	if err := json.Unmarshal(run.job.Payload, &out.Job.Args); err != nil {
		tb.Fatalf("skiplocktest: Work: decode the args of job %s into %T: %v", res.ID, args, err)
		return nil
	}
	var dead bool
	if out.Row, dead, err = w.row(ctx, res); err != nil {
		tb.Fatalf("skiplocktest: Work: %v", err)
		return nil
	}
	st, _ := c.QueueStats(res.Queue)
	switch {
	case st.Completed == 1:
		out.Outcome = OutcomeCompleted
	case st.Snoozed == 1:
		out.Outcome = OutcomeSnoozed
	case st.Failed == 1 && dead:
		out.Outcome = OutcomeDead
	case st.Failed == 1:
		out.Outcome = OutcomeFailed
	default:
		tb.Fatalf("skiplocktest: Work: the client wrote no result for job %s (handler returned %v; %+v): see the client's log above", res.ID, run.err, st)
		return nil
	}
	settled = true
	if out.Outcome == OutcomeFailed || out.Outcome == OutcomeSnoozed {
		if err := w.cancel(ctx, res); err != nil {
			tb.Fatalf("skiplocktest: Work: cancel job %s, which would run again: %v", res.ID, err)
			return nil
		}
	}
	return out
}

// cancel makes a job that would run again final, through its layout's
// CancelJob, so that no client runs it after Work and the queue is free
// for the next Work.
func (w *Worker[T]) cancel(ctx context.Context, res *client.InsertResult) error {
	name := schemaOrDefault(w.cfg.Schema)
	if res.Layout == schema.LayoutFanout {
		q, err := fanout.New(ctx, w.db, &fanout.Config{Schema: name, Queue: res.Queue, Retry: w.cfg.Retry})
		if err != nil {
			return err
		}
		return q.CancelJob(ctx, res.ID)
	}
	q, err := bucketed.New(ctx, w.db, &bucketed.Config{Schema: name, Retry: w.cfg.Retry})
	if err != nil {
		return err
	}
	return q.CancelJob(ctx, res.ID)
}

// stop stops c. When a second attempt starts meanwhile (extra closes:
// a retry or snooze already due), it stops hard, which gives that attempt
// back unrun; the first attempt's result is written by then.
func stop(ctx context.Context, c *client.Client, extra <-chan struct{}) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if extra == nil {
		cancel()
	}
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(sctx) }()
	select {
	case err := <-stopped:
		return err
	case <-extra:
		cancel()
		if err := <-stopped; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// attempt is the Work middleware: it records the first attempt of job id
// and holds back any other attempt until the client stops.
type attempt struct {
	id          string
	mu          sync.Mutex
	ran         bool
	job         skiplock.Job // as the handler got it
	err         error
	done, extra chan struct{}
	extraOnce   sync.Once
}

func (a *attempt) work(ctx context.Context, job *skiplock.Job, next func(ctx context.Context) error) (err error) {
	a.mu.Lock()
	first := job.ID == a.id && !a.ran
	a.ran = a.ran || first
	a.mu.Unlock()
	if !first {
		a.extraOnce.Do(func() { close(a.extra) })
		<-ctx.Done()
		return ctx.Err()
	}
	defer func() {
		if p := recover(); p != nil {
			err = &skiplock.PanicError{Value: p, Stack: debug.Stack()}
			a.job, a.err = *job, err
			close(a.done)
			panic(p) // the client's worker recovers it, and fails the attempt
		}
		a.job, a.err = *job, err
		close(a.done)
	}()
	return next(ctx)
}

// others counts the live jobs of the job's queue other than it.
func (w *Worker[T]) others(ctx context.Context, res *client.InsertResult) (int64, error) {
	name := "bucketed_others"
	if res.Layout == schema.LayoutFanout {
		name = "fanout_others"
	}
	sql, err := statement(w.cfg.Schema, name)
	if err != nil {
		return 0, err
	}
	var n int64
	err = w.db.QueryRow(ctx, sql, res.Queue, res.ID).Scan(&n)
	return n, err
}

// row reads the job after its attempt: from its layout's table, or, for
// fanout, job_dead (dead true). nil when it is gone.
func (w *Worker[T]) row(ctx context.Context, res *client.InsertResult) (*skiplock.Job, bool, error) {
	rows, err := queryJobs(ctx, w.db, w.cfg.Schema, "by_id", res.ID)
	if err != nil {
		return nil, false, err
	}
	for _, r := range rows {
		if r.layout == res.Layout {
			return r.job, r.job.Status == skiplock.StatusFailed, nil
		}
	}
	if res.Layout != schema.LayoutFanout {
		return nil, false, nil
	}
	sql, err := statement(w.cfg.Schema, "fanout_dead_by_id")
	if err != nil {
		return nil, false, err
	}
	rs, err := w.db.Query(ctx, sql, res.ID)
	if err != nil {
		return nil, false, err
	}
	defer rs.Close()
	if !rs.Next() {
		return nil, false, rs.Err()
	}
	j, err := scanRow(rs)
	return j, err == nil, err
}
