package metricsink_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skiplock/skiplock/internal/metricsink"
)

// TestNewTwice: a second registration in one registry is refused with an
// error that says what to do, and the first keeps working.
func TestNewTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metricsink.New(reg, metricsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metricsink.New(reg, metricsink.Options{}); err == nil || !strings.Contains(err.Error(), "once per registry") {
		t.Fatalf("second New: %v, want an already-registered error", err)
	}
	m.Inserted(metricsink.Labels{Queue: "q", Kind: "k", Layout: "bucketed"}, 3)
	want := `
# HELP skiplock_jobs_inserted_total Jobs this process inserted, counted once they committed: an insert in its own statement or in a transaction skiplock ran or began (DB.Begin) after its commit succeeded; never one rolled back, nor one whose commit was ambiguous.
# TYPE skiplock_jobs_inserted_total counter
skiplock_jobs_inserted_total{kind="k",layout="bucketed",queue="q"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiplock_jobs_inserted_total"); err != nil {
		t.Fatal(err)
	}
	var none *metricsink.Recorder // nil: every method is a no-op
	none.Completed(metricsink.Labels{}, metricsink.Timing{})
	none.SetQueues(nil, 0)
	none.WatchLeader(func() bool { return true })
}

// TestQueueGaugesFollowTheLead: the queue gauges are exported only while
// a watched leader func says true; a scrape while not leading forgets the
// sample, so regaining the lead exports nothing stale until the next
// sample.
func TestQueueGaugesFollowTheLead(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metricsink.New(reg, metricsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var leads atomic.Bool
	m.WatchLeader(leads.Load)
	sample := []metricsink.QueueSample{{Queue: "q", Layout: "bucketed", Jobs: map[string]int64{"queued": 5, "running": 2}, OldestQueued: 3 * time.Second, Paused: true}}
	queueSeries := func() int {
		n, err := testutil.GatherAndCount(reg, "skiplock_queue_jobs", "skiplock_queue_oldest_queued_seconds", "skiplock_queue_paused")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	leader := func() float64 {
		n, err := testutil.GatherAndCount(reg, "skiplock_leader")
		if err != nil || n != 1 {
			t.Fatalf("skiplock_leader: %d series, %v", n, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "skiplock_leader" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	leads.Store(true)
	m.SetQueues(sample, 0)
	if n, l := queueSeries(), leader(); n != 4 || l != 1 {
		t.Fatalf("leading: %d queue series, leader %v; want 4, 1", n, l)
	}
	want := `
# HELP skiplock_queue_paused 1 when an operator paused the queue (skiplock queues pause), else 0; sampled by the maintenance leader. For the queue label "(other)": how many of its queues are paused.
# TYPE skiplock_queue_paused gauge
skiplock_queue_paused{layout="bucketed",queue="q"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiplock_queue_paused"); err != nil {
		t.Fatal(err)
	}
	leads.Store(false)
	if n, l := queueSeries(), leader(); n != 0 || l != 0 {
		t.Fatalf("lead lost: %d queue series, leader %v; want 0, 0", n, l)
	}
	leads.Store(true)
	if n := queueSeries(); n != 0 {
		t.Fatalf("lead regained before a sample: %d queue series (stale), want 0", n)
	}
	m.SetQueues(sample, 0)
	if n := queueSeries(); n != 4 {
		t.Fatalf("after the new leader's sample: %d queue series, want 4", n)
	}
}

// TestQueueSampleAge: while leading, skiplock_queue_sample_age_seconds
// says how old the exported sample is; once it is older than SetQueues'
// maxAge, the queue gauges are no longer exported (the age still is), so
// a leader whose sampling stopped shows no stale count; a new sample
// brings them back.
func TestQueueSampleAge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metricsink.New(reg, metricsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.WatchLeader(func() bool { return true })
	sample := []metricsink.QueueSample{{Queue: "q", Layout: "bucketed", Jobs: map[string]int64{"queued": 425}}}
	gauges := func() (queueSeries int, age float64, aged bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "skiplock_queue_jobs", "skiplock_queue_oldest_queued_seconds", "skiplock_queue_paused":
				queueSeries += len(mf.GetMetric())
			case "skiplock_queue_sample_age_seconds":
				age, aged = mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return queueSeries, age, aged
	}
	if n, _, aged := gauges(); n != 0 || aged {
		t.Fatalf("before any sample: %d queue series, age exported %v; want none", n, aged)
	}
	const maxAge = 50 * time.Millisecond
	m.SetQueues(sample, maxAge)
	if n, age, aged := gauges(); n != 3 || !aged || age < 0 || age > maxAge.Seconds() {
		t.Fatalf("fresh sample: %d queue series, age %v (exported %v); want 3 and an age within %v", n, age, aged, maxAge)
	}
	time.Sleep(2 * maxAge) // time under test: the sample grows older than maxAge
	if n, age, aged := gauges(); n != 0 || !aged || age < (2*maxAge).Seconds() {
		t.Fatalf("stale sample: %d queue series, age %v (exported %v); want none, and the age at least %v", n, age, aged, 2*maxAge)
	}
	m.SetQueues(sample, maxAge)
	if n, _, _ := gauges(); n != 3 {
		t.Fatalf("after a new sample: %d queue series, want 3", n)
	}
}
