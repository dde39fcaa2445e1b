package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

type cancelArgs struct {
	N int `json:"n"`
}

func (cancelArgs) Kind() string { return "cancel_test" }

// A handler's skiplock.Cancel, on a queue of each layout whose kind has
// its own backoff: every job runs once, subscribers hear one
// EventJobCancelled per job (final, with the handler's error), and
// QueueStats count them as Cancelled, not Failed; but for fanout's
// documented window (docs/concepts.md, "Retries, backoff and snoozes"),
// where a claim whose snapshot predates the attempt's count runs the job
// once more before its cancel is recorded, heard and counted as a
// failure.
func TestHandlerCancelIsHeard(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	const each = 20
	var mu sync.Mutex
	runs := map[string]int{}
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[cancelArgs](func(ctx context.Context, j *client.Job[cancelArgs]) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return skiplock.Cancel(errors.New("not wanted"))
	}), &client.KindOptions{Backoff: func(int) time.Duration { return time.Millisecond }}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), Queues: map[string]client.QueueConfig{
		"b": {MaxWorkers: 4}, "f": {MaxWorkers: 4, Layout: schema.LayoutFanout}}})
	if err != nil {
		t.Fatal(err)
	}
	events, end := c.Subscribe(client.EventJobCancelled, client.EventJobFailed)
	defer end()
	var params []client.InsertParams
	for _, q := range []string{"b", "f"} {
		for i := range each {
			params = append(params, client.InsertParams{Args: cancelArgs{N: i}, Opts: &client.InsertOpts{Queue: q, MaxAttempts: 5}})
		}
	}
	if _, err := c.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	heard := map[string]int{}
	again := map[string]int{} // fanout's documented window: a second run, heard as a failure
	for len(heard) < 2*each {
		select {
		case ev := <-events:
			if ev.Queue == "f" && ev.Kind == client.EventJobFailed && !ev.Final && skiplock.IsCancel(ev.Err) {
				again[ev.Job.ID]++
				continue
			}
			if ev.Kind != client.EventJobCancelled || !ev.Final || !skiplock.IsCancel(ev.Err) {
				t.Fatalf("job %s of queue %s: event %s, final %v, error %v; want a final cancel with the handler's error", ev.Job.ID, ev.Queue, ev.Kind, ev.Final, ev.Err)
			}
			heard[ev.Job.ID]++
		case <-ctx.Done():
			t.Fatalf("%d of %d cancels heard", len(heard), 2*each)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for q, failed := range map[string]int{"b": 0, "f": len(again)} {
		if st, _ := c.QueueStats(q); st.Cancelled != each || st.Failed != int64(failed) {
			t.Errorf("queue %s: stats %+v, want %d cancelled and %d failed", q, st, each, failed)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1+again[id] || heard[id] != 1 || again[id] > 1 {
			t.Errorf("job %s ran %d times, its cancel heard %d times, %d runs in fanout's window", id, n, heard[id], again[id])
		}
	}
}
