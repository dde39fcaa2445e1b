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
	m, err := metricsink.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metricsink.New(reg); err == nil || !strings.Contains(err.Error(), "once per registry") {
		t.Fatalf("second New: %v, want an already-registered error", err)
	}
	m.Inserted(metricsink.Labels{Queue: "q", Kind: "k", Layout: "bucketed"}, 3)
	want := `
# HELP skiplock_jobs_inserted_total Jobs this process inserted (committed or not: an insert in the caller's transaction counts when the statement succeeds).
# TYPE skiplock_jobs_inserted_total counter
skiplock_jobs_inserted_total{kind="k",layout="bucketed",queue="q"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiplock_jobs_inserted_total"); err != nil {
		t.Fatal(err)
	}
	var none *metricsink.Recorder // nil: every method is a no-op
	none.Completed(metricsink.Labels{}, metricsink.Timing{})
	none.SetQueues(nil)
	none.WatchLeader(func() bool { return true })
}

// TestQueueGaugesFollowTheLead: the queue gauges are exported only while
// a watched leader func says true; a scrape while not leading forgets the
// sample, so regaining the lead exports nothing stale until the next
// sample.
func TestQueueGaugesFollowTheLead(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metricsink.New(reg)
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
	m.SetQueues(sample)
	if n, l := queueSeries(), leader(); n != 4 || l != 1 {
		t.Fatalf("leading: %d queue series, leader %v; want 4, 1", n, l)
	}
	want := `
# HELP skiplock_queue_paused 1 when an operator paused the queue (skiplock queues pause), else 0; sampled by the maintenance leader.
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
	m.SetQueues(sample)
	if n := queueSeries(); n != 4 {
		t.Fatalf("after the new leader's sample: %d queue series, want 4", n)
	}
}
