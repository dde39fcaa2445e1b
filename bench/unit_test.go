package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

func TestParsePgbenchOutput(t *testing.T) {
	t.Parallel()
	out, err := os.ReadFile("testdata/pgbench15.out")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parsePgbenchOutput(string(out))
	if err != nil {
		t.Fatal(err)
	}
	want := pgbenchResult{Clients: 500, Processed: 14163, Failed: 0, LatencyMS: 1060.214, TPS: 471.603123, Version: "15.18 (Debian 15.18-0+deb12u1)"}
	if r != want {
		t.Fatalf("parsed %+v\nwant   %+v", r, want)
	}
	// An aborted run has no summary: the error says what is missing.
	_, err = parsePgbenchOutput("pgbench (15.18)\nnumber of clients: 5\n")
	if err == nil || !strings.Contains(err.Error(), "transactions processed") {
		t.Fatalf("incomplete output: err = %v", err)
	}
}

func TestParsePgbenchLog(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/pgbench.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := NewHistogram()
	if err := parsePgbenchLog(f, h); err != nil {
		t.Fatal(err)
	}
	s := h.Summary()
	// Four completed transactions; failed and skipped ones are left out.
	if s.Count != 4 || s.Min != 2.5 || s.Max != 1000 {
		t.Fatalf("summary %+v: want 4 transactions from 2.5 to 1000 ms", s)
	}
	if err := parsePgbenchLog(strings.NewReader("1 2 abc 0 1 2\n"), NewHistogram()); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad latency: err = %v", err)
	}
	if err := parsePgbenchLog(strings.NewReader("1 2 3\n"), NewHistogram()); err == nil {
		t.Fatal("short line: no error")
	}
}

func TestPgbenchConnInfoKeepsPasswordOffTheCommandLine(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://app:s3cret@db.example:6543/queue?sslmode=require",
		"host=db.example port=6543 user=app password=s3cret dbname=queue sslmode=require",
	} {
		ci, pw, err := pgbenchConnInfo(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if pw != "s3cret" || strings.Contains(ci, "s3cret") {
			t.Fatalf("%s: conninfo %q, password %q", dsn, ci, pw)
		}
		want := "host='db.example' port=6543 user='app' dbname='queue' sslmode='require'"
		if ci != want {
			t.Fatalf("%s: conninfo %q, want %q", dsn, ci, want)
		}
	}
	// A DSN the driver refuses: its error shows no piece of the password.
	for _, dsn := range []string{
		`host=db.example user=app password = 'it\'s@Tail' sslmode=disabled`,
		"postgres://app:Ab1:Cd2/Ef3#Gh4%Ij5@db.example/queue",
	} {
		_, _, err := pgbenchConnInfo(dsn)
		if err == nil || strings.Contains(err.Error(), "Tail") || strings.Contains(err.Error(), "Ef3#") || strings.Contains(err.Error(), "Gh4") {
			t.Errorf("%s: err %v", dsn, err)
		}
	}
}

func TestPgbenchArgs(t *testing.T) {
	t.Parallel()
	r := &pgbenchRun{Clients: 500, Duration: 1500 * time.Millisecond, Work: time.Second, Progress: 5 * time.Second}
	got := strings.Join(r.args("s.sql", "/tmp/x/log"), " ")
	for _, want := range []string{"-n -M prepared -c 500", "-T 2", "-P 5", "-D work=1", "-l --log-prefix=/tmp/x/log", "-f s.sql"} {
		if !strings.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
	r = &pgbenchRun{Clients: 4, TxPerClient: 25}
	if got := strings.Join(r.args("s.sql", ""), " "); !strings.Contains(got, "-t 25") || strings.Contains(got, "-T") {
		t.Errorf("job-count args %q", got)
	}
}

// The report's JSON names are the CLI contract (DESIGN.md).
func TestReportJSONFields(t *testing.T) {
	t.Parallel()
	eff := 0.99
	ratio := 1.02
	r := &Report{Tool: "skiplock", Scenario: "latency", Layout: "bucketed", Mode: "lease", Workers: 500, Jobs: 10, Seconds: 1,
		JobsPerS: 10, Efficiency: &eff, LatencyMS: Summary{Count: 1}, Retries: Retries{Total: 2, BySQLState: map[string]int64{"40001": 2}},
		Baseline: &Report{Tool: "pgbench", Retries: Retries{BySQLState: map[string]int64{}}}, Ratio: &ratio,
		Machine: DescribeMachine(), Engine: &EngineInfo{Name: "postgres"}, Settings: &Settings{}}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	checkReportFields(t, m, true)
	base, ok := m["baseline"].(map[string]any)
	if !ok {
		t.Fatalf("baseline is %T", m["baseline"])
	}
	checkReportFields(t, base, false)
	if rt := m["retries"].(map[string]any); rt["total"] != 2.0 || rt["by_sqlstate"].(map[string]any)["40001"] != 2.0 {
		t.Fatalf("retries = %v", rt)
	}
	if mc := m["machine"].(map[string]any); mc["cores"].(float64) < 1 {
		t.Fatalf("machine = %v", mc)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"skiplock", "pgbench", "99.0%", "1.020x", "40001=2"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	// A timed run also counts as pgbench -T does, and says so.
	window, windowRatio := 491.7, 1.004
	r.WindowJobsPerS, r.WindowRatio = &window, &windowRatio
	r.Settings = &Settings{DurationS: 60, IdealJobsS: 500}
	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["window_jobs_per_s"] != 491.7 || m["window_ratio"] != 1.004 {
		t.Fatalf("window_jobs_per_s %v, window_ratio %v", m["window_jobs_per_s"], m["window_ratio"])
	}
	table.Reset()
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"within the 1m0s window): skiplock 491.7 jobs/s (98.3% of ideal)", "1.004x counted as pgbench -T counts"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// checkReportFields checks the fields DESIGN.md names.
func checkReportFields(t *testing.T, m map[string]any, top bool) {
	t.Helper()
	for _, k := range []string{"scenario", "layout", "mode", "workers", "jobs", "seconds", "jobs_per_s", "efficiency", "latency_ms", "dequeue_ms", "retries", "errors", "connections"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if top {
		for _, k := range []string{"baseline", "machine", "engine", "settings"} {
			if _, ok := m[k]; !ok {
				t.Errorf("report lacks %q", k)
			}
		}
	}
	for _, k := range []string{"latency_ms", "dequeue_ms"} {
		s, ok := m[k].(map[string]any)
		if !ok {
			t.Errorf("%s is %T", k, m[k])
			continue
		}
		for _, f := range []string{"min", "avg", "p50", "p95", "p99", "max"} {
			if _, ok := s[f]; !ok {
				t.Errorf("%s lacks %q", k, f)
			}
		}
	}
}

func TestConfigDefaultsAndUsage(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Scenario: ScenarioLatency}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Layout != schema.LayoutBucketed || c.Mode != ModeLease || c.Workers != 500 || c.Work != time.Second ||
		c.Duration != 30*time.Second || c.Conns != 50 || c.Batch != 1 || c.Jobs < 500*30 {
		t.Fatalf("latency defaults %+v", c)
	}
	c, err = (&Config{Scenario: ScenarioLatency, Mode: ModeTx, Workers: 20}).withDefaults()
	// 20 workers, the 16 that count their attempts, the client's one.
	if err != nil || c.Layout != schema.LayoutFanout || c.Conns != 20+fanout.RecorderConns(20)+1 || c.Conns != 37 {
		t.Fatalf("tx mode: %+v, %v", c, err)
	}
	c, err = (&Config{Scenario: ScenarioLock}).withDefaults()
	if err != nil || c.Layout != schema.LayoutFanout || c.Workers != 15 || c.Conns != 15 {
		t.Fatalf("lock defaults: %+v, %v", c, err)
	}
	c, err = (&Config{Scenario: ScenarioThroughput}).withDefaults()
	if err != nil || c.Jobs != 100_000 || c.Duration != 0 || c.Batch != 1 || c.Workers != 1000 || c.Conns != 50 {
		t.Fatalf("throughput defaults: %+v, %v", c, err)
	}
	// A batch runs the layout's own calls, with the old default workers.
	c, err = (&Config{Scenario: ScenarioThroughput, Batch: 200}).withDefaults()
	if err != nil || c.Batch != 200 || c.Workers != 10 || c.Conns != 10 {
		t.Fatalf("throughput with a batch: %+v, %v", c, err)
	}
	c, err = (&Config{Scenario: ScenarioPickup, Layout: schema.LayoutFanout, Workers: 3}).withDefaults()
	if err != nil || c.Samples != DefaultPickupSamples || c.Gap != time.Second || c.PollInterval != time.Second || c.Mode != ModeTx || c.Conns < 4 {
		t.Fatalf("pickup defaults: %+v, %v", c, err)
	}
	for _, bad := range []Config{
		{Scenario: ScenarioPickup, Work: time.Second},
		{Scenario: ScenarioPickup, Conns: 3},
		{Scenario: ScenarioPickup, Samples: -1},
		{Scenario: ScenarioPickup, Baseline: true},
		{Scenario: ScenarioLatency, NoNotify: true},
		{Scenario: "nope"},
		{Scenario: ScenarioLatency, Layout: schema.LayoutBucketed, Mode: ModeTx},
		{Scenario: ScenarioLatency, Mode: ModeTx, Batch: 5},
		{Scenario: ScenarioLatency, Mode: ModeTx, Workers: 10, Conns: 5},
		{Scenario: ScenarioLock, Layout: schema.LayoutBucketed},
		{Scenario: ScenarioLatency, Workers: -1},
		{Scenario: ScenarioLatency, Schema: "no spaces"},
		{Scenario: ScenarioLatency, Workers: MaxWorkers + 1},
		{Scenario: ScenarioThroughput, Conns: 1 << 32},
		{Scenario: ScenarioThroughput, Batch: 1 << 62},
		{Scenario: ScenarioLatency, Schema: "information_schema"},
	} {
		if _, err := bad.withDefaults(); !usage.Is(err) {
			t.Errorf("%+v: err = %v, want a usage error", bad, err)
		}
	}
}

func TestLatencyJobsDoNotOverflow(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Scenario: ScenarioLatency, Workers: MaxWorkers, Work: time.Nanosecond, Duration: 1 << 62}).withDefaults()
	if err != nil || c.Jobs <= 0 {
		t.Fatalf("jobs %d, err %v", c.Jobs, err)
	}
}

func TestThroughProxy(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://app:s3cret@db.example:6543/queue?sslmode=require&port=7000": "postgres://app:s3cret@127.0.0.1:4321/queue?load_balance=false&sslmode=require",
		"host=db.example port=6543 user=app password=s3cret dbname=queue":       "host=db.example port=6543 user=app password=s3cret dbname=queue host=127.0.0.1 port=4321 load_balance=false",
	} {
		got := throughProxy(dsn, "127.0.0.1:4321")
		if got != want {
			t.Fatalf("%s:\n got %s\nwant %s", skiplock.RedactDSN(dsn), skiplock.RedactDSN(got), skiplock.RedactDSN(want))
		}
		// The rewritten DSN parses to the proxy, password kept.
		cc, err := pgconn.ParseConfig(got)
		if err != nil || cc.Host != "127.0.0.1" || cc.Port != 4321 || cc.Password != "s3cret" {
			t.Fatalf("%s parses to %s:%d (%v)", skiplock.RedactDSN(got), cc.Host, cc.Port, err)
		}
	}
}

// fakeTx is a transaction that sends nothing.
type fakeTx struct{ skiplock.Querier }

func (fakeTx) Commit(context.Context) error   { return nil }
func (fakeTx) Rollback(context.Context) error { return nil }

type fakeBeginner struct{}

func (fakeBeginner) Begin(context.Context, skiplock.TxOptions) (skiplock.Tx, error) {
	return fakeTx{Querier: nopQuerier{}}, nil
}

// A transaction counts BEGIN, its statements and one end: the deferred
// Rollback after a Commit sends nothing. Uncounted contexts are left out.
// A pipelined BEGIN takes no round trip of its own; a statement that locks
// with SKIP LOCKED is a claim.
func TestCountingTx(t *testing.T) {
	t.Parallel()
	s := &stmtCounter{}
	ctx := context.Background()
	tx, err := countBegin(ctx, fakeBeginner{}, s, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tx.Exec(ctx, "x")                                              //nolint:errcheck // counting only
	tx.QueryRow(uncounted(ctx), "poll")                            //nolint:errcheck // counting only
	tx.Query(ctx, "SELECT 1 FOR UPDATE SKIP LOCKED")               //nolint:errcheck // counting only
	tx.QueryRow(uncounted(ctx), "SELECT 1 FOR UPDATE SKIP LOCKED") //nolint:errcheck // counting only
	tx.Commit(ctx)                                                 //nolint:errcheck // counting only
	tx.Rollback(ctx)                                               //nolint:errcheck // counting only
	n := s.load()
	if n.statements != 4 || n.begins != 1 || n.claims != 1 {
		t.Fatalf("counted %+v for BEGIN, two statements (one a claim), COMMIT: want 4 statements, 1 BEGIN, 1 claim", n)
	}
	if got := n.roundTrips(true); got != 3 {
		t.Errorf("%d round trips with BEGIN pipelined, want 3", got)
	}
	if got := n.roundTrips(false); got != 4 {
		t.Errorf("%d round trips with BEGIN sent alone, want 4", got)
	}
}

type nopQuerier struct{}

func (nopQuerier) Exec(context.Context, string, ...any) (int64, error) { return 0, nil }
func (nopQuerier) Query(context.Context, string, ...any) (skiplock.Rows, error) {
	return nil, nil
}
func (nopQuerier) QueryRow(context.Context, string, ...any) skiplock.Row { return nil }
