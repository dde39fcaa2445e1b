package ui

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/admin"
)

// TestWindow: rollups land in the bucket of their minute, summed over
// queues; the window's totals are the sums of the rollups from Since on;
// latencies are averaged with the jobs as weights; minutes before the
// window or after now are left out; a bucket without jobs has no
// latency, and its line breaks there.
func TestWindow(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 7, 30, 0, time.UTC)
	rs := []admin.Rollup{
		{Queue: "a", Minute: now.Add(-25 * time.Hour).Truncate(time.Minute), Completed: 1000}, // before the day
		{Queue: "a", Minute: time.Date(2026, 11, 23, 9, 50, 0, 0, time.UTC), Completed: 3, Failed: 1, WaitP50: time.Second, RunP95: 4 * time.Second},
		{Queue: "b", Minute: time.Date(2026, 11, 23, 9, 50, 0, 0, time.UTC), Completed: 4, WaitP50: 3 * time.Second, RunP95: 2 * time.Second},
		{Queue: "a", Minute: time.Date(2026, 11, 23, 10, 7, 0, 0, time.UTC), Completed: 2},
		{Queue: "a", Minute: time.Date(2026, 11, 23, 10, 20, 0, 0, time.UTC), Completed: 500}, // past the last bucket
		{Queue: "a", Minute: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), Failed: 5},        // in the day, not the hour
	}
	h := newWindow("hour", "", now, time.Minute, 60, rs)
	if want := time.Date(2026, 11, 23, 9, 8, 0, 0, time.UTC); !h.Since.Equal(want) || len(h.Buckets) != 60 {
		t.Fatalf("hour since %s, %d buckets", h.Since, len(h.Buckets))
	}
	if h.Completed != 9 || h.Failed != 1 {
		t.Errorf("hour totals %d completed, %d failed; want 9, 1", h.Completed, h.Failed)
	}
	b := h.Buckets[42] // 09:50
	if !b.At.Equal(time.Date(2026, 11, 23, 9, 50, 0, 0, time.UTC)) || b.Completed != 7 || b.Failed != 1 {
		t.Errorf("09:50 bucket %+v", b)
	}
	// Weights 4 and 4: the mean of 1s and 3s, and of 4s and 2s.
	if b.WaitP50 != 2 || b.RunP95 != 3 {
		t.Errorf("09:50 latencies wait p50 %v, run p95 %v; want 2, 3", b.WaitP50, b.RunP95)
	}
	if last := h.Buckets[59]; last.Completed != 2 || !math.IsNaN(h.Buckets[58].WaitP50) {
		t.Errorf("last bucket %+v, the one before %+v", last, h.Buckets[58])
	}
	d := newWindow("day", "", now, 15*time.Minute, 96, rs)
	if d.Completed != 9 || d.Failed != 6 {
		t.Errorf("day totals %d completed, %d failed; want 9, 6", d.Completed, d.Failed)
	}
	if want := time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC); !d.Since.Equal(want) {
		t.Errorf("day since %s, want %s", d.Since, want)
	}
	svg := string(h.Latency())
	// Four series over two buckets with jobs (09:50 and 10:07) with
	// empty ones between: two pieces each.
	if n := strings.Count(svg, "<polyline"); n != 8 {
		t.Errorf("latency chart has %d line pieces, want 8", n)
	}
	if strings.Contains(string(h.Throughput()), "no jobs finished") {
		t.Error("throughput chart says it is empty")
	}
	empty := newWindow("hour", "", now, time.Minute, 60, nil)
	if s := string(empty.Throughput()); !strings.Contains(s, "no jobs finished") || strings.Contains(s, "<polyline") {
		t.Errorf("empty chart: %s", s)
	}
}
