package metrics_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/metrics"
)

// TestMaxQueueLabels: with the limit at 3, five queues make series for
// the first three met plus metrics.OtherQueues, on counters, histograms
// and the leader's queue gauges alike; every count adds up across them,
// and a queue keeps its own label once it has one.
func TestMaxQueueLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.MaxQueueLabels(3))
	if err != nil {
		t.Fatal(err)
	}
	r := metricsink.Of(m)
	r.WatchLeader(func() bool { return true })
	queues := []string{"q0", "q1", "q2", "q3", "q4"}
	var sample []metricsink.QueueSample
	for i, q := range queues {
		l := metricsink.Labels{Queue: q, Kind: "k", Layout: "bucketed"}
		r.Inserted(l, i+1)
		r.Completed(l, metricsink.Timing{})
		r.Failed(l, false)
		sample = append(sample, metricsink.QueueSample{Queue: q, Layout: "bucketed", Jobs: map[string]int64{"queued": int64(10 * (i + 1))}, Paused: i >= 3})
	}
	r.Inserted(metricsink.Labels{Queue: "q1", Kind: "k", Layout: "bucketed"}, 100) // q1 keeps its own label
	r.SetQueues(sample, 0)

	want := slices.Sorted(slices.Values([]string{"q0", "q1", "q2", metrics.OtherQueues}))
	for _, c := range []struct {
		name  string
		total float64
		other float64
	}{
		{"skiplock_jobs_inserted_total", 1 + 2 + 3 + 4 + 5 + 100, 4 + 5},
		{"skiplock_jobs_completed_total", 5, 2},
		{"skiplock_jobs_failed_total", 5, 2},
		{"skiplock_job_run_seconds", 5, 2},
		{"skiplock_queue_jobs", 150, 40 + 50},
		{"skiplock_queue_paused", 2, 2},
	} {
		got := byQueue(t, reg, c.name)
		if labels := slices.Sorted(maps.Keys(got)); !slices.Equal(labels, want) {
			t.Errorf("%s: queue labels %q, want %q", c.name, labels, want)
		}
		var sum float64
		for _, v := range got {
			sum += v
		}
		if sum != c.total || got[metrics.OtherQueues] != c.other {
			t.Errorf("%s: %v in all, %v under %q; want %v and %v", c.name, sum, got[metrics.OtherQueues], metrics.OtherQueues, c.total, c.other)
		}
	}
}

// byQueue sums a metric's series by their queue label: a counter's or
// gauge's value, a histogram's sample count.
func byQueue(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var queue string
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					queue = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[queue] += v
		}
		return out
	}
	t.Fatalf("no metric %s gathered", name)
	return nil
}
