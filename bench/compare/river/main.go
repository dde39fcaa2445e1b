// Command river is bench-compare's River harness: a burn-down of no-op jobs
// on River (the version in this folder's go.mod), so that skiplock's
// `bench throughput` can be set beside it in the same run on the same
// server. make bench-compare builds and runs it; it is its own module so
// that River stays out of skiplock's go.mod.
//
//	river -dsn URL -jobs 100000 -workers 1000 -cooldown 10ms
//
// It migrates River's tables into the database it is given and empties
// river_job first: point it at a database of its own. It inserts the jobs
// with InsertManyFast (COPY, 10,000 per call), then starts a client and
// times from Start until the last job's completion is committed (River's
// completer emits a subscription event once a batch of completions is
// written), as skiplock's bench counts committed completions. River's own
// `river bench -n` does the same burn-down. It prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// result is the line the driver reads.
type result struct {
	Tool     string  `json:"tool"`
	Version  string  `json:"version"`
	Jobs     int     `json:"jobs"`
	Workers  int     `json:"workers"`
	Cooldown string  `json:"cooldown"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
}

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "database URL (a database of its own)")
	jobs := flag.Int("jobs", 100000, "jobs to burn down")
	workers := flag.Int("workers", 1000, "MaxWorkers of the default queue")
	cooldown := flag.Duration("cooldown", 10*time.Millisecond, "FetchCooldown (River's default is 100ms)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *dsn == "" || *jobs <= 0 {
		log.Fatal("usage: river -dsn URL [-jobs N] [-workers N] [-cooldown D]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		log.Fatal(err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	client, err := river.NewClient(drv, &river.Config{
		Workers:       ws,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		FetchCooldown: *cooldown,
	})
	if err != nil {
		log.Fatal(err)
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for i := 0; i < *jobs; i++ {
		params = append(params, river.InsertManyParams{Args: noopArgs{}})
		if len(params) == cap(params) || i == *jobs-1 {
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				log.Fatal(err)
			}
			params = params[:0]
		}
	}
	// A buffer for every event: River drops events a full channel cannot take.
	events, stop := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: *jobs + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer stop()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for done := 0; done < *jobs; {
		select {
		case <-events:
			done++
		case <-ctx.Done():
			log.Fatalf("%d of %d jobs completed after %s", done, *jobs, *timeout)
		}
	}
	el := time.Since(start)
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	_ = client.Stop(stopCtx)
	out, _ := json.Marshal(result{Tool: "river", Version: riverVersion(), Jobs: *jobs, Workers: *workers, Cooldown: cooldown.String(),
		Seconds: el.Seconds(), JobsPerS: float64(*jobs) / el.Seconds()})
	fmt.Println(string(out))
}

// riverVersion is River's module version in this build.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "unknown"
}
