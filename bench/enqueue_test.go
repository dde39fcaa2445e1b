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
			// maintenance here) add a few: single inserts notify in their
			// own statement, debounced, and a burst ends with a trailing
			// notification (more of them the slower the machine).
			if want := int64(tc.calls) * tc.statements; rep.Statements < want || rep.Statements > want+want/10+3 {
				t.Fatalf("%d statements for %d calls, want %d", rep.Statements, tc.calls, want)
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
