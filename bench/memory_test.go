package bench_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// memArgs is the memory benchmark's job: kind "", a payload of about 100
// bytes.
type memArgs struct {
	Note string `json:"note"`
}

// Kind is "": the raw worker runs it.
func (memArgs) Kind() string { return "" }

// BenchmarkClientInFlightMemory measures the memory of a process whose
// client.Client holds 10,000 jobs in flight: a bucketed queue of 500
// workers with a prefetch of 9,500, on 10,000 queued jobs whose handlers
// block, so that 500 run and 9,500 wait claimed in memory. Once every
// job is claimed and 500 run, it reads the process's resident set
// (VmRSS), its peak over the process's life (VmHWM: run the benchmark
// alone, -run '^$', so that no other test's peak counts) and the Go
// heap in use, and reports them; it asserts no threshold (a figure, not
// a test). Then it lets the handlers finish. See docs/benchmarks.md's
// headline figures for the command and the figure.
func BenchmarkClientInFlightMemory(b *testing.B) {
	const workers, prefetch, jobs = 500, 9500, 10_000
	db, sch := testdb.MigratedOn(b, testdb.Open(b, &skiplock.OpenConfig{MaxConns: 20}), nil, schema.LayoutBucketed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var rss, hwm, heap, goroutines float64
	for range b.N {
		if _, err := db.Exec(ctx, "DELETE FROM "+sqlident.Quote(sch)+"."+sqlident.Quote(schema.JobsTable)); err != nil {
			b.Fatal(err)
		}
		inserter, err := client.New(ctx, db, &client.Config{Schema: sch, NoMaintenance: true})
		if err != nil {
			b.Fatal(err)
		}
		note := strings.Repeat("x", 90)
		batch := make([]client.InsertParams, 1000)
		for i := range batch {
			batch[i] = client.InsertParams{Args: memArgs{Note: note}, Opts: &client.InsertOpts{Queue: bench.DefaultQueue}}
		}
		for range jobs / len(batch) {
			if _, err := inserter.InsertMany(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		release := make(chan struct{})
		var running atomic.Int64
		ws := client.NewWorkers()
		if err := client.AddRawWorker(ws, "", func(ctx context.Context, _ *skiplock.Job) error {
			running.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil); err != nil {
			b.Fatal(err)
		}
		cl, err := client.New(ctx, db, &client.Config{
			Schema: sch, Workers: ws, JobTimeout: -1, AllowSmallPool: true, Notify: client.NotifyOff,
			Queues: map[string]client.QueueConfig{bench.DefaultQueue: {MaxWorkers: workers, Prefetch: prefetch}},
		})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		if err := cl.Start(context.WithoutCancel(ctx)); err != nil {
			b.Fatal(err)
		}
		for {
			st, _ := cl.QueueStats(bench.DefaultQueue)
			if running.Load() >= workers && st.Claimed >= jobs {
				break
			}
			if err := retry.Sleep(ctx, 10*time.Millisecond); err != nil {
				b.Fatalf("%d running, %d claimed: never reached %d in flight: %v", running.Load(), st.Claimed, jobs, err)
			}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, hwm = float64(bench.ProcStatus("VmRSS:")), float64(bench.PeakRSS())
		heap, goroutines = float64(ms.HeapInuse), float64(runtime.NumGoroutine())
		close(release)
		for {
			st, _ := cl.QueueStats(bench.DefaultQueue)
			if st.Completed >= jobs {
				break
			}
			if err := retry.Sleep(ctx, 10*time.Millisecond); err != nil {
				b.Fatalf("%d of %d completed: %v", st.Completed, jobs, err)
			}
		}
		if err := cl.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(rss/(1<<20), "rss-MiB")
	b.ReportMetric(hwm/(1<<20), "peak-rss-MiB")
	b.ReportMetric(heap/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(goroutines, "goroutines")
	b.Logf("%d jobs in flight (%d running, %d prefetched): RSS %.1f MiB, peak RSS %.1f MiB, Go heap in use %.1f MiB, %.0f goroutines",
		jobs, workers, prefetch, rss/(1<<20), hwm/(1<<20), heap/(1<<20), goroutines)
}
