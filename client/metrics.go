package client

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// Defaults of the metrics' queue sample.
const (
	// DefaultMetricsSampleInterval is how often the maintenance leader
	// samples the queue gauges when Config.MetricsSampleInterval is 0.
	DefaultMetricsSampleInterval = 15 * time.Second
	// MetricsSampleCap is the most index entries one count of the queue
	// sample reads: a queue with more jobs in a state reports this many
	// (skiplock_queue_jobs means "at least" at the cap), so a sample's
	// cost stays bounded under a backlog of millions.
	MetricsSampleCap = 100000
)

// metricsStaleAfter is how many sample intervals old a queue sample may
// be and still be exported: a missed round or two is lag, more means the
// sampling fails, and counts that old would mislead more than no gauge.
const metricsStaleAfter = 3

//go:embed metrics.sql
var metricsSQLSource string

var metricsSQLFile = sqltext.MustParse("client/metrics.sql", metricsSQLSource)

func init() {
	sqltext.Register(sqltext.Source{Path: metricsSQLFile.Path, File: metricsSQLFile, Vars: metricsSQLVars})
}

func metricsSQLVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	q := func(t string) string { return sqlident.Quote(schemaName) + "." + sqlident.Quote(t) }
	return map[string]string{"jobs": q(schema.JobsTable), "job_queue": q(schema.JobQueueTable), "setting": q(schema.SettingTable)}
}

// withRetryCounters returns o with retry counters that m watches: o's own
// when it has them, else new ones (o is copied, not changed).
func withRetryCounters(m *metricsink.Recorder, o *retry.Options) *retry.Options {
	if m == nil {
		return o
	}
	var out retry.Options
	if o != nil {
		out = *o
	}
	if out.Counters == nil {
		out.Counters = &retry.Counters{}
	}
	m.WatchRetries(out.Counters)
	return &out
}

// attemptTimes keeps each running attempt's start and handler time until
// its outcome is known (after its commit), keyed by job id.
type attemptTimes struct {
	mu    sync.Mutex
	m     map[string]attemptTime
	added int
}

type attemptTime struct {
	start time.Time
	run   time.Duration // 0 while the handler runs
}

// forgetAfter bounds how long an attempt's times wait for an outcome
// that never comes (a fanout transaction retried onto another job).
const forgetAfter = 24 * time.Hour

// begin records the start of an attempt of job and returns the func that
// records its end.
func (a *attemptTimes) begin(job *skiplock.Job) func() {
	start := time.Now()
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]attemptTime{}
	}
	a.m[job.ID] = attemptTime{start: start}
	if a.added++; a.added%4096 == 0 {
		for id, t := range a.m {
			if time.Since(t.start) > forgetAfter {
				delete(a.m, id)
			}
		}
	}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		if t, ok := a.m[job.ID]; ok && t.start.Equal(start) {
			t.run = time.Since(start)
			a.m[job.ID] = t
		}
		a.mu.Unlock()
	}
}

// end forgets job's attempt and returns its times.
func (a *attemptTimes) end(job *skiplock.Job) (attemptTime, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.m[job.ID]
	delete(a.m, job.ID)
	return t, ok
}

// timeAttempt starts timing an attempt for the metrics; call the result
// when the handler returns. Without metrics it does nothing.
func (c *Client) timeAttempt(job *skiplock.Job) func() {
	if c.cfg.Metrics == nil {
		return func() {}
	}
	return c.attempts.begin(job)
}

// labels are job's metric labels.
func labels(job *skiplock.Job, layout schema.Layout) metricsink.Labels {
	return metricsink.Labels{Queue: job.Queue, Kind: job.Kind, Layout: string(layout)}
}

// completed counts a committed completion with its timings.
func (c *Client) completed(job *skiplock.Job, layout schema.Layout) {
	done := time.Now()
	t, _ := c.attempts.end(job)
	tm := metricsink.Timing{Run: t.run, EndToEnd: done.Sub(job.CreatedAt)}
	if !t.start.IsZero() {
		tm.Wait = t.start.Sub(job.RunAt)
	}
	c.meter.Completed(labels(job, layout), tm)
}

// bucketedResult counts a bucketed job's outcome
// (bucketed.WorkerConfig.AfterResult).
func (c *Client) bucketedResult(job *skiplock.Job, o bucketed.Outcome) {
	m, l := c.meter, labels(job, schema.LayoutBucketed)
	if o == bucketed.OutcomeCompleted {
		c.completed(job, schema.LayoutBucketed)
		return
	}
	c.attempts.end(job)
	switch o {
	case bucketed.OutcomeFailed:
		m.Failed(l, job.Attempts >= job.MaxAttempts)
	case bucketed.OutcomeSnoozed:
		m.Snoozed(l)
	case bucketed.OutcomeCancelled:
		m.Cancelled(l, 1)
	case bucketed.OutcomeLost:
		m.LeaseLost(l)
	}
}

// fanoutResult counts a fanout Process call's outcome
// (fanout.WorkerConfig.OnResult): it runs after the job's transaction
// committed, or after the failure was recorded.
func (c *Client) fanoutResult(queue string, res *fanout.Result, err error) {
	job := res.Job
	if job == nil {
		return // no job claimed: a failed poll
	}
	m, l := c.meter, labels(job, schema.LayoutFanout)
	m.Claimed(queue, string(schema.LayoutFanout), res.Claim)
	switch {
	case err != nil:
		// A stop mid-job, a lost database or an ambiguous commit: the job
		// is back in the queue, or its outcome is unknown.
		c.attempts.end(job)
	case res.Snoozed:
		c.attempts.end(job)
		m.Snoozed(l)
	case res.Cancelled:
		c.attempts.end(job)
		m.Cancelled(l, 1)
	case res.HandlerErr == nil:
		c.completed(job, schema.LayoutFanout)
	case !res.Dead && job.Attempts >= job.MaxAttempts:
		// The last attempt failed, and its recording found the job gone:
		// a claim that raced the recording buried it (fanout's amend_dead)
		// and counts the final failure there. Not a retried one.
		c.attempts.end(job)
	default:
		c.attempts.end(job)
		m.Failed(l, res.Dead)
	}
}

// resultHooks wires a queue's outcomes into the metrics and the
// subscriptions: the outcome and claim callbacks of its worker config.
func (c *Client) resultHooks(name string, bw *bucketed.WorkerConfig, fw *fanout.WorkerConfig) {
	m := c.meter
	if bw != nil {
		bw.AfterResult = func(job *skiplock.Job, o bucketed.Outcome) {
			if m != nil {
				c.bucketedResult(job, o)
			}
			c.events.bucketedResult(job, o)
		}
		if m != nil {
			bw.AfterClaim = func(n int, took time.Duration) {
				m.Claimed(name, string(schema.LayoutBucketed), took)
			}
		}
	}
	if fw != nil {
		prev := fw.OnResult
		fw.OnResult = func(i int, res *fanout.Result, err error) {
			if m != nil {
				c.fanoutResult(name, res, err)
			}
			c.events.fanoutResult(res, err)
			if prev != nil {
				prev(i, res, err)
			}
		}
	}
}

// countInserted counts the jobs an insert into queue through db wrote:
// jobs are the batch, inserted how many of them the statement wrote.
// They are counted once they committed: at once for a statement of its
// own (db is the client's *skiplock.DB), after the commit for a
// transaction of DB.Begin (InsertMany, a Tx the caller began on a DB);
// a transaction whose outcome skiplock cannot see (skiplock.WrapTx)
// counts them now, in the in-caller-transaction counter.
func (c *Client) countInserted(db skiplock.Querier, queue string, layout schema.Layout, jobs []skiplock.NewJob, inserted int) {
	m := c.meter
	if m == nil || inserted <= 0 {
		return
	}
	n := insertedByKind(jobs, inserted)
	count := func(add func(metricsink.Labels, int)) func() {
		return func() {
			for _, kind := range slices.Sorted(maps.Keys(n)) {
				add(metricsink.Labels{Queue: queue, Kind: kind, Layout: string(layout)}, n[kind])
			}
		}
	}
	if _, ok := db.(*skiplock.DB); ok {
		count(m.Inserted)()
		return
	}
	if !txhook.AfterCommit(db, count(m.Inserted)) {
		count(m.InsertedInCallerTx)()
	}
}

// insertedByKind splits the inserted jobs of a batch by kind. When unique
// keys skipped some, which were skipped is known only by key, so a short
// batch counts its jobs without a key, then the rest under the kinds of
// the keyed jobs in order.
func insertedByKind(jobs []skiplock.NewJob, inserted int) map[string]int {
	n := map[string]int{}
	if inserted == len(jobs) {
		for _, j := range jobs {
			n[j.Kind]++
		}
		return n
	}
	left := inserted
	for _, keyed := range []bool{false, true} {
		for _, j := range jobs {
			if (j.UniqueKey != "") == keyed && left > 0 {
				n[j.Kind]++
				left--
			}
		}
	}
	return n
}

// watchMaintenance exports the leader flag and the rescues of the
// client's maintenance service.
func (c *Client) watchMaintenance(s *maintenance.Service) {
	m := c.meter
	if m == nil || s == nil {
		return
	}
	m.WatchLeader(s.IsLeader)
	m.WatchRescues(func() (int64, int64) {
		st := s.Stats()
		return st.Rescued, st.RescuedFailed
	})
}

// metricsHook is the maintenance hook that samples the queue gauges
// while this client leads; nil without metrics.
func (c *Client) metricsHook() []maintenance.Hook {
	if c.cfg.Metrics == nil {
		return nil
	}
	return []maintenance.Hook{{Name: "metrics", Interval: c.cfg.MetricsSampleInterval, Run: c.sampleQueues}}
}

// sampleQueues reads the declared queues' gauges (metrics.sql) and the
// paused queues, in the leader's fenced transaction, and hands them to
// the metrics.
func (c *Client) sampleQueues(ctx context.Context, tx skiplock.Tx) error {
	paused, err := admin.PausedQueues(ctx, tx, c.cfg.Schema)
	if err != nil {
		return fmt.Errorf("metrics sample: %w", err)
	}
	var out []metricsink.QueueSample
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Queues)) {
		layout := c.cfg.Queues[name].Layout
		s := metricsink.QueueSample{Queue: name, Layout: string(layout), Jobs: map[string]int64{}, Paused: slices.Contains(paused, name), OldestQueued: -1}
		var oldest *time.Time
		var now time.Time
		switch layout {
		case schema.LayoutFanout:
			var n int64
			err = tx.QueryRow(ctx, c.metricsSQL["sample_fanout"], name, MetricsSampleCap).Scan(&n, &oldest, &now)
			s.Jobs["queued"] = n
		default:
			var queued, running int64
			err = tx.QueryRow(ctx, c.metricsSQL["sample_bucketed"], name, MetricsSampleCap).Scan(&queued, &running, &oldest, &now)
			s.Jobs["queued"], s.Jobs["running"] = queued, running
		}
		if err != nil {
			return fmt.Errorf("metrics sample of queue %q: %w", name, err)
		}
		if oldest != nil {
			s.OldestQueued = max(now.Sub(*oldest), 0)
		}
		if layout != schema.LayoutFanout {
			if s.Limits, err = c.sampleLimits(ctx, name); err != nil {
				return fmt.Errorf("metrics sample of queue %q: %w", name, err)
			}
		}
		out = append(out, s)
	}
	c.meter.SetQueues(out, metricsStaleAfter*c.cfg.MetricsSampleInterval)
	return nil
}

// sampleLimits reads a bucketed queue's limits for the gauges; nil when
// it has none.
func (c *Client) sampleLimits(ctx context.Context, queue string) (*metricsink.QueueLimits, error) {
	st, err := c.bq.LimitsOf(ctx, queue)
	if err != nil || (st.Concurrency == 0 && st.Rate == 0 && st.PartitionBy == "") {
		return nil, err
	}
	l := &metricsink.QueueLimits{Concurrency: st.Concurrency, Held: st.SlotsHeld}
	if st.PartitionBy != "" {
		l.Concurrency, l.Held = 0, 0 // the limit is per partition: the partitions' gauges
	}
	if st.Rate > 0 {
		l.Rate = float64(st.Rate) / st.RatePeriod.Seconds()
	}
	for _, p := range st.Partitions {
		l.Partitions = append(l.Partitions, metricsink.PartitionSample{Name: p.Name, Limit: p.Limit, Running: p.Running, Waiting: p.Waiting})
	}
	return l, nil
}

// renderMetricsSQL renders metrics.sql for the client's schema and
// engine: the *_key_join block where the engine's claims are key joins.
func renderMetricsSQL(d *skiplock.Dialect, schemaName string) (map[string]string, error) {
	sql, err := metricsSQLFile.Render(metricsSQLVars(d, schemaName))
	if err != nil {
		return nil, err
	}
	if d.KeyJoinDML {
		sql["sample_bucketed"] = sql["sample_bucketed_key_join"]
	}
	delete(sql, "sample_bucketed_key_join")
	return sql, nil
}
