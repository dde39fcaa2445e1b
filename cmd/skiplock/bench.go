package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name: "bench",
		usage: "bench latency|lock|throughput|tombstones|pickup|soak|enqueue [--layout L] [--mode lease|tx|bulk|single] [--workers N] [--clients N] [--work D] [--duration D] " +
			"[--jobs N] [--batch N] [--conns N] [--progress D] [--rtt D] [--baseline] [--separate-begin] [--delete-completed] [--held-claims] [--concurrency N] [--partitions N] " +
			"[--samples N] [--gap D] [--poll-interval D] [--no-notify] [--same-client] [--rate R|max] [--producers N] [--window D] [--cpuprofile FILE] [--json]",
		summary: "the load driver: the articles' latency and lock tests, a burn-down, dead versions kept, pickup of one job by idle workers, a soak, enqueue speed; --rtt emulates round trips; --baseline runs pgbench too",
		run:     runBench,
	})
}

func runBench(ctx context.Context, e *env, args []string) error {
	synopsis := commands["bench"].usage
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(e.stderr, "usage: skiplock [global flags] %s\n\n"+
			"  latency     the scalable-job-queue article's test: preload jobs; W workers claim one, work D, complete (default 500 x 1s for 30s)\n"+
			"  lock        the scalable-job-queue article's lock-only test: W clients BEGIN; lock one job; COMMIT (default 15 for 30s)\n"+
			"  throughput  burn-down like river bench -n: preload N no-op jobs and work them all (default 100000)\n"+
			"  tombstones  burn down N jobs (default 200000) on one connection while a side connection holds a snapshot,\n"+
			"              so that no dead version is removed (as on YugabyteDB and CockroachDB); claim latency and index\n"+
			"              tuples per claim per window, then on the drained queue and on a fresh table\n"+
			"  pickup      a client.Client with W idle workers (default 10); N times (--samples, default 50): wait --gap (1s)\n"+
			"              plus up to a poll interval, insert one job through a second client, time insert commit -> handler\n"+
			"              start; and the working client's statements per second while idle (--no-notify: polling only,\n"+
			"              every --poll-interval)\n"+
			"  soak        steady state: --producers P (default 16) enqueue at --rate R jobs/s or max while a client with\n"+
			"              W workers (default 100) works, no preload, finished jobs pruned after 30s; per --window (1m) of\n"+
			"              --duration (default 10m): jobs/s in and out, end-to-end latency, table size, dead tuples\n\n"+
			"  enqueue     inserts alone into an emptied table: --mode bulk (default) sends --jobs (200000) through the\n"+
			"              layout's bulk API, --batch (5000) per call; --mode single inserts --jobs (20000) one per\n"+
			"              client Insert from --clients (50) goroutines\n\n"+
			"--rtt D on any scenario sends every connection through a loopback proxy adding D/2 each way.\n"+
			"The bench empties and refills its own schema: %s, or one --schema names that does not\n"+
			"exist yet (the bench creates and marks it). It refuses any other schema.\n"+
			"Run skiplock bench SCENARIO -h for the flags.\n", synopsis, bench.DefaultSchema)
		if len(args) == 0 {
			return errUsageShown
		}
		return nil
	}
	scenario := args[0]
	cfg := bench.Config{Scenario: scenario}
	fs := e.flags("bench "+scenario, synopsis)
	layout := fs.String("layout", "", "bucketed (lease mode) or fanout (tx mode); default by --mode, else bucketed")
	fs.StringVar(&cfg.Mode, "mode", "", "lease (bucketed, a small pool) or tx (fanout, one connection per worker)")
	fs.IntVar(&cfg.Workers, "workers", 0, "concurrent workers or clients (default: latency 500, lock 15, throughput 1000 on the client and 10 with --batch or --mode tx; tombstones claims on one)")
	fs.DurationVar(&cfg.Work, "work", 0, "latency: how long each job works (default 1s)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to run (latency and lock default 30s; throughput runs until the jobs are done)")
	fs.IntVar(&cfg.Jobs, "jobs", 0, "jobs to preload (throughput: the burn-down size, default 100000; tombstones: default 200000; latency: default enough for --duration, or with --duration 0 the count to work)")
	fs.IntVar(&cfg.Batch, "batch", 0, "jobs per claim in lease mode: 1 (the default) runs the client, whose producer sizes its claims; above 1 each worker claims and completes that many with the layout's own calls (tombstones: default 200)")
	fs.IntVar(&cfg.Conns, "conns", 0, "worker pool size (lease mode default min(workers, 50); tx mode and lock hold one per worker)")
	fs.DurationVar(&cfg.Progress, "progress", 5*time.Second, "interval between progress lines (0 turns them off)")
	fs.DurationVar(&cfg.RTT, "rtt", 0, "emulated network round trip: every connection goes through a loopback proxy adding half of it each way (e.g. 2ms; 0: none)")
	fs.BoolVar(&cfg.DeleteCompleted, "delete-completed", false, "bucketed: delete jobs as they complete instead of keeping them as Success (client.Config.DeleteCompleted)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "bucketed, on the client: the bench queue's global concurrency limit (skiplock queues configure --concurrency), set before the run; 0: none")
	fs.IntVar(&cfg.WorkflowRoots, "workflow-roots", 0, "bucketed throughput and enqueue --mode bulk: make the jobs one workflow of N roots, every other job depending on one of them (inserted in one transaction); 0: plain jobs")
	fs.IntVar(&cfg.Partitions, "partitions", 0, "bucketed, on the client: spread the preloaded jobs over N partitions by key and partition the queue (--concurrency then per partition); 0: none")
	fs.BoolVar(&cfg.HeldClaims, "held-claims", false, "bucketed, on the client: hold each claim's transaction open while its jobs run, one write per job (client.QueueConfig.HeldClaims; PostgreSQL, short jobs)")
	fs.BoolVar(&cfg.Baseline, "baseline", false, "also run the article's script through pgbench with the same workers and duration")
	fs.BoolVar(&cfg.SeparateBegin, "separate-begin", false, "send each transaction's BEGIN as its own round trip, as pgbench's scripts do (default: BEGIN rides with the first statement)")
	fs.IntVar(&cfg.Samples, "samples", 0, "pickup: jobs to time, one at a time (default 50)")
	fs.DurationVar(&cfg.Gap, "gap", 0, "pickup: idle wait before each insert (default 1s), plus a random part of the poll interval")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 0, "pickup: the working client's FetchPollInterval (default 1s)")
	fs.BoolVar(&cfg.NoNotify, "no-notify", false, "pickup: notifications off (client.NotifyOff): idle workers find jobs by polling")
	fs.BoolVar(&cfg.SameClient, "same-client", false, "pickup: insert through the working client itself (its in-process wake) instead of a second client")
	rate := fs.String("rate", "max", "soak: the producers' jobs/s in all, or max (each inserts one job at a time as fast as it can)")
	fs.IntVar(&cfg.Producers, "producers", 0, "soak: goroutines inserting, on a pool of their own (default 16)")
	fs.DurationVar(&cfg.Window, "window", 0, "soak: the reporting interval (default 1m)")
	clients := fs.Int("clients", 0, "enqueue: concurrent callers (single default 50, bulk 1); the same as --workers")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the run to this file (for finding the load driver's own overhead)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if cfg.Progress == 0 {
		cfg.Progress = -1
	}
	if *rate != "max" {
		r, err := strconv.ParseFloat(*rate, 64)
		if err != nil || r <= 0 {
			return usage.Errorf("--rate %q: use a positive number of jobs/s, or max", *rate)
		}
		if scenario != bench.ScenarioSoak {
			return usage.Errorf("--rate is the soak scenario's: leave it out of %s", scenario)
		}
		cfg.Rate = r
	}
	if scenario == bench.ScenarioEnqueue {
		// --mode bulk|single is the enqueue scenario's own (enqueue.go).
		cfg.EnqueueMode, cfg.Mode = cfg.Mode, ""
		if *clients != 0 {
			cfg.Workers = *clients
		}
	} else if *clients != 0 {
		return usage.Errorf("--clients is the enqueue scenario's: use --workers for %s", scenario)
	}
	if *layout != "" {
		l, err := schema.ParseLayout(*layout)
		if err != nil {
			return err
		}
		cfg.Layout = l
	}
	for _, n := range []string{"workers", "jobs", "batch", "conns", "samples", "producers", "clients"} {
		if err := countFlags(fs, n); err != nil {
			return err
		}
	}
	cfg.Schema = e.schema
	if cfg.Schema == schema.DefaultSchema {
		// Never empty the application's queue: benches get their own.
		cfg.Schema = bench.DefaultSchema
	}
	engine, err := e.parsedEngine()
	if err != nil {
		return err
	}
	cfg.Engine = engine
	if cfg.Emulate, cfg.Emulation, err = e.emulation(); err != nil {
		return err
	}
	oc, err := e.openConfig(0)
	if err != nil {
		return err
	}
	cfg.ListenDSN = oc.ListenDSN
	cfg.Out = e.stderr
	cfg.Logger = e.log
	// Check the flags before starting a server.
	if err := bench.Validate(&cfg); err != nil {
		return err
	}
	if cfg.DSN, err = e.resolveDSN(ctx); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usage.Errorf("--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, &cfg)
	if err != nil {
		if rep != nil && rep.Jobs > 0 && !e.json {
			rep.WriteTable(e.stderr) //nolint:errcheck // the error is what matters
		}
		return err
	}
	if e.json {
		return rep.WriteJSON(e.stdout)
	}
	return rep.WriteTable(e.stdout)
}
