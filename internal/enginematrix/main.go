// Command enginematrix runs skiplock's test suite (the same `go test` that
// `make test` runs) against every distributed engine it can reach:
//
//   - the server in $SKIPLOCK_TEST_DSN, when it is set;
//   - CockroachDB, in a container from testcontainers-go's cockroachdb
//     module, when a Docker daemon answers;
//   - YugabyteDB, in a generic container running its image (started with
//     yugabyted, READ COMMITTED on), when a Docker daemon answers.
//
// It reports which engines ran, which passed, and which were skipped and
// why. Skips are not failures: it exits 0 unless a suite that ran failed or
// a container that Docker accepted did not come up. PostgreSQL is `make
// test`'s business.
//
// It is its own module, so that testcontainers and the Docker client stay
// out of skiplock's go.mod and out of every library build.
//
// Usage (from the repository root: make test-engines):
//
//	go -C internal/enginematrix run . [-root ../..] [-engines dsn,cockroach,yugabyte] [-- go test flags and packages]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

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

// defaultTestArgs are `make test`'s.
var defaultTestArgs = []string{"-race", "-count=1", "-timeout", "25m", "./..."}

type outcome string

const (
	passed  outcome = "passed"
	failed  outcome = "FAILED"
	skipped outcome = "skipped"
)

type result struct {
	engine  string
	outcome outcome
	detail  string
}

func main() {
	root := flag.String("root", "../..", "the skiplock repository root, where go test runs")
	engines := flag.String("engines", "dsn,cockroach,yugabyte", "which runs to attempt: dsn (SKIPLOCK_TEST_DSN), cockroach, yugabyte")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: enginematrix [flags] [-- go test arguments (default %s)]\n", strings.Join(defaultTestArgs, " "))
		flag.PrintDefaults()
	}
	flag.Parse()
	testArgs := flag.Args()
	if len(testArgs) == 0 {
		testArgs = defaultTestArgs
	}
	want := map[string]bool{}
	for _, e := range strings.Split(*engines, ",") {
		switch e = strings.TrimSpace(e); e {
		case "dsn", "cockroach", "yugabyte":
			want[e] = true
		default:
			fmt.Fprintf(os.Stderr, "enginematrix: unknown engine %q in -engines: use dsn, cockroach, yugabyte\n", e)
			os.Exit(2)
		}
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

	m := &matrix{root: absRoot, testArgs: testArgs}
	if want["dsn"] {
		m.runDSN(ctx)
	}
	if want["cockroach"] || want["yugabyte"] {
		dockerErr := dockerHealth(ctx)
		if want["cockroach"] {
			m.runContainer(ctx, "cockroach", dockerErr, startCockroach)
		}
		if want["yugabyte"] {
			m.runContainer(ctx, "yugabyte", dockerErr, startYugabyte)
		}
	}
	os.Exit(m.report())
}

type matrix struct {
	root     string
	testArgs []string
	results  []result
}

func (m *matrix) add(engine string, o outcome, format string, args ...any) {
	m.results = append(m.results, result{engine, o, fmt.Sprintf(format, args...)})
}

// runDSN runs the suite against $SKIPLOCK_TEST_DSN, whatever engine it is.
func (m *matrix) runDSN(ctx context.Context) {
	const name = "SKIPLOCK_TEST_DSN"
	dsn := os.Getenv(name)
	if dsn == "" {
		m.add(name, skipped, "SKIPLOCK_TEST_DSN is not set (point it at a YugabyteDB or CockroachDB server, e.g. from `skiplock cluster up`)")
		return
	}
	label := skiplock.RedactDSN(dsn)
	version, err := serverVersion(ctx, dsn)
	if err != nil {
		m.add(name, failed, "%s does not answer: %v", skiplock.RedactDSN(dsn), skiplock.RedactDSNError(err, dsn))
		return
	}
	m.suite(ctx, name, label+" ("+shortVersion(version)+")", dsn)
}

// runContainer starts one engine in Docker, runs the suite against it and
// removes the container.
func (m *matrix) runContainer(ctx context.Context, engine string, dockerErr error, start func(context.Context) (string, string, func(), error)) {
	if dockerErr != nil {
		m.add(engine, skipped, "no Docker daemon: %v", oneLine(dockerErr))
		return
	}
	fmt.Printf("=== enginematrix: starting %s in Docker\n", engine)
	dsn, image, cleanup, err := start(ctx)
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		m.add(engine, failed, "Docker answered, but the %s container did not come up: %v", engine, oneLine(err))
		return
	}
	m.suite(ctx, engine, image, dsn)
}

// suite runs go test with SKIPLOCK_TEST_DSN=dsn and records the outcome.
func (m *matrix) suite(ctx context.Context, name, label, dsn string) {
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	fmt.Printf("=== enginematrix: go test %s against %s\n", strings.Join(m.testArgs, " "), label)
	cmd := exec.CommandContext(ctx, goBin, append([]string{"test"}, m.testArgs...)...)
	cmd.Dir = m.root
	cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+dsn)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began).Round(time.Second)
	if err != nil {
		m.add(name, failed, "go test failed after %s: %v, against %s", took, err, label)
		return
	}
	m.add(name, passed, "go test passed in %s, against %s", took, label)
}

// report prints the table and returns the exit code.
func (m *matrix) report() int {
	fmt.Println()
	fmt.Printf("engine matrix (go test %s; PostgreSQL runs in make test):\n", strings.Join(m.testArgs, " "))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	ran, code := 0, 0
	for _, r := range m.results {
		fmt.Fprintf(tw, "  %s\t%s: %s\n", r.engine, r.outcome, r.detail)
		if r.outcome != skipped {
			ran++
		}
		if r.outcome == failed {
			code = 1
		}
	}
	tw.Flush()
	fmt.Printf("%d of %d engine runs ran, %d skipped\n", ran, len(m.results), len(m.results)-ran)
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
