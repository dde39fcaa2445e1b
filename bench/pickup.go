package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
)

// The pickup scenario (runPickup): a client.Client with Workers idle
// workers on one queue of the layout; Samples times: an idle gap (Gap
// plus a random part of PollInterval, so that inserts fall at random
// points of the poll cycle), then
// one job inserted through a second, insert-only client.Client on its own
// small pool (as another process would insert it: the pickup goes
// through a notification, or the poll, never the in-process wake; with
// SameClient through the working client itself), and the time from the
// Insert call's return (its commit) to the handler's start. The working
// client's statements over the idle gaps are counted at the skiplock.Pool
// seam (count.go): its queue's (producer, listener, heartbeat) and,
// apart, the schema's maintenance service's, which the bench runs on the
// same pool as the client would (one per process, whatever the queues).

// Pickup defaults.
const (
	// DefaultPickupSamples is how many jobs the pickup scenario times.
	DefaultPickupSamples = 50
	// DefaultPickupGap is the idle wait before each of its inserts.
	DefaultPickupGap = time.Second
	// DefaultPickupWorkers is the working client's idle workers.
	DefaultPickupWorkers = 10
	// insertConns is the inserting client's pool.
	insertConns = 2
)

// pickupTimeout is how long a job may wait for pickup before the run
// fails: far beyond any poll interval, so only a stuck job reaches it.
func pickupTimeout(c *Config) time.Duration { return 3*c.PollInterval + 30*time.Second }

// pickupClientConfig is the working client's configuration.
func pickupClientConfig(c *Config, workers *client.Workers, rec *recorder) *client.Config {
	notify := client.NotifyAuto
	if c.NoNotify {
		notify = client.NotifyOff
	}
	return &client.Config{
		Schema:            c.Schema,
		Queues:            map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: c.Workers}},
		Workers:           workers,
		FetchPollInterval: c.PollInterval,
		Notify:            notify,
		NoMaintenance:     true, // the bench runs it, counted apart (runPickup)
		Logger:            errorsOf(rec, c.Logger),
	}
}

// errorsOf is a logger that records the failures a worker logs (records
// with an "err" attribute: failed claims, completions, heartbeats) as the
// run's errors, its other records ("recovered") not, and passes every
// record to log (nil: none).
func errorsOf(rec *recorder, log *slog.Logger) *slog.Logger {
	next := slog.DiscardHandler
	if log != nil {
		next = log.Handler()
	}
	return slog.New(errorHandler{rec: rec, next: next})
}

// errorHandler is errorsOf's slog.Handler.
type errorHandler struct {
	rec  *recorder
	next slog.Handler
}

func (h errorHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h errorHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.rec != nil {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				h.rec.fail(errors.New(a.Value.String()))
				return false
			}
			return true
		})
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h errorHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return errorHandler{rec: h.rec, next: h.next.WithAttrs(as)}
}

func (h errorHandler) WithGroup(name string) slog.Handler {
	return errorHandler{rec: h.rec, next: h.next.WithGroup(name)}
}

// pickupConns is the working pool's size: what the client needs.
func pickupConns(c *Config) int {
	return pickupClientConfig(c, nil, nil).Connections()
}

// runPickup runs the pickup scenario (see above).
func runPickup(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	if err := empty(ctx, c, admin); err != nil {
		return err
	}
	defer emptyAfter(ctx, c, admin)
	if err := resetLimits(ctx, c, admin); err != nil {
		return err
	}
	work, err := openPool(ctx, c)
	if err != nil {
		return err
	}
	defer work.Close()
	maint := &stmtCounter{}

	rec := newRecorder()
	started := make(chan time.Time, 1)
	workers := client.NewWorkers()
	err = client.AddRawWorker(workers, "", func(context.Context, *skiplock.Job) error {
		select {
		case started <- time.Now():
		default: // a job not asked for (none is): not timed
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	worker, err := client.New(ctx, work, pickupClientConfig(c, workers, rec))
	if err != nil {
		return err
	}
	inserter := worker
	if !c.SameClient {
		openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		insDB, err := skiplock.Open(openCtx, c.DSN, c.openConfig(insertConns))
		cancel()
		if err != nil {
			return fmt.Errorf("open the inserting client's pool: %w", err)
		}
		defer insDB.Close()
		icfg := pickupClientConfig(c, nil, rec)
		icfg.Queues = map[string]client.QueueConfig{DefaultQueue: {Layout: c.Layout, MaxWorkers: -1}}
		if inserter, err = client.New(ctx, insDB, icfg); err != nil {
			return fmt.Errorf("inserting client: %w", err)
		}
	}

	// The schema's maintenance, as the working client would run it, on
	// its pool, its statements counted apart.
	svc, err := maintenance.Start(context.WithValue(ctx, counterKey{}, maint), work, &maintenance.Config{Schema: c.Schema, Logger: errorsOf(rec, c.Logger)})
	if err != nil {
		return err
	}
	defer svc.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the run's figures are taken
	if err := worker.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return worker.Stop(sctx)
	}
	defer stop() //nolint:errcheck // the error path's error is the one to report

	pickups := NewHistogram()
	var idle time.Duration
	var idleStmts, idleMaint int64
	var peak atomic.Int64
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	start := time.Now()
	go rec.progress(progCtx, nil, 0, start, work, &peak)
	// One job first, not timed: the listener is up and every
	// connection the client uses is open before the samples.
	for i := -1; i < c.Samples; i++ {
		if err := waitCompleted(ctx, worker, int64(i+1)); err != nil {
			return err
		}
		g0, s0, m0 := time.Now(), c.stmts.load(), maint.load()
		// A random part of a poll interval on top of the gap: the
		// inserts land at random points of the producers' poll cycle,
		// as real ones do, not in step with it.
		if err := sleepCtx(ctx, c.Gap+rand.N(c.PollInterval)); err != nil {
			return err
		}
		if i >= 0 {
			idle += time.Since(g0)
			idleStmts += c.stmts.load().since(s0).statements
			idleMaint += maint.load().since(m0).statements
		}
		// The inserting client's statements are its own pool's; with
		// SameClient the insert is the bench's, not an idle statement.
		if _, err := inserter.Insert(uncounted(ctx), rawArgs{}, &client.InsertOpts{Queue: DefaultQueue}); err != nil {
			return fmt.Errorf("insert sample %d: %w", i+1, err)
		}
		committed := time.Now()
		t := time.NewTimer(pickupTimeout(c))
		select {
		case at := <-started:
			t.Stop()
			if i >= 0 {
				pickups.Record(max(at.Sub(committed), 0))
				rec.done.Add(1)
			}
		case <-t.C:
			return fmt.Errorf("sample %d: no handler started %v after the insert: the job was not picked up (notifications lost and polling stuck?)", i+1, pickupTimeout(c))
		case <-ctx.Done():
			return fmt.Errorf("bench interrupted after %d samples: %w", i+1, ctx.Err())
		}
	}
	if err := waitCompleted(ctx, worker, int64(c.Samples+1)); err != nil {
		return err
	}
	stopProgress()
	if err := stop(); err != nil {
		rec.fail(fmt.Errorf("stop: %w", err))
	}
	secs := time.Since(start).Seconds()
	rec.fill(rep, secs, 0, nil, int(max(peak.Load(), int64(work.Stats().Total))), counts{})
	rep.StatementsPerJob = nil
	s := pickups.Summary()
	rep.PickupMS = &s
	if idle > 0 {
		q, m := float64(idleStmts)/idle.Seconds(), float64(idleMaint)/idle.Seconds()
		rep.IdleStatementsPerS, rep.IdleMaintenanceStatementsPerS = &q, &m
		rep.IdleSeconds = idle.Seconds()
	}
	return nil
}

// rawArgs is the pickup scenario's job: kind "", run by the raw worker.
type rawArgs struct{}

// Kind is "": the jobs the bench enqueues carry no kind.
func (rawArgs) Kind() string { return "" }

// waitCompleted waits, without a statement, until the working client
// has written n completions, so that an idle gap starts idle.
func waitCompleted(ctx context.Context, cl *client.Client, n int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		st, _ := cl.QueueStats(DefaultQueue)
		if st.Completed >= n {
			return nil
		}
		if st.Failed > 0 || st.Lost > 0 {
			return fmt.Errorf("a timed job failed (%d) or lost its lease (%d): see the errors", st.Failed, st.Lost)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %d not completed a minute after it started: the completion is stuck", n)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pickupDefaults checks and fills the pickup scenario's settings.
func (o *Config) pickupDefaults() error {
	switch {
	case o.Duration != 0 || o.Work != 0 || o.Jobs != 0 || o.Batch != 0:
		return usage.Errorf("the pickup scenario times --samples single jobs on idle workers: leave --duration, --work, --jobs and --batch out")
	case o.Baseline:
		return usage.Errorf("the pickup scenario has no pgbench baseline: leave --baseline out")
	case o.Conns != 0:
		return usage.Errorf("--conns %d: the pickup scenario sizes the working client's pool as client.Config.Connections says; leave --conns out", o.Conns)
	case o.Samples < 0 || o.Gap < 0 || o.PollInterval < 0:
		return usage.Errorf("--samples, --gap and --poll-interval cannot be negative")
	}
	if o.Samples == 0 {
		o.Samples = DefaultPickupSamples
	}
	if o.Gap == 0 {
		o.Gap = DefaultPickupGap
	}
	if o.PollInterval == 0 {
		o.PollInterval = client.DefaultFetchPollInterval
	}
	if o.Workers == 0 {
		o.Workers = DefaultPickupWorkers
	}
	return nil
}
