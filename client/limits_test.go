package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestQueueLimitsDefaultsAndLocal: a queue's QueueConfig.Limits are
// written at Start where the database holds none, and not over an
// operator's; the client then runs at most the local limit at once with
// 10 workers, and QueueSetLimits changes the limit for the next claims.
func TestQueueLimitsDefaultsAndLocal(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	var running, most, done atomic.Int64
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[emailArgs](func(ctx context.Context, j *client.Job[emailArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // the job's work: it holds its place meanwhile
		done.Add(1)
		return nil
	}), nil))
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
	if m := most.Load(); m != 2 {
		t.Errorf("at most %d jobs ran at once; want the local limit, 2", m)
	}
}
