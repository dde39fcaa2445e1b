package main

import (
	"context"
	"errors"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// fanoutCLI is the enqueue/work/stats glue for the fanout layout.
type fanoutCLI struct{}

func init() { registerLayout(schema.LayoutFanout, fanoutCLI{}) }

// defaultMode: fanout processes each job inside its dequeue transaction.
func (fanoutCLI) defaultMode() string { return "tx" }

func (fanoutCLI) enqueue(ctx context.Context, db *skiplock.DB, schemaName string, jobs []skiplock.NewJob) (int, error) {
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: schemaName})
	if err != nil {
		return 0, err
	}
	return q.EnqueueMany(ctx, jobs)
}

// workPoolSpare is how many connections the work command's pool has beyond
// one per worker and the ones the Worker reserves to count attempts
// (fanout.RecorderConns): one for the --until-empty probe.
const workPoolSpare = 1

func (fanoutCLI) work(ctx context.Context, e *env, db *skiplock.DB, o workOptions) (workReport, error) {
	if o.Mode != "tx" {
		return workReport{}, usage.Errorf("--mode %s: the fanout layout processes each job inside its dequeue transaction (--mode tx); use --layout bucketed for leases", o.Mode)
	}
	if o.Batch > 1 {
		return workReport{}, usage.Errorf("--batch %d: the fanout layout claims one job per transaction; leave --batch out", o.Batch)
	}
	// Each worker holds a connection while it works: the shared pool is
	// sized for short commands, so open one sized for the workers, whose
	// sessions end a transaction left idle past the job budget.
	dsn, err := e.resolveDSN(ctx)
	if err != nil {
		return workReport{}, err
	}
	st := fanout.SessionTimeout(o.JobTimeout)
	oc, err := e.openConfig(int32(max(int(db.Stats().Max), o.Workers+fanout.RecorderConns(o.Workers)+workPoolSpare)))
	if err != nil {
		return workReport{}, err
	}
	oc.IdleInTransactionTimeout, oc.StatementTimeout = st, st
	wdb, err := skiplock.Open(ctx, dsn, oc)
	if err != nil {
		return workReport{}, err
	}
	defer wdb.Close()
	db = wdb
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: o.Schema, Queue: o.Queue})
	if err != nil {
		return workReport{}, err
	}
	rec, err := newRecorder(ctx, e, o)
	if err != nil {
		return workReport{}, err
	}
	defer rec.close()
	handler := demoHandler(e, o, rec)

	start := time.Now()
	// The workers get a context that outlives ctx, so that an interrupt
	// stops them gracefully (jobs in flight finish) rather than abruptly.
	w, err := q.NewWorker(&fanout.WorkerConfig{Workers: o.Workers, Handler: handler, JobTimeout: o.fanoutJobTimeout(db.Dialect()), Logger: e.log, Maintenance: o.maintenanceConfig()})
	if err != nil {
		return workReport{}, err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		var ce *fanout.ConnLimitError
		if errors.As(err, &ce) {
			return workReport{}, usage.Errorf("server allows %d connections; --mode tx with %d workers needs %d: raise max_connections or use --mode lease",
				ce.Allowed, ce.Workers, ce.Needed)
		}
		return workReport{}, err
	}
	waitErr := waitFanout(ctx, e, q, o.UntilEmpty)
	stopCtx, cancel := context.WithTimeout(context.Background(), o.Work+30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		e.logf("jobs still running %v after the stop: cancelled them (they are back in the queue)", o.Work+30*time.Second)
	}
	c := w.Stats()
	rep := workReport{Handled: c.Completed, Failed: c.Failed, Seconds: time.Since(start).Seconds()}
	if c.Dead > 0 || c.Errors > 0 {
		e.logf("%d job(s) moved to %s; %d database error(s)", c.Dead, schema.DeadJobTable, c.Errors)
	}
	return rep, waitErr
}

// demoHandler is the built-in handler (demoWork), and with o.Record a
// work_log row written inside the job's transaction, so the row commits
// if and only if the job is removed.
func demoHandler(e *env, o workOptions, rec *recorder) fanout.Handler {
	return func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
		if err := demoWork(ctx, e, o, rec, job); err != nil || !o.Record {
			return err
		}
		return rec.recordFanout(ctx, tx, job)
	}
}

// waitFanout returns when ctx ends or, with untilEmpty, once the queue has
// no job left (a job being processed still has its row, so "none left"
// means every job finished or died).
func waitFanout(ctx context.Context, e *env, q *fanout.Queue, untilEmpty bool) error {
	if !untilEmpty {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var away outage
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		more, err := q.HasQueued(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if away.ride(e, err) {
				continue
			}
			return err
		}
		away.back(e)
		if !more {
			return nil
		}
	}
}

func (fanoutCLI) stats(ctx context.Context, db *skiplock.DB, schemaName, queue string) (layoutStats, error) {
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: schemaName})
	if err != nil {
		return layoutStats{}, err
	}
	st, err := q.Stats(ctx, queue)
	if err != nil {
		return layoutStats{}, err
	}
	return layoutStats{
		// A fanout job is Queued until it is done (its row is deleted) or
		// dead (moved to job_dead).
		ByStatus:      map[string]int64{string(skiplock.StatusQueued): st.Queued, "Dead": st.Dead},
		ByQueue:       st.QueuedByQueue,
		QueuedOldestS: st.OldestQueued.Seconds(),
		Dead:          st.Dead,
	}, nil
}
