package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/schema"
)

// TestQueueLimitsDefaultsAndLocal: a queue's QueueConfig.Limits are
// written at Start where the database holds none, and not over an
// operator's; the client then runs at most the local limit at once with
// 10 workers, and QueueSetLimits changes the limit for the next claims.
func TestQueueLimitsDefaultsAndLocal(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ws, g, done := atOnce(t, 5*time.Millisecond)
	cfg := &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{
		"default": {MaxWorkers: 10, Limits: client.Limits{LocalConcurrency: 2, Concurrency: 4}},
		"other":   {MaxWorkers: 1, Limits: client.Limits{Concurrency: 7}},
	}}
	operator, err := client.New(ctx, db, &client.Config{Schema: s})
	must(t, err)
	must(t, operator.QueueSetLimits(ctx, "other", client.Limits{Concurrency: 3}))
	c, err := client.New(ctx, db, cfg)
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // the test is about the limits
	if st, err := c.QueueLimits(ctx, "default"); err != nil || st.LocalConcurrency != 2 || st.Concurrency != 4 || st.Slots != 4 {
		t.Fatalf("default queue after Start: %+v, %v; want the defaults written", st, err)
	}
	if st, err := c.QueueLimits(ctx, "other"); err != nil || st.Concurrency != 3 {
		t.Fatalf("other queue after Start: %+v, %v; want the operator's 3 kept", st, err)
	}
	for i := range 40 {
		_, err := c.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool { return done.Load() == 40 })
	if m := g.Most(); m != 2 {
		t.Errorf("at most %d jobs ran at once; want the local limit, 2", m)
	}
}

// TestPartitionKeyLimits: a queue partitioned by key with a limit of 1
// per partition, its jobs inserted with InsertOpts.PartitionKey into two
// partitions: with 10 workers, at most one job of each partition runs at
// once, and both partitions run side by side.
func TestPartitionKeyLimits(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	running, most := map[int]int{}, map[int]int{}
	var done atomic.Int64
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		p := j.Args.N % 2
		mu.Lock()
		running[p]++
		most[p] = max(most[p], running[p])
		if running[0] > 0 && running[1] > 0 {
			most[2] = 1 // the partitions ran side by side
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the job's work: it holds its slot meanwhile
		mu.Lock()
		running[p]--
		mu.Unlock()
		done.Add(1)
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{
		"default": {MaxWorkers: 10, Limits: client.Limits{Concurrency: 1, PartitionBy: "key"}},
	}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // the test is about the limits
	for i := range 40 {
		_, err := c.Insert(ctx, emailArgs{N: i}, &client.InsertOpts{PartitionKey: fmt.Sprint("p", i%2)})
		must(t, err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool { return done.Load() == 40 })
	mu.Lock()
	defer mu.Unlock()
	if most[0] != 1 || most[1] != 1 || most[2] != 1 {
		t.Errorf("at most %d and %d jobs of each partition ran at once, side by side: %v; want 1 each, side by side", most[0], most[1], most[2] == 1)
	}
}

// TestLimitGauges: the maintenance leader exports a limited queue's
// global limit, the slots its running jobs hold, and its rate per second;
// a queue without limits has none of these gauges.
func TestLimitGauges(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c, reg := heldGaugeClient(t, map[string]client.QueueConfig{
		"default": {MaxWorkers: 10, Limits: client.Limits{Concurrency: 4, Rate: 10, RatePeriod: 2 * time.Second}},
		"free":    {MaxWorkers: 1},
	})
	for i := range 6 {
		_, err := c.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
	}
	var got map[string]float64
	testdb.WaitFor(t, "the limit gauges, with 4 slots held", 30*time.Second, func() bool {
		got = series(t, reg)
		return got[gauge("skiplock_queue_concurrency_held", "default", "bucketed")] == 4
	})
	if got[gauge("skiplock_queue_concurrency_limit", "default", "bucketed")] != 4 || got[gauge("skiplock_queue_rate_limit_per_second", "default", "bucketed")] != 5 {
		t.Errorf("limit gauges: %v", got)
	}
	for _, name := range []string{"skiplock_queue_concurrency_limit", "skiplock_queue_concurrency_held", "skiplock_queue_rate_limit_per_second"} {
		if _, ok := got[gauge(name, "free", "bucketed")]; ok {
			t.Errorf("%s exported for a queue without limits", name)
		}
	}
}

// TestPartitionGauges: a queue partitioned by key with a limit of 2 per
// partition and partition vip's own 3; 4 jobs of a, 1 of vip and 1 of
// none (the partition "") held by their handlers. The leader's sample
// exports each partition's running and waiting jobs and its limit: a runs
// 2 and waits 2.
func TestPartitionGauges(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c, reg := heldGaugeClient(t, map[string]client.QueueConfig{
		"default": {MaxWorkers: 10, Limits: client.Limits{Concurrency: 2, PartitionBy: "key", PartitionLimits: map[string]int{"vip": 3}}},
	})
	for i, key := range []string{"a", "a", "a", "a", "vip", ""} {
		_, err := c.Insert(ctx, emailArgs{N: i}, &client.InsertOpts{PartitionKey: key})
		must(t, err)
	}
	part := func(name, p string) string { return gauge(name, "default", "bucketed", "partition="+p) }
	var got map[string]float64
	testdb.WaitFor(t, "the partition gauges, a running 2 of 4", 30*time.Second, func() bool {
		got = series(t, reg)
		return got[part("skiplock_partition_running", "a")] == 2 && got[part("skiplock_partition_running", "vip")] == 1 && got[part("skiplock_partition_running", "")] == 1
	})
	want := map[string]float64{
		part("skiplock_partition_waiting", "a"): 2, part("skiplock_partition_waiting", "vip"): 0, part("skiplock_partition_waiting", ""): 0,
		part("skiplock_partition_concurrency_limit", "a"): 2, part("skiplock_partition_concurrency_limit", "vip"): 3,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (exported: %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got[gauge("skiplock_queue_concurrency_limit", "default", "bucketed")]; ok {
		t.Errorf("the queue-wide limit gauge exported for a queue whose limit is per partition")
	}
}

// heldGaugeClient is a started client on a fresh schema with queues, a
// registry of its own sampled every 50 ms, and one kind (emailArgs) whose
// handlers hold their jobs (and slots) until the test ends, so the gauges
// can be read while they run.
func heldGaugeClient(t *testing.T, queues map[string]client.QueueConfig) (*client.Client, *prometheus.Registry) {
	t.Helper()
	db, s := openDB(t)
	ctx := ctxT(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	must(t, err)
	release := make(chan struct{})
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		<-release
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Metrics: m, MetricsSampleInterval: 50 * time.Millisecond, Queues: queues})
	must(t, err)
	must(t, c.Start(ctx))
	t.Cleanup(func() {
		close(release)
		c.Stop(context.Background()) //nolint:errcheck // the tests are about the gauges
	})
	return c, reg
}

// TestFanoutQueueLimits: a fanout queue's QueueConfig.Limits (global 3)
// are written at Start and kept by its claims: with 10 workers, at most 3
// jobs at once, and 3 reached; a rate on a fanout queue is refused.
func TestFanoutQueueLimits(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ws, g, done := atOnce(t, 50*time.Millisecond)
	if _, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{
		"default": {Layout: schema.LayoutFanout, MaxWorkers: 10, Limits: client.Limits{Rate: 5, RatePeriod: time.Second}},
	}}); err == nil {
		t.Fatal("a rate on a fanout queue: accepted")
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Queues: map[string]client.QueueConfig{
		"default": {Layout: schema.LayoutFanout, MaxWorkers: 10, Limits: client.Limits{Concurrency: 3}},
	}})
	must(t, err)
	must(t, c.Start(ctx))
	defer c.Stop(ctx) //nolint:errcheck // the test is about the limits
	for i := range 40 {
		_, err := c.Insert(ctx, emailArgs{N: i}, nil)
		must(t, err)
	}
	testdb.WaitFor(t, "every job done", time.Minute, func() bool { return done.Load() == 40 })
	if m := g.Most(); m != 3 {
		t.Errorf("at most %d jobs ran at once; want the global limit, 3", m)
	}
}

// atOnce returns workers whose emailArgs jobs take work each, with the
// most that ran at once and how many are done.
func atOnce(t *testing.T, work time.Duration) (ws *client.Workers, g *testdb.Gauge, done *atomic.Int64) {
	t.Helper()
	g, done = new(testdb.Gauge), new(atomic.Int64)
	ws = client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		g.Enter()
		defer g.Leave()
		time.Sleep(work) // the job's work: it holds its place meanwhile
		done.Add(1)
		return nil
	}), nil))
	return ws, g, done
}
