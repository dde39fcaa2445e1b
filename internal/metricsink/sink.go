package metricsink

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/retry"
)

// Label names.
const (
	LabelQueue    = "queue"
	LabelKind     = "kind"
	LabelLayout   = "layout"
	LabelFinal    = "final"
	LabelSQLState = "sqlstate"
	LabelState    = "state"
	// LabelPartition is a partition's value (skiplock_partition_*).
	LabelPartition = "partition"
)

// DurationBuckets are the job histograms' buckets, in seconds: from 1 ms
// (a fanout job's claim) to 1 h (a long bucketed job, or a job that waited
// out a backoff).
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// ClaimBuckets are skiplock_claim_seconds' buckets: a claim is one
// statement, from a fraction of a millisecond to seconds on a loaded
// distributed engine.
var ClaimBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Labels identify one job's series: its queue, its kind ("" for jobs
// enqueued without one) and its queue's layout ("bucketed" or "fanout").
type Labels struct {
	Queue, Kind, Layout string
}

// OtherQueues is the queue label of the queues beyond
// Options.MaxQueueLabels: they share its series. Parentheses make it
// unlikely to be a real queue's name (a queue so named would share them).
const OtherQueues = "(other)"

// DefaultMaxQueueLabels is Options.MaxQueueLabels when it is 0.
const DefaultMaxQueueLabels = 1000

// Options tune a Recorder.
type Options struct {
	// MaxQueueLabels bounds how many queues get a queue label of their
	// own: the first this many queues the Recorder meets keep theirs for
	// its life, and later ones are counted under OtherQueues, so that
	// thousands of queues cannot make thousands of series per metric.
	// 0 means DefaultMaxQueueLabels; negative, no limit.
	MaxQueueLabels int
}

// queueLabels hands out the queue label values under a limit.
type queueLabels struct {
	max  int // negative: no limit
	mu   sync.RWMutex
	seen map[string]bool
}

func newQueueLabels(max int) *queueLabels {
	if max == 0 {
		max = DefaultMaxQueueLabels
	}
	return &queueLabels{max: max, seen: map[string]bool{}}
}

// label is queue's label value: its name if it is among the first max
// queues seen, else OtherQueues.
func (q *queueLabels) label(queue string) string {
	if q.max < 0 {
		return queue
	}
	q.mu.RLock()
	own := q.seen[queue]
	q.mu.RUnlock()
	if own {
		return queue
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seen[queue] {
		return queue
	}
	if len(q.seen) >= q.max {
		return OtherQueues
	}
	q.seen[queue] = true
	return queue
}

// Timing is what a completed job's histograms record.
type Timing struct {
	// Wait is from the job's run_at (the time it could first run, or
	// run again after a backoff or snooze) to the start of the attempt
	// that completed it.
	Wait time.Duration
	// Run is that attempt's handler time.
	Run time.Duration
	// EndToEnd is from the job's creation to its committed completion.
	EndToEnd time.Duration
}

// QueueSample is one queue's state as the maintenance leader sampled it
// (see SetQueues).
type QueueSample struct {
	// Queue and Layout name the queue.
	Queue, Layout string
	// Jobs counts the queue's jobs by state ("queued", "running"), each
	// count read up to a cap (see the client's Config.Recorder).
	Jobs map[string]int64
	// OldestQueued is how long the oldest claimable job has waited
	// (bucketed: since its run_at; fanout: since its creation); negative
	// when no job waits (exported as 0).
	OldestQueued time.Duration
	// Paused is whether an operator paused the queue.
	Paused bool
	// Limits are the queue's flow-control limits and what they hold; nil
	// for a queue without any (and for a folded sample).
	Limits *QueueLimits

	// pausedQueues counts the paused queues of a folded OtherQueues
	// sample.
	pausedQueues int
}

// QueueLimits are a queue's limits in a sample (bucketed.Limits): each
// zero when unset.
type QueueLimits struct {
	// Concurrency is the global limit; Held how many of its slots a
	// running job holds.
	Concurrency, Held int
	// Rate is the most starts per second the rate limit allows.
	Rate float64
	// Partitions are a partitioned queue's partitions that have jobs
	// running or waiting: the first bucketed.MaxShownPartitions by name,
	// which bounds the gauges' series per queue.
	Partitions []PartitionSample
}

// PartitionSample is one partition of a partitioned queue in a sample.
type PartitionSample struct {
	// Name is the partition's value ("" for jobs without one).
	Name string
	// Limit is its global limit (its own, or the queue's per partition);
	// 0 when none.
	Limit int
	// Running counts its jobs that hold a slot of it; Waiting its Queued
	// jobs.
	Running, Waiting int
}

// Recorder is skiplock's Prometheus collectors and the methods through
// which the client, its maintenance and the dashboard count: it lives
// behind metrics.Metrics (Of), so that users read the metrics and only
// skiplock writes them. A nil *Recorder is valid: every method does
// nothing, so code can call them unconditionally.
//
// Counters and histograms count what this process did. The gauges
// skiplock_queue_* describe the queue as a whole: the schema's
// maintenance leader samples them, and only a process that leads exports
// them (a process that loses the lead drops them at once, so no stale
// value lingers). Scrape every process: sum the counters across them, and
// read the queue gauges from whichever process has skiplock_leader 1.
type Recorder struct {
	inserted, insertedInCallerTx, completed, failed, cancelled, snoozed, leaseLost *prometheus.CounterVec
	wait, run, endToEnd, claim                                                     *prometheus.HistogramVec

	retriesDesc, rescuedDesc, leaderDesc, queueJobsDesc, oldestDesc, pausedDesc, sampleAgeDesc *prometheus.Desc
	limitDesc, heldDesc, rateDesc, partRunningDesc, partWaitingDesc, partLimitDesc             *prometheus.Desc

	mu        sync.Mutex
	retries   []*retry.Counters
	rescues   []func() (requeued, failed int64)
	leaders   []func() bool
	sample    []QueueSample
	sampledAt time.Time
	maxAge    time.Duration
	ownedReg  prometheus.Registerer
	queues    *queueLabels
}

// New makes skiplock's collectors and registers them in reg
// (prometheus.DefaultRegisterer when nil). Register once per registry:
// a second New on the same registry fails with an error that says so;
// share the first Recorder between the clients of a process instead.
func New(reg prometheus.Registerer, o Options) (*Recorder, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	job := []string{LabelQueue, LabelKind, LabelLayout}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Recorder{
		inserted: counter("skiplock_jobs_inserted_total",
			"Jobs this process inserted, counted once they committed: an insert in its own statement or in a transaction skiplock ran or began (DB.Begin) after its commit succeeded; never one rolled back, nor one whose commit was ambiguous.", job...),
		insertedInCallerTx: counter("skiplock_jobs_inserted_in_caller_tx_total",
			"Jobs this process inserted into a transaction whose outcome skiplock cannot see (the caller's own, wrapped with skiplock.WrapTx), counted when the insert statement succeeded: committed or not.", job...),
		completed: counter("skiplock_jobs_completed_total",
			"Jobs this process completed, counted after the completion committed (bucketed: the batched Success; fanout: the job's transaction).", job...),
		failed: counter("skiplock_jobs_failed_total",
			"Failed attempts this process recorded; final=\"true\" when the failure used the job's last attempt (bucketed: Failed; fanout: moved to job_dead), else it is retried.",
			append(job, LabelFinal)...),
		cancelled: counter("skiplock_jobs_cancelled_total", "Jobs this process cancelled by id (client.Client.JobCancel, the dashboard's cancel action).", job...),
		snoozed:   counter("skiplock_jobs_snoozed_total", "Attempts that snoozed (skiplock.Snooze) and whose snooze was written: the job runs later, the attempt not counted.", job...),
		leaseLost: counter("skiplock_jobs_lease_lost_total",
			"Bucketed results not written because the job's lease was lost first (it expired, or the job was cancelled), or because writing them failed: the job runs again elsewhere.", job...),
		wait: hist("skiplock_job_wait_seconds", "Completed jobs: from run_at (when the job could run, or run again after a backoff or snooze) to the start of the attempt that completed it.", DurationBuckets, job...),
		run:  hist("skiplock_job_run_seconds", "Completed jobs: the handler time of the attempt that completed the job.", DurationBuckets, job...),
		endToEnd: hist("skiplock_job_end_to_end_seconds",
			"Completed jobs: from the job's creation (insert) to its committed completion, on both layouts (measured after the commit; creation time by the database's clock).", DurationBuckets, job...),
		claim: hist("skiplock_claim_seconds",
			"Claim statements that returned jobs (bucketed: one claim for a batch; fanout: the claim inside the job's transaction).", ClaimBuckets, LabelQueue, LabelLayout),
		retriesDesc: prometheus.NewDesc("skiplock_transaction_retries_total",
			"Transactions run again after a retryable error (serialization failure, deadlock, lost connection: sqlstate \"conn\"), by the SQLSTATE that caused the retry.", []string{LabelSQLState}, nil),
		rescuedDesc: prometheus.NewDesc("skiplock_jobs_rescued_total",
			"Jobs whose lease expired that this process's maintenance leader rescued: state=\"queued\" put back to run, state=\"failed\" with no attempts left.", []string{LabelState}, nil),
		leaderDesc: prometheus.NewDesc("skiplock_leader", "1 when this process holds the schema's maintenance lease (it then exports the skiplock_queue_* gauges), else 0.", nil, nil),
		queueJobsDesc: prometheus.NewDesc("skiplock_queue_jobs",
			"Jobs of a queue by state, sampled by the maintenance leader through index-bounded queries: bucketed queued and running, fanout queued (pending); each count stops at the client's sample cap (a value at the cap means at least that many). Finished jobs are counted by the _total counters.",
			[]string{LabelQueue, LabelLayout, LabelState}, nil),
		oldestDesc: prometheus.NewDesc("skiplock_queue_oldest_queued_seconds",
			"How long the oldest claimable job of a queue has waited, sampled by the maintenance leader; 0 when none waits. Bucketed: since run_at, the oldest of the buckets' next jobs (exact for a queue of one priority); fanout: since creation, exact below the sample cap, else the oldest of the rows read (a lower bound).",
			[]string{LabelQueue, LabelLayout}, nil),
		pausedDesc: prometheus.NewDesc("skiplock_queue_paused",
			"1 when an operator paused the queue (skiplock queues pause), else 0; sampled by the maintenance leader. For the queue label \""+OtherQueues+"\": how many of its queues are paused.",
			[]string{LabelQueue, LabelLayout}, nil),
		limitDesc: prometheus.NewDesc("skiplock_queue_concurrency_limit",
			"A queue's global concurrency limit (skiplock queues configure --concurrency), sampled by the maintenance leader; only for queues that have one.",
			[]string{LabelQueue, LabelLayout}, nil),
		heldDesc: prometheus.NewDesc("skiplock_queue_concurrency_held",
			"How many of a limited queue's concurrency slots a running job holds (prefetched jobs included; at the limit, claims wait for a slot), sampled by the maintenance leader.",
			[]string{LabelQueue, LabelLayout}, nil),
		rateDesc: prometheus.NewDesc("skiplock_queue_rate_limit_per_second",
			"A queue's rate limit (skiplock queues configure --rate), as job starts per second, sampled by the maintenance leader; only for queues that have one.",
			[]string{LabelQueue, LabelLayout}, nil),
		partRunningDesc: prometheus.NewDesc("skiplock_partition_running",
			"Jobs of a partition of a partitioned queue (skiplock queues configure --partition-by) that run or are prefetched, holding its slots, sampled by the maintenance leader; for the first 100 partitions by name that have jobs running or waiting.",
			[]string{LabelQueue, LabelLayout, LabelPartition}, nil),
		partWaitingDesc: prometheus.NewDesc("skiplock_partition_waiting",
			"Queued jobs of a partition of a partitioned queue, waiting for their run_at or for the partition's limit, sampled by the maintenance leader; the same partitions as skiplock_partition_running.",
			[]string{LabelQueue, LabelLayout, LabelPartition}, nil),
		partLimitDesc: prometheus.NewDesc("skiplock_partition_concurrency_limit",
			"A partition's global limit (its own --partition-limit, or the queue's --concurrency per partition; 1 for a sequence), sampled by the maintenance leader; the same partitions, where a limit applies.",
			[]string{LabelQueue, LabelLayout, LabelPartition}, nil),
		sampleAgeDesc: prometheus.NewDesc("skiplock_queue_sample_age_seconds",
			"Seconds since the maintenance leader took the sample the skiplock_queue_* gauges show, at scrape time. A sample older than the client allows (3 sample intervals: the sampling fails or lags) is not exported, this gauge alone is.",
			nil, nil),
		ownedReg: reg,
		queues:   newQueueLabels(o.MaxQueueLabels),
	}
	cs := []prometheus.Collector{m.inserted, m.insertedInCallerTx, m.completed, m.failed, m.cancelled, m.snoozed, m.leaseLost, m.wait, m.run, m.endToEnd, m.claim, (*sourced)(m)}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("metrics: skiplock's collectors are already registered in this registry: call metrics.New once per registry and share its Recorder between clients (%w)", err)
			}
			return nil, fmt.Errorf("metrics: register skiplock's collectors: %w", err)
		}
	}
	return m, nil
}

// Unregister removes the collectors from the registry New put them in.
func (m *Recorder) Unregister() {
	if m == nil {
		return
	}
	for _, c := range []prometheus.Collector{m.inserted, m.insertedInCallerTx, m.completed, m.failed, m.cancelled, m.snoozed, m.leaseLost, m.wait, m.run, m.endToEnd, m.claim, (*sourced)(m)} {
		m.ownedReg.Unregister(c)
	}
}

// values are l's label values, the queue's under the label limit.
func (m *Recorder) values(l Labels) []string {
	return []string{m.queues.label(l.Queue), l.Kind, l.Layout}
}

// Inserted counts n jobs whose insert committed.
func (m *Recorder) Inserted(l Labels, n int) {
	if m != nil && n > 0 {
		m.inserted.WithLabelValues(m.values(l)...).Add(float64(n))
	}
}

// InsertedInCallerTx counts n jobs inserted into a transaction whose
// outcome skiplock cannot see.
func (m *Recorder) InsertedInCallerTx(l Labels, n int) {
	if m != nil && n > 0 {
		m.insertedInCallerTx.WithLabelValues(m.values(l)...).Add(float64(n))
	}
}

// Completed counts a job whose completion committed and records its
// timings (a negative duration, from clocks apart, is recorded as 0).
func (m *Recorder) Completed(l Labels, t Timing) {
	if m == nil {
		return
	}
	v := m.values(l)
	m.completed.WithLabelValues(v...).Inc()
	m.wait.WithLabelValues(v...).Observe(seconds(t.Wait))
	m.run.WithLabelValues(v...).Observe(seconds(t.Run))
	m.endToEnd.WithLabelValues(v...).Observe(seconds(t.EndToEnd))
}

// Failed counts a recorded failed attempt; final when it used the job's
// last attempt.
func (m *Recorder) Failed(l Labels, final bool) {
	if m != nil {
		m.failed.WithLabelValues(append(m.values(l), fmt.Sprint(final))...).Inc()
	}
}

// Cancelled counts n jobs cancelled by this process.
func (m *Recorder) Cancelled(l Labels, n int) {
	if m != nil && n > 0 {
		m.cancelled.WithLabelValues(m.values(l)...).Add(float64(n))
	}
}

// Snoozed counts a written snooze.
func (m *Recorder) Snoozed(l Labels) {
	if m != nil {
		m.snoozed.WithLabelValues(m.values(l)...).Inc()
	}
}

// LeaseLost counts a result not written because the lease was lost.
func (m *Recorder) LeaseLost(l Labels) {
	if m != nil {
		m.leaseLost.WithLabelValues(m.values(l)...).Inc()
	}
}

// Claimed records one claim statement that returned jobs.
func (m *Recorder) Claimed(queue, layout string, took time.Duration) {
	if m != nil {
		m.claim.WithLabelValues(m.queues.label(queue), layout).Observe(seconds(took))
	}
}

// WatchRetries exports c's retries by SQLSTATE: at each scrape,
// skiplock_transaction_retries_total sums every watched Counters.
func (m *Recorder) WatchRetries(c *retry.Counters) {
	if m == nil || c == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.retries, c) {
		m.retries = append(m.retries, c)
	}
}

// WatchRescues exports a maintenance leader's rescues: at each scrape,
// skiplock_jobs_rescued_total sums what every watched func returns (the
// totals so far: maintenance.Stats Rescued and RescuedFailed).
func (m *Recorder) WatchRescues(f func() (requeued, failed int64)) {
	if m != nil && f != nil {
		m.mu.Lock()
		m.rescues = append(m.rescues, f)
		m.mu.Unlock()
	}
}

// WatchLeader makes skiplock_leader 1 while f (or any other watched func)
// reports true, and gates the queue gauges on it.
func (m *Recorder) WatchLeader(f func() bool) {
	if m != nil && f != nil {
		m.mu.Lock()
		m.leaders = append(m.leaders, f)
		m.mu.Unlock()
	}
}

// SetQueues replaces the queue gauges' sample, taken now; the
// maintenance leader calls it after each sample. They are exported while
// a watched leader func reports true and the sample is at most maxAge old
// (0: any age): a leader whose sampling fails or lags then exports no
// stale count, and skiplock_queue_sample_age_seconds says why. Queues
// beyond the label limit are folded into one sample per layout.
func (m *Recorder) SetQueues(s []QueueSample, maxAge time.Duration) {
	if m == nil {
		return
	}
	folded := m.fold(s)
	m.mu.Lock()
	m.sample, m.sampledAt, m.maxAge = folded, time.Now(), maxAge
	m.mu.Unlock()
}

// fold returns s with the queues beyond the label limit merged into one
// OtherQueues sample per layout: their jobs summed by state, the oldest
// wait the longest of theirs, and Paused counting their paused queues
// (paused holds the counts).
func (m *Recorder) fold(s []QueueSample) []QueueSample {
	out := make([]QueueSample, 0, len(s))
	other := map[string]int{} // layout -> index in out
	for _, q := range s {
		if m.queues.label(q.Queue) != OtherQueues {
			out = append(out, q)
			continue
		}
		i, ok := other[q.Layout]
		if !ok {
			i = len(out)
			other[q.Layout] = i
			out = append(out, QueueSample{Queue: OtherQueues, Layout: q.Layout, Jobs: map[string]int64{}, OldestQueued: -1})
		}
		o := &out[i]
		for state, n := range q.Jobs {
			o.Jobs[state] += n
		}
		o.OldestQueued = max(o.OldestQueued, q.OldestQueued)
		if q.Paused {
			o.pausedQueues++
		}
	}
	return out
}

func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

// sourced collects the metrics read from other parts at scrape time:
// retries, rescues, the leader flag and the leader's queue sample.
type sourced Recorder

// Describe sends the descriptors of the sourced metrics.
func (s *sourced) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.retriesDesc, s.rescuedDesc, s.leaderDesc, s.queueJobsDesc, s.oldestDesc, s.pausedDesc, s.sampleAgeDesc, s.limitDesc, s.heldDesc, s.rateDesc, s.partRunningDesc, s.partWaitingDesc, s.partLimitDesc} {
		ch <- d
	}
}

// Collect reads the sources. A process that does not lead exports no
// queue gauge and forgets its last sample, so that it cannot export a
// stale one should it lead again before its first new sample.
func (s *sourced) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	retries, rescues, leaders := slices.Clone(s.retries), slices.Clone(s.rescues), slices.Clone(s.leaders)
	s.mu.Unlock()
	byState := map[string]int64{}
	for _, c := range retries {
		for code, n := range c.RetriesBySQLState() {
			byState[code] += n
		}
	}
	for _, code := range slices.Sorted(maps.Keys(byState)) {
		ch <- prometheus.MustNewConstMetric(s.retriesDesc, prometheus.CounterValue, float64(byState[code]), code)
	}
	if len(rescues) > 0 {
		var requeued, failed int64
		for _, f := range rescues {
			r, fl := f()
			requeued, failed = requeued+r, failed+fl
		}
		ch <- prometheus.MustNewConstMetric(s.rescuedDesc, prometheus.CounterValue, float64(requeued), "queued")
		ch <- prometheus.MustNewConstMetric(s.rescuedDesc, prometheus.CounterValue, float64(failed), "failed")
	}
	leads := false
	for _, f := range leaders {
		leads = leads || f()
	}
	if len(leaders) > 0 {
		ch <- prometheus.MustNewConstMetric(s.leaderDesc, prometheus.GaugeValue, b2f(leads))
	}
	s.collectQueues(ch, leads)
}

// collectQueues exports the leader's queue sample with its age; none when
// this process does not lead or has no sample yet, only the age when the
// sample is too old.
func (s *sourced) collectQueues(ch chan<- prometheus.Metric, leads bool) {
	s.mu.Lock()
	if !leads {
		s.sample, s.sampledAt = nil, time.Time{}
	}
	sample, at, maxAge := s.sample, s.sampledAt, s.maxAge
	s.mu.Unlock()
	if at.IsZero() {
		return
	}
	age := time.Since(at)
	ch <- prometheus.MustNewConstMetric(s.sampleAgeDesc, prometheus.GaugeValue, seconds(age))
	if maxAge > 0 && age > maxAge {
		return
	}
	for _, q := range sample {
		for _, state := range slices.Sorted(maps.Keys(q.Jobs)) {
			ch <- prometheus.MustNewConstMetric(s.queueJobsDesc, prometheus.GaugeValue, float64(q.Jobs[state]), q.Queue, q.Layout, state)
		}
		ch <- prometheus.MustNewConstMetric(s.oldestDesc, prometheus.GaugeValue, seconds(q.OldestQueued), q.Queue, q.Layout)
		ch <- prometheus.MustNewConstMetric(s.pausedDesc, prometheus.GaugeValue, b2f(q.Paused)+float64(q.pausedQueues), q.Queue, q.Layout)
		if l := q.Limits; l != nil && l.Concurrency > 0 {
			ch <- prometheus.MustNewConstMetric(s.limitDesc, prometheus.GaugeValue, float64(l.Concurrency), q.Queue, q.Layout)
			ch <- prometheus.MustNewConstMetric(s.heldDesc, prometheus.GaugeValue, float64(l.Held), q.Queue, q.Layout)
		}
		if l := q.Limits; l != nil && l.Rate > 0 {
			ch <- prometheus.MustNewConstMetric(s.rateDesc, prometheus.GaugeValue, l.Rate, q.Queue, q.Layout)
		}
		if l := q.Limits; l != nil {
			for _, p := range l.Partitions {
				name := strings.ToValidUTF8(p.Name, "\uFFFD") // a key given at insert may be any bytes; a label may not
				ch <- prometheus.MustNewConstMetric(s.partRunningDesc, prometheus.GaugeValue, float64(p.Running), q.Queue, q.Layout, name)
				ch <- prometheus.MustNewConstMetric(s.partWaitingDesc, prometheus.GaugeValue, float64(p.Waiting), q.Queue, q.Layout, name)
				if p.Limit > 0 {
					ch <- prometheus.MustNewConstMetric(s.partLimitDesc, prometheus.GaugeValue, float64(p.Limit), q.Queue, q.Layout, name)
				}
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Of returns the Recorder behind a *metrics.Metrics (nil for a nil one).
// The metrics package sets it: this package cannot import that one.
var Of = func(m any) *Recorder { return nil }
