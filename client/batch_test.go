package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// batchItem is a batch job that ends in Outcome's state.
type batchItem struct {
	N       int             `json:"n"`
	Outcome skiplock.Status `json:"outcome"`
}

func (batchItem) Kind() string { return "batch_item" }

// batchDone is a batch's callback.
type batchDone struct {
	Note string `json:"note"`
}

func (batchDone) Kind() string { return "batch_done" }

// TestBatchCallsBackOnceWithCounts: a batch of 60 jobs on real workers,
// 40 succeeding, 12 failing for good and 8 cancelled by their handlers:
// the callback runs once, after every job of the batch has finished (its
// handler finds none Queued or Running), with the counts by final state,
// and is not inserted again by later rounds of the leader.
func TestBatchCallsBackOnceWithCounts(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	rounds := make(chan struct{}, 100)
	var early atomic.Int64
	done := make(chan map[string]any, 2)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[batchItem](func(ctx context.Context, j *client.Job[batchItem]) error {
		time.Sleep(time.Millisecond * time.Duration(j.Args.N%5)) // the jobs end in no set order
		switch j.Args.Outcome {
		case skiplock.StatusFailed:
			return errors.New("fails for good")
		case skiplock.StatusCanceled:
			return skiplock.Cancel(errors.New("not wanted"))
		}
		return nil
	}), nil))
	must(t, client.AddWorker(ws, client.WorkFunc[batchDone](func(ctx context.Context, j *client.Job[batchDone]) error {
		var live int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE "kind" = 'batch_item' AND "status" IN ('Queued', 'Running')`).Scan(&live); err != nil {
			return err
		}
		early.Add(live)
		var meta map[string]any
		if err := json.Unmarshal(j.Metadata, &meta); err != nil {
			return err
		}
		meta["note"] = j.Args.Note
		done <- meta
		return nil
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t),
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 8}},
		Maintenance: &maintenance.Config{BatchInterval: 20 * time.Millisecond, AfterTask: func(task string, err error) {
			if task == "batcher" && err == nil {
				select {
				case rounds <- struct{}{}:
				default:
				}
			}
		}}})
	must(t, err)
	var params []client.InsertParams
	want := map[skiplock.Status]int{skiplock.StatusSuccess: 40, skiplock.StatusFailed: 12, skiplock.StatusCanceled: 8}
	n := 0
	for outcome, k := range want {
		for range k {
			params = append(params, client.InsertParams{Args: batchItem{N: n, Outcome: outcome}, Opts: &client.InsertOpts{MaxAttempts: 1}})
			n++
		}
	}
	res, err := c.InsertBatch(ctx, params, client.InsertParams{Args: batchDone{Note: "all done"}})
	must(t, err)
	if res.ID == "" || len(res.Jobs) != n {
		t.Fatalf("InsertBatch: id %q, %d results, want an id and %d", res.ID, len(res.Jobs), n)
	}
	if row, err := c.JobGet(ctx, res.Jobs[n-1].ID); err != nil || row.Batch != res.ID {
		t.Fatalf("JobGet of a batch's job: %+v, %v; want batch %s", row, err, res.ID)
	}
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // the test's end
	var meta map[string]any
	select {
	case meta = <-done:
	case <-ctx.Done():
		t.Fatal("the batch's callback never ran")
	}
	if early.Load() != 0 {
		t.Errorf("the callback ran with %d of its batch's jobs still Queued or Running", early.Load())
	}
	batch, _ := meta["batch"].(map[string]any)
	counts, _ := batch["counts"].(map[string]any)
	if batch["id"] != res.ID || batch["size"] != float64(n) || meta["note"] != "all done" {
		t.Fatalf("callback metadata %v, args note %v: want batch %s of %d", meta, meta["note"], res.ID, n)
	}
	for state, key := range map[skiplock.Status]string{skiplock.StatusSuccess: "success", skiplock.StatusFailed: "failed", skiplock.StatusCanceled: "canceled"} {
		if counts[key] != float64(want[state]) {
			t.Errorf("counts %v: %s = %v, want %d", counts, key, counts[key], want[state])
		}
	}
	if counts["gone"] != float64(0) {
		t.Errorf("counts %v: gone = %v, want 0", counts, counts["gone"])
	}
	// Three more rounds of the leader: no second callback.
	for range 3 {
		select {
		case <-rounds:
		case <-ctx.Done():
			t.Fatal("the leader stopped finishing batches")
		}
	}
	if got := count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE "kind" = 'batch_done'`); got != 1 {
		t.Errorf("%d callback jobs, want 1", got)
	}
}

// TestBatchRefusals: a batch with a fanout job, a unique job, or a
// callback to a fanout queue is a usage error that inserts nothing.
func TestBatchRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed, schema.LayoutFanout)
	c, err := client.New(ctx, db, &client.Config{Schema: s, NoMaintenance: true, Queues: map[string]client.QueueConfig{"f": {Layout: schema.LayoutFanout, MaxWorkers: -1}}})
	must(t, err)
	cb := client.InsertParams{Args: batchDone{}}
	for name, tc := range map[string]struct {
		jobs     []client.InsertParams
		callback client.InsertParams
	}{
		"fanout job":      {[]client.InsertParams{{Args: batchItem{}}, {Args: batchItem{}, Opts: &client.InsertOpts{Queue: "f"}}}, cb},
		"unique job":      {[]client.InsertParams{{Args: batchItem{}, Opts: &client.InsertOpts{UniqueKey: "k"}}}, cb},
		"fanout callback": {[]client.InsertParams{{Args: batchItem{}}}, client.InsertParams{Args: batchDone{}, Opts: &client.InsertOpts{Queue: "f"}}},
		"no jobs":         {nil, cb},
	} {
		if _, err := c.InsertBatch(ctx, tc.jobs, tc.callback); !usage.Is(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."job_batch"`) + countKind(t, db, s, "jobs", "batch_item"); n != 0 {
		t.Fatalf("refused batches left %d rows", n)
	}
}
