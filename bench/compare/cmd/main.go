// Command cmd is make bench-compare: skiplock's burn-down beside River's,
// pg-boss's and the SQL limit's (pgbench), in alternating rounds on one
// PostgreSQL server, directly and through a round-trip delay, written into
// docs/benchmarks.md between the bench-compare markers.
//
//	go run ./bench/compare/cmd -rounds 5 -jobs 100000 -rtts 0,1ms,5ms,20ms
//
// It builds the skiplock CLI and the River harness (bench/compare/river,
// its own module, so River stays out of skiplock's go.mod), uses the pg-boss
// harness in bench/compare/pgboss (make bench-compare runs npm ci there
// first), starts the embedded PostgreSQL (skiplock local start) unless
// -dsn names a server, and gives each queue a database of its own, dropped
// and created afresh. Each round runs, for every round trip in -rtts, one
// after another (the order rotating from round to round):
//
//   - skiplock bench throughput --jobs N --baseline: the client's burn-down
//     (1,000 workers), then the SQL limit, scripts/claimcomplete.sql
//     through pgbench on the same table;
//   - the River harness, best of -workers 1000 -cooldown 10ms and -workers
//     10000 -cooldown 100ms (River's throughput is bounded by MaxWorkers per
//     FetchCooldown);
//   - the pg-boss harness, best of batch 1,000 x 4 and batch 500 x 8 local
//     workers.
//
// Before each run every tool's database is vacuumed and the server
// checkpoints, so that no run pays for the dead rows and dirty buffers
// of the one before it (autovacuum would clean them up during it).
//
// With a round trip above 0 every client, pgbench included, connects
// through a delay proxy in this process (internal/faultproxy, the one
// skiplock bench --rtt uses) that holds every chunk half the round trip in
// each direction. A peer that cannot run here (River's module not served,
// no Node or no pg-boss installed) is skipped and the section says why.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/faultproxy"
)

const (
	startMarker = "<!-- bench-compare:start -->"
	endMarker   = "<!-- bench-compare:end -->"
	// Pinned in bench/compare/river/go.mod and bench/compare/pgboss/package.json.
	riverPinned  = "v0.51.2"
	pgbossPinned = "12.38.0"
)

// setting is one way to run a peer; a peer's figure in a round is the best
// of its settings.
type setting struct {
	label string
	args  []string
}

var (
	riverSettings = []setting{
		{"1,000 workers, 10 ms fetch cooldown", []string{"-workers", "1000", "-cooldown", "10ms"}},
		{"10,000 workers, 100 ms fetch cooldown", []string{"-workers", "10000", "-cooldown", "100ms"}},
	}
	pgbossSettings = []setting{
		{"batch 1,000, 4 local workers", []string{"--batch", "1000", "--concurrency", "4"}},
		{"batch 500, 8 local workers", []string{"--batch", "500", "--concurrency", "8"}},
	}
)

// cell is one round at one round trip.
type cell struct {
	round int
	rtt   time.Duration
	order []string

	skiplock, limit float64 // jobs/s; 0 when the run failed
	skErr           string
	// river and pgboss hold each setting's jobs/s (0: failed or skipped).
	river, pgboss       []float64
	riverErr, pgbossErr string
}

func best(v []float64) (float64, int) {
	b, at := 0.0, -1
	for i, x := range v {
		if x > b {
			b, at = x, i
		}
	}
	return b, at
}

type config struct {
	root, bin           string
	rounds, jobs        int
	rtts                []time.Duration
	timeout             time.Duration
	dsns                map[string]string // by tool: the database's direct DSN
	riverBin            string
	pgbossDir, nodePath string
	skipRiver           string // why River is skipped ("" runs it)
	skipPgboss          string
}

func main() { os.Exit(run()) }

// run is main; it returns the exit code, so that its deferred clean-ups run.
func run() int {
	rounds := flag.Int("rounds", 5, "alternating rounds")
	jobs := flag.Int("jobs", 100000, "jobs per burn-down")
	rttList := flag.String("rtts", "0,1ms,5ms,20ms", "round trips, comma-separated: 0 connects directly, D through the delay proxy (D/2 each way)")
	out := flag.String("out", "docs/benchmarks.md", "file whose bench-compare section to replace (appended when it has no markers)")
	dsn := flag.String("dsn", "", "a PostgreSQL server's URL (postgres://...); the databases are created on it (default: the embedded PostgreSQL)")
	timeout := flag.Duration("timeout", 15*time.Minute, "the longest one run may take")
	keep := flag.Bool("keep", false, "keep the bench databases afterwards")
	since := flag.Int64("since", 0, "unix time the command started (make passes it, so that the duration covers npm ci)")
	note := flag.String("note", "", "a line to put under the section's heading (e.g. that it was a short run)")
	flag.Parse()
	start := time.Now()
	if *since > 0 {
		start = time.Unix(*since, 0)
	}
	rtts, err := parseRTTs(*rttList)
	if err != nil || *rounds < 1 || *jobs < 1 {
		return fail(fmt.Errorf("bad flags: -rounds %d -jobs %d -rtts %q: %v", *rounds, *jobs, *rttList, err))
	}
	ctx := context.Background()
	root, err := os.Getwd()
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "compare", "river", "go.mod")); err != nil {
		return fail(errors.New("run it from the repository's root (make bench-compare)"))
	}
	tmp, err := os.MkdirTemp("", "bench-compare-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	c := &config{root: root, bin: filepath.Join(tmp, "skiplock"), rounds: *rounds, jobs: *jobs, rtts: rtts, timeout: *timeout,
		riverBin: filepath.Join(tmp, "river"), pgbossDir: filepath.Join(root, "bench", "compare", "pgboss")}

	logf("building the skiplock CLI")
	if o, err := command(ctx, root, "go", "build", "-o", c.bin, "./cmd/skiplock").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("go build ./cmd/skiplock: %v\n%s", err, o))
	}
	logf("building the River harness (bench/compare/river, River %s)", riverPinned)
	if o, err := command(ctx, filepath.Join(root, "bench", "compare", "river"), "go", "build", "-o", c.riverBin, ".").CombinedOutput(); err != nil {
		c.skipRiver = "its harness did not build (is River " + riverPinned + " served by the Go module proxy here?): " + lastLine(o)
		logf("River skipped: %s", c.skipRiver)
	}
	nodeVersion := ""
	if p, err := exec.LookPath("node"); err != nil {
		c.skipPgboss = "no node on PATH"
	} else if _, err := os.Stat(filepath.Join(c.pgbossDir, "node_modules", "pg-boss", "package.json")); err != nil {
		c.skipPgboss = "pg-boss is not installed in bench/compare/pgboss (npm ci there failed or did not run: is the npm registry reachable?)"
	} else {
		c.nodePath = p
		o, _ := command(ctx, root, p, "--version").Output()
		nodeVersion = strings.TrimSpace(string(o))
	}
	if c.skipPgboss != "" {
		logf("pg-boss skipped: %s", c.skipPgboss)
	}

	admin := *dsn
	if admin == "" {
		logf("starting the embedded PostgreSQL (skiplock local start)")
		if o, err := command(ctx, root, c.bin, "local", "start").CombinedOutput(); err != nil {
			return fail(fmt.Errorf("skiplock local start: %v\n%s", err, o))
		}
		o, err := command(ctx, root, c.bin, "local", "dsn").Output()
		if err != nil {
			return fail(fmt.Errorf("skiplock local dsn: %v", err))
		}
		admin = strings.TrimSpace(string(o))
	}
	c.dsns, err = createDatabases(ctx, admin)
	if err != nil {
		return fail(err)
	}
	if !*keep {
		defer dropDatabases(context.Background(), admin, c.dsns)
	}
	serverVersion := ""
	if conn, err := pgx.Connect(ctx, admin); err == nil {
		_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&serverVersion)
		conn.Close(ctx)
	}
	load0 := loadavg()

	var cells []*cell
	var sk skiplockReport // the first successful report: machine, engine, settings
	failed := 0
	for r := 1; r <= c.rounds; r++ {
		for _, rtt := range c.rtts {
			order := rotate([]string{"skiplock", "river", "pg-boss"}, r-1)
			cl := &cell{round: r, rtt: rtt, order: order, river: make([]float64, len(riverSettings)), pgboss: make([]float64, len(pgbossSettings))}
			for _, tool := range order {
				switch tool {
				case "skiplock":
					c.settle(ctx)
					rep, err := c.runSkiplock(ctx, rtt)
					if err != nil {
						cl.skErr = err.Error()
						failed++
						logf("round %d rtt %s: skiplock failed: %v", r, rtt, err)
						continue
					}
					if sk.Tool == "" {
						sk = rep
					}
					cl.skiplock = rep.JobsPerS
					if rep.Baseline != nil {
						cl.limit = rep.Baseline.JobsPerS
					}
				case "river":
					if c.skipRiver != "" {
						continue
					}
					for i, s := range riverSettings {
						c.settle(ctx)
						v, err := c.runPeer(ctx, rtt, "river", s)
						if err != nil {
							cl.riverErr = err.Error()
							failed++
							logf("round %d rtt %s: River (%s) failed: %v", r, rtt, s.label, err)
						}
						cl.river[i] = v
					}
				case "pg-boss":
					if c.skipPgboss != "" {
						continue
					}
					for i, s := range pgbossSettings {
						c.settle(ctx)
						v, err := c.runPeer(ctx, rtt, "pg-boss", s)
						if err != nil {
							cl.pgbossErr = err.Error()
							failed++
							logf("round %d rtt %s: pg-boss (%s) failed: %v", r, rtt, s.label, err)
						}
						cl.pgboss[i] = v
					}
				}
			}
			rb, _ := best(cl.river)
			pb, _ := best(cl.pgboss)
			logf("round %d/%d rtt %s: skiplock %s, SQL limit %s, River %s, pg-boss %s jobs/s",
				r, c.rounds, rttLabel(rtt), num(cl.skiplock), num(cl.limit), num(rb), num(pb))
			cells = append(cells, cl)
		}
	}

	elapsed := time.Since(start)
	env := environment{
		date: time.Now().UTC().Format("2006-01-02"), elapsed: elapsed, load0: load0, load1: loadavg(),
		goVersion: runtime.Version(), pgVersion: serverVersion, nodeVersion: nodeVersion, revision: revision(ctx, root),
		note: *note, sk: sk,
	}
	section := render(c, env, cells)
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	if err := writeSection(path, section); err != nil {
		return fail(err)
	}
	logf("wrote the bench-compare section of %s (%s in all)", *out, elapsed.Round(time.Second))
	if failed > 0 {
		logf("%d runs failed: see the section", failed)
		return 1
	}
	return 0
}

// skiplockReport is the part of skiplock bench --json the section uses.
type skiplockReport struct {
	Tool     string          `json:"tool"`
	JobsPerS float64         `json:"jobs_per_s"`
	Workers  int             `json:"workers"`
	Conns    int             `json:"connections"`
	Baseline *skiplockReport `json:"baseline"`
	Machine  struct {
		Cores  int    `json:"cores"`
		Memory int64  `json:"memory_bytes"`
		OS     string `json:"os"`
		Arch   string `json:"arch"`
	} `json:"machine"`
	Engine struct {
		Version        string            `json:"version"`
		ServerSettings map[string]string `json:"server_settings"`
		Pgbench        string            `json:"pgbench"`
	} `json:"engine"`
}

// settle, before each run, clears what the runs before it left for the
// server to do: it vacuums every tool's database (the dead row versions
// of the last burn-down, which autovacuum would otherwise clean up in the
// middle of the next run, on the same cores) and then checkpoints (the
// dirty buffers). Every run starts from the same quiet server, whichever
// tool ran before it. A failure is logged, and the run goes on.
func (c *config) settle(ctx context.Context) {
	for _, tool := range slices.Sorted(maps.Keys(c.dsns)) {
		conn, err := pgx.Connect(ctx, c.dsns[tool])
		if err != nil {
			logf("settling before the next run: connecting to %s's database: %v", tool, skiplock.RedactDSNError(err, c.dsns[tool]))
			continue
		}
		for _, stmt := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				logf("settling before the next run: %s in %s's database: %v", stmt, tool, err)
			}
		}
		conn.Close(ctx)
	}
}

// runSkiplock runs skiplock bench throughput --baseline on its database,
// through a delay proxy when rtt > 0.
func (c *config) runSkiplock(ctx context.Context, rtt time.Duration) (skiplockReport, error) {
	var rep skiplockReport
	dsn, stop, err := through(c.dsns["skiplock"], rtt)
	if err != nil {
		return rep, err
	}
	defer stop()
	o, err := c.run(ctx, c.root, c.bin, "--dsn", dsn, "--log-level", "warn", "--json", "bench", "throughput",
		"--jobs", strconv.Itoa(c.jobs), "--baseline", "--progress", "0")
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(o, &rep); err != nil {
		return rep, fmt.Errorf("skiplock bench's report: %v", err)
	}
	return rep, nil
}

// runPeer runs one setting of River's or pg-boss's harness and returns its jobs/s.
func (c *config) runPeer(ctx context.Context, rtt time.Duration, tool string, s setting) (float64, error) {
	direct := c.dsns[tool]
	dsn, stop, err := through(direct, rtt)
	if err != nil {
		return 0, err
	}
	defer stop()
	var o []byte
	if tool == "river" {
		o, err = c.run(ctx, c.root, c.riverBin, append([]string{"-dsn", dsn, "-jobs", strconv.Itoa(c.jobs)}, s.args...)...)
	} else {
		o, err = c.run(ctx, c.pgbossDir, c.nodePath, append([]string{"burn.js", "--dsn", dsn, "--jobs", strconv.Itoa(c.jobs),
			"--timeout", strconv.Itoa(int(c.timeout.Seconds()))}, s.args...)...)
	}
	if err != nil {
		return 0, err
	}
	var res struct {
		JobsPerS float64 `json:"jobs_per_s"`
	}
	if err := json.Unmarshal(lastNonEmpty(o), &res); err != nil || res.JobsPerS <= 0 {
		return 0, fmt.Errorf("%s printed no result: %s", tool, lastLine(o))
	}
	return res.JobsPerS, nil
}

// run runs a command with the run timeout and returns its stdout; its
// stderr's last line goes into the error.
func (c *config) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := command(ctx, dir, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	o, err := cmd.Output()
	if err != nil {
		return o, fmt.Errorf("%s: %v: %s", filepath.Base(name), err, redact(lastLine(stderr.Bytes())))
	}
	return o, nil
}

func command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	return cmd
}

// through returns dsn unchanged for rtt 0, else a delay proxy's DSN to the
// same server and a function that stops the proxy.
func through(dsn string, rtt time.Duration) (string, func(), error) {
	if rtt <= 0 {
		return dsn, func() {}, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, errors.New("the DSN is not a URL")
	}
	p, err := faultproxy.Start(u.Host, faultproxy.Config{Latency: rtt / 2})
	if err != nil {
		return "", nil, err
	}
	u.Host = p.Addr()
	return u.String(), func() { p.Close() }, nil
}

// createDatabases drops and creates a database per tool on admin's server
// and returns their DSNs.
func createDatabases(ctx context.Context, admin string) (map[string]string, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, errors.New("-dsn must be a postgres:// URL with a host")
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", skiplock.RedactDSNError(err, admin))
	}
	defer conn.Close(ctx)
	dsns := map[string]string{}
	for _, tool := range []string{"skiplock", "river", "pg-boss"} {
		name := dbName(tool)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, err
		}
		d := *u
		d.Path = "/" + name
		dsns[tool] = d.String()
	}
	return dsns, nil
}

func dropDatabases(ctx context.Context, admin string, dsns map[string]string) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for tool := range dsns {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName(tool)+" WITH (FORCE)")
	}
}

func dbName(tool string) string { return "bench_compare_" + strings.ReplaceAll(tool, "-", "") }

type environment struct {
	date                                        string
	elapsed                                     time.Duration
	load0, load1                                string
	goVersion, pgVersion, nodeVersion, revision string
	note                                        string
	sk                                          skiplockReport
}

// render writes the section, markers included.
func render(c *config, env environment, cells []*cell) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n## Against River and pg-boss: make bench-compare\n\n", startMarker)
	p("Written by `make bench-compare` (`bench/compare/cmd`) on %s in %s (builds, installs and every run); rerun it to replace this section.\n", env.date, env.elapsed.Round(time.Second))
	if env.note != "" {
		p("%s\n", env.note)
	}
	p("\n%s\n\n", headline(c, env, cells))

	m := env.sk.Machine
	p("**Machine.** %s; %s, %s; load average %s at the start, %s at the end (the machine may be shared).\n\n",
		cpuLine(m.Cores), osLine(), memLine(m.Memory), env.load0, env.load1)
	pgbench := env.sk.Engine.Pgbench
	p("**Versions.** skiplock %s; Go %s; PostgreSQL %s on the same machine (the embedded server unless `-dsn` named one), pgbench %s; ",
		env.revision, strings.TrimPrefix(env.goVersion, "go"), orDash(env.pgVersion), orDash(pgbench))
	if c.skipRiver != "" {
		p("River %s skipped: %s; ", riverPinned, c.skipRiver)
	} else {
		p("River %s (riverpgxv5, pgx v5.12.0 as skiplock's); ", riverPinned)
	}
	if c.skipPgboss != "" {
		p("pg-boss %s skipped: %s.\n\n", pgbossPinned, c.skipPgboss)
	} else {
		p("pg-boss %s (pg 8.23.1) on Node %s: pg-boss declares Node >= 22.12, and it ran on the Node this machine has.\n\n", pgbossPinned, strings.TrimPrefix(env.nodeVersion, "v"))
	}

	var ss []string
	for _, k := range slices.Sorted(maps.Keys(env.sk.Engine.ServerSettings)) {
		ss = append(ss, fmt.Sprintf("%s %s", k, env.sk.Engine.ServerSettings[k]))
	}
	p("**Settings.** %s jobs per burn-down, %s, round trips %s. Server: %s. Each queue has a database of its own, created afresh, and empties its table before each run.\n",
		num(float64(c.jobs)), plural(c.rounds, "round"), rttList(c.rtts), orDash(strings.Join(ss, ", ")))
	p("- skiplock: `skiplock bench throughput --jobs %d --baseline` (the client, bucketed layout, lease claims, %d workers on %d connections, completed jobs kept), timed from the start of the workers to the last completion's commit.\n",
		c.jobs, env.sk.Workers, env.sk.Conns)
	p("- The SQL limit: the same command's baseline, `scripts/claimcomplete.sql` through pgbench (8 clients, one statement claiming and completing 100 jobs) on the same table, right after skiplock's run.\n")
	p("- River: `bench/compare/river`, no-op jobs inserted with `InsertManyFast`, timed from `Start` to the last completion event (written by River's completer); best of %s.\n", settingList(riverSettings))
	p("- pg-boss: `bench/compare/pgboss/burn.js`, no-op jobs inserted with `insert` (1,000 per call), timed from `work` until the database shows every job completed; best of %s (burst fetching on).\n", settingList(pgbossSettings))
	p("- Round trip D above 0: every client, pgbench included, connects through a delay proxy in the driver's process (`internal/faultproxy`, as `skiplock bench --rtt` uses) that holds each chunk D/2 in each direction, without a bandwidth limit. Each round runs every round trip in turn; within it the three queues run one after another, their order rotating from round to round. Before each run (each peer setting included) every queue's database is vacuumed (`VACUUM (ANALYZE)`) and the server checkpoints, so that no run pays for the dead rows and dirty buffers the one before it left.\n\n")

	p("Jobs/s, and skiplock's ratio to each in the same round:\n\n")
	p("| round trip | round | skiplock | SQL limit | River (best) | pg-boss (best) | skiplock / River | skiplock / pg-boss | skiplock / SQL limit |\n")
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, rtt := range c.rtts {
		for _, cl := range cells {
			if cl.rtt != rtt {
				continue
			}
			rb, _ := best(cl.river)
			pb, _ := best(cl.pgboss)
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", rttLabel(rtt), cl.round, num(cl.skiplock), num(cl.limit),
				peer(rb, c.skipRiver), peer(pb, c.skipPgboss), ratio(cl.skiplock, rb), ratio(cl.skiplock, pb), ratio(cl.skiplock, cl.limit))
		}
	}
	p("\nEvery peer run, jobs/s (the order within the round in the last column):\n\n")
	p("| round trip | round |")
	for _, s := range riverSettings {
		p(" River, %s |", s.label)
	}
	for _, s := range pgbossSettings {
		p(" pg-boss, %s |", s.label)
	}
	p(" order |\n|---|---|%s---|\n", strings.Repeat("---|", len(riverSettings)+len(pgbossSettings)))
	for _, rtt := range c.rtts {
		for _, cl := range cells {
			if cl.rtt != rtt {
				continue
			}
			p("| %s | %d |", rttLabel(rtt), cl.round)
			for _, v := range cl.river {
				p(" %s |", peer(v, c.skipRiver))
			}
			for _, v := range cl.pgboss {
				p(" %s |", peer(v, c.skipPgboss))
			}
			p(" %s |\n", strings.Join(cl.order, ", "))
		}
	}
	var errs []string
	for _, cl := range cells {
		for _, e := range []struct{ tool, err string }{{"skiplock", cl.skErr}, {"River", cl.riverErr}, {"pg-boss", cl.pgbossErr}} {
			if e.err != "" {
				errs = append(errs, fmt.Sprintf("- round %d, %s: %s failed: %s", cl.round, rttLabel(cl.rtt), e.tool, redact(e.err)))
			}
		}
	}
	if len(errs) > 0 {
		p("\nFailed runs (a dash in the tables):\n\n%s\n", strings.Join(errs, "\n"))
	}
	p("\nThe machines these runs share are noisy: compare the ratios within a round, not jobs/s across sections.\n%s\n", endMarker)
	return b.String()
}

// headline is the one line the README can quote: the ratios' range per
// round trip.
func headline(c *config, env environment, cells []*cell) string {
	var parts []string
	for _, rtt := range c.rtts {
		var river, pgboss, limit []float64
		for _, cl := range cells {
			if cl.rtt != rtt || cl.skiplock == 0 {
				continue
			}
			if rb, _ := best(cl.river); rb > 0 {
				river = append(river, cl.skiplock/rb)
			}
			if pb, _ := best(cl.pgboss); pb > 0 {
				pgboss = append(pgboss, cl.skiplock/pb)
			}
			if cl.limit > 0 {
				limit = append(limit, cl.skiplock/cl.limit)
			}
		}
		var what []string
		if len(river) > 0 {
			what = append(what, span(river)+" River's")
		}
		if len(pgboss) > 0 {
			what = append(what, span(pgboss)+" pg-boss's")
		}
		if len(limit) > 0 {
			what = append(what, span(limit)+" the SQL limit's")
		}
		if len(what) > 0 {
			where := "directly"
			if rtt > 0 {
				where = "through a " + rttLabel(rtt) + " round trip"
			}
			parts = append(parts, where+" "+strings.Join(what, ", "))
		}
	}
	if len(parts) == 0 {
		return "**In short:** no round completed."
	}
	return fmt.Sprintf("**In short** (%s of %s-job burn-downs, %d cores): skiplock's jobs/s were %s.",
		plural(c.rounds, "round"), num(float64(c.jobs)), env.sk.Machine.Cores, strings.Join(parts, "; "))
}

// span is a ratio range, "2.01x" or "1.95-2.10x".
func span(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2fx", lo)
	}
	return fmt.Sprintf("%.2f-%.2fx", lo, hi)
}

// writeSection replaces the text between the markers in path, or appends
// the section when the file has none.
func writeSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, startMarker), strings.Index(s, endMarker)
	var next string
	switch {
	case i >= 0 && j > i:
		next = s[:i] + section + s[j+len(endMarker):]
	case i < 0 && j < 0:
		next = strings.TrimRight(s, "\n") + "\n\n" + section
		if !strings.HasSuffix(next, "\n") {
			next += "\n"
		}
	default:
		return fmt.Errorf("%s: the bench-compare markers are out of order or one is missing", path)
	}
	return os.WriteFile(path, []byte(next), 0o644)
}

func parseRTTs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("round trip %q", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("no round trip")
	}
	return out, nil
}

func rotate(s []string, n int) []string {
	n %= len(s)
	return append(slices.Clone(s[n:]), s[:n]...)
}

func rttLabel(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return strings.TrimSuffix(fmt.Sprintf("%g ms", float64(d)/float64(time.Millisecond)), ".0")
}

func rttList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, rttLabel(d))
	}
	return strings.Join(s, ", ")
}

func settingList(ss []setting) string {
	var s []string
	for _, x := range ss {
		s = append(s, x.label+" (`"+strings.Join(x.args, " ")+"`)")
	}
	return strings.Join(s, " and ")
}

// num formats jobs/s with thousands separators; 0 is a dash.
func num(v float64) string {
	if v <= 0 {
		return "—"
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func peer(v float64, skipped string) string {
	if skipped != "" {
		return "skipped"
	}
	return num(v)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func cpuLine(cores int) string {
	if cores == 0 {
		cores = runtime.NumCPU()
	}
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = " (" + strings.TrimSpace(v) + ")"
				break
			}
		}
	}
	return fmt.Sprintf("%d cores%s", cores, model)
}

func memLine(bytes int64) string {
	if bytes == 0 {
		return "memory unknown"
	}
	return fmt.Sprintf("%.1f GiB of memory", float64(bytes)/(1<<30))
}

func osLine() string {
	name := runtime.GOOS + "/" + runtime.GOARCH
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				name = strings.Trim(v, `"`) + " (" + runtime.GOARCH + ")"
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		name += ", Linux " + strings.TrimSpace(string(b))
	}
	return name
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// revision is the commit the working tree is on (read only; "unknown"
// outside a git checkout).
func revision(ctx context.Context, root string) string {
	o, err := command(ctx, root, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(commit unknown)"
	}
	return "at commit " + strings.TrimSpace(string(o)) + " (with the working tree's changes, if any)"
}

func lastNonEmpty(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(lastNonEmpty(b)))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// redact blanks a password in any URL the text holds.
func redact(s string) string {
	f := strings.Fields(s)
	for i, w := range f {
		if u, err := url.Parse(w); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
				f[i] = u.String()
			}
		}
	}
	return strings.Join(f, " ")
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-compare: "+format+"\n", a...)
}

func fail(err error) int {
	logf("%s", redact(err.Error()))
	return 1
}
