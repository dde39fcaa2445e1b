package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// layoutCommands is what the enqueue, work and stats commands need from a
// layout. Each layout's file (layout_bucketed.go, layout_fanout.go)
// registers one from init; the commands themselves hold no layout logic.
type layoutCommands interface {
	// enqueue adds one batch of jobs and returns how many rows it added
	// (fewer when unique keys deduplicate).
	enqueue(ctx context.Context, db *skiplock.DB, schemaName string, jobs []skiplock.NewJob) (int, error)
	// work runs the built-in demo handler (sleep o.Work, optionally record
	// to work_log) until ctx ends or, with o.UntilEmpty, nothing is left.
	work(ctx context.Context, e *env, db *skiplock.DB, o workOptions) (workReport, error)
	// stats reports counts for the layout, for one queue or all ("").
	stats(ctx context.Context, db *skiplock.DB, schemaName, queue string) (layoutStats, error)
	// defaultMode is the --mode used when none is given.
	defaultMode() string
}

var layoutCLIs = map[schema.Layout]layoutCommands{}

func registerLayout(l schema.Layout, c layoutCommands) { layoutCLIs[l] = c }

func layoutCLI(name string) (schema.Layout, layoutCommands, error) {
	l, err := schema.ParseLayout(name)
	if err != nil {
		return "", nil, err
	}
	c, ok := layoutCLIs[l]
	if !ok {
		return "", nil, fmt.Errorf("layout %s is not available in this build", l)
	}
	return l, c, nil
}

// workOptions are the work command's flags.
type workOptions struct {
	Schema            string
	Queue             string
	Workers           int
	Work              time.Duration
	UntilEmpty        bool
	Mode              string
	VisibilityTimeout time.Duration
	DeleteCompleted   bool
	// HeldClaims holds each bucketed claim's transaction open while its
	// jobs run (client.QueueConfig.HeldClaims).
	HeldClaims bool
	Record     bool
	// RecordAttempts writes one work_attempt_log row per attempt
	// (record.go).
	RecordAttempts bool
	Batch          int
	// RescueInterval, when positive, is how often this process's
	// maintenance leader (when it leads) puts expired leases back.
	RescueInterval time.Duration
	// CrashOn, when set, makes the demo handler SIGKILL its own process
	// on a job whose payload contains it (a test and demo of jobs that
	// kill their worker).
	CrashOn string
	// JobTimeout is each fanout job's time budget; with --queues, each
	// attempt's on either layout. JobTimeoutSet says --job-timeout was
	// given: where the engine bounds a fanout job's transaction
	// (skiplock.Dialect.HoldLimit) the default gives way to the bound.
	JobTimeout    time.Duration
	JobTimeoutSet bool
	// Queues is --queues: name=workers[:layout],... worked by one
	// client.Client ("" works Queue alone).
	Queues string
	// Kinds are the job kinds the demo handler is registered for in the
	// client (always including "", the jobs enqueued without a kind).
	Kinds []string
	// Fail is the fraction of attempts the demo handler fails (0..1).
	Fail float64
	// FailOn, when set, makes the demo handler fail every attempt of a
	// job whose payload contains it, its last included: the job fails
	// for good.
	FailOn string
	// Panic is the fraction of attempts the demo handler panics in
	// (0..1), never a job's last.
	Panic float64
	// RetryBackoff, when positive, is the wait before a job whose attempt
	// Fail failed runs again (instead of the layout's exponential backoff).
	RetryBackoff time.Duration
	// MetricsAddr, when set, is where /metrics is served (metrics_http.go).
	MetricsAddr string
	// Runs, when set (--runs-log), gets one line per demo handler run.
	Runs *runsLog
}

// workReport is what a work run did.
type workReport struct {
	Layout   string  `json:"layout"`
	Mode     string  `json:"mode"`
	Workers  int     `json:"workers"`
	Handled  int64   `json:"handled"`
	Failed   int64   `json:"failed"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// Lost counts results the lease fence refused (bucketed): the lease
	// had expired and the job was another worker's by then.
	Lost *int64 `json:"lost,omitempty"`
	// ScheduledLater counts the jobs --until-empty left because their
	// run_at is ahead (bucketed), NextDue is the earliest, and NextDueInS
	// how far ahead it was by the database's clock.
	ScheduledLater int64      `json:"scheduled_later,omitempty"`
	NextDue        *time.Time `json:"next_due,omitempty"`
	NextDueInS     float64    `json:"next_due_in_s,omitempty"`
	// Waiting counts the jobs --until-empty left waiting for workflow
	// dependencies that have not finished (bucketed).
	Waiting int64 `json:"waiting_on_dependencies,omitempty"`
	// Queues are the per-queue counts when --queues names several.
	Queues map[string]queueReport `json:"queues,omitempty"`
}

// queueReport is what a work run did on one of several queues.
type queueReport struct {
	Layout  string `json:"layout"`
	Workers int    `json:"workers"`
	Handled int64  `json:"handled"`
	Failed  int64  `json:"failed"`
	// Lost is as workReport's (bucketed).
	Lost *int64 `json:"lost,omitempty"`
}

// layoutStats is what stats reports; JSON names are the CLI contract.
type layoutStats struct {
	Layout         string           `json:"layout"`
	ByStatus       map[string]int64 `json:"by_status"`
	ByQueue        map[string]int64 `json:"by_queue,omitempty"`
	ByBucket       map[string]int64 `json:"by_bucket,omitempty"`
	QueuedOldestS  float64          `json:"queued_oldest_s"`
	InFlightLeases int64            `json:"in_flight_leases"`
	Dead           int64            `json:"dead"`
	// PausedQueues are the schema's paused queues (skiplock queues pause).
	PausedQueues []string `json:"paused_queues"`
}

func init() {
	register(&command{
		name:    "enqueue",
		usage:   "enqueue --layout L [--queue Q] [--kind K] [--count N] [--payload JSON] [--run-at T] [--priority P] [--unique-key K | --unique-by RULES [--unique-period D]] [--unique-states S,...] | enqueue --workflow FILE.json",
		summary: "add jobs (batched)",
		run:     runEnqueue,
	})
	register(&command{
		name:    "work",
		usage:   "work --layout L {--workers N | --queues Q=N[:LAYOUT],...} [--kinds K,...] [--work D] [--fail P] [--panic P] [--retry-backoff D] [--until-empty] [--mode lease|tx] [--visibility-timeout D] [--job-timeout D] [--record] [--record-attempts] [--rescue-interval D] [--crash-on-payload TEXT] [--fail-on-payload TEXT] [--runs-log FILE] [--metrics-addr HOST:PORT]",
		summary: "run the built-in demo handler with N workers, or on several queues with one client",
		run:     runWork,
	})
	register(&command{
		name:    "stats",
		usage:   "stats [--layout L] [--queue Q]",
		summary: "counts by status, bucket and queue; oldest queued age; in-flight leases",
		run:     runStats,
	})
}

func runEnqueue(ctx context.Context, e *env, args []string) error {
	fs := e.flags("enqueue", commands["enqueue"].usage)
	layout := fs.String("layout", "bucketed", "bucketed or fanout")
	queue := fs.String("queue", skiplock.DefaultQueue, "queue name")
	kind := fs.String("kind", "", "the jobs' kind: the worker that runs them (work --kinds); \"\" is the jobs without a kind")
	count := fs.Int("count", 1, "how many jobs")
	payload := fs.String("payload", "{}", "JSON payload of every job")
	payloadFile := fs.String("payload-file", "", "read the JSON payload of every job from this file (- for standard input), for payloads too long for an argument; at most --max-payload bytes")
	runAt := fs.String("run-at", "", "when the jobs may run: RFC 3339 time from 1970 on, or a delay such as 30s (default now)")
	priority := fs.Int("priority", 0, "priority, lower runs first (-32768..32767)")
	maxAttempts := fs.Int("max-attempts", 0, fmt.Sprintf("attempts before a job is dead (default %d)", skiplock.DefaultMaxAttempts))
	uniqueKey := fs.String("unique-key", "", "skip the job while one with this key is queued or running (--count 1)")
	uniqueBy := fs.String("unique-by", "", "skip the job while one of the queue that is the same by these rules is queued or running, comma-separated: kind (always), args (all the payload), args.FIELD (a top-level field); the client's UniqueOpts (--count 1)")
	uniquePeriod := fs.Duration("unique-period", 0, "with or without --unique-by: also the same period of run time, e.g. 1h: at most one live job per period (--count 1)")
	uniqueStates := fs.String("unique-states", "", "with a unique key or rules: the states in which the job holds it, comma-separated; Queued,Running (the default) plus any of Success, Failed, Canceled (bucketed)")
	partitionKey := fs.String("partition-key", "", "the job's partition in a partitioned queue, whatever it is partitioned by (bucketed)")
	sequenceKey := fs.String("sequence-key", "", "the job's sequence in a queue of sequences (queues configure --partition-by key --sequential): its partition key (bucketed)")
	batch := fs.Int("batch", 5000, "jobs per INSERT, or per COPY where the engine has it")
	maxPayload := fs.Int("max-payload", skiplock.DefaultMaxPayloadBytes, "refuse payloads larger than this many bytes")
	workflow := fs.String("workflow", "", `insert a workflow from this JSON file (- for standard input): {"name": ..., "jobs": [{"id", "kind", "queue", "payload", "deps": [ids], "run_anyway", "priority", "max_attempts"}]}; prints its id (bucketed)`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *workflow != "" {
		for _, f := range []string{"layout", "queue", "kind", "count", "payload", "payload-file", "run-at", "priority", "max-attempts", "unique-key", "unique-by", "unique-period", "unique-states", "partition-key", "sequence-key", "batch"} {
			if flagSet(fs, f) {
				return usage.Errorf("--workflow and --%s: a workflow's file gives each job's fields", f)
			}
		}
		return enqueueWorkflow(ctx, e, *workflow, *maxPayload)
	}
	if *maxPayload < 1 || *maxPayload > skiplock.DefaultMaxPayloadBytes {
		return usage.Errorf("--max-payload %d: use 1 to %d bytes", *maxPayload, skiplock.DefaultMaxPayloadBytes)
	}
	if *payloadFile != "" {
		if flagSet(fs, "payload") {
			return usage.Errorf("--payload and --payload-file: give the payload one way")
		}
		text, err := readPayload(*payloadFile, *maxPayload)
		if err != nil {
			return err
		}
		*payload = text
	}
	_, lc, err := layoutCLI(*layout)
	if err != nil {
		return err
	}
	if err := countFlags(fs, "count", "batch"); err != nil {
		return err
	}
	if err := maxFlag(fs, "batch", maxBatch); err != nil {
		return err
	}
	if *sequenceKey != "" {
		if *partitionKey != "" && *partitionKey != *sequenceKey {
			return usage.Errorf("--sequence-key %q and --partition-key %q: a sequence key is the job's partition key; give one", *sequenceKey, *partitionKey)
		}
		*partitionKey = *sequenceKey
	}
	unique, err := parseUniqueBy(*uniqueBy, *uniquePeriod)
	if err != nil {
		return err
	}
	switch {
	case unique != nil && *uniqueKey != "":
		return usage.Errorf("--unique-key and --unique-by/--unique-period: give the key, or the rules that make it")
	case (*uniqueKey != "" || unique != nil) && *count != 1:
		return usage.Errorf("a unique job with --count %d: uniqueness dedupes, so enqueue one job at a time", *count)
	}
	at, err := parseRunAt(*runAt, time.Now())
	if err != nil {
		return err
	}
	if unique != nil {
		if *uniqueKey, err = client.UniqueKeyFor(*unique, *kind, []byte(*payload), at); err != nil {
			return fmt.Errorf("--unique-by: %w; nothing was written", err)
		}
	}
	job := skiplock.NewJob{Queue: *queue, Payload: json.RawMessage(*payload), Priority: *priority, RunAt: at, MaxAttempts: *maxAttempts, UniqueKey: *uniqueKey, Kind: *kind, PartitionKey: *partitionKey,
		UniqueStates: parseStates(*uniqueStates)}
	if err := job.Normalize(*maxPayload); err != nil {
		return usage.Errorf("job for queue %q: %v; nothing was written", *queue, err)
	}
	db, err := e.open(ctx, 4)
	if err != nil {
		return err
	}
	start := time.Now()
	added := 0
	// Stream: one batch in memory at a time, however large --count is.
	jobs := make([]skiplock.NewJob, min(*batch, *count))
	for i := range jobs {
		jobs[i] = job
	}
	for done := 0; done < *count; {
		n := min(*batch, *count-done)
		got, err := lc.enqueue(ctx, db, e.schema, jobs[:n])
		added += got
		if err != nil {
			return fmt.Errorf("after %d jobs: %w", added, err)
		}
		done += n
	}
	secs := time.Since(start).Seconds()
	if e.json {
		return e.printJSON(map[string]any{"layout": *layout, "queue": *queue, "kind": *kind, "enqueued": added, "requested": *count, "seconds": secs})
	}
	ofKind := ""
	if *kind != "" {
		ofKind = fmt.Sprintf(" of kind %q", *kind)
	}
	fmt.Fprintf(e.stdout, "enqueued %d of %d job(s)%s on %s queue %q in %.2fs\n", added, *count, ofKind, *layout, *queue, secs)
	if added < *count {
		fmt.Fprintf(e.stdout, "%d skipped: a job of the queue holds the same unique key\n", *count-added)
	}
	return nil
}

// maintenanceConfig is the work command's maintenance leader
// configuration: nil (the defaults) unless a flag tunes it.
func (o workOptions) maintenanceConfig() *maintenance.Config {
	if o.RescueInterval <= 0 {
		return nil
	}
	return &maintenance.Config{RescueInterval: o.RescueInterval}
}

// crashOn, the demo handler's first step, SIGKILLs this process when the
// job's payload contains text (non-empty), after saying so on stderr: no
// deferred function runs and nothing is written back, as when a job
// crashes its worker. The bucketed claim has counted the attempt; see the
// fanout package doc for how fanout counts one.
func crashOn(e *env, text string, job *skiplock.Job) {
	if text == "" || !strings.Contains(string(job.Payload), text) {
		return
	}
	e.logf("crash-on-payload: job %s attempt %d of %d: killing this process (pid %d) with SIGKILL", job.ID, job.Attempts, job.MaxAttempts, os.Getpid())
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	// Kill does not return on success; if it could not kill, die anyway.
	e.logf("crash-on-payload: SIGKILL failed (%v): exiting", err)
	os.Exit(3)
}

// parseRunAt reads --run-at: empty (now), a delay ("30s", "5m"), or an
// RFC 3339 time from 1970 on (earlier times are refused).
func parseRunAt(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usage.Errorf("--run-at %q: a delay cannot be negative", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usage.Errorf("--run-at %q: use an RFC 3339 time (2026-01-02T15:04:05Z) or a delay (30s, 5m)", s)
	}
	if t.Before(skiplock.MinRunAt) {
		// Refused, not stored: the zero time would read as "now".
		return time.Time{}, usage.Errorf("--run-at %q is before 1970: times that early are refused; leave --run-at out to run now", s)
	}
	return t, nil
}

func runWork(ctx context.Context, e *env, args []string) error {
	fs := e.flags("work", commands["work"].usage)
	layout := fs.String("layout", "bucketed", "bucketed or fanout")
	o := workOptions{}
	fs.StringVar(&o.Queue, "queue", skiplock.DefaultQueue, "queue to work")
	fs.IntVar(&o.Workers, "workers", 10, "concurrent workers")
	fs.DurationVar(&o.Work, "work", 0, "how long the demo handler works on each job")
	fs.BoolVar(&o.UntilEmpty, "until-empty", false, "exit once no job can run now and none is running; bucketed jobs scheduled for later (--run-at, retry backoffs) are left and counted in the report (fanout waits for its retry backoffs)")
	fs.StringVar(&o.Mode, "mode", "", "lease (bucketed) or tx (fanout); default by layout")
	fs.DurationVar(&o.VisibilityTimeout, "visibility-timeout", 30*time.Second, "lease length (bucketed)")
	fs.BoolVar(&o.DeleteCompleted, "delete-completed", false, "delete bucketed jobs as they complete instead of keeping them as Success until retention (one write per job less; no history of completed jobs)")
	fs.BoolVar(&o.HeldClaims, "held-claims", false, "bucketed, on the client: hold each claim's transaction open while its jobs run, one write per job instead of two (PostgreSQL; for short jobs: each must finish within --visibility-timeout less a fifth)")
	fs.BoolVar(&o.Record, "record", false, "insert one row per handled job into <schema>.work_log, in the transaction that completes it, with the completing attempt's handler start and end (started_at, finished_at)")
	fs.BoolVar(&o.RecordAttempts, "record-attempts", false, "insert one row per attempt into <schema>.work_attempt_log when its handler starts, outside the job's transaction, and set its finished_at and outcome when it returns (a killed worker leaves them null): failed attempts included, at a statement before and after each")
	fs.IntVar(&o.Batch, "batch", 0, "jobs claimed per dequeue (default by layout; not with --queues or --kinds, whose client claims for its free workers plus a prefetch)")
	fs.DurationVar(&o.RescueInterval, "rescue-interval", 0, "how often the schema's maintenance leader, when this process leads, puts jobs whose lease expired back to run (default 5s)")
	fs.StringVar(&o.CrashOn, "crash-on-payload", "", "for tests and demos: the handler SIGKILLs its own process on every job whose payload contains this text")
	fs.StringVar(&o.FailOn, "fail-on-payload", "", "for tests and demos: the handler fails every attempt of a job whose payload contains this text, its last included, so that the job fails for good")
	fs.DurationVar(&o.JobTimeout, "job-timeout", fanout.DefaultJobTimeout, "each job's time budget (fanout; with --queues, every attempt's): its handler is cancelled then, and a stopped worker's transactions end that much later plus "+fanout.SessionMargin.String()+"; on CockroachDB a fanout job's default is four fifths of the closed-timestamp target (2.4s)")
	fs.StringVar(&o.Queues, "queues", "", "work several queues with one client: name=workers[:bucketed|fanout],... such as a=10,b=4:fanout (layout default --layout); replaces --queue and --workers")
	kinds := kindsFlag{}
	fs.Var(&kinds, "kinds", "job kinds the demo handler runs besides \"\" (the jobs enqueued without a kind), comma-separated or repeated; other kinds fail as unknown (runs with the client, as --queues does)")
	fs.Float64Var(&o.Fail, "fail", 0, "for tests and demos: the handler fails this fraction (0 to 1) of attempts, never a job's last")
	fs.Float64Var(&o.Panic, "panic", 0, "for tests and demos: the handler panics in this fraction (0 to 1) of attempts, never a job's last; the worker records each panic as a failed attempt, with its stack")
	fs.DurationVar(&o.RetryBackoff, "retry-backoff", 0, "wait before running a job again after --fail failed its attempt (default: the layout's exponential backoff from 1s)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, such as 127.0.0.1:9090 (default: none)")
	runsPath := fs.String("runs-log", "", "for tests and demos: append one line per handler run to this file (job id, attempt, ok or failed), written as the handler returns, so that runs are counted across processes and kills")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.JobTimeoutSet = flagSet(fs, "job-timeout")
	l, lc, err := layoutCLI(*layout)
	if err != nil {
		return err
	}
	if o.Fail < 0 || o.Fail > 1 || o.Fail != o.Fail {
		return usage.Errorf("--fail %g: use a fraction from 0 (no failures) to 1 (every attempt but a job's last)", o.Fail)
	}
	if o.Panic < 0 || o.Panic > 1 || o.Panic != o.Panic {
		return usage.Errorf("--panic %g: use a fraction from 0 (no panics) to 1 (every attempt but a job's last)", o.Panic)
	}
	if o.RetryBackoff < 0 {
		return usage.Errorf("--retry-backoff %v: a duration cannot be negative", o.RetryBackoff)
	}
	if o.Work < 0 {
		return usage.Errorf("--work %v: a duration cannot be negative", o.Work)
	}
	if o.VisibilityTimeout < time.Second {
		return usage.Errorf("--visibility-timeout %v: use at least 1s", o.VisibilityTimeout)
	}
	if o.RescueInterval != 0 && (o.RescueInterval < 100*time.Millisecond || o.RescueInterval > time.Hour) {
		return usage.Errorf("--rescue-interval %v: use 100ms to 1h (or leave it out for 5s)", o.RescueInterval)
	}
	if o.JobTimeout < time.Second {
		return usage.Errorf("--job-timeout %v: use at least 1s", o.JobTimeout)
	}
	if o.Batch < 0 || o.Batch > maxBatch {
		return usage.Errorf("--batch %d: use 1 to %d (or leave it out)", o.Batch, maxBatch)
	}
	if o.Mode != "" {
		if err := oneOf("mode", o.Mode, "lease", "tx"); err != nil {
			return err
		}
	}
	o.Schema = e.schema
	o.Kinds = kinds.list()
	if *runsPath != "" {
		runs, err := openRunsLog(*runsPath)
		if err != nil {
			return err
		}
		defer runs.close()
		o.Runs = runs
	}
	if o.Queues != "" || len(o.Kinds) > 1 || !flagSet(fs, "batch") {
		// One client.Client works every queue (work_client.go); --batch
		// asks for the layout's own worker, which claims in batches.
		return runClientWork(ctx, e, fs, l, o)
	}
	if o.HeldClaims {
		return usage.Errorf("--held-claims with --batch: held claims run on the client, which claims for its free workers plus a prefetch: leave --batch out")
	}
	if o.MetricsAddr != "" {
		return usage.Errorf("--metrics-addr with --batch: metrics come from the client, which claims for its free workers plus a prefetch: leave --batch out")
	}
	if o.Workers < 1 || o.Workers > maxWorkers {
		return usage.Errorf("--workers %d: use 1 to %d", o.Workers, maxWorkers)
	}
	if o.Mode == "" {
		o.Mode = lc.defaultMode()
	}
	if err := oneOf("mode", o.Mode, "lease", "tx"); err != nil {
		return err
	}
	if err := skiplock.ValidateQueueName(o.Queue); err != nil {
		return err
	}
	db, err := e.open(ctx, 0)
	if err != nil {
		return err
	}
	rep, err := lc.work(ctx, e, db, o)
	if err != nil {
		return err
	}
	rep.Layout, rep.Mode, rep.Workers = string(l), o.Mode, o.Workers
	if rep.Seconds > 0 {
		rep.JobsPerS = float64(rep.Handled) / rep.Seconds
	}
	return printWorkReport(e, rep, fmt.Sprintf("queue %q", o.Queue))
}

// printWorkReport prints a work run's report, as JSON with --json; where
// names the worked queues in the note on jobs scheduled for later.
func printWorkReport(e *env, rep workReport, where string) error {
	if e.json {
		return e.printJSON(rep)
	}
	fmt.Fprintf(e.stdout, "handled %d job(s), %d failed, in %.1fs (%.1f jobs/s) with %d %s worker(s)\n",
		rep.Handled, rep.Failed, rep.Seconds, rep.JobsPerS, rep.Workers, rep.Mode)
	for _, name := range slices.Sorted(maps.Keys(rep.Queues)) {
		q := rep.Queues[name]
		fmt.Fprintf(e.stdout, "  queue %q (%s, %d worker(s)): handled %d, %d failed\n", name, q.Layout, q.Workers, q.Handled, q.Failed)
	}
	if rep.Lost != nil && *rep.Lost > 0 {
		fmt.Fprintf(e.stdout, "%d result(s) refused: the job's lease had expired and another worker had it (it runs or ran there)\n", *rep.Lost)
	}
	if rep.Waiting > 0 {
		fmt.Fprintf(e.stdout, "%d job(s) of %s wait for workflow dependencies that have not finished (retries waiting out a backoff, or jobs elsewhere): run work again\n", rep.Waiting, where)
	}
	if rep.ScheduledLater > 0 {
		fmt.Fprintf(e.stdout, "%d job(s) of %s are scheduled for later; the next is due at %s (in %s): --until-empty does not wait for them, run work again then\n",
			rep.ScheduledLater, where, rep.NextDue.Format(time.RFC3339), time.Duration(rep.NextDueInS*float64(time.Second)).Round(time.Second))
	}
	return nil
}

func runStats(ctx context.Context, e *env, args []string) error {
	fs := e.flags("stats", commands["stats"].usage)
	layout := fs.String("layout", "", "bucketed or fanout (default: every migrated layout)")
	queue := fs.String("queue", "", "one queue (default all)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var layouts []schema.Layout
	if *layout != "" {
		l, _, err := layoutCLI(*layout)
		if err != nil {
			return err
		}
		layouts = []schema.Layout{l}
	}
	if *queue != "" {
		if err := skiplock.ValidateQueueName(*queue); err != nil {
			return err
		}
	}
	db, err := e.open(ctx, 2)
	if err != nil {
		return err
	}
	if layouts == nil {
		applied, err := schema.AppliedMigrations(ctx, db, e.schema)
		if err != nil {
			return fmt.Errorf("%w: run `skiplock migrate --schema %s` first", err, e.schema)
		}
		seen := map[schema.Layout]bool{}
		for _, a := range applied {
			if _, ok := layoutCLIs[a.Layout]; ok && !seen[a.Layout] {
				seen[a.Layout] = true
				layouts = append(layouts, a.Layout)
			}
		}
		sort.Slice(layouts, func(i, j int) bool { return layouts[i] < layouts[j] })
	}
	paused, err := admin.PausedQueues(ctx, db, e.schema)
	if err != nil {
		return err
	}
	if *queue != "" {
		paused = slices.DeleteFunc(paused, func(q string) bool { return q != *queue })
	}
	var all []layoutStats
	for _, l := range layouts {
		st, err := layoutCLIs[l].stats(ctx, db, e.schema, *queue)
		if err != nil {
			return err
		}
		st.Layout, st.PausedQueues = string(l), paused
		all = append(all, st)
	}
	if e.json {
		if len(all) == 1 {
			return e.printJSON(all[0])
		}
		return e.printJSON(all)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stdout, "schema %q has no queue layouts: run `skiplock migrate --schema %s`\n", e.schema, e.schema)
	}
	for _, st := range all {
		printStats(e, st)
	}
	return nil
}

func printStats(e *env, st layoutStats) {
	fmt.Fprintf(e.stdout, "%s (schema %s)\n", st.Layout, e.schema)
	fmt.Fprintf(e.stdout, "  by status: %s\n", formatCounts(st.ByStatus, "(none)"))
	if len(st.ByQueue) > 0 {
		fmt.Fprintf(e.stdout, "  by queue:  %s\n", formatCounts(st.ByQueue, "(none)"))
	}
	if len(st.ByBucket) > 0 {
		fmt.Fprintf(e.stdout, "  by bucket: %s\n", formatCounts(st.ByBucket, "(none)"))
	}
	fmt.Fprintf(e.stdout, "  oldest queued: %.1fs  in-flight leases: %d  dead: %d\n", st.QueuedOldestS, st.InFlightLeases, st.Dead)
	if len(st.PausedQueues) > 0 {
		fmt.Fprintf(e.stdout, "  paused: %s\n", strings.Join(st.PausedQueues, ", "))
	}
}

// formatCounts prints "key=count" pairs in key order, or none when empty.
func formatCounts[N int | int64](m map[string]N, none string) string {
	if len(m) == 0 {
		return none
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// fanoutJobTimeout is the fanout job budget to ask for on d's engine: 0
// (the worker's default, the engine's bound) where the engine bounds a
// job's transaction and --job-timeout was not given.
func (o *workOptions) fanoutJobTimeout(d *skiplock.Dialect) time.Duration {
	if d.HoldLimit > 0 && !o.JobTimeoutSet {
		return 0
	}
	return o.JobTimeout
}

// readPayload reads a payload of at most limit bytes from path (- for
// standard input).
func readPayload(path string, limit int) (string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", usage.Errorf("--payload-file: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return "", fmt.Errorf("--payload-file %s: %w", path, err)
	}
	if len(b) > limit {
		return "", usage.Errorf("--payload-file %s: the payload is larger than --max-payload (%d bytes); nothing was written", path, limit)
	}
	return string(b), nil
}

// parseStates splits --unique-states into statuses (Normalize checks
// them); nil when it is empty.
func parseStates(s string) []skiplock.Status {
	var out []skiplock.Status
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, skiplock.Status(part))
		}
	}
	return out
}

// parseUniqueBy reads --unique-by and --unique-period into the client's
// unique rules; nil when neither is given.
func parseUniqueBy(by string, period time.Duration) (*client.UniqueOpts, error) {
	if by == "" && period == 0 {
		return nil, nil
	}
	u := &client.UniqueOpts{ByPeriod: period}
	if period < 0 {
		return nil, usage.Errorf("--unique-period %v: use a positive period", period)
	}
	for part := range strings.SplitSeq(by, ",") {
		switch part = strings.TrimSpace(part); {
		case part == "" && by == "", part == "kind":
		case part == "args":
			u.ByArgs = true
		case strings.HasPrefix(part, "args.") && len(part) > len("args."):
			u.ArgsFields = append(u.ArgsFields, strings.TrimPrefix(part, "args."))
		default:
			return nil, usage.Errorf("--unique-by %q: %q is not a rule: use kind, args or args.FIELD, comma-separated", by, part)
		}
	}
	if u.ByArgs && len(u.ArgsFields) > 0 {
		return nil, usage.Errorf("--unique-by %q: args (all of the payload) and args.FIELD (some of it): give one", by)
	}
	return u, nil
}
