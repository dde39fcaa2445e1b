package bench_test

import (
	"testing"

	"github.com/skiplock/skiplock/bench"
)

// TestEnqueue runs the enqueue scenario small in both modes on both
// layouts: every job is counted (Run also counts the rows), each call is
// timed, and the statements sent show the paths: a bulk batch is one
// transaction around a COPY (BEGIN; bucketed: the bucket count, fanout:
// the ids; the COPY, counted as its two round trips; COMMIT), and a
// single Insert is one statement.
func TestEnqueue(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg        bench.Config
		calls      int
		statements int64 // per call
	}{
		"bulk bucketed":   {bench.Config{EnqueueMode: bench.EnqueueBulk, Layout: "bucketed", Jobs: 1000, Batch: 300}, 4, 5},
		"bulk fanout":     {bench.Config{EnqueueMode: bench.EnqueueBulk, Layout: "fanout", Jobs: 1000, Batch: 300}, 4, 5},
		"single bucketed": {bench.Config{EnqueueMode: bench.EnqueueSingle, Layout: "bucketed", Jobs: 200, Workers: 5}, 200, 1},
		"single fanout":   {bench.Config{EnqueueMode: bench.EnqueueSingle, Layout: "fanout", Jobs: 200, Workers: 5}, 200, 1},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Scenario, tc.cfg.Progress = bench.ScenarioEnqueue, -1
			c, _ := config(t, tc.cfg)
			rep := run(t, c)
			if rep.Jobs != int64(tc.cfg.Jobs) || rep.JobsPerS <= 0 || rep.Mode != tc.cfg.EnqueueMode || rep.Layout != string(tc.cfg.Layout) {
				t.Fatalf("report: %d jobs at %.0f/s, mode %q, layout %q; want %d jobs, mode %q", rep.Jobs, rep.JobsPerS, rep.Mode, rep.Layout, tc.cfg.Jobs, tc.cfg.EnqueueMode)
			}
			if rep.LatencyMS.Count != uint64(tc.calls) {
				t.Fatalf("%d calls timed, want %d", rep.LatencyMS.Count, tc.calls)
			}
			// A client's own background statements (no workers, no
			// maintenance here) are its trailing notifications after
			// debounced inserts, at most one per insert, counted apart:
			// their number follows the clock (one per debounce window),
			// so the slower the machine the more of them.
			// A bucketed insert reads its queue's limits (for a
			// partition key taken from the args): once before the first,
			// however many start together, then beside them at most once
			// a second.
			want, reads := int64(tc.calls)*tc.statements, int64(0)
			if tc.cfg.Layout == "bucketed" {
				reads = 1 + int64(rep.Seconds)
			}
			if got := rep.Statements - rep.Notifications; got < want || got > want+reads || rep.Notifications > int64(tc.calls) {
				t.Fatalf("%d statements (%d of them notifications) for %d calls, want %d besides the notifications and at most %d reads of the limits", rep.Statements, rep.Notifications, tc.calls, want, reads)
			}
		})
	}
}

// TestEnqueueFlags: the scenario refuses the other scenarios' flags and
// an unknown mode before connecting.
func TestEnqueueFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []bench.Config{
		{Scenario: bench.ScenarioEnqueue, EnqueueMode: "lease"},
		{Scenario: bench.ScenarioEnqueue, Baseline: true},
		{Scenario: bench.ScenarioEnqueue, Jobs: -1},
	} {
		if err := bench.Validate(&c); err == nil {
			t.Fatalf("%+v: accepted", c)
		}
	}
}
