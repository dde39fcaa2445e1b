package main

import (
	"context"
	"strconv"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// bucketedCLI is the bucketed layout behind enqueue, work and stats.
type bucketedCLI struct{}

func init() { registerLayout(schema.LayoutBucketed, bucketedCLI{}) }

func (bucketedCLI) defaultMode() string { return "lease" }

func (bucketedCLI) enqueue(ctx context.Context, db *skiplock.DB, schemaName string, jobs []skiplock.NewJob) (int, error) {
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: schemaName, EnqueueBatch: len(jobs)})
	if err != nil {
		return 0, err
	}
	return q.EnqueueMany(ctx, jobs)
}

// Defaults of the bucketed work command.
const (
	// bucketedZeroWorkBatch is the claim size when jobs take no time: one
	// statement serves many jobs. Jobs that take time are claimed one at a
	// time so that none waits behind another in a worker's hand.
	bucketedZeroWorkBatch = 128
	// bucketedMaxPool caps the pool: in lease mode a worker holds a
	// connection only while it claims, so a few dozen connections serve
	// hundreds of workers.
	bucketedMaxPool = 32
	// bucketedStopGrace is how long work lets in-flight jobs finish after
	// an interrupt before it cancels them and gives their leases back.
	bucketedStopGrace = 10 * time.Second
)

// bucketedPoolSize is the pool the work command needs: one connection per
// worker up to bucketedMaxPool (the Worker's claimers and completers share
// it, a few at a time), plus room for the heartbeat, the retention sweep
// and the --until-empty check.
func bucketedPoolSize(workers int) int { return min(workers, bucketedMaxPool) + 3 }

// bucketedPoolFits fails, saying the fix, when the pool work needs for
// workers exceeds the server's max_connections.
func bucketedPoolFits(workers, serverMax int) error {
	if need := bucketedPoolSize(workers); need > serverMax {
		return usage.Errorf("server allows %d connections; --workers %d in lease mode needs a pool of %d: raise max_connections or use fewer --workers", serverMax, workers, need)
	}
	return nil
}

func (bucketedCLI) work(ctx context.Context, e *env, small *skiplock.DB, o workOptions) (workReport, error) {
	if o.Mode != "lease" {
		return workReport{}, usage.Errorf("--mode %s: the bucketed layout works with leases (--mode lease); --mode tx belongs to --layout fanout", o.Mode)
	}
	need := bucketedPoolSize(o.Workers)
	if serverMax, err := small.ServerMaxConnections(ctx); err != nil {
		e.logf("cannot read the server's max_connections (%v): not checking that %d connections fit", err, need)
	} else if err := bucketedPoolFits(o.Workers, serverMax); err != nil {
		return workReport{}, err
	}
	dsn, err := e.resolveDSN(ctx)
	if err != nil {
		return workReport{}, err
	}
	// No session of the workers holds a transaction open, or waits in a
	// statement, longer than a lease: a stopped process's transactions
	// end and free their jobs' rows for the others.
	oc, err := e.openConfig(int32(need))
	if err != nil {
		return workReport{}, err
	}
	oc.IdleInTransactionTimeout, oc.StatementTimeout = o.VisibilityTimeout, o.VisibilityTimeout
	db, err := skiplock.Open(ctx, dsn, oc)
	if err != nil {
		return workReport{}, err
	}
	defer db.Close()
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: o.Schema, VisibilityTimeout: o.VisibilityTimeout, DeleteCompleted: o.DeleteCompleted, Logger: e.log})
	if err != nil {
		return workReport{}, err
	}
	rec, err := newRecorder(ctx, e, o)
	if err != nil {
		return workReport{}, err
	}
	defer rec.close()
	batch := o.Batch
	if batch == 0 {
		batch = 1
		if o.Work == 0 {
			batch = bucketedZeroWorkBatch
		}
	}
	cfg := &bucketed.WorkerConfig{
		Queue: o.Queue, Workers: o.Workers, Prefetch: o.Workers * (batch - 1), Logger: e.log, Maintenance: o.maintenanceConfig(),
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			return demoWork(ctx, e, o, rec, job)
		},
	}
	if o.Record {
		// One work_log row per job, in the completion's transaction: it
		// commits exactly when the job's Success does.
		cfg.OnComplete = rec.recordBucketed
	}
	w, err := q.NewWorker(cfg)
	if err != nil {
		return workReport{}, err
	}
	start := time.Now()
	// The workers' parent outlives an interrupt, so that Stop can let the
	// jobs in hand finish before cancelling them.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return workReport{}, err
	}
	left, waitErr := bucketedWait(ctx, e, q, w, o)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bucketedStopGrace)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		e.logf("stop: jobs still running after %v were cancelled and given back: %v", bucketedStopGrace, err)
	}
	st := w.Stats()
	rep := workReport{Handled: st.Completed, Failed: st.Failed, Lost: &st.Lost, Seconds: time.Since(start).Seconds(), Waiting: left.Waiting}
	if left.Later > 0 {
		rep.ScheduledLater = left.Later
		next := left.NextAt.UTC()
		rep.NextDue = &next
		rep.NextDueInS = left.NextAt.Sub(left.Now).Seconds()
	}
	return rep, waitErr
}

// bucketedWait returns when ctx ends, or with --until-empty once no job of
// the queue is due now and none is Running anywhere (expired leases
// included: it waits for them to come back and be worked). Jobs scheduled
// for later (run_at ahead, retries waiting out a backoff included) do not
// hold it: it returns them in the Backlog, for the report to say how many
// and when the next is due. It prints progress every few seconds.
func bucketedWait(ctx context.Context, e *env, q *bucketed.Queue, w *bucketed.Worker, o workOptions) (bucketed.Backlog, error) {
	var idle func(ctx context.Context) (bool, bucketed.Backlog, error)
	if o.UntilEmpty {
		idle = func(ctx context.Context) (bool, bucketed.Backlog, error) {
			left, err := q.Backlog(ctx, o.Queue)
			return !left.Due && !left.Running, left, err
		}
	}
	return waitLoop(ctx, e, func() int64 { return w.Stats().Completed }, idle)
}

// waitLoop polls every 100 ms until ctx ends (returning nothing) or, when
// idle is set, until idle says the queues are done, returning what it
// says is scheduled for later. It logs handled() every few seconds.
func waitLoop(ctx context.Context, e *env, handled func() int64, idle func(ctx context.Context) (bool, bucketed.Backlog, error)) (bucketed.Backlog, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastDone := time.Now(), int64(0)
	var away outage
	for {
		select {
		case <-ctx.Done():
			return bucketed.Backlog{}, nil
		case <-tick.C:
		}
		if time.Since(last) >= 5*time.Second {
			done := handled()
			e.logf("progress: %d handled (%.0f jobs/s)", done, float64(done-lastDone)/time.Since(last).Seconds())
			last, lastDone = time.Now(), done
		}
		if idle == nil {
			continue
		}
		done, later, err := idle(ctx)
		switch {
		case ctx.Err() != nil:
			return bucketed.Backlog{}, nil
		case err != nil:
			if away.ride(e, err) {
				continue
			}
			return bucketed.Backlog{}, err
		case done:
			return later, nil
		}
		away.back(e)
	}
}

func (bucketedCLI) stats(ctx context.Context, db *skiplock.DB, schemaName, queue string) (layoutStats, error) {
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: schemaName})
	if err != nil {
		return layoutStats{}, err
	}
	st, err := q.Stats(ctx, queue)
	if err != nil {
		return layoutStats{}, err
	}
	out := layoutStats{
		ByStatus: map[string]int64{}, ByQueue: st.ByQueue, ByBucket: map[string]int64{},
		QueuedOldestS: st.QueuedOldest.Seconds(), InFlightLeases: st.InFlightLeases,
		Dead: st.ByStatus[skiplock.StatusFailed],
	}
	for s, n := range st.ByStatus {
		out.ByStatus[string(s)] = n
	}
	for b, n := range st.ByBucket {
		out.ByBucket[strconv.Itoa(b)] = n
	}
	return out, nil
}
