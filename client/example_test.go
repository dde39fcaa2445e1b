package client_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// SendEmail is a job kind: its fields are the job's arguments.
type SendEmail struct {
	To string `json:"to"`
}

// Kind names the worker that runs SendEmail jobs.
func (SendEmail) Kind() string { return "send_email" }

// One client works a bucketed queue and a fanout queue; inserting wakes
// the workers at once. Runs against the test database.
func Example() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_client", schema.LayoutBucketed, schema.LayoutFanout)
	defer db.Close()

	var mu sync.Mutex
	sent := map[string]bool{}
	done := make(chan struct{}, 2)
	workers := client.NewWorkers()
	if err := client.AddWorker(workers, client.WorkFunc[SendEmail](func(ctx context.Context, job *client.Job[SendEmail]) error {
		mu.Lock()
		sent[job.Args.To] = true
		mu.Unlock()
		done <- struct{}{}
		return nil
	}), &client.KindOptions{Timeout: 30 * time.Second}); err != nil {
		panic(err)
	}
	c, err := client.New(ctx, db, &client.Config{
		Schema:  "example_client",
		Workers: workers,
		Queues: map[string]client.QueueConfig{
			"mail":   {MaxWorkers: 4},
			"ledger": {Layout: schema.LayoutFanout, MaxWorkers: 2},
		},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // the example's output is the check

	if _, err := c.Insert(ctx, SendEmail{To: "a@example.com"}, &client.InsertOpts{Queue: "mail"}); err != nil {
		panic(err)
	}
	if _, err := c.Insert(ctx, SendEmail{To: "b@example.com"}, &client.InsertOpts{Queue: "ledger"}); err != nil {
		panic(err)
	}
	<-done
	<-done
	mu.Lock()
	fmt.Println("sent:", sent["a@example.com"], sent["b@example.com"])
	mu.Unlock()
	// Output:
	// sent: true true
}
