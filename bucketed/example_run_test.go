package bucketed_test

import (
	"context"
	"errors"
	"fmt"

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
