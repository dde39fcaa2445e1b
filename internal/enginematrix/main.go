// Command enginematrix runs skiplock's checks against every distributed
// engine it can reach:
//
//   - the server in $SKIPLOCK_TEST_DSN, when it is set;
//   - CockroachDB, in a container from testcontainers-go's cockroachdb
//     module, when a Docker daemon answers; without one, a real three-node
//     cluster from github.com/cockroachdb/cockroach-go/v2's testserver,
//     whose cockroach binary comes from $COCKROACH_BINARY, the PATH, or a
//     download (where the internet is not reachable, the column is skipped
//     and says so);
//   - YugabyteDB, in a generic container running its image (started with
//     yugabyted, READ COMMITTED on), when a Docker daemon answers.
//
// Against each it runs these steps (-steps chooses):
//
//   - suite: the test suite (the same go test that make test runs; the
//     reliability suite's package is left to the chaos step);
//   - chaos: the reliability suite, internal/chaos (small scale;
//     SKIPLOCK_CHAOS=full for the full one; the runs that restart the
//     harness's own server skip themselves against an outside server);
//   - explain: internal/planshape, which runs EXPLAIN on the engine for the
//     bucketed and fanout claims and checks the operators expected on that
//     engine (the shapes written next to the statements in the .sql files);
//   - latency: skiplock bench latency, short (-latency-args);
//   - tombstones: skiplock bench tombstones, small (-tombstones-args).
//
// It prints a table of what ran, what passed and what was skipped and why.
// Skips are not failures: it exits 0 unless a step that ran failed or a
// server that should have come up did not. PostgreSQL is make test's
// business, but SKIPLOCK_TEST_DSN may point at one, and then every step
// runs against it.
//
// It is its own module, so that testcontainers, the Docker client and
// cockroach-go stay out of skiplock's go.mod and out of every library build.
//
// Usage (from the repository root: make test-engines):
//
//	go -C internal/enginematrix run . [-root ../..] [-engines dsn,cockroach,yugabyte] [-steps suite,chaos,explain,latency,tombstones] [-- go test flags and packages]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/testserver"
	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/cockroachdb"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/skiplock/skiplock"
)

// Images, overridable so that a machine with its own mirror or a newer
// release can run them. CockroachDB 25.2 matches the grammar the unit
// tests parse with.
const (
	defaultCockroachImage = "cockroachdb/cockroach:latest-v25.2"
	defaultYugabyteImage  = "yugabytedb/yugabyte:2025.2.1.0-b141"
)

// defaultTestFlags are make test's; the packages are ./... less the
// chaos step's when that step runs.
var defaultTestFlags = []string{"-race", "-count=1", "-timeout", "25m"}

// chaosPackage is the reliability suite's package, run by the chaos step.
const chaosPackage = "./internal/chaos"

// allSteps are the steps in the order they run.
var allSteps = []string{"suite", "chaos", "explain", "latency", "tombstones"}

type outcome string

const (
	passed  outcome = "passed"
	failed  outcome = "FAILED"
	skipped outcome = "skipped"
)

type result struct {
	engine, step string
	outcome      outcome
	detail       string
}

func main() {
	root := flag.String("root", "../..", "the skiplock repository root, where go test runs")
	engines := flag.String("engines", "dsn,cockroach,yugabyte", "which engines to attempt: dsn (SKIPLOCK_TEST_DSN), cockroach, yugabyte")
	steps := flag.String("steps", strings.Join(allSteps, ","), "which steps to run against each engine: "+strings.Join(allSteps, ", "))
	latencyArgs := flag.String("latency-args", "--workers 20 --work 100ms --duration 10s", "flags for skiplock bench latency")
	tombstonesArgs := flag.String("tombstones-args", "--jobs 2000", "flags for skiplock bench tombstones")
	cockroachTimeout := flag.Duration("cockroach-download-timeout", 90*time.Second, "how long the cockroach binary's download may take when no Docker daemon answers")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: enginematrix [flags] [-- go test arguments for the suite step (default %s ./... without %s)]\n",
			strings.Join(defaultTestFlags, " "), chaosPackage)
		flag.PrintDefaults()
	}
	flag.Parse()
	want, err := choose(*engines, "dsn", "cockroach", "yugabyte")
	if err != nil {
		fmt.Fprintf(os.Stderr, "enginematrix: -engines: %v\n", err)
		os.Exit(2)
	}
	stepSet, err := choose(*steps, allSteps...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "enginematrix: -steps: %v\n", err)
		os.Exit(2)
	}
	absRoot, err := filepath.Abs(*root)
	if err == nil {
		_, err = os.Stat(filepath.Join(absRoot, "go.mod"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "enginematrix: -root %s is not the repository root (%v)\n", *root, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := &matrix{
		root: absRoot, testArgs: flag.Args(), steps: stepSet,
		benchArgs: map[string][]string{"latency": strings.Fields(*latencyArgs), "tombstones": strings.Fields(*tombstonesArgs)},
	}
	defer m.cleanup()
	if want["dsn"] {
		m.runDSN(ctx)
	}
	if want["cockroach"] || want["yugabyte"] {
		dockerErr := dockerHealth(ctx)
		if want["cockroach"] {
			if dockerErr != nil {
				m.runLocalCockroach(ctx, dockerErr, *cockroachTimeout)
			} else {
				m.runContainer(ctx, "cockroach", startCockroach)
			}
		}
		if want["yugabyte"] {
			if dockerErr != nil {
				m.add("yugabyte", "all", skipped, "no Docker daemon: %v", oneLine(dockerErr))
			} else {
				m.runContainer(ctx, "yugabyte", startYugabyte)
			}
		}
	}
	code := m.report()
	m.cleanup()
	os.Exit(code)
}

// choose parses a comma-separated list of names, each one of valid.
func choose(list string, valid ...string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if !slices.Contains(valid, e) {
			return nil, fmt.Errorf("unknown name %q: use %s", e, strings.Join(valid, ", "))
		}
		out[e] = true
	}
	return out, nil
}

type matrix struct {
	root      string
	testArgs  []string // the suite step's, from the command line; nil: the default
	steps     map[string]bool
	benchArgs map[string][]string
	results   []result

	binDir string // where the skiplock binary was built, for the bench steps
	binErr error
}

func (m *matrix) add(engine, step string, o outcome, format string, args ...any) {
	m.results = append(m.results, result{engine, step, o, fmt.Sprintf(format, args...)})
}

func (m *matrix) cleanup() {
	if m.binDir != "" {
		os.RemoveAll(m.binDir)
		m.binDir = ""
	}
}

// runDSN runs the steps against $SKIPLOCK_TEST_DSN, whatever engine it is.
func (m *matrix) runDSN(ctx context.Context) {
	const name = "SKIPLOCK_TEST_DSN"
	dsn := os.Getenv(name)
	if dsn == "" {
		m.add(name, "all", skipped, "SKIPLOCK_TEST_DSN is not set (point it at a YugabyteDB, CockroachDB or PostgreSQL server, e.g. from `skiplock cluster up` or `skiplock local dsn`)")
		return
	}
	version, err := serverVersion(ctx, dsn)
	if err != nil {
		m.add(name, "all", failed, "%s does not answer: %v", skiplock.RedactDSN(dsn), skiplock.RedactDSNError(err, dsn))
		return
	}
	m.runSteps(ctx, name, skiplock.RedactDSN(dsn)+" ("+shortVersion(version)+")", dsn)
}

// runContainer starts one engine in Docker, runs the steps against it and
// removes the container.
func (m *matrix) runContainer(ctx context.Context, engine string, start func(context.Context) (string, string, func(), error)) {
	fmt.Printf("=== enginematrix: starting %s in Docker\n", engine)
	dsn, image, cleanup, err := start(ctx)
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		m.add(engine, "all", failed, "Docker answered, but the %s container did not come up: %v", engine, oneLine(err))
		return
	}
	m.runSteps(ctx, engine, image, dsn)
}

// runLocalCockroach runs the steps against a three-node CockroachDB that
// cockroach-go's testserver starts from a local binary: $COCKROACH_BINARY,
// cockroach on the PATH, or one it downloads. Where none can be had (no
// internet to download from), the column is skipped.
func (m *matrix) runLocalCockroach(ctx context.Context, dockerErr error, downloadTimeout time.Duration) {
	const engine = "cockroach"
	bin, how, err := cockroachBinary(downloadTimeout)
	if err != nil {
		m.add(engine, "all", skipped, "no Docker daemon (%v), and cockroach-go's testserver has no cockroach binary: %v "+
			"(set COCKROACH_BINARY to a cockroach binary, or run where binaries.cockroachdb.com is reachable)", oneLine(dockerErr), oneLine(err))
		return
	}
	fmt.Printf("=== enginematrix: no Docker daemon; starting a three-node CockroachDB with cockroach-go's testserver (%s)\n", how)
	ts, err := startTestServer(bin)
	if err != nil {
		m.add(engine, "all", failed, "cockroach-go's testserver did not start a three-node cluster from %s: %v", bin, oneLine(err))
		return
	}
	defer ts.Stop()
	u := ts.PGURL()
	dsn := u.String()
	label := "three-node testserver, " + how
	if v, err := serverVersion(ctx, dsn); err == nil {
		label += " (" + shortVersion(v) + ")"
	}
	m.runSteps(ctx, engine, label, dsn)
}

// cockroachBinary finds a cockroach binary, downloading one through
// testserver (bounded by timeout) when there is none here.
func cockroachBinary(timeout time.Duration) (path, how string, err error) {
	if p := os.Getenv("COCKROACH_BINARY"); p != "" {
		return p, "$COCKROACH_BINARY " + p, nil
	}
	if p, err := exec.LookPath("cockroach"); err == nil {
		return p, "cockroach on the PATH", nil
	}
	type got struct {
		path string
		err  error
	}
	done := make(chan got, 1)
	go func() {
		p, err := testserver.DownloadBinary(&testserver.TestConfig{}, "", false)
		done <- got{p, err}
	}()
	select {
	case g := <-done:
		if g.err != nil {
			return "", "", fmt.Errorf("no cockroach on the PATH, and the download failed (is the internet reachable?): %w", g.err)
		}
		return g.path, "downloaded " + g.path, nil
	case <-time.After(timeout):
		return "", "", fmt.Errorf("no cockroach on the PATH, and the download took more than %s (is the internet reachable?)", timeout)
	}
}

// startTestServer starts three insecure nodes on free local ports.
func startTestServer(bin string) (testserver.TestServer, error) {
	opts := []testserver.TestServerOpt{testserver.ThreeNodeOpt(), testserver.CockroachBinaryPathOpt(bin)}
	for range 3 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		opts = append(opts, testserver.AddListenAddrPortOpt(p))
	}
	ts, err := testserver.NewTestServer(opts...)
	if err != nil {
		return nil, err
	}
	if err := ts.WaitForInit(); err != nil {
		ts.Stop()
		return nil, err
	}
	return ts, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runSteps runs the chosen steps against one server.
func (m *matrix) runSteps(ctx context.Context, engine, label, dsn string) {
	fmt.Printf("=== enginematrix: %s is %s\n", engine, label)
	for _, step := range allSteps {
		if !m.steps[step] || ctx.Err() != nil {
			continue
		}
		switch step {
		case "suite":
			args, err := m.suiteArgs(ctx)
			if err != nil {
				m.add(engine, step, failed, "go list: %v", err)
				continue
			}
			m.goTest(ctx, engine, step, dsn, args)
		case "chaos":
			m.goTest(ctx, engine, step, dsn, []string{"-count=1", "-timeout", "30m", "-v", chaosPackage})
		case "explain":
			m.goTest(ctx, engine, step, dsn, []string{"-count=1", "-v", "-run", "^TestClaimPlanShapes$", "./internal/planshape"})
		case "latency", "tombstones":
			m.bench(ctx, engine, step, dsn)
		}
	}
}

// suiteArgs is the suite step's go test arguments: the command line's, or
// make test's flags over ./... less the chaos step's package when that
// step runs too.
func (m *matrix) suiteArgs(ctx context.Context) ([]string, error) {
	if len(m.testArgs) > 0 {
		return m.testArgs, nil
	}
	if !m.steps["chaos"] {
		return append(slices.Clone(defaultTestFlags), "./..."), nil
	}
	cmd := exec.CommandContext(ctx, goBin(), "list", "./...")
	cmd.Dir = m.root
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	args := slices.Clone(defaultTestFlags)
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasSuffix(p, strings.TrimPrefix(chaosPackage, ".")) {
			args = append(args, p)
		}
	}
	return args, nil
}

// goTest runs go test with SKIPLOCK_TEST_DSN=dsn and records the outcome.
func (m *matrix) goTest(ctx context.Context, engine, step, dsn string, args []string) {
	shown := args
	if len(shown) > 8 {
		shown = append(slices.Clone(shown[:8]), fmt.Sprintf("... (%d more)", len(args)-8))
	}
	fmt.Printf("=== enginematrix: %s / %s: go test %s\n", engine, step, strings.Join(shown, " "))
	cmd := exec.CommandContext(ctx, goBin(), append([]string{"test"}, args...)...)
	cmd.Dir = m.root
	cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+dsn)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began).Round(time.Second)
	if err != nil {
		m.add(engine, step, failed, "go test failed after %s: %v", took, err)
		return
	}
	m.add(engine, step, passed, "go test passed in %s", took)
}

// skiplockBin builds the skiplock binary once, for the bench steps.
func (m *matrix) skiplockBin(ctx context.Context) (string, error) {
	if m.binDir == "" && m.binErr == nil {
		dir, err := os.MkdirTemp("", "enginematrix-")
		if err != nil {
			m.binErr = err
		} else {
			m.binDir = dir
			cmd := exec.CommandContext(ctx, goBin(), "build", "-o", filepath.Join(dir, "skiplock"), "./cmd/skiplock")
			cmd.Dir = m.root
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			m.binErr = cmd.Run()
		}
	}
	if m.binErr != nil {
		return "", fmt.Errorf("go build ./cmd/skiplock: %w", m.binErr)
	}
	return filepath.Join(m.binDir, "skiplock"), nil
}

// benchSummary is what the table shows of a bench's JSON report.
type benchSummary struct {
	Jobs             int64    `json:"jobs"`
	JobsPerS         float64  `json:"jobs_per_s"`
	StatementsPerJob *float64 `json:"statements_per_job"`
	RoundTripsPerJob *float64 `json:"round_trips_per_job"`
	LatencyMS        struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
	Windows []json.RawMessage `json:"windows"`
	Errors  int64             `json:"errors"`
}

// bench runs skiplock bench <step> against dsn, on a schema of its own.
func (m *matrix) bench(ctx context.Context, engine, step, dsn string) {
	bin, err := m.skiplockBin(ctx)
	if err != nil {
		m.add(engine, step, failed, "%v", err)
		return
	}
	args := append([]string{"--json", "--dsn", dsn, "bench", step}, m.benchArgs[step]...)
	fmt.Printf("=== enginematrix: %s / %s: skiplock bench %s %s\n", engine, step, step, strings.Join(m.benchArgs[step], " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = m.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	began := time.Now()
	err = cmd.Run()
	took := time.Since(began).Round(100 * time.Millisecond)
	if err != nil {
		m.add(engine, step, failed, "skiplock bench %s failed after %s: %v", step, took, skiplock.RedactDSNError(err, dsn))
		return
	}
	var s benchSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		m.add(engine, step, failed, "skiplock bench %s: its JSON report does not parse: %v", step, err)
		return
	}
	if s.Jobs == 0 || s.Errors > 0 {
		m.add(engine, step, failed, "skiplock bench %s: %d jobs worked, %d errors", step, s.Jobs, s.Errors)
		return
	}
	detail := fmt.Sprintf("%d jobs in %s, %.0f jobs/s", s.Jobs, took, s.JobsPerS)
	if step == "latency" {
		detail += fmt.Sprintf(", latency p50 %.1f ms p99 %.1f ms", s.LatencyMS.P50, s.LatencyMS.P99)
	} else {
		detail += fmt.Sprintf(", %d windows", len(s.Windows))
	}
	if s.StatementsPerJob != nil {
		detail += fmt.Sprintf(", %.2f statements/job", *s.StatementsPerJob)
	}
	if s.RoundTripsPerJob != nil {
		detail += fmt.Sprintf(", %.2f round trips/job", *s.RoundTripsPerJob)
	}
	m.add(engine, step, passed, "%s", detail)
}

func goBin() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// report prints the table and returns the exit code.
func (m *matrix) report() int {
	fmt.Println()
	fmt.Println("engine matrix (PostgreSQL runs in make test; skips are not failures):")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  ENGINE\tSTEP\tOUTCOME\tDETAIL\n")
	ran, code := 0, 0
	for _, r := range m.results {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.engine, r.step, r.outcome, r.detail)
		if r.outcome != skipped {
			ran++
		}
		if r.outcome == failed {
			code = 1
		}
	}
	tw.Flush()
	fmt.Printf("%d of %d rows ran, %d skipped\n", ran, len(m.results), len(m.results)-ran)
	return code
}

// dockerHealth asks the Docker daemon for its info. testcontainers panics
// on some broken setups; that counts as no daemon.
func dockerHealth(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return p.Health(hctx)
}

func cockroachImage() string { return envOr("SKIPLOCK_COCKROACH_IMAGE", defaultCockroachImage) }
func yugabyteImage() string  { return envOr("SKIPLOCK_YUGABYTE_IMAGE", defaultYugabyteImage) }

// startCockroach runs a single insecure CockroachDB node.
func startCockroach(ctx context.Context) (dsn, image string, cleanup func(), err error) {
	image = cockroachImage()
	ctr, err := cockroachdb.Run(ctx, image, cockroachdb.WithInsecure())
	cleanup = terminator(ctr)
	if err != nil {
		return "", image, cleanup, err
	}
	cc, err := ctr.ConnectionConfig(ctx)
	if err != nil {
		return "", image, cleanup, err
	}
	u := url.URL{
		Scheme: "postgresql", User: url.User(cc.User),
		Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database,
		RawQuery: "sslmode=disable",
	}
	return u.String(), image, cleanup, nil
}

// startYugabyte runs one yugabyted node with READ COMMITTED on (docs/design.md,
// "Retries, isolation and ambiguous commits") and waits until YSQL answers.
func startYugabyte(ctx context.Context) (dsn, image string, cleanup func(), err error) {
	image = yugabyteImage()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd("bin/yugabyted", "start", "--background=false", "--tserver_flags=yb_enable_read_committed_isolation=true"),
		testcontainers.WithExposedPorts("5433/tcp"),
		testcontainers.WithWaitStrategyAndDeadline(5*time.Minute, wait.ForListeningPort("5433/tcp")),
	)
	cleanup = terminator(ctr)
	if err != nil {
		return "", image, cleanup, err
	}
	// The smart driver connects to the addresses yb_servers() reports,
	// the container's own; on Linux the host reaches it there. Docker
	// Desktop does not route to containers: fall back to the mapped port,
	// where load balancing cannot reach the other address.
	var candidates []string
	if ip, err := ctr.ContainerIP(ctx); err == nil && ip != "" {
		candidates = append(candidates, ybDSN(ip, "5433"))
	}
	if host, err := ctr.Host(ctx); err == nil {
		if port, err := ctr.MappedPort(ctx, "5433/tcp"); err == nil {
			candidates = append(candidates, ybDSN(host, port.Port()))
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	var last error = errors.New("no address for the container")
	for time.Now().Before(deadline) {
		for _, d := range candidates {
			if _, last = serverVersion(ctx, d); last == nil {
				return d, image, cleanup, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", image, cleanup, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return "", image, cleanup, fmt.Errorf("YSQL did not answer within 3 minutes: %w", last)
}

func ybDSN(host, port string) string {
	return "postgres://yugabyte@" + net.JoinHostPort(host, port) + "/yugabyte?sslmode=disable"
}

func terminator(ctr testcontainers.Container) func() {
	return func() {
		// A module's container whose start failed early holds no
		// container to terminate, and calling through it panics.
		defer func() { _ = recover() }()
		if err := testcontainers.TerminateContainer(ctr); err != nil {
			fmt.Fprintf(os.Stderr, "enginematrix: remove container: %v\n", err)
		}
	}
}

// serverVersion connects once and returns SELECT version().
func serverVersion(ctx context.Context, dsn string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(cctx, "SELECT version()").Scan(&v)
	return v, err
}

func shortVersion(v string) string {
	if len(v) > 60 {
		v = v[:60] + "..."
	}
	return v
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
