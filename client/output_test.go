package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// outputArgs are TestHandlerRecordsOutputAndProgress's jobs.
type outputArgs struct {
	N   int  `json:"n"`
	Big bool `json:"big"`
}

func (outputArgs) Kind() string { return "output_test" }

// TestHandlerRecordsOutputAndProgress: a bucketed job's handler reports
// progress, which JobGet shows while the job runs, then records its
// output, which stays once the job has succeeded. Output past the bound,
// a fanout job's output and a call outside a handler are usage errors.
func TestHandlerRecordsOutputAndProgress(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	reported, release := make(chan string, 1), make(chan struct{})
	refused := make(chan error, 2)
	ws := client.NewWorkers()
	must(t, client.AddWorker(ws, client.WorkFunc[outputArgs](func(ctx context.Context, j *client.Job[outputArgs]) error {
		if _, fanout := client.TxFromContext(ctx); fanout {
			refused <- client.RecordOutput(ctx, map[string]int{"n": j.Args.N})
			return nil
		}
		if j.Args.Big {
			refused <- client.RecordOutput(ctx, strings.Repeat("x", skiplock.MaxOutputBytes))
			return nil
		}
		if err := client.ReportProgress(ctx, map[string]int{"done": 1, "of": 2}); err != nil {
			return err
		}
		reported <- j.ID
		<-release
		if err := client.ReportProgress(ctx, map[string]int{"done": 2, "of": 2}); err != nil {
			return err
		}
		return client.RecordOutput(ctx, map[string]int{"sum": 2 * j.Args.N})
	}), nil))
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), Queues: map[string]client.QueueConfig{
		"b": {MaxWorkers: 2}, "f": {MaxWorkers: 1, Layout: schema.LayoutFanout}}})
	must(t, err)
	events, end := c.Subscribe(client.EventJobCompleted)
	defer end()
	job, err := c.Insert(ctx, outputArgs{N: 21}, &client.InsertOpts{Queue: "b"})
	must(t, err)
	must(t, c.Start(ctx))
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // the test's end
	select {
	case <-reported:
	case <-ctx.Done():
		t.Fatal("the handler never reported progress")
	}
	row, err := c.JobGet(ctx, job.ID)
	must(t, err)
	if row.State != "running" || !sameJSON(row.Progress, `{"done": 1, "of": 2}`) || row.Output != nil {
		t.Fatalf("while running: state %s, progress %s, output %s; want running, the first progress, no output", row.State, row.Progress, row.Output)
	}
	close(release)
	for done := false; !done; {
		select {
		case ev := <-events:
			done = ev.Job.ID == job.ID
		case <-ctx.Done():
			t.Fatal("the job never completed")
		}
	}
	row, err = c.JobGet(ctx, job.ID)
	must(t, err)
	if row.State != "success" || !sameJSON(row.Output, `{"sum": 42}`) || !sameJSON(row.Progress, `{"done": 2, "of": 2}`) {
		t.Fatalf("after it succeeded: state %s, output %s, progress %s", row.State, row.Output, row.Progress)
	}
	for _, opts := range []*client.InsertOpts{{Queue: "b"}, {Queue: "f"}} {
		_, err := c.Insert(ctx, outputArgs{N: 1, Big: opts.Queue == "b"}, opts)
		must(t, err)
		select {
		case err := <-refused:
			if !usage.Is(err) {
				t.Errorf("queue %s: recording %v, want a usage error", opts.Queue, err)
			}
		case <-ctx.Done():
			t.Fatal("the refused recordings never ran")
		}
	}
	if err := client.RecordOutput(ctx, 1); !usage.Is(err) || errors.Is(err, skiplock.ErrLeaseLost) {
		t.Errorf("outside a handler: %v, want a usage error", err)
	}
}

// sameJSON reports whether got holds the JSON value want.
func sameJSON(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
