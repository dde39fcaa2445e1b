package bucketed_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// Enqueue jobs, claim them with a lease, complete them, and see that a
// stale worker's late result is refused. Runs against the test database.
func Example() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_bucketed", schema.LayoutBucketed)
	defer db.Close()

	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: "example_bucketed"})
	if err != nil {
		panic(err)
	}
	added, err := q.EnqueueMany(ctx, []skiplock.NewJob{
		{Queue: "mail", Payload: []byte(`{"to":"a@example.com"}`)},
		{Queue: "mail", Payload: []byte(`{"to":"b@example.com"}`)},
		{Queue: "mail", Payload: []byte(`{"to":"c@example.com"}`), UniqueKey: "c"},
	})
	if err != nil {
		panic(err)
	}
	dup, err := q.Enqueue(ctx, skiplock.NewJob{Queue: "mail", UniqueKey: "c"})
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued:", added, "duplicate skipped:", dup.Duplicate)

	jobs, err := q.Dequeue(ctx, "mail", 10)
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed:", len(jobs), "status:", jobs[0].Status, "attempt:", jobs[0].Attempts)

	lost, err := q.CompleteMany(ctx, jobs)
	if err != nil {
		panic(err)
	}
	fmt.Println("completed:", len(jobs)-len(lost))

	// The same lease presented again: the job has finished, so the late
	// report changes nothing.
	err = q.Complete(ctx, jobs[0])
	fmt.Println("late complete is refused:", errors.Is(err, skiplock.ErrLeaseLost))
	// Output:
	// enqueued: 3 duplicate skipped: true
	// claimed: 3 status: Running attempt: 1
	// completed: 3
	// late complete is refused: true
}

// Run a Worker whose OnComplete hook enqueues a follow-up job for each
// completed one in the completion's transaction: a receipt commits
// exactly when its job's Success does. Runs against the test database.
func ExampleQueue_EnqueueIn() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_bucketed_worker", schema.LayoutBucketed)
	defer db.Close()

	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: "example_bucketed_worker", Queue: "mail"})
	if err != nil {
		panic(err)
	}
	if _, err := q.EnqueueMany(ctx, []skiplock.NewJob{{Payload: []byte(`1`)}, {Payload: []byte(`2`)}}); err != nil {
		panic(err)
	}
	completed := make(chan struct{}, 2) // a signal for each committed completion
	w, err := q.NewWorker(&bucketed.WorkerConfig{Workers: 2,
		Handler:       func(ctx context.Context, job *skiplock.Job) error { return nil },
		AfterComplete: func(*skiplock.Job, time.Time, time.Time) { completed <- struct{}{} },
		OnComplete: func(ctx context.Context, tx skiplock.Tx, done []*skiplock.Job) error {
			for _, j := range done {
				if _, err := q.EnqueueIn(ctx, tx, skiplock.NewJob{Queue: "receipts", Payload: j.Payload}); err != nil {
					return err
				}
			}
			return nil
		}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	for range 2 {
		select {
		case <-completed:
		case <-time.After(time.Minute):
			panic("the jobs did not complete within a minute")
		}
	}
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	st, err := q.Stats(ctx, "receipts")
	if err != nil {
		panic(err)
	}
	fmt.Println("completed:", w.Stats().Completed, "receipts queued:", st.ByStatus[skiplock.StatusQueued])
	// Output: completed: 2 receipts queued: 2
}
