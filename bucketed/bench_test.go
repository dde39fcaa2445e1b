package bucketed_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// benchQueue migrates a fresh schema on a pool of conns connections.
func benchQueue(b *testing.B, conns int32) (*bucketed.Queue, *skiplock.DB, string) {
	db := testdb.Open(b, &skiplock.OpenConfig{MaxConns: conns})
	name := testdb.Schema(b, db)
	if _, err := schema.Migrate(context.Background(), db, &schema.MigrateConfig{Options: schema.Options{Schema: name}, Layouts: []schema.Layout{schema.LayoutBucketed}}); err != nil {
		b.Fatal(err)
	}
	return queueOn(b, db, name, nil), db, name
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkBurnDown is River's `river bench -n 100000` for this layout:
// preload N no-op jobs, work them all with a Worker (batched claims and
// completions), report jobs/s. N, workers and batch come from
// BURN_JOBS, BURN_WORKERS and BURN_BATCH (default 100000, 4, 128).
//
//	go test ./bucketed -run '^$' -bench BurnDown -benchtime 1x
func BenchmarkBurnDown(b *testing.B) {
	n, workers, batch := envInt("BURN_JOBS", 100000), envInt("BURN_WORKERS", 4), envInt("BURN_BATCH", 128)
	q, _, _ := benchQueue(b, int32(workers+4))
	ctx := context.Background()
	var rate float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		mustEnqueue(b, q, nJobs(n, "default")...)
		var completed atomic.Int64
		done := make(chan struct{}) // closed at the n-th committed completion
		w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: workers, Prefetch: workers * (batch - 1), IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond,
			Handler: func(context.Context, *skiplock.Job) error { return nil },
			AfterComplete: func(*skiplock.Job, time.Time, time.Time) {
				if completed.Add(1) == int64(n) {
					close(done)
				}
			}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		w.Start(ctx) //nolint:errcheck
		<-done
		elapsed := time.Since(start)
		b.StopTimer()
		w.Stop(ctx) //nolint:errcheck
		rate = float64(n) / elapsed.Seconds()
	}
	b.ReportMetric(rate, "jobs/s")
}

// BenchmarkDequeueLatency measures one Dequeue(1) followed by Complete
// (not timed) with the table in three states: 10k queued; 1M queued; 1M
// finished plus 10k queued. Each reports the median and p99 of the claim.
//
//	go test ./bucketed -run '^$' -bench DequeueLatency -benchtime 2000x
func BenchmarkDequeueLatency(b *testing.B) {
	for _, st := range []struct {
		name             string
		queued, finished int
	}{
		{"queued=10k", 10000, 0},
		{"queued=1M", 1000000, 0},
		{"finished=1M,queued=10k", 10000, 1000000},
	} {
		b.Run(st.name, func(b *testing.B) {
			q, db, name := benchQueue(b, 4)
			ctx := context.Background()
			tbl := jobsTable(name)
			load := func(n int, status string) {
				for done := 0; done < n; done += 250000 {
					k := min(250000, n-done)
					if _, err := db.Exec(ctx, `INSERT INTO `+tbl+` ("status", "payload", "finished_at", "attempts")
						SELECT $1::TEXT::`+sqlident.Quote(name)+`."job_status", '{}', CASE WHEN $1 = 'Success' THEN now() END, CASE WHEN $1 = 'Success' THEN 1 ELSE 0 END
						FROM generate_series(1, $2::INT)`, status, k); err != nil {
						b.Fatal(err)
					}
				}
			}
			load(st.finished, "Success")
			load(st.queued, "Queued")
			if _, err := db.Exec(ctx, "VACUUM ANALYZE "+tbl); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				jobs, err := q.Dequeue(ctx, "default", 1)
				lat = append(lat, time.Since(t0))
				if err != nil || len(jobs) != 1 {
					b.Fatalf("dequeue %d: %d jobs, %v", i, len(jobs), err)
				}
				b.StopTimer()
				if err := q.Complete(ctx, jobs[0]); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_us")
			if testing.Verbose() {
				fmt.Printf("%s: p50 %v p99 %v max %v\n", st.name, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
			}
		})
	}
}
