package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// Ledger is a job kind worked on a fanout queue: its handler writes in
// the job's own transaction.
type Ledger struct {
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

// Kind names the worker that runs Ledger jobs.
func (Ledger) Kind() string { return "ledger" }

// A job inserted in the caller's transaction exists only if that
// transaction commits: here the first is rolled back and never runs, the
// second commits and does.
func ExampleClient_InsertTx() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_insert_tx", schema.LayoutBucketed)
	defer db.Close()
	c, err := client.New(ctx, db, &client.Config{Schema: "example_insert_tx"}) // insert only: no queue worked
	if err != nil {
		panic(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.Begin(ctx, skiplock.TxOptions{})
		if err != nil {
			panic(err)
		}
		if _, err := c.InsertTx(ctx, tx, SendEmail{To: fmt.Sprint("commit=", commit)}, nil); err != nil {
			panic(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			panic(err)
		}
	}
	jobs, err := c.JobList(ctx, &client.JobListParams{Kind: "send_email"})
	if err != nil {
		panic(err)
	}
	for _, j := range jobs {
		row, err := c.JobGet(ctx, j.ID)
		if err != nil {
			panic(err)
		}
		fmt.Println(row.State, string(row.Payload))
	}
	// Output:
	// queued {"to": "commit=true"}
}

// On a fanout queue the handler's writes and the job's removal commit in
// one transaction (client.TxFromContext): the balance moves exactly once,
// whatever retries and crashes happen.
func ExampleTxFromContext() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_fanout_tx", schema.LayoutFanout)
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE "example_fanout_tx"."balance" ("account" TEXT PRIMARY KEY, "cents" INT8 NOT NULL)`); err != nil {
		panic(err)
	}
	done := make(chan struct{})
	workers := client.NewWorkers()
	if err := client.AddWorker(workers, client.WorkFunc[Ledger](func(ctx context.Context, job *client.Job[Ledger]) error {
		tx, ok := client.TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("ledger jobs run on a fanout queue")
		}
		_, err := tx.Exec(ctx, `INSERT INTO "example_fanout_tx"."balance" VALUES ($1, $2)
ON CONFLICT ("account") DO UPDATE SET "cents" = "balance"."cents" + excluded."cents"`, job.Args.Account, job.Args.Cents)
		if err == nil {
			defer close(done)
		}
		return err
	}), &client.KindOptions{Queue: "ledger"}); err != nil {
		panic(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: "example_fanout_tx", Workers: workers, NoMaintenance: true,
		Queues: map[string]client.QueueConfig{"ledger": {Layout: schema.LayoutFanout, MaxWorkers: 2}}})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // the example's output is the check
	if _, err := c.Insert(ctx, Ledger{Account: "acme", Cents: 1250}, nil); err != nil {
		panic(err)
	}
	<-done
	if err := c.Stop(ctx); err != nil { // the job's transaction has committed once Stop returns
		panic(err)
	}
	var cents int64
	if err := db.QueryRow(ctx, `SELECT "cents" FROM "example_fanout_tx"."balance" WHERE "account" = 'acme'`).Scan(&cents); err != nil {
		panic(err)
	}
	fmt.Println("acme:", cents)
	// Output:
	// acme: 1250
}

// A periodic job is enqueued on its schedule by whichever client leads
// the schema's maintenance, each tick once however many processes run.
func ExampleConfig_periodicJobs() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_periodic", schema.LayoutBucketed)
	defer db.Close()
	ran := make(chan string, 1)
	workers := client.NewWorkers()
	if err := client.AddWorker(workers, client.WorkFunc[SendEmail](func(ctx context.Context, job *client.Job[SendEmail]) error {
		select {
		case ran <- job.Args.To:
		default:
		}
		return nil
	}), nil); err != nil {
		panic(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: "example_periodic", Workers: workers,
		Queues:       map[string]client.QueueConfig{"default": {MaxWorkers: 2}},
		PeriodicJobs: []client.PeriodicJob{{Name: "digest", Every: time.Hour, Args: SendEmail{To: "digest@example.com"}, RunOnStart: true}}})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // the example's output is the check
	fmt.Println("ran for", <-ran)
	// Output:
	// ran for digest@example.com
}

// Operating a queue: pause it (workers of every client stop claiming
// its jobs; inserts still work), see it paused, resume it.
func ExampleClient_QueuePause() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_pause", schema.LayoutBucketed)
	defer db.Close()
	c, err := client.New(ctx, db, &client.Config{Schema: "example_pause"})
	if err != nil {
		panic(err)
	}
	if _, err := c.Insert(ctx, SendEmail{To: "a@example.com"}, &client.InsertOpts{Queue: "mail"}); err != nil {
		panic(err)
	}
	if err := c.QueuePause(ctx, "mail", nil); err != nil {
		panic(err)
	}
	if err := c.QueuePause(ctx, "no-such-queue", nil); err != nil {
		fmt.Println("unknown queue refused")
	}
	queues, err := c.QueueList(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range queues {
		fmt.Println(q.Name, q.Layout, "paused:", q.Paused, "queued:", q.Counts["queued"])
	}
	if err := c.QueueResume(ctx, "mail", nil); err != nil {
		panic(err)
	}
	// Output:
	// unknown queue refused
	// mail bucketed paused: true queued: 1
}
