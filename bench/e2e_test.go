package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/syncbuf"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// config is a tiny bench on the test server, in a schema of its own.
func config(t *testing.T, c bench.Config) (*bench.Config, *syncbuf.Buffer) {
	t.Helper()
	db := testdb.Open(t, nil)
	out := &syncbuf.Buffer{}
	c.DSN = testdb.DSN(t)
	c.Schema = testdb.Schema(t, db)
	c.Out = out
	c.Logger = testdb.Logger(t)
	return &c, out
}

func run(t *testing.T, c *bench.Config) *bench.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, c)
	if err != nil {
		t.Fatalf("bench %s: %v", c.Scenario, err)
	}
	if rep.Errors != 0 {
		t.Fatalf("bench %s: %d errors: %v", c.Scenario, rep.Errors, rep.ErrorSamples)
	}
	if rep.Machine == nil || rep.Engine == nil || rep.Engine.Version == "" || rep.Settings == nil {
		t.Fatalf("report does not name the machine, engine and settings: %+v", rep)
	}
	return rep
}

// checkCounts checks what every job scenario must hold: every completed
// job was recorded once in each histogram.
func checkCounts(t *testing.T, rep *bench.Report) {
	t.Helper()
	if rep.LatencyMS.Count != uint64(rep.Jobs) || rep.DequeueMS.Count != uint64(rep.Jobs) {
		t.Fatalf("%d jobs, but %d latencies and %d dequeue latencies recorded", rep.Jobs, rep.LatencyMS.Count, rep.DequeueMS.Count)
	}
	if rep.Jobs > 0 && !(rep.LatencyMS.Min <= rep.LatencyMS.P50 && rep.LatencyMS.P50 <= rep.LatencyMS.P99 && rep.LatencyMS.P99 <= rep.LatencyMS.Max) {
		t.Fatalf("latency summary out of order: %+v", rep.LatencyMS)
	}
}

func TestLatencyByJobCount(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{bench.ModeLease, bench.ModeTx} {
		t.Run(mode, func(t *testing.T) {
			c, out := config(t, bench.Config{Scenario: bench.ScenarioLatency, Mode: mode, Workers: 4,
				Work: 20 * time.Millisecond, Jobs: 40, Progress: 100 * time.Millisecond})
			rep := run(t, c)
			// Duration 0 with a job count: every preloaded job is worked,
			// each exactly once.
			if rep.Jobs != 40 {
				t.Fatalf("%s: worked %d jobs, want the 40 preloaded", mode, rep.Jobs)
			}
			checkCounts(t, rep)
			if rep.Efficiency == nil || *rep.Efficiency <= 0 {
				t.Fatalf("efficiency %v", rep.Efficiency)
			}
			most := 4
			if mode == bench.ModeTx {
				most += fanout.RecorderConns(4) + 1 // fanout counts attempts over its own, and the client has one
			}
			if rep.Connections < 1 || rep.Connections > most {
				t.Fatalf("%d connections for 4 workers", rep.Connections)
			}
			if rep.LatencyMS.Min < 20 {
				t.Fatalf("a job took %.3f ms, less than its 20 ms of work", rep.LatencyMS.Min)
			}
			if !strings.Contains(out.String(), "progress: ") {
				t.Fatalf("no progress lines: %q", out.String())
			}
		})
	}
}

func TestLatencyForADuration(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Workers: 3, Conns: 2,
		Work: 50 * time.Millisecond, Duration: 2 * time.Second, Progress: -1})
	rep := run(t, c)
	if rep.Jobs == 0 || rep.Mode != bench.ModeLease || rep.Layout != "bucketed" || rep.Workers != 3 {
		t.Fatalf("report %+v", rep)
	}
	checkCounts(t, rep)
	// Lease mode shares a small pool among more workers.
	if rep.Connections > 2 {
		t.Fatalf("%d connections with --conns 2", rep.Connections)
	}
	// Counted as pgbench -T counts: only jobs finished within the 2 s.
	if w := rep.WindowJobsPerS; w == nil || *w <= 0 || *w*2 > float64(rep.Jobs) {
		t.Fatalf("window jobs/s %v with %d jobs in %.2fs", w, rep.Jobs, rep.Seconds)
	}
}

// Many lease-mode workers on a pool of two: claims are coalesced and
// completions batched, and still every preloaded job is worked exactly
// once (a second completion of a job would come back as a lost lease, an
// error) and each job's latency covers its work.
func TestLeaseManyWorkersFewConnections(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Workers: 60, Conns: 2,
		Work: 30 * time.Millisecond, Jobs: 600, Progress: -1})
	rep := run(t, c)
	if rep.Jobs != 600 {
		t.Fatalf("worked %d jobs, want the 600 preloaded", rep.Jobs)
	}
	checkCounts(t, rep)
	if rep.Connections > 2 {
		t.Fatalf("%d connections with --conns 2", rep.Connections)
	}
	if rep.LatencyMS.Min < 30 {
		t.Fatalf("a job took %.3f ms, less than its 30 ms of work", rep.LatencyMS.Min)
	}
}

func TestThroughputBurnDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   string
		batch  int
		driver string
		del    bool // --delete-completed
		held   bool // --held-claims
	}{{bench.ModeLease, 0, bench.DriverClient, false, false}, {bench.ModeLease, 50, bench.DriverBatch, false, false}, {bench.ModeTx, 0, bench.DriverClient, false, false},
		{bench.ModeLease, 0, bench.DriverClient, true, false}, {bench.ModeLease, 0, bench.DriverClient, false, true}, {bench.ModeLease, 0, bench.DriverClient, true, true}} {
		t.Run(fmt.Sprintf("%s_%s_delete_%v_held_%v", tc.mode, tc.driver, tc.del, tc.held), func(t *testing.T) {
			c, _ := config(t, bench.Config{Scenario: bench.ScenarioThroughput, Mode: tc.mode, Workers: 4, Batch: tc.batch, Jobs: 300, Progress: -1,
				DeleteCompleted: tc.del, HeldClaims: tc.held})
			rep := run(t, c)
			if rep.Jobs != 300 || rep.Settings.Driver != tc.driver || rep.Settings.DeleteCompleted != tc.del || rep.Settings.HeldClaims != tc.held {
				t.Fatalf("burned down %d jobs with driver %q, delete_completed %v, held_claims %v; want 300 with %q, %v, %v",
					rep.Jobs, rep.Settings.Driver, rep.Settings.DeleteCompleted, rep.Settings.HeldClaims, tc.driver, tc.del, tc.held)
			}
			// The server's writes per job (PostgreSQL): a bucketed job's row
			// is updated at least twice (claimed, completed), never HOT; with
			// --delete-completed, updated once (claimed), then deleted. A
			// held claim writes a job once: updated, or deleted.
			switch w := rep.Writes; {
			case tc.held && rep.Engine != nil && rep.Engine.Name == "postgres" && w != nil:
				if w.UpdatesPerJob+w.DeletesPerJob < 1 || w.UpdatesPerJob+w.DeletesPerJob >= 2 || (tc.del && w.DeletesPerJob < 1) || w.HOTUpdatesPerJob != 0 {
					t.Errorf("writes %+v: a held job is written once (deleted with --delete-completed), never HOT", *w)
				}
			case tc.del && rep.Engine != nil && rep.Engine.Name == "postgres" && w != nil:
				if w.UpdatesPerJob < 1 || w.UpdatesPerJob >= 2 || w.DeletesPerJob < 1 || w.HOTUpdatesPerJob != 0 {
					t.Errorf("writes %+v: a bucketed job deleted as it completes is updated once and deleted once, never HOT", *w)
				}
			case rep.Engine == nil || rep.Engine.Name != "postgres":
				// Only PostgreSQL has the statistics.
			case w == nil:
				t.Fatal("no server writes in the report")
			case w.WALBytesPerJob <= 0:
				t.Errorf("writes %+v: no WAL", *w)
			case tc.mode == bench.ModeLease && (w.UpdatesPerJob < 2 || w.HOTUpdatesPerJob != 0):
				t.Errorf("writes %+v: a bucketed job's row is updated twice, never HOT", *w)
			}
			checkCounts(t, rep)
			if rep.Efficiency != nil {
				t.Fatalf("efficiency %v outside the latency scenario", *rep.Efficiency)
			}
		})
	}
}

// TestThroughputPartitioned: a burn-down with the jobs spread over five
// partitions by key, one running at a time in each (--partitions 5
// --concurrency 1): every job is worked, and the report says how.
func TestThroughputPartitioned(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioThroughput, Workers: 4, Jobs: 300, Progress: -1, Partitions: 5, Concurrency: 1})
	rep := run(t, c)
	if rep.Jobs != 300 || rep.Settings.Partitions != 5 || rep.Settings.Concurrency != 1 {
		t.Fatalf("burned down %d jobs over %d partitions with a limit of %d; want 300 over 5 with 1", rep.Jobs, rep.Settings.Partitions, rep.Settings.Concurrency)
	}
	checkCounts(t, rep)
}

func TestLock(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLock, Workers: 3, Jobs: 50, Duration: time.Second, Progress: -1})
	rep := run(t, c)
	if rep.Jobs == 0 || rep.Layout != "fanout" || rep.Connections != 3 {
		t.Fatalf("report %+v", rep)
	}
	checkCounts(t, rep)
}

func TestBaseline(t *testing.T) {
	t.Parallel()
	if _, err := bench.FindPgbench(); errors.Is(err, bench.ErrNoPgbench) {
		t.Skip("pgbench is not installed: the baseline cannot be tested here")
	}
	c, out := config(t, bench.Config{Scenario: bench.ScenarioLock, Workers: 2, Jobs: 20, Duration: 2 * time.Second,
		Progress: time.Second, Baseline: true})
	rep := run(t, c)
	b := rep.Baseline
	if b == nil || b.Tool != "pgbench" || b.Workers != 2 || b.Jobs == 0 || b.Errors != 0 || b.LatencyMS.Count != uint64(b.Jobs) {
		t.Fatalf("baseline %+v", b)
	}
	if rep.Ratio == nil || rep.Engine.Pgbench == "" {
		t.Fatalf("ratio %v, pgbench version %q", rep.Ratio, rep.Engine.Pgbench)
	}
	if !strings.Contains(out.String(), "pgbench progress: ") {
		t.Fatalf("no pgbench progress lines: %q", out.String())
	}
}

// The latency baseline runs the article's script with its sleep and delete;
// with a job count, pgbench works exactly the jobs preloaded.
func TestLatencyBaselineByJobCount(t *testing.T) {
	t.Parallel()
	if _, err := bench.FindPgbench(); errors.Is(err, bench.ErrNoPgbench) {
		t.Skip("pgbench is not installed: the baseline cannot be tested here")
	}
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Workers: 3, Work: 10 * time.Millisecond, Jobs: 30,
		Progress: -1, Baseline: true})
	rep := run(t, c)
	if rep.Jobs != 30 || rep.Baseline == nil || rep.Baseline.Jobs != 30 || rep.Baseline.Efficiency == nil {
		t.Fatalf("ours %d jobs, baseline %+v", rep.Jobs, rep.Baseline)
	}
}

func TestTooFewConnections(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Mode: bench.ModeTx, Workers: bench.MaxWorkers, Duration: time.Second})
	_, err := bench.Run(context.Background(), c)
	if !usage.Is(err) || !strings.Contains(err.Error(), "--mode tx with 10000 workers needs 10022: raise max_connections or use --mode lease") ||
		!strings.Contains(err.Error(), "server allows ") {
		t.Fatalf("err = %v", err)
	}
}

// The tombstones scenario on a small burn-down: ten windows over the jobs
// with the dead versions growing, index tuples counted, and empty claims
// on a fresh table and on the drained queue, in the JSON the CLI prints.
func TestTombstones(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		jobs  int
		batch int
	}{{bench.ModeLease, 2000, 20}, {bench.ModeTx, 500, 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			c, out := config(t, bench.Config{Scenario: bench.ScenarioTombstones, Mode: tc.mode, Jobs: tc.jobs, Batch: tc.batch, Progress: time.Second})
			rep := run(t, c)
			if rep.Jobs != int64(tc.jobs) || rep.Workers != 1 || len(rep.Windows) != 10 {
				t.Fatalf("%d jobs by %d workers in %d windows, want %d by 1 in 10", rep.Jobs, rep.Workers, len(rep.Windows), tc.jobs)
			}
			var jobs int64
			for i, w := range rep.Windows {
				if w.DeadBefore != jobs {
					t.Fatalf("window %d: dead_before %d, want the %d jobs worked before it", i+1, w.DeadBefore, jobs)
				}
				jobs += w.Jobs
				if w.Claims == 0 || w.ClaimMS.Count != uint64(w.Claims) || w.ClaimMS.P50 > w.ClaimMS.P99 {
					t.Fatalf("window %d: %d claims, claim_ms %+v", i+1, w.Claims, w.ClaimMS)
				}
				if w.IndexTuplesPerClaim == nil || *w.IndexTuplesPerClaim <= 0 {
					t.Fatalf("window %d: index tuples per claim %s", i+1, fmtFloat(w.IndexTuplesPerClaim))
				}
			}
			if jobs != rep.Jobs {
				t.Fatalf("the windows worked %d jobs, the run %d", jobs, rep.Jobs)
			}
			checkCounts(t, rep)
			for name, s := range map[string]*bench.ClaimSample{"fresh": rep.Fresh, "drained": rep.Drained} {
				if s == nil || s.Claims == 0 || s.ClaimMS.Count != uint64(s.Claims) || s.IndexTuplesPerClaim == nil {
					t.Fatalf("%s: %+v", name, s)
				}
			}
			// The held snapshot keeps every dead version: the server
			// counts them. Both layouts' claims start after their
			// watermarks, so the drained queue's empty claims do not walk
			// them (a claim that did would read about one entry per job;
			// an occasional heads probe does).
			if d := rep.Drained.DeadTuples; d == nil || *d < int64(tc.jobs) {
				t.Fatalf("n_dead_tup %s on the drained queue after %d jobs: the snapshot did not hold them", fmtCount(d), tc.jobs)
			}
			drained, fresh := *rep.Drained.IndexTuplesPerClaim, *rep.Fresh.IndexTuplesPerClaim
			if drained >= float64(tc.jobs)/2 {
				t.Fatalf("index tuples per empty claim: drained %v (fresh %v) for %d dead jobs: the claims walk the dead entries", drained, fresh, tc.jobs)
			}
			if rep.StatementsPerJob == nil || *rep.StatementsPerJob <= 0 {
				t.Fatalf("statements per job %v", rep.StatementsPerJob)
			}
			if !strings.Contains(out.String(), "tombstones: window 10:") {
				t.Fatalf("no window lines: %q", out.String())
			}
			var buf bytes.Buffer
			if err := rep.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var j map[string]any
			if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"scenario", "layout", "mode", "workers", "jobs", "seconds", "jobs_per_s", "windows", "drained", "fresh", "rtt_ms", "statements_per_job", "round_trips_per_job", "jobs_per_claim"} {
				if _, ok := j[k]; !ok {
					t.Fatalf("JSON has no %q: %s", k, buf.String())
				}
			}
			w0 := j["windows"].([]any)[0].(map[string]any)
			for _, k := range []string{"dead_before", "claim_ms", "index_tuples_per_claim"} {
				if _, ok := w0[k]; !ok {
					t.Fatalf("a window has no %q: %v", k, w0)
				}
			}
			cm := w0["claim_ms"].(map[string]any)
			if _, ok := cm["p50"]; !ok {
				t.Fatalf("claim_ms has no p50: %v", cm)
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "drained (empty)") {
				t.Fatalf("table: %v\n%s", err, table.String())
			}
		})
	}
}

// With --rtt every claim costs at least one emulated round trip: a bound
// the proxy guarantees, whatever the machine's speed. The report records
// the round trip and the statements sent per job.
func TestRTT(t *testing.T) {
	t.Parallel()
	const rtt = 20 * time.Millisecond
	for _, mode := range []string{bench.ModeLease, bench.ModeTx} {
		t.Run(mode, func(t *testing.T) {
			c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Mode: mode, Workers: 2,
				Work: 5 * time.Millisecond, Jobs: 10, Progress: -1, RTT: rtt})
			rep := run(t, c)
			if rep.Jobs != 10 {
				t.Fatalf("worked %d jobs, want 10", rep.Jobs)
			}
			checkCounts(t, rep)
			if rep.RTTMS != 20 {
				t.Fatalf("rtt_ms %v, want 20", rep.RTTMS)
			}
			// Lease mode measures a goroutine's wait for its next job,
			// which the Worker's prefetch makes nothing, and in tx mode a
			// claim chained after the last job's removal comes back with
			// it (fanout's chained claim); the first claim of each still
			// waited a round trip.
			if wait := rep.DequeueMS.Max; wait < 20 {
				t.Fatalf("a claim took %.3f ms through a proxy adding a 20 ms round trip", wait)
			}
			// A claim and a completion at least; nothing else counted.
			if rep.StatementsPerJob == nil || *rep.StatementsPerJob < 2 {
				t.Fatalf("statements per job %v", rep.StatementsPerJob)
			}
			// Round trips: no more than the statements (a pipelined BEGIN
			// takes none), and at least the claim's and the completion's.
			if rep.RoundTripsPerJob == nil || *rep.RoundTripsPerJob < 2 || *rep.RoundTripsPerJob > *rep.StatementsPerJob {
				t.Fatalf("round trips per job %v (statements per job %v)", rep.RoundTripsPerJob, *rep.StatementsPerJob)
			}
			if rep.Claims == 0 || rep.JobsPerClaim == nil {
				t.Fatalf("no claim counted: %d claims, %v jobs per claim", rep.Claims, rep.JobsPerClaim)
			}
		})
	}
}

// The pickup scenario times every sample, through a second client (a
// notification), through the working one, and by polling, and counts the
// idle statements.
func TestPickup(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]bench.Config{
		"bucketed":           {Layout: "bucketed"},
		"fanout":             {Layout: "fanout", Workers: 2},
		"bucketed polling":   {Layout: "bucketed", NoNotify: true, PollInterval: 100 * time.Millisecond},
		"fanout same client": {Layout: "fanout", SameClient: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.Scenario, tc.Samples, tc.Gap, tc.Progress = bench.ScenarioPickup, 4, 150*time.Millisecond, -1
			c, _ := config(t, tc)
			rep := run(t, c)
			if rep.PickupMS == nil || rep.PickupMS.Count != 4 || rep.Jobs != 4 {
				t.Fatalf("pickup %+v, jobs %d: want 4 samples", rep.PickupMS, rep.Jobs)
			}
			if rep.IdleStatementsPerS == nil || rep.IdleMaintenanceStatementsPerS == nil || rep.IdleSeconds < 0.5 {
				t.Fatalf("idle statements %v, maintenance %v over %.2f s", rep.IdleStatementsPerS, rep.IdleMaintenanceStatementsPerS, rep.IdleSeconds)
			}
			if tc.NoNotify && (rep.Settings.Notify || *rep.IdleStatementsPerS == 0) {
				t.Fatalf("polling every 100ms: notify %v, %v idle statements/s", rep.Settings.Notify, *rep.IdleStatementsPerS)
			}
			if rep.PickupMS.Max > 30_000 {
				t.Fatalf("pickup max %.1f ms", rep.PickupMS.Max)
			}
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "pickup ms") {
				t.Fatalf("table %q, %v", table.String(), err)
			}
		})
	}
}

// TestPickupClearsAnEarlierRunsLimits: a throughput run with --concurrency
// leaves the bench queue limited; a pickup run after it on the same schema
// sets the queue's limits to its own (none), so its claims do not take the
// limited path (four statements each).
func TestPickupClearsAnEarlierRunsLimits(t *testing.T) {
	t.Parallel()
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioThroughput, Layout: "bucketed", Jobs: 200, Workers: 4, Concurrency: 2, Progress: -1})
	run(t, c)
	db := testdb.Open(t, nil)
	q, err := bucketed.New(context.Background(), db, &bucketed.Config{Schema: c.Schema})
	if err != nil {
		t.Fatal(err)
	}
	limits := func() bucketed.Limits {
		st, err := q.LimitsOf(context.Background(), bench.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		return st.Limits
	}
	if l := limits(); l.Concurrency != 2 {
		t.Fatalf("after bench throughput --concurrency 2 the queue's limits are %+v", l)
	}
	p := *c
	p.Scenario, p.Concurrency, p.Samples, p.Gap, p.Jobs, p.Workers = bench.ScenarioPickup, 0, 2, 100*time.Millisecond, 0, 0
	run(t, &p)
	if l := limits(); !l.IsZero() {
		t.Errorf("after bench pickup the queue's limits are %+v; want none", l)
	}
}

// fmtCount prints a count that may be missing.
func fmtCount(n *int64) string {
	if n == nil {
		return "missing"
	}
	return strconv.FormatInt(*n, 10)
}

// fmtFloat prints a figure that may be missing.
func fmtFloat(v *float64) string {
	if v == nil {
		return "missing"
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}
