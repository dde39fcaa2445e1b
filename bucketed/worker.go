package bucketed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/skiplock/skiplock/maintenance"
)

// Worker runs a handler over a queue's jobs. It is an assembly of parts
// with one job each, which a claimed job passes through in this order:
//
//   - the producer (producer.go) claims for the free goroutines plus a
//     prefetch, one poll while idle, and hands the jobs out;
//   - the runner (runner.go) runs the handler on a pool of goroutines
//     (internal/workloop), a panic turned into a failure;
//   - the completer (completer.go) writes the results back in batches;
//   - the heartbeat (heartbeat.go) extends the leases of the jobs in hand
//     meanwhile.
//
// How a job is held from claim to result is chosen once, by NewWorker: a
// lease (leasedworker.go), with the completer and the heartbeat, or a
// held claim (heldworker.go, WorkerConfig.HeldClaims), whose transaction
// commits its jobs' results and needs neither.
type Worker struct {
	q     *Queue
	cfg   WorkerConfig
	tally tally
	prod  *producer
	run   *runner
	comp  *completer // nil for held claims
	// parts are started in this order (the heartbeat and the completer
	// for leased jobs, the runner, the producer), so that what each one
	// passes on finds its taker running, and stopped in the reverse
	// order, so that each drains into a taker still running.
	parts []part
	maint *maintenance.Service

	mu               sync.Mutex
	started, running bool
}

// part is one long-lived part of a Worker, started and stopped through
// internal/startstop. stop's ctx bounds a part that drains (the producer,
// the runner): when it ends, the work in hand is abandoned.
type part interface {
	start(ctx context.Context) error
	stop(ctx context.Context) error
}

// NewWorker checks cfg and returns a Worker; Start runs it.
func (q *Queue) NewWorker(cfg *WorkerConfig) (*Worker, error) {
	c, err := q.workerConfig(cfg)
	if err != nil {
		return nil, err
	}
	if c.prefetchGrows && !c.HeldClaims && q.serializable() {
		// Leased claims go one at a time there (leasedMode.inFlight): no
		// claim beside it covers the goroutines' demand while one is out,
		// and a claim's time grows with its size, so the prefetch may
		// cover a claim's round trip and execution for every goroutine,
		// twice over: fewer, larger claims pay the round trip and commit
		// less often per job (docs/benchmarks.md, "Round trips").
		c.prefetchMax = max(c.prefetchMax, 2*c.Workers)
	}
	w := &Worker{q: q, cfg: c}
	w.tally.cfg = &w.cfg
	var brk breaker // tripped by the completer's writes; held claims never trip it
	w.prod = newProducer(q, &w.cfg, &w.tally, &brk)
	w.run = &runner{cfg: &w.cfg, prod: w.prod}
	var mode claimMode
	if c.HeldClaims {
		mode = &heldMode{q: q, cfg: &w.cfg, tally: &w.tally, runner: w.run, wakeIn: w.prod.wakeIn}
	} else {
		book := newLeaseBook(q.cfg.VisibilityTimeout, w.cfg.Logger)
		permits := newPermitPool(q.cfg.VisibilityTimeout, w.cfg.Heartbeat, w.prod.resultsWritten)
		leased := &leasedMode{q: q, cfg: &w.cfg, book: book, permits: permits, results: make(chan result, c.FlushSize)}
		w.comp = &completer{q: q, cfg: &w.cfg, results: leased.results, book: book, tally: &w.tally, breaker: &brk, wakeIn: w.prod.wakeIn, written: w.prod.resultsWritten}
		w.parts = append(w.parts, &heartbeat{q: q, cfg: &w.cfg, book: book, permits: permits}, w.comp)
		mode = leased
	}
	w.prod.mode, w.run.mode = mode, mode
	w.parts = append(w.parts, w.run, w.prod)
	return w, nil
}

// Start launches the parts. ctx is the parent of every handler's
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
	for i, p := range w.parts {
		if err := p.start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				w.parts[j].stop(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
			}
			if w.maint != nil {
				w.maint.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
			}
			return err
		}
	}
	w.mu.Lock()
	w.running = true
	w.mu.Unlock()
	return nil
}

// Stop stops claiming, gives back jobs claimed but not started, and waits
// for the jobs being handled to finish. When ctx ends first, their
// contexts are cancelled and their leases given back (Release), so other
// workers take them at once. Every result is written before Stop returns.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	running := w.running
	w.mu.Unlock()
	if !running {
		return errors.New("bucketed worker: not started")
	}
	// In the reverse order of Start: the producer claims no more (its
	// stop is the worker's: from then on the runner starts no job), the
	// runner lets the jobs running finish and gives back the rest, the
	// completer writes every result, and the heartbeat keeps the leases
	// until it has.
	var err error
	for i := len(w.parts) - 1; i >= 0; i-- {
		if perr := w.parts[i].stop(ctx); perr != nil && err == nil {
			err = perr
		}
	}
	if w.maint != nil {
		if merr := w.maint.Stop(ctx); merr != nil && err == nil {
			err = merr
		}
	}
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
	if c.Logger == nil {
		c.Logger = w.cfg.Logger
	}
	return &c
}

// Wait blocks until every handler goroutine has returned: after Stop, or
// once the context given to Start is cancelled. It returns at once for a
// Worker never started. Results are written back by Stop, which a hard
// stop still needs.
func (w *Worker) Wait() {
	w.mu.Lock()
	running := w.running
	w.mu.Unlock()
	if running {
		w.run.wait()
	}
}

// Stats reports what the worker has done so far.
func (w *Worker) Stats() WorkerStats {
	return w.tally.stats()
}
