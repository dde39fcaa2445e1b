package bench_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// syncBuffer is a bytes.Buffer safe for the progress goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// config is a tiny bench on the test server, in a schema of its own.
func config(t *testing.T, c bench.Config) (*bench.Config, *syncBuffer) {
	t.Helper()
	db := testdb.Open(t, nil)
	out := &syncBuffer{}
	c.DSN = testdb.DSN(t)
	c.Schema = testdb.Schema(t, db)
	c.Out = out
	c.Logf = t.Logf
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
				most++ // fanout counts attempts over one more
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
	for _, mode := range []string{bench.ModeLease, bench.ModeTx} {
		t.Run(mode, func(t *testing.T) {
			c, _ := config(t, bench.Config{Scenario: bench.ScenarioThroughput, Mode: mode, Workers: 4, Jobs: 300, Progress: -1})
			rep := run(t, c)
			if rep.Jobs != 300 {
				t.Fatalf("burned down %d jobs, want 300", rep.Jobs)
			}
			checkCounts(t, rep)
			if rep.Efficiency != nil {
				t.Fatalf("efficiency %v outside the latency scenario", *rep.Efficiency)
			}
		})
	}
}

func TestLock(t *testing.T) {
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLock, Workers: 3, Jobs: 50, Duration: time.Second, Progress: -1})
	rep := run(t, c)
	if rep.Jobs == 0 || rep.Layout != "fanout" || rep.Connections != 3 {
		t.Fatalf("report %+v", rep)
	}
	checkCounts(t, rep)
}

func TestBaseline(t *testing.T) {
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

// The latency baseline runs the seed's script with its sleep and delete;
// with a job count, pgbench works exactly the jobs preloaded.
func TestLatencyBaselineByJobCount(t *testing.T) {
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
	c, _ := config(t, bench.Config{Scenario: bench.ScenarioLatency, Mode: bench.ModeTx, Workers: 100_000, Duration: time.Second})
	_, err := bench.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "--mode tx with 100000 workers needs 100005: raise max_connections or use --mode lease") ||
		!strings.Contains(err.Error(), "server allows ") {
		t.Fatalf("err = %v", err)
	}
}
