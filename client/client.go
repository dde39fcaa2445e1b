package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/internal/workloop"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// Client inserts and works jobs of many kinds on many queues, both
// layouts, over one pool. Make one per process and database with New;
// Start runs its queues' workers, Stop stops them gracefully.
type Client struct {
	db      *skiplock.DB
	cfg     Config
	notify  bool   // LISTEN/NOTIFY in use
	channel string // the schema's notification channel
	// defaultTimeout is true when Config.JobTimeout was left to its
	// default: a fanout queue's budget may then follow the engine's bound.
	defaultTimeout bool

	bq     *bucketed.Queue          // every bucketed queue, inserts and claims
	fq     map[string]*fanout.Queue // per fanout queue (declared ones)
	queues map[string]*queueRunner  // worked queues

	notifyMu   sync.Mutex
	notifiedAt map[string]time.Time // last notification per queue (debounce)
	trailing   map[string]time.Time // when the pending trailing notification is sent (trail)

	periodic []schedule        // parsed Config.PeriodicJobs
	sql      map[string]string // client.sql for the schema

	meter      *metricsink.Recorder // Config.Metrics' counters; nil without (metrics.go)
	attempts   attemptTimes         // running attempts' times, for Config.Metrics (metrics.go)
	metricsSQL map[string]string    // metrics.sql for the schema and engine

	mu      sync.Mutex
	started bool
	stopped bool
	maint   *maintenance.Service
	// leader is maint for InsertBatch, which may run while Start does.
	leader   atomic.Pointer[maintenance.Service]
	listener *listener
	rec      *recorder // per-minute rollups and presence (rollup.go)

	ops    operations // jobs and queues (ops.go)
	events events     // Subscribe's (subscribe.go)
}

// queueRunner is one worked queue: its layout's worker and the channel
// that wakes its producer.
type queueRunner struct {
	name  string
	cfg   QueueConfig
	wake  chan struct{}
	w     queueWorker
	stats func() Stats
}

// wakeUp ends the queue's idle wait, if it is waiting.
func (r *queueRunner) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// New checks cfg against the database and returns a Client. It fails,
// with the fix in the error, when the pool or the server has too few
// connections for the queues (Config.Connections), or when NotifyOn is
// asked of a server that refuses LISTEN. Nothing runs until Start.
func New(ctx context.Context, db *skiplock.DB, cfg *Config) (*Client, error) {
	if db == nil {
		return nil, usage.Errorf("client.New: db is nil: open one with skiplock.Open")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cl := &Client{db: db, cfg: c, defaultTimeout: cfg == nil || cfg.JobTimeout == 0, fq: map[string]*fanout.Queue{}, queues: map[string]*queueRunner{}, notifiedAt: map[string]time.Time{}, trailing: map[string]time.Time{}}
	cl.events.log = c.Logger
	cl.meter = metricsink.Of(c.Metrics)
	switch c.Notify {
	case NotifyAuto:
		cl.notify = db.Dialect().Notifications || ybNotifications(ctx, db)
	case NotifyOn:
		cl.notify = true
	}
	cl.channel = sqlident.Channel(c.Schema)
	if cl.notify && c.Notify == NotifyAuto {
		// The engine says it has LISTEN/NOTIFY; a notification that comes
		// back proves it (YugabyteDB's flag may be on a tserver but not on
		// the master, a pooler may hand LISTEN and NOTIFY different
		// sessions).
		if err := probeNotifications(ctx, db, cl.channel); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			cl.notify = false
			c.Logger.Warn("LISTEN/NOTIFY does not work on this server: polling instead (client.Config.FetchPollInterval)", logs.Err(err), "poll_interval", c.FetchPollInterval)
		}
	}
	if cl.periodic, err = parsePeriodic(c.PeriodicJobs); err != nil {
		return nil, err
	}
	if cl.sql, err = sqlFile.Render(sqlVars(db.Dialect(), c.Schema)); err != nil {
		return nil, err
	}
	if cl.metricsSQL, err = renderMetricsSQL(db.Dialect(), c.Schema); err != nil {
		return nil, err
	}
	if need := c.Connections(); len(c.worked()) > 0 {
		if c.AllowSmallPool {
			need = c.minConnections(cl.notify)
		}
		if max := int(db.Stats().Max); max < need {
			return nil, usage.Errorf("client: the pool allows %d connections and these queues need %d (client.Config.Connections): open the DB with skiplock.OpenConfig.MaxConns of at least %d", max, need, need)
		}
		allowed, err := db.ServerMaxConnections(ctx)
		if err == nil && allowed < need+fanout.SpareConns {
			return nil, usage.Errorf("client: the server allows %d connections (max_connections) and this client needs %d, plus %d spare: raise max_connections, or lower the fanout queues' MaxWorkers (each fanout worker holds a connection while it works)", allowed, need, fanout.SpareConns)
		}
	}
	var releaseNotify string // workflow releases wake the workers as inserts do
	if cl.notify {
		releaseNotify = cl.channel
	}
	bq, err := bucketed.New(ctx, db, &bucketed.Config{Schema: c.Schema, Logger: c.Logger, VisibilityTimeout: c.VisibilityTimeout, Retry: c.Retry, Owner: c.Owner,
		DeleteCompleted: c.DeleteCompleted, ReleaseNotify: releaseNotify})
	if err != nil && cl.usesLayout(schema.LayoutBucketed) {
		return nil, fmt.Errorf("client: %w", err)
	}
	cl.bq = bq // nil when the schema has no bucketed layout and no queue needs it
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		q := c.Queues[name]
		if q.Layout != schema.LayoutFanout {
			continue
		}
		fq, err := fanout.New(ctx, db, &fanout.Config{Schema: c.Schema, Queue: name, Retry: c.Retry, Logger: c.Logger})
		if err != nil {
			return nil, fmt.Errorf("client: queue %q: %w", name, err)
		}
		cl.fq[name] = fq
	}
	for _, name := range c.worked() {
		if err := cl.addRunner(name, c.Queues[name]); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// ybNotifications reports whether a YugabyteDB server has LISTEN/NOTIFY
// turned on (early access from v2025.2.3, tserver flag
// ysql_yb_enable_listen_notify, seen as the setting
// yb_enable_listen_notify).
func ybNotifications(ctx context.Context, db *skiplock.DB) bool {
	if db.Engine() != skiplock.EngineYugabyte {
		return false
	}
	var on string
	err := db.QueryRow(ctx, `SELECT coalesce(current_setting('yb_enable_listen_notify', true), 'off')`).Scan(&on)
	return err == nil && on == "on"
}

// usesLayout reports whether a declared queue needs the layout. (An
// insert into an undeclared queue needs bucketed too, and says so when
// the schema lacks it.)
func (c *Client) usesLayout(l schema.Layout) bool {
	for _, q := range c.cfg.Queues {
		if q.Layout == l {
			return true
		}
	}
	return false
}

// addRunner builds the worker of one worked queue.
func (c *Client) addRunner(name string, q QueueConfig) error {
	r := &queueRunner{name: name, cfg: q, wake: make(chan struct{}, 1)}
	poll := c.cfg.FetchPollInterval
	switch q.Layout {
	case schema.LayoutFanout:
		wc := &fanout.WorkerConfig{
			Queue: name, Workers: q.MaxWorkers, JobTimeout: c.longestTimeout(),
			PollInterval: poll, Wake: r.wake, WaitWhenDrained: true, NoMaintenance: true,
			Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
				return c.work(withNoRecorder(context.WithValue(ctx, txKey{}, tx)), job)
			},
			OnResult: c.fanoutCompleted,
		}
		c.resultHooks(name, nil, wc)
		w, err := c.fq[name].NewWorker(wc)
		if err != nil {
			return fmt.Errorf("client: queue %q: %w", name, err)
		}
		r.w, r.stats = w, func() Stats {
			s := w.Stats()
			return Stats{Claimed: s.Completed + s.Failed + s.Snoozed + s.Cancelled, Completed: s.Completed, Failed: s.Failed, Snoozed: s.Snoozed, Cancelled: s.Cancelled}
		}
	default:
		wc := &bucketed.WorkerConfig{
			Queue: name, Workers: q.MaxWorkers, Prefetch: q.Prefetch, HeldClaims: q.HeldClaims,
			PollInterval: poll, Wake: r.wake, NoMaintenance: true, Owner: c.cfg.Owner,
			Handler: func(ctx context.Context, job *skiplock.Job) error {
				err := c.work(withRecorder(ctx, c.bq, job, q.HeldClaims), job)
				c.events.attemptEnded(job, err)
				return err
			},
			OnComplete: c.cfg.OnComplete, AfterComplete: c.cfg.AfterComplete, WaitWhenDrained: true,
		}
		c.resultHooks(name, wc, nil)
		w, err := c.bq.NewWorker(wc)
		if err != nil {
			return fmt.Errorf("client: queue %q: %w", name, err)
		}
		r.w, r.stats = w, func() Stats {
			s := w.Stats()
			return Stats{Claimed: s.Claimed, Completed: s.Completed, Failed: s.Failed, Snoozed: s.Snoozed, Released: s.Released, Lost: s.Lost, Cancelled: s.Cancelled}
		}
	}
	c.queues[name] = r
	return nil
}

// fanoutCompleted hears each Process of a fanout queue that claimed a
// job: one whose removal committed is complete (AfterComplete).
func (c *Client) fanoutCompleted(_ int, res *fanout.Result, err error) {
	if c.cfg.AfterComplete != nil && err == nil && res.Job != nil && res.HandlerErr == nil && !res.Snoozed {
		c.cfg.AfterComplete(res.Job, res.Started, res.Claimed)
	}
}

// longestTimeout is the longest attempt any kind may take: a fanout
// queue's transaction budget.
func (c *Client) longestTimeout() time.Duration {
	d := c.cfg.JobTimeout
	if c.cfg.Workers != nil {
		for _, k := range c.cfg.Workers.kinds {
			if k.opts.Timeout > d {
				d = k.opts.Timeout
			}
		}
	}
	if d < 0 {
		return 24 * time.Hour // no timeout asked: a day's budget for the transaction
	}
	if hold := c.db.Dialect().HoldLimit; hold > 0 && d == DefaultJobTimeout && c.defaultTimeout {
		// Nobody asked for a minute: the fanout worker's default is the
		// longest a job's transaction may stay open on this engine
		// (fanout.WorkerConfig.JobTimeout).
		return 0
	}
	return d
}

// Start runs the workers of every worked queue, the maintenance leader
// election and the notification listener. ctx is the parent of every
// handler's context: cancelling it is a hard stop (prefer Stop).
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("client: already started (a Client runs once, also after Stop): make another with New")
	}
	if len(c.queues) == 0 {
		return usage.Errorf("client: no queue to work: add Queues with MaxWorkers and Workers, or use the client only to insert")
	}
	rec, err := c.newRecorder()
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// The maintenance service's schema reads go beside the check that the
	// server is writable: both only read, and behind a distributed
	// engine each is a round trip or more before the first claim.
	var m *maintenance.Service
	maintErr := make(chan error, 1)
	if c.cfg.NoMaintenance {
		maintErr <- nil
	} else {
		mc := c.maintenanceConfig(rec)
		go func() {
			var err error
			m, err = maintenance.New(ctx, c.db, mc)
			maintErr <- err
		}()
	}
	err = c.db.CheckWritable(ctx)
	if merr := <-maintErr; err == nil && merr != nil {
		err = merr
	}
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := c.defaultLimits(ctx); err != nil {
		return err
	}
	c.started = true
	c.rec = rec
	if m != nil {
		if err := m.Start(ctx); err != nil {
			return fmt.Errorf("client: %w", err)
		}
		c.maint = m
		c.leader.Store(m)
		c.watchMaintenance(m)
	}
	c.rec.start(ctx)
	if c.notify {
		c.listener = startListener(ctx, c)
	}
	for _, name := range slices.Sorted(maps.Keys(c.queues)) {
		if err := c.queues[name].w.Start(ctx); err != nil {
			c.stopLocked(context.WithoutCancel(ctx)) //nolint:errcheck // the start error is the one to report
			return fmt.Errorf("client: start queue %q: %w", name, err)
		}
	}
	return nil
}

// maintenanceConfig is the client's maintenance service's configuration:
// Config.Maintenance with the client's schema, logger and hooks (the
// periodic jobs, the metrics, and rec's rollups, rec's id as the lease's
// holder, so that the leader is known among the clients).
func (c *Client) maintenanceConfig(rec *recorder) *maintenance.Config {
	mc := maintenance.Config{}
	if c.cfg.Maintenance != nil {
		mc = *c.cfg.Maintenance
	}
	mc.Schema = c.cfg.Schema
	if mc.Logger == nil {
		mc.Logger = c.cfg.Logger
	}
	if len(c.periodic) > 0 {
		mc.Hooks = append(append([]maintenance.Hook(nil), mc.Hooks...), c.periodicHook())
	}
	mc.Hooks = append(slices.Clip(mc.Hooks), c.metricsHook()...)
	mc.Holder, mc.Hooks = rec.id, append(slices.Clip(mc.Hooks), rec.hooks()...) // rollups: the leader folds
	return &mc
}

// Stop stops claiming on every queue, gives prefetched jobs back, and
// waits for the jobs being worked to finish; when ctx ends first, their
// contexts are cancelled and their jobs given back. Every result is
// written before Stop returns.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return errors.New("client: not started")
	}
	return c.stopLocked(ctx)
}

func (c *Client) stopLocked(ctx context.Context) error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var wg sync.WaitGroup
	errs := make([]error, 0, len(c.queues)+1)
	var emu sync.Mutex
	for name, r := range c.queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.w.Stop(ctx)
			if err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("queue %q: %w", name, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The rest stops after the workers (the recorder counts their last
	// attempts), each apart from the others, at once: the recorder's last
	// flush and the leader's resignation are a round trip or two each, and
	// Stop returns as soon as the slowest is done.
	wg.Go(func() { c.rec.stop(ctx) })
	if c.listener != nil {
		wg.Go(c.listener.Stop)
	}
	if c.maint != nil {
		wg.Go(func() {
			if err := c.maint.Stop(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("client: stop: %w", err)
	}
	return nil
}

// Stats counts what a worked queue's workers did.
type Stats struct {
	// Claimed jobs (bucketed; fanout counts a claim as its outcome).
	Claimed int64
	// Completed, Failed (attempts), Snoozed, Released (given back on
	// stop, bucketed), Lost (lease lost before the result was written,
	// bucketed) and Cancelled (by their handler: skiplock.Cancel).
	Completed, Failed, Snoozed, Released, Lost, Cancelled int64
}

// QueueStats reports what the workers of queue have done so far; false
// when the client does not work it.
func (c *Client) QueueStats(queue string) (Stats, bool) {
	r, ok := c.queues[queue]
	if !ok {
		return Stats{}, false
	}
	return r.stats(), true
}

// txKey carries a fanout job's transaction in its handler's context.
type txKey struct{}

// TxFromContext returns the transaction of the fanout job being worked
// under ctx: the job's removal commits with it, so writes through it
// happen exactly once. ok is false for bucketed jobs, which hold no
// transaction while they run.
func TxFromContext(ctx context.Context) (tx skiplock.Tx, ok bool) {
	tx, ok = ctx.Value(txKey{}).(skiplock.Tx)
	return tx, ok
}

// work runs one attempt: the kind's worker inside the middleware, with
// the attempt's timeout, and the snooze cap applied.
func (c *Client) work(ctx context.Context, job *skiplock.Job) (err error) {
	defer c.timeAttempt(job)()
	defer c.rec.observe(ctx, job, time.Now(), &err)
	k := c.cfg.Workers.lookup(job.Kind)
	timeout := c.cfg.JobTimeout
	if k != nil && k.opts.Timeout != 0 {
		timeout = k.opts.Timeout
	}
	run := func(ctx context.Context) error {
		if k == nil {
			return &UnknownKindError{Kind: job.Kind, Known: c.cfg.Workers.names()}
		}
		return k.work(ctx, job)
	}
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		if mw := c.cfg.Middleware[i].Work; mw != nil {
			next := run
			run = func(ctx context.Context) error { return mw(ctx, job, next) }
		}
	}
	jctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		jctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	// A panic is recovered here, not only by the layout's worker, so that
	// what this attempt's deferred accounting (the rollups) sees is the
	// failure the layout records: an unwinding panic leaves err nil.
	err = workloop.Call(func() error { return run(jctx) })
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.Is(jctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("job timed out after %v (the kind's KindOptions.Timeout, or Config.JobTimeout): %w", timeout, err)
	}
	if d, ok := skiplock.AsSnooze(err); ok {
		if n := snoozes(job); n >= c.cfg.MaxSnoozes {
			return fmt.Errorf("job snoozed %d times, the most Config.MaxSnoozes allows: this snooze (%v) fails the attempt instead", n, d)
		}
		return err
	}
	if k != nil && k.opts.Backoff != nil && !skiplock.IsCancel(err) {
		if _, ok := skiplock.RetryDelay(err); !ok {
			return skiplock.RetryAfter(err, k.opts.Backoff(job.Attempts))
		}
	}
	return err
}

// snoozes reads the job's snooze count from its metadata.
func snoozes(job *skiplock.Job) int {
	var m struct {
		Snoozes json.Number `json:"snoozes"`
	}
	if json.Unmarshal(job.Metadata, &m) != nil {
		return 0
	}
	n, _ := strconv.Atoi(m.Snoozes.String())
	return n
}
