package bench

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// A short soak in three windows: every job a producer inserted is worked
// exactly once and completed, the report's counts agree with what the
// producers and handlers saw, and each window reads the tables' size.
func TestSoak(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout schema.Layout
		rate   float64
		rtt    time.Duration
		// prune: a retention short enough that finished jobs are
		// pruned during the run (bucketed).
		prune bool
	}{
		{"bucketed max", schema.LayoutBucketed, 0, 0, false},
		{"bucketed rate rtt", schema.LayoutBucketed, 300, 2 * time.Millisecond, false},
		{"bucketed pruned", schema.LayoutBucketed, 300, 0, true},
		{"fanout rate", schema.LayoutFanout, 300, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, nil)
			var mu sync.Mutex
			inserted, handled := map[string]int{}, map[string]int{}
			windows := 3
			if tc.prune {
				windows = 4
			}
			c := &Config{Scenario: ScenarioSoak, Layout: tc.layout, Rate: tc.rate, Producers: 3, Workers: 10,
				Duration: time.Duration(windows) * 2 * time.Second, Window: 2 * time.Second, Progress: -1, RTT: tc.rtt,
				DSN: testdb.DSN(t), Schema: testdb.Schema(t, db), Logger: testdb.Logger(t),
				soakHooks: &soakHooks{
					inserted: func(ids []string) {
						mu.Lock()
						defer mu.Unlock()
						for _, id := range ids {
							inserted[id]++
						}
					},
					handled: func(id string) {
						mu.Lock()
						defer mu.Unlock()
						handled[id]++
					},
				}}
			if tc.prune {
				c.soakHooks.retention, c.soakHooks.pruneInterval = 200*time.Millisecond, 200*time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors != 0 {
				t.Fatalf("%d errors: %v", rep.Errors, rep.ErrorSamples)
			}
			if len(rep.Minutes) != windows {
				t.Fatalf("%d windows, want %d (windows of 2s)", len(rep.Minutes), windows)
			}
			s := rep.Soak
			mu.Lock()
			defer mu.Unlock()
			if s.Enqueued == 0 || s.Enqueued != int64(len(inserted)) {
				t.Fatalf("report says %d enqueued, the producers inserted %d distinct jobs", s.Enqueued, len(inserted))
			}
			for id, n := range inserted {
				if n != 1 {
					t.Fatalf("job %s inserted %d times", id, n)
				}
				if handled[id] != 1 {
					t.Fatalf("job %s handled %d times, want once", id, handled[id])
				}
			}
			if len(handled) != len(inserted) {
				t.Fatalf("%d jobs handled, %d inserted", len(handled), len(inserted))
			}
			if s.Completed != s.Enqueued || s.Left != 0 || s.Unmatched != 0 || rep.Jobs != s.Completed {
				t.Fatalf("enqueued %d, completed %d, left %d, unmatched %d, jobs %d: want every job completed once", s.Enqueued, s.Completed, s.Left, s.Unmatched, rep.Jobs)
			}
			if rep.LatencyMS.Count != uint64(s.Completed) {
				t.Fatalf("%d end-to-end latencies for %d completions", rep.LatencyMS.Count, s.Completed)
			}
			var enq, done int64
			var timed uint64
			for i, m := range rep.Minutes {
				enq, done, timed = enq+m.Enqueued, done+m.Completed, timed+m.E2EMS.Count
				if m.TableBytes <= 0 || m.Rows < 0 || m.DeadTuples < 0 {
					t.Fatalf("window %d: table %d bytes, %d rows, %d dead tuples: want the tables read", i+1, m.TableBytes, m.Rows, m.DeadTuples)
				}
				if m.Backlog != enq-done {
					t.Fatalf("window %d: backlog %d, but %d enqueued and %d completed so far", i+1, m.Backlog, enq, done)
				}
			}
			if last := rep.Minutes[windows-1]; tc.prune && last.Rows >= enq-last.Enqueued {
				// Without pruning the table would hold at least every job
				// enqueued before the last window.
				t.Fatalf("%d rows at the end, %d jobs enqueued before the last window: want finished jobs pruned", last.Rows, enq-last.Enqueued)
			}
			if enq > s.Enqueued || done > s.Completed || timed > uint64(done) {
				t.Fatalf("windows count %d enqueued, %d completed, %d timed; the run %d and %d", enq, done, timed, s.Enqueued, s.Completed)
			}
			if rep.PeakRSSBytes <= 0 {
				t.Fatalf("peak RSS %d: want VmHWM read", rep.PeakRSSBytes)
			}
			var out strings.Builder
			if err := rep.WriteJSON(&out); err != nil {
				t.Fatal(err)
			}
			var js map[string]any
			if err := json.Unmarshal([]byte(out.String()), &js); err != nil {
				t.Fatal(err)
			}
			minutes, _ := js["minutes"].([]any)
			if len(minutes) != windows || js["peak_rss_bytes"] == nil {
				t.Fatalf("JSON lacks minutes or peak_rss_bytes: %s", out.String())
			}
			for _, k := range []string{"enqueued_per_s", "completed_per_s", "e2e_ms", "table_bytes", "dead_tuples"} {
				if _, ok := minutes[0].(map[string]any)[k]; !ok {
					t.Fatalf("JSON minute lacks %s: %v", k, minutes[0])
				}
			}
			out.Reset()
			if err := rep.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"peak RSS", "completed/s", "table+index MB"} {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("table lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestSoakUsage(t *testing.T) {
	for _, c := range []Config{
		{Scenario: ScenarioSoak, Duration: time.Second, Window: 2 * time.Second},
		{Scenario: ScenarioSoak, Rate: -1},
		{Scenario: ScenarioSoak, Jobs: 10},
		{Scenario: ScenarioSoak, Baseline: true},
		{Scenario: ScenarioSoak, Samples: 3},
		{Scenario: ScenarioLatency, Rate: 10},
		{Scenario: ScenarioThroughput, Producers: 2},
		{Scenario: ScenarioLatency, Window: time.Second},
	} {
		if _, err := c.withDefaults(); !usage.Is(err) {
			t.Errorf("%+v: %v, want a usage error", c, err)
		}
	}
	c, err := (&Config{Scenario: ScenarioSoak}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration != DefaultSoakDuration || c.Window != DefaultSoakWindow || c.Producers != DefaultSoakProducers || c.Workers != DefaultSoakWorkers || c.Layout != schema.LayoutBucketed {
		t.Fatalf("defaults: %+v", c)
	}
}
