package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// Process jobs inside their own transactions: a handler's writes commit
// with the job's removal, and a failed handler leaves no trace but the
// recorded attempt and its backoff. Runs against the test database.
func Example() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_fanout", schema.LayoutFanout)
	defer db.Close()

	// A failed job waits out a backoff before it can be claimed again:
	// 10ms here, doubling per attempt (default 1s).
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: "example_fanout", RetryBase: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	if _, err := q.EnqueueMany(ctx, []skiplock.NewJob{{Payload: []byte(`1`)}, {Payload: []byte(`2`)}, {Payload: []byte(`3`)}}); err != nil {
		panic(err)
	}
	handled, failedOnce := 0, false
	var retryAt time.Time // when the failed job's backoff ends
	for {
		res, err := q.Process(ctx, func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			if !failedOnce {
				failedOnce = true
				return errors.New("first try fails") // rolled back; the job stays queued, in backoff
			}
			_, err := tx.Exec(ctx, `INSERT INTO "example_fanout"."work_log" (job_id, worker) VALUES ($1, 'example')`, job.ID)
			return err
		})
		if err != nil {
			panic(err)
		}
		if res.Job == nil {
			// Nothing ready: the queue is empty, or a job is waiting out
			// its backoff.
			more, err := q.HasQueued(ctx)
			if err != nil {
				panic(err)
			}
			if !more {
				break
			}
			time.Sleep(time.Until(retryAt) + time.Millisecond) // time under test: no claim takes the failed job before its backoff (Result.RetryIn) ends
			continue
		}
		if res.HandlerErr == nil {
			handled++
		} else {
			retryAt = time.Now().Add(res.RetryIn)
		}
	}
	var logged, queued int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM "example_fanout"."work_log"), (SELECT count(*) FROM "example_fanout"."job_queue")`).Scan(&logged, &queued); err != nil {
		panic(err)
	}
	fmt.Println("handled:", handled, "work_log rows:", logged, "left in queue:", queued)
	// Output: handled: 3 work_log rows: 3 left in queue: 0
}

// Run a Worker whose handler enqueues a follow-up job through the job's
// own transaction: each receipt commits exactly when its order's job is
// removed. NewWorker, Start, Stop and Stats are the bucketed layout's
// names too. Runs against the test database.
func ExampleQueue_NewWorker() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_fanout_worker", schema.LayoutFanout)
	defer db.Close()

	orders, err := fanout.New(ctx, db, &fanout.Config{Schema: "example_fanout_worker", Queue: "orders"})
	if err != nil {
		panic(err)
	}
	receipts, err := fanout.New(ctx, db, &fanout.Config{Schema: "example_fanout_worker", Queue: "receipts"})
	if err != nil {
		panic(err)
	}
	if _, err := orders.EnqueueMany(ctx, []skiplock.NewJob{{Payload: []byte(`1`)}, {Payload: []byte(`2`)}, {Payload: []byte(`3`)}}); err != nil {
		panic(err)
	}
	processed := make(chan struct{}, 3) // a signal for each order processed and committed
	w, err := orders.NewWorker(&fanout.WorkerConfig{Workers: 2,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			_, err := receipts.EnqueueIn(ctx, tx, skiplock.NewJob{Payload: job.Payload})
			return err
		},
		OnResult: func(_ int, r *fanout.Result, err error) {
			if err == nil && r.HandlerErr == nil {
				processed <- struct{}{}
			}
		}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		select {
		case <-processed:
		case <-time.After(time.Minute):
			panic("the orders were not processed within a minute")
		}
	}
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	st, err := receipts.Stats(ctx, "receipts")
	if err != nil {
		panic(err)
	}
	fmt.Println("orders completed:", w.Stats().Completed, "receipts queued:", st.Queued)
	// Output: orders completed: 3 receipts queued: 3
}
