package bucketed_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
)

// Claim a batch by hand and report each job, as a load driver does.
func ExampleQueue_Dequeue() {
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	q, err := bucketed.New(ctx, db, &bucketed.Config{VisibilityTimeout: time.Minute})
	if err != nil {
		log.Fatal(err) // says to run skiplock migrate when the schema is missing
	}
	if _, err := q.EnqueueMany(ctx, []skiplock.NewJob{{Queue: "mail", Payload: []byte(`{"to":"a@example.com"}`)}}); err != nil {
		log.Fatal(err)
	}
	jobs, err := q.Dequeue(ctx, "mail", 100)
	if err != nil {
		log.Fatal(err)
	}
	var done []*skiplock.Job
	var failed []bucketed.Failure
	for _, j := range jobs {
		if err := send(j); err != nil {
			failed = append(failed, bucketed.Failure{Job: j, Err: err})
			continue
		}
		done = append(done, j)
	}
	lost, err := q.CompleteMany(ctx, done) // one statement for the batch
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(lost), "results dropped: their leases had expired and another worker took them")
	if _, err := q.FailMany(ctx, failed); err != nil {
		log.Fatal(err)
	}
}

// Run a handler over a queue with a Worker until interrupted.
func ExampleQueue_NewWorker() {
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	q, err := bucketed.New(ctx, db, nil)
	if err != nil {
		log.Fatal(err)
	}
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Queue:   "mail",
		Workers: 20,
		Handler: func(ctx context.Context, j *skiplock.Job) error { return send(j) },
		Logger:  slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// ... until shutdown:
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = w.Stop(stop) // in-flight jobs finish or are given back
}

func send(*skiplock.Job) error { return nil }
