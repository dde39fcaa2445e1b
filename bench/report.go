package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// Report is one bench run. The JSON names are the CLI contract
// (docs/benchmarks.md, "The benchmark scenarios"); the baseline is the same shape.
type Report struct {
	// Tool is who ran the load: "skiplock" or "pgbench".
	Tool     string `json:"tool"`
	Scenario string `json:"scenario"`
	Layout   string `json:"layout"`
	Mode     string `json:"mode"`
	Workers  int    `json:"workers"`
	// Jobs is how many jobs were completed (lock: transactions that
	// locked a row).
	Jobs     int64   `json:"jobs"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// Efficiency is jobs/s over the ideal workers/work, 0..1; null outside
	// the latency scenario.
	Efficiency *float64 `json:"efficiency"`
	// LatencyMS is per job from the start of its claim to its completion
	// committed (lock: per transaction); DequeueMS is the claim alone
	// (count 0 where it was not measured, as for pgbench).
	LatencyMS Summary `json:"latency_ms"`
	DequeueMS Summary `json:"dequeue_ms"`
	Retries   Retries `json:"retries"`
	Errors    int64   `json:"errors"`
	// ErrorSamples are the first few distinct errors, for diagnosis.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Connections is the most connections the run held open at once.
	Connections int `json:"connections"`
	// RTTMS is the round trip the run's connections were given by the
	// loopback proxy (Config.RTT), 0 without one.
	RTTMS float64 `json:"rtt_ms"`
	// Statements is how many statements the queue clients sent while the
	// jobs were worked, counted at the skiplock.Pool seam (BEGIN, COMMIT
	// and ROLLBACK included); StatementsPerJob is that over Jobs. Null for
	// pgbench, whose statements skiplock does not see.
	Statements       int64    `json:"statements,omitempty"`
	StatementsPerJob *float64 `json:"statements_per_job"`
	// RoundTrips is how many client round trips those statements took:
	// one each, except a BEGIN pipelined with its transaction's first
	// statement (Settings.PipelineBegin), which rides in that statement's
	// round trip. RoundTripsPerJob is that over Jobs: the client round
	// trips per job claimed and worked. Only round trips between the
	// client and the SQL server are counted: inside a distributed engine a
	// statement makes further RPCs the client cannot see (on YugabyteDB
	// one per row a SKIP LOCKED claim locks or skips, yugabyte-db #23584),
	// which docs/engines.md ("Round trips of a claim on YugabyteDB")
	// estimates from the plan. Null for pgbench.
	RoundTrips       int64    `json:"round_trips,omitempty"`
	RoundTripsPerJob *float64 `json:"round_trips_per_job"`
	// Ahead is how many of those round trips were statements sent ahead,
	// beside a job's handler rather than on its path (a fanout attempt's
	// count: txhook.Ahead); PathRoundTripsPerJob is the others over Jobs.
	Ahead                int64    `json:"ahead,omitempty"`
	PathRoundTripsPerJob *float64 `json:"path_round_trips_per_job,omitempty"`
	// InFlight is how many of those statements were out at once on
	// average: the time each spent sent and not yet answered (its rows
	// read), summed, over Seconds. Behind a round trip it says how much
	// of the round trips the queue hides behind concurrency: one means
	// every statement waited for the one before. Null for pgbench.
	InFlight *float64 `json:"statements_in_flight"`
	busy     int64    // the statements' summed time out, in nanoseconds
	// Claims is how many claim statements were sent (those that lock
	// with SKIP LOCKED); JobsPerClaim is Jobs over that. Null for pgbench
	// and where no claim was counted.
	Claims       int64    `json:"claims,omitempty"`
	JobsPerClaim *float64 `json:"jobs_per_claim"`
	// Notifications is how many of the statements only woke listeners: a
	// client's trailing notification after inserts it debounced (one per
	// queue per debounce window at most, so their number follows the
	// run's length rather than its jobs).
	Notifications int64 `json:"notifications,omitempty"`
	// Windows, Drained and Fresh are the tombstones scenario's figures
	// (see runTombstones); absent from the other scenarios.
	Windows []TombstoneWindow `json:"windows,omitempty"`
	Drained *ClaimSample      `json:"drained,omitempty"`
	Fresh   *ClaimSample      `json:"fresh,omitempty"`
	// Minutes and Soak are the soak scenario's figures (see runSoak).
	Minutes []SoakMinute `json:"minutes,omitempty"`
	Soak    *SoakSummary `json:"soak,omitempty"`
	// PeakRSSBytes is the bench process's peak resident set (VmHWM) at
	// the end of the run, the load driver's own memory (0 where the OS
	// does not tell, and for pgbench).
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	// Writes is what the run cost the server in writes per job
	// (throughput scenario, PostgreSQL); the baseline's too.
	Writes *Writes `json:"writes,omitempty"`
	// PickupMS is the pickup scenario's time from an insert's commit to
	// its handler's start, per sample; IdleStatementsPerS the working
	// client's statements for its queue (producer, listener, heartbeat)
	// per second of the idle gaps (IdleSeconds in all), and
	// IdleMaintenanceStatementsPerS the schema's maintenance service's on
	// the same pool over the same gaps. Absent from the other scenarios.
	PickupMS                      *Summary `json:"pickup_ms,omitempty"`
	IdleStatementsPerS            *float64 `json:"idle_statements_per_s,omitempty"`
	IdleMaintenanceStatementsPerS *float64 `json:"idle_maintenance_statements_per_s,omitempty"`
	IdleSeconds                   float64  `json:"idle_s,omitempty"`
	// WindowJobsPerS counts as pgbench -T does: the jobs finished by the
	// end of the --duration window, over the window (a timed run stops
	// claiming at the deadline and lets the jobs in flight finish, which
	// JobsPerS counts over the longer time; pgbench drops them). Null for
	// runs without a duration.
	WindowJobsPerS *float64 `json:"window_jobs_per_s,omitempty"`
	// Baseline is the pgbench run of the article's script (--baseline), null
	// when none ran; BaselineSkipped says why it did not.
	Baseline        *Report `json:"baseline"`
	BaselineSkipped string  `json:"baseline_skipped,omitempty"`
	// Ratio is this run's jobs/s over the baseline's; WindowRatio the same
	// with both counted as pgbench -T counts (WindowJobsPerS).
	Ratio       *float64 `json:"ratio,omitempty"`
	WindowRatio *float64 `json:"window_ratio,omitempty"`

	Machine  *Machine    `json:"machine,omitempty"`
	Engine   *EngineInfo `json:"engine,omitempty"`
	Settings *Settings   `json:"settings,omitempty"`
}

// setInFlight sets InFlight from the statements' time out and Seconds,
// once both are in.
func (r *Report) setInFlight() {
	if r.Statements > 0 && r.Seconds > 0 {
		v := float64(r.busy) / 1e9 / r.Seconds
		r.InFlight = &v
	}
}

// setStatements records the statements sent for r.Jobs jobs, and their
// round trips given how BEGIN was sent (r.Settings.PipelineBegin).
func (r *Report) setStatements(n counts) {
	r.Statements = n.statements
	r.busy = n.busy
	r.RoundTrips = n.roundTrips(r.Settings != nil && r.Settings.PipelineBegin)
	r.Claims, r.Notifications = n.claims, n.notifies
	if r.Jobs > 0 {
		per, trips := float64(n.statements)/float64(r.Jobs), float64(r.RoundTrips)/float64(r.Jobs)
		r.StatementsPerJob, r.RoundTripsPerJob = &per, &trips
		if n.ahead > 0 {
			path := float64(r.RoundTrips-n.ahead) / float64(r.Jobs)
			r.Ahead, r.PathRoundTripsPerJob = n.ahead, &path
		}
	}
	if n.claims > 0 {
		per := float64(r.Jobs) / float64(n.claims)
		r.JobsPerClaim = &per
	}
}

// ms64 is d in milliseconds.
func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Retries counts transactions run again, by SQLSTATE ("conn" for lost
// connections), from retry.Counters.
type Retries struct {
	Total      int64            `json:"total"`
	BySQLState map[string]int64 `json:"by_sqlstate"`
}

// Machine names the machine that drove the load.
type Machine struct {
	Hostname    string `json:"hostname"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	GoVersion   string `json:"go_version"`
}

// EngineInfo names the database and the server settings that matter for
// a queue's speed.
type EngineInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Personality is the engine whose rules the run followed on
	// PostgreSQL (skiplock.OpenConfig.Emulate), and Emulated what of it
	// did not run there; both empty on an engine's own rules.
	Personality string            `json:"personality,omitempty"`
	Emulated    []string          `json:"emulated,omitempty"`
	Server      map[string]string `json:"server_settings"`
	Pgbench     string            `json:"pgbench,omitempty"`
}

// Settings are every knob of the run, defaults filled in.
type Settings struct {
	Schema    string  `json:"schema"`
	Queue     string  `json:"queue"`
	WorkS     float64 `json:"work_s"`
	DurationS float64 `json:"duration_s"`
	Preload   int     `json:"preload"`
	Batch     int     `json:"batch"`
	// Driver is what ran the jobs: DriverClient, DriverBatch or
	// DriverStatements.
	Driver     string  `json:"driver,omitempty"`
	Conns      int     `json:"conns"`
	ProgressS  float64 `json:"progress_s"`
	Baseline   bool    `json:"baseline"`
	IdealJobsS float64 `json:"ideal_jobs_per_s,omitempty"`
	// PipelineBegin says the workers' transactions sent BEGIN with their
	// first statement (skiplock.OpenConfig.SeparateBegin unset); pgbench's
	// scripts send it alone.
	PipelineBegin bool `json:"pipeline_begin"`
	// DeleteCompleted says completed bucketed jobs were deleted, not kept
	// as Success (Config.DeleteCompleted).
	DeleteCompleted bool `json:"delete_completed"`
	// HeldClaims says the bucketed queue held its claims' transactions
	// open while the jobs ran (Config.HeldClaims).
	HeldClaims bool `json:"held_claims"`
	// Concurrency is the queue's global concurrency limit (0: none).
	Concurrency int `json:"concurrency,omitempty"`
	// Partitions is how many partitions the jobs were spread over (0:
	// the queue not partitioned).
	Partitions int `json:"partitions,omitempty"`
	// WorkflowRoots: the jobs were one workflow of that many roots, the
	// others depending on them (Config.WorkflowRoots).
	WorkflowRoots int `json:"workflow_roots,omitempty"`
	// Samples, GapS, PollIntervalS, Notify and SameClient are the pickup
	// scenario's settings (Config): Notify says notifications were in
	// use.
	Samples       int     `json:"samples,omitempty"`
	GapS          float64 `json:"gap_s,omitempty"`
	PollIntervalS float64 `json:"poll_interval_s,omitempty"`
	Notify        bool    `json:"notify,omitempty"`
	SameClient    bool    `json:"same_client,omitempty"`
}

// DescribeMachine reads the machine's cores and memory.
func DescribeMachine() *Machine {
	host, _ := os.Hostname()
	return &Machine{Hostname: host, Cores: runtime.NumCPU(), MemoryBytes: memTotal(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version()}
}

// memTotal reads MemTotal from /proc/meminfo (0 where there is none).
func memTotal() int64 { return procKB("/proc/meminfo", "MemTotal:") }

// serverSettings are read with SHOW where the engine has them.
var serverSettings = []string{"max_connections", "shared_buffers", "synchronous_commit", "fsync", "default_transaction_isolation"}

// DescribeEngine reads the engine, its version and the settings above;
// settings the engine does not know are left out.
func DescribeEngine(ctx context.Context, db *skiplock.DB) *EngineInfo {
	info := &EngineInfo{Name: string(db.Engine()), Version: db.Version(), Server: map[string]string{}}
	if p := db.Personality(); p != skiplock.PersonalityNone {
		info.Personality = string(p)
		info.Version = db.EngineVersion()
		info.Emulated = db.EmulationSkipped()
	}
	for _, s := range serverSettings {
		var v string
		if err := db.QueryRow(ctx, "SHOW "+s).Scan(&v); err == nil {
			info.Server[s] = v
		}
	}
	return info
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: what ran where, then one row per run
// (skiplock, and pgbench with --baseline) and the ratio.
func (r *Report) WriteTable(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "skiplock bench %s: layout %s, mode %s, %d workers", r.Scenario, r.Layout, r.Mode, r.Workers)
	if s := r.Settings; s != nil {
		if r.Scenario == "latency" {
			fmt.Fprintf(b, ", work %v", time.Duration(s.WorkS*float64(time.Second)))
		}
		if s.DurationS > 0 {
			fmt.Fprintf(b, ", duration %v", time.Duration(s.DurationS*float64(time.Second)))
		}
		fmt.Fprintf(b, "\nsettings: schema %s, queue %s, preload %d, driver %s, batch %d, conns %d, progress %v, baseline %v, BEGIN %s",
			s.Schema, s.Queue, s.Preload, s.Driver, s.Batch, s.Conns, time.Duration(s.ProgressS*float64(time.Second)), s.Baseline,
			map[bool]string{true: "pipelined with the first statement", false: "its own round trip"}[s.PipelineBegin])
		if s.Partitions > 0 {
			fmt.Fprintf(b, ", %d partitions", s.Partitions)
		}
		if s.WorkflowRoots > 0 {
			fmt.Fprintf(b, ", one workflow of %d roots and their dependents", s.WorkflowRoots)
		}
		if s.Concurrency > 0 {
			fmt.Fprintf(b, ", global concurrency limit %d", s.Concurrency)
		}
		if s.DeleteCompleted || s.HeldClaims {
			fmt.Fprintf(b, ", delete completed %v, held claims %v", s.DeleteCompleted, s.HeldClaims)
		}
	}
	if m := r.Machine; m != nil {
		fmt.Fprintf(b, "\nmachine: %s, %d cores, %.1f GiB, %s/%s, %s", m.Hostname, m.Cores, float64(m.MemoryBytes)/(1<<30), m.OS, m.Arch, m.GoVersion)
	}
	if e := r.Engine; e != nil {
		fmt.Fprintf(b, "\nengine: %s, %s", e.Name, firstLine(e.Version))
		if e.Personality != "" {
			fmt.Fprintf(b, "\nemulated: %s's rules on PostgreSQL; not run here: %s", e.Personality, strings.Join(e.Emulated, "; "))
		}
		if len(e.Server) > 0 {
			fmt.Fprintf(b, "\nserver: %s", formatPairs(e.Server))
		}
		if e.Pgbench != "" {
			fmt.Fprintf(b, "\npgbench: %s", e.Pgbench)
		}
	}
	for _, w := range []struct {
		who string
		r   *Report
	}{{"skiplock", r}, {"pgbench", r.Baseline}} {
		if w.r != nil && w.r.Writes != nil {
			fmt.Fprintf(b, "\nserver writes per job (%s): %.2f row updates (%.2f HOT), %.2f deletes, %.0f WAL bytes",
				w.who, w.r.Writes.UpdatesPerJob, w.r.Writes.HOTUpdatesPerJob, w.r.Writes.DeletesPerJob, w.r.Writes.WALBytesPerJob)
		}
	}
	if r.PeakRSSBytes > 0 {
		fmt.Fprintf(b, "\npeak RSS of the bench process: %s MiB", mib(r.PeakRSSBytes))
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b)
	if r.PickupMS != nil {
		r.writePickup(b)
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tjobs\tseconds\tjobs/s\teff\tlat min\tavg\tp50\tp95\tp99\tmax ms\tdeq avg\tdeq p99 ms\tretries\terrors\tconns\t")
	for _, run := range []*Report{r, r.Baseline} {
		if run == nil {
			continue
		}
		eff := "-"
		if run.Efficiency != nil {
			eff = fmt.Sprintf("%.1f%%", 100**run.Efficiency)
		}
		l, d := run.LatencyMS, run.DequeueMS
		deqAvg, deqP99 := "-", "-"
		if d.Count > 0 {
			deqAvg, deqP99 = ms(d.Avg), ms(d.P99)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n",
			run.Tool, run.Jobs, run.Seconds, run.JobsPerS, eff, ms(l.Min), ms(l.Avg), ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max),
			deqAvg, deqP99, run.Retries.Total, run.Errors, run.Connections)
	}
	tw.Flush()
	if r.Retries.Total > 0 {
		fmt.Fprintf(b, "retries by SQLSTATE: %s\n", formatPairs(r.Retries.BySQLState))
	}
	if r.RTTMS > 0 {
		fmt.Fprintf(b, "rtt: %s ms added per round trip (%s ms each way) by a loopback proxy\n", ms(r.RTTMS), ms(r.RTTMS/2))
	}
	if r.StatementsPerJob != nil {
		fmt.Fprintf(b, "statements: %d sent by the queue clients, %.2f per job\n", r.Statements, *r.StatementsPerJob)
		if r.InFlight != nil {
			fmt.Fprintf(b, "in flight: %.2f statements out at once on average (sent, not yet answered)\n", *r.InFlight)
		}
	}
	if r.RoundTripsPerJob != nil {
		fmt.Fprintf(b, "round trips: %d between the queue clients and the SQL server, %.2f per job (RPCs inside a distributed engine are not seen here)\n",
			r.RoundTrips, *r.RoundTripsPerJob)
		if r.PathRoundTripsPerJob != nil {
			fmt.Fprintf(b, "  of them %d sent ahead, beside a job's handler: %.2f per job on the job's path\n", r.Ahead, *r.PathRoundTripsPerJob)
		}
	}
	if r.JobsPerClaim != nil {
		fmt.Fprintf(b, "claims: %d, %.2f jobs per claim\n", r.Claims, *r.JobsPerClaim)
	}
	r.writeTombstones(b)
	r.writeSoak(b)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(b, "error: %s\n", e)
	}
	if r.WindowJobsPerS != nil && r.Settings != nil {
		fmt.Fprintf(b, "counted as pgbench -T counts (only jobs finished within the %v window): skiplock %.1f jobs/s",
			time.Duration(r.Settings.DurationS*float64(time.Second)), *r.WindowJobsPerS)
		if r.Settings.IdealJobsS > 0 {
			fmt.Fprintf(b, " (%.1f%% of ideal)", 100**r.WindowJobsPerS/r.Settings.IdealJobsS)
		}
		fmt.Fprintln(b)
	}
	if r.Ratio != nil {
		fmt.Fprintf(b, "skiplock/pgbench: %.3fx jobs/s", *r.Ratio)
		if r.WindowRatio != nil {
			fmt.Fprintf(b, "; %.3fx counted as pgbench -T counts", *r.WindowRatio)
		}
		fmt.Fprintln(b)
	}
	if r.BaselineSkipped != "" {
		fmt.Fprintf(b, "baseline skipped: %s\n", r.BaselineSkipped)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writePickup writes the pickup scenario's figures.
func (r *Report) writePickup(b *strings.Builder) {
	if s := r.Settings; s != nil {
		how := map[bool]string{true: "LISTEN/NOTIFY", false: "polling only"}[s.Notify]
		from := map[bool]string{true: "the working client itself (in-process wake)", false: "a second client on its own pool"}[s.SameClient]
		fmt.Fprintf(b, "pickup: %d samples, %v idle before each (plus up to a poll interval, at random), inserted by %s; %s, poll interval %v\n",
			s.Samples, time.Duration(s.GapS*float64(time.Second)), from, how, time.Duration(s.PollIntervalS*float64(time.Second)))
	}
	p := r.PickupMS
	fmt.Fprintf(b, "pickup ms (insert committed -> handler started): p50 %s, p95 %s, p99 %s, max %s, avg %s\n", ms(p.P50), ms(p.P95), ms(p.P99), ms(p.Max), ms(p.Avg))
	if r.IdleStatementsPerS != nil && r.IdleMaintenanceStatementsPerS != nil {
		fmt.Fprintf(b, "idle statements/s over %.1f s of gaps: %.2f by the queue (producer, listener, heartbeat), %.2f by the maintenance service\n",
			r.IdleSeconds, *r.IdleStatementsPerS, *r.IdleMaintenanceStatementsPerS)
	}
	if r.RTTMS > 0 {
		fmt.Fprintf(b, "rtt: %s ms added per round trip by a loopback proxy\n", ms(r.RTTMS))
	}
	fmt.Fprintf(b, "errors: %d, connections: %d\n", r.Errors, r.Connections)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(b, "error: %s\n", e)
	}
}

// writeTombstones writes the tombstones scenario's windows and empty
// claims, with the ratios its goals are stated in.
func (r *Report) writeTombstones(b *strings.Builder) {
	if len(r.Windows) == 0 {
		return
	}
	fmt.Fprintln(b)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tdead before\tn_dead_tup\tjobs\tclaims\tclaim p50\tp99 ms\tindex tuples/claim\t")
	row := func(name, dead, deadTup string, jobs, claims int64, s Summary, per *float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n", name, dead, deadTup, jobs, claims, ms(s.P50), ms(s.P99), perClaim(per))
	}
	count := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	}
	if f := r.Fresh; f != nil {
		row("fresh table (empty)", "0", count(f.DeadTuples), 0, f.Claims, f.ClaimMS, f.IndexTuplesPerClaim)
	}
	for i, w := range r.Windows {
		row(strconv.Itoa(i+1), strconv.FormatInt(w.DeadBefore, 10), count(w.DeadTuples), w.Jobs, w.Claims, w.ClaimMS, w.IndexTuplesPerClaim)
	}
	if d := r.Drained; d != nil {
		row("drained (empty)", strconv.FormatInt(r.Jobs, 10), count(d.DeadTuples), 0, d.Claims, d.ClaimMS, d.IndexTuplesPerClaim)
	}
	tw.Flush()
	first, last := r.Windows[0].ClaimMS.P50, r.Windows[len(r.Windows)-1].ClaimMS.P50
	if first > 0 {
		fmt.Fprintf(b, "last window's claim p50 / first's: %.2fx (goal: within 2x)\n", last/first)
	}
	if r.Drained != nil && r.Fresh != nil && r.Fresh.ClaimMS.P50 > 0 {
		fmt.Fprintf(b, "drained-queue claim p50 / fresh table's: %.2fx (goal: within 2x)\n", r.Drained.ClaimMS.P50/r.Fresh.ClaimMS.P50)
	}
}

// ms formats milliseconds with three significant decimals at most.
func ms(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// formatPairs prints "key=value" pairs in key order.
func formatPairs[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return strings.Join(parts, " ")
}
