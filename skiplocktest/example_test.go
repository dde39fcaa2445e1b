package skiplocktest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/skiplocktest"
)

// SendEmail is a job kind: its fields are the job's arguments.
type SendEmail struct {
	To string `json:"to"`
}

// Kind names the worker that runs SendEmail jobs.
func (SendEmail) Kind() string { return "send_email" }

// signUp is code under test: it inserts a job in the caller's
// transaction.
func signUp(ctx context.Context, c *client.Client, tx skiplock.Tx, email string) error {
	_, err := c.InsertTx(ctx, tx, SendEmail{To: email}, &client.InsertOpts{Queue: "mail"})
	return err
}

// A test asserts that the code under test inserted a job, in its
// transaction, before it commits. Runs against the test database.
func Example() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_skiplocktest")
	defer db.Close()
	// In a test, t is the test's *testing.T, and the schema comes from
	// skiplocktest.Schema(t, db).
	t := &testing.T{}
	const name = "example_skiplocktest"

	c, err := client.New(ctx, db, &client.Config{Schema: name})
	if err != nil {
		panic(err)
	}
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the example never commits
	if err := signUp(ctx, c, tx, "a@example.com"); err != nil {
		panic(err)
	}

	job := skiplocktest.RequireInsertedTx(ctx, t, tx, name, SendEmail{To: "a@example.com"},
		&skiplocktest.RequireInsertedOpts{Queue: "mail", Layout: schema.LayoutBucketed})
	fmt.Println(job.Kind, job.Args.To, job.Status)
	// Outside the transaction, nothing was inserted yet.
	skiplocktest.RequireNotInserted(ctx, t, db, name, SendEmail{To: "a@example.com"}, nil)
	// Output:
	// send_email a@example.com Queued
}

// Several jobs, of several kinds and layouts, in any order.
func ExampleRequireManyInserted() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_skiplocktest_many")
	defer db.Close()
	t := &testing.T{} // in a test, the test's *testing.T
	const name = "example_skiplocktest_many"

	c, err := client.New(ctx, db, &client.Config{Schema: name,
		Queues: map[string]client.QueueConfig{"ledger": {Layout: schema.LayoutFanout, MaxWorkers: -1}}})
	if err != nil {
		panic(err)
	}
	if _, err := c.InsertMany(ctx, []client.InsertParams{
		{Args: SendEmail{To: "a@example.com"}},
		{Args: SendEmail{To: "b@example.com"}, Opts: &client.InsertOpts{Queue: "ledger"}},
	}); err != nil {
		panic(err)
	}

	jobs := skiplocktest.RequireManyInserted(ctx, t, db, name, []skiplocktest.ExpectedJob{
		{Args: SendEmail{To: "b@example.com"}, Opts: &skiplocktest.RequireInsertedOpts{Layout: schema.LayoutFanout}},
		{Args: SendEmail{To: "a@example.com"}, Opts: &skiplocktest.RequireInsertedOpts{Queue: skiplock.DefaultQueue}},
	})
	fmt.Println(jobs[0].Queue, jobs[1].Queue)
	// Output:
	// ledger default
}

// A worker's handler runs through a real client: on a fanout queue it
// writes through the job's transaction, which commits with the job's
// removal.
func ExampleWorker() {
	ctx := context.Background()
	db := testdb.ExampleDB("example_skiplocktest_worker")
	defer db.Close()
	t := &testing.T{} // in a test, the test's *testing.T
	const name = "example_skiplocktest_worker"

	worker := client.WorkFunc[SendEmail](func(ctx context.Context, job *client.Job[SendEmail]) error {
		tx, ok := client.TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("not on a fanout queue")
		}
		_, err := tx.Exec(ctx, `INSERT INTO example_skiplocktest_worker.work_log (job_id, worker) VALUES ($1, $2)`, job.ID, job.Args.To)
		return err
	})
	w := skiplocktest.NewWorker(t, db, &client.Config{
		Schema: name,
		Queues: map[string]client.QueueConfig{"mail": {Layout: schema.LayoutFanout}},
	}, worker, &client.KindOptions{Queue: "mail"})

	res := w.Work(ctx, t, SendEmail{To: "a@example.com"}, nil)
	var logged int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM example_skiplocktest_worker.work_log WHERE job_id = $1`, res.Job.ID).Scan(&logged); err != nil {
		panic(err)
	}
	fmt.Println(res.Outcome, res.Err, res.Job.Attempts, logged)
	// Output:
	// completed <nil> 1 1
}

// A test makes its own schema, dropped when it ends, and points the
// client at it.
func ExampleSchema() {
	var t *testing.T // the test's
	db := testdb.Open(t, nil)
	name := skiplocktest.Schema(t, db, schema.LayoutBucketed)
	c, err := client.New(context.Background(), db, &client.Config{Schema: name})
	if err != nil {
		t.Fatal(err)
	}
	_ = c
}
