package fanout

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/workloop"
)

// SpareConns is how many server connections a Worker's check keeps free
// beyond one per worker: for the process's other queries (enqueue, stats,
// the --until-empty probe) and PostgreSQL's superuser_reserved_connections
// (3 by default), which ordinary users cannot take.
const SpareConns = 5

// WorkerConfig tunes a Worker.
type WorkerConfig struct {
	// Workers is how many jobs run at once; each holds one connection
	// while it processes. At least 1.
	Workers int
	// Handler does each job's work. Required.
	Handler Handler
	// OnResult, when set, hears every Process call that claimed a job or
	// failed, with Process's error, from the worker's goroutine (keep it
	// quick): for counters and latency recording. Empty polls are not
	// reported.
	OnResult func(worker int, r *Result, err error)
	// IdleMin, IdleMax, ErrorMin and ErrorMax tune the waits after an
	// empty poll or a failure (see workloop.Config); 0 means its defaults.
	IdleMin, IdleMax, ErrorMin, ErrorMax time.Duration
	// Logf hears database failures and recoveries, and skipped checks;
	// nil is silent.
	Logf func(format string, args ...any)
}

// ConnLimitError says the server allows fewer connections than the
// workers need. Nothing was started.
type ConnLimitError struct {
	// Allowed is the server's max_connections.
	Allowed int
	// Workers is the number of workers asked for.
	Workers int
	// Needed is Workers, plus one that records attempts, plus SpareConns.
	Needed int
}

// Error says what the server allows, what the run needs, and the fix.
func (e *ConnLimitError) Error() string {
	return fmt.Sprintf("server allows %d connections; %d fanout workers need %d (each holds one while it processes, plus one that records attempts and %d spare): raise max_connections, run fewer workers, or use the bucketed layout's leases",
		e.Allowed, e.Workers, e.Needed, SpareConns)
}

// Worker runs a Queue's jobs with a pool of goroutines (internal/workloop):
// each loops on Process, backs off with jitter while the queue is empty or
// the database fails, and stops gracefully.
type Worker struct {
	pool                           *workloop.Pool
	rec                            *recorder
	handled, failed, dead, errored atomic.Int64
}

// WorkerCounts are what a Worker has done so far.
type WorkerCounts struct {
	// Handled counts jobs processed and deleted.
	Handled int64
	// Failed counts handler failures (each rolled back and recorded).
	Failed int64
	// Dead counts failures that moved a job to job_dead (also in Failed).
	Dead int64
	// Errors counts Process calls that failed on the database.
	Errors int64
}

type workerKey struct{}

// WorkerIndex returns the 0-based number of the Worker goroutine running a
// handler, from the handler's ctx; ok is false outside a Worker.
func WorkerIndex(ctx context.Context) (w int, ok bool) {
	w, ok = ctx.Value(workerKey{}).(int)
	return w, ok
}

// StartWorker checks that the database can give every worker a
// connection, then starts cfg.Workers workers. The pool must allow at
// least cfg.Workers+1 connections (skiplock.OpenConfig.MaxConns): one per
// worker, and one the Worker keeps to count attempts before handlers run;
// the server's max_connections must be at least cfg.Workers+1+SpareConns
// (*ConnLimitError otherwise); servers without that setting (CockroachDB)
// skip the second check.
//
// ctx is the parent of every handler's context: cancelling it is a hard
// stop. Use Stop for a graceful one.
func (q *Queue) StartWorker(ctx context.Context, cfg *WorkerConfig) (*Worker, error) {
	if cfg == nil || cfg.Handler == nil {
		return nil, skiplock.Usagef("fanout: StartWorker needs a WorkerConfig with a Handler")
	}
	if cfg.Workers < 1 {
		return nil, skiplock.Usagef("fanout: workers %d: use at least 1", cfg.Workers)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	need := cfg.Workers + 1 // and the recorder's
	if poolMax := q.db.Stats().Max; int(poolMax) < need {
		return nil, skiplock.Usagef("fanout: the connection pool allows %d connections; each of %d workers holds one while it processes and one more counts attempts: open the DB with OpenConfig.MaxConns of at least %d",
			poolMax, cfg.Workers, need)
	}
	allowed, err := q.db.ServerMaxConnections(ctx)
	switch {
	case err != nil:
		// CockroachDB has no max_connections; its per-gateway limit is
		// unset by default.
		logf("fanout: cannot read the server's max_connections (%v): skipping the connection check", err)
	case allowed < need+SpareConns:
		return nil, &ConnLimitError{Allowed: allowed, Workers: cfg.Workers, Needed: need + SpareConns}
	}
	w := &Worker{rec: newRecorder(q, cfg.Workers, logf)}
	step := func(ctx context.Context, i int) (bool, error) {
		res, err := q.process(context.WithValue(ctx, workerKey{}, i), cfg.Handler, w.rec)
		if err != nil {
			w.errored.Add(1)
		}
		if cfg.OnResult != nil && (res.Job != nil || err != nil) {
			cfg.OnResult(i, &res, err)
		}
		if res.Job == nil {
			return false, err
		}
		switch {
		case err != nil:
			// Counted above: a stop mid-job, a lost database, an
			// ambiguous commit.
		case res.HandlerErr == nil:
			w.handled.Add(1)
		default:
			w.failed.Add(1)
			if res.Dead {
				w.dead.Add(1)
			}
		}
		return true, err
	}
	w.pool, err = workloop.Start(ctx, workloop.Config{
		Workers: cfg.Workers,
		IdleMin: cfg.IdleMin, IdleMax: cfg.IdleMax,
		ErrorMin: cfg.ErrorMin, ErrorMax: cfg.ErrorMax,
		Logf: cfg.Logf,
	}, step)
	if err != nil {
		w.rec.close()
		return nil, err
	}
	return w, nil
}

// Stop stops claiming jobs and waits for the jobs in flight to finish and
// commit. If ctx ends first, it cancels them (their transactions roll back
// and the jobs return to the queue, with no attempt counted) and returns
// ctx's error once they have returned.
func (w *Worker) Stop(ctx context.Context) error {
	err := w.pool.Stop(ctx)
	w.rec.close()
	return err
}

// Wait blocks until every worker goroutine has returned.
func (w *Worker) Wait() {
	w.pool.Wait()
	w.rec.close()
}

// Counts reports what the workers have done so far.
func (w *Worker) Counts() WorkerCounts {
	return WorkerCounts{Handled: w.handled.Load(), Failed: w.failed.Load(), Dead: w.dead.Load(), Errors: w.errored.Load()}
}
