package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// eventArgs is a job kind whose handler fails attempts up to FailUntil
// and, when Snooze is set, snoozes its first run (a snooze gives the
// attempt back).
type eventArgs struct {
	N         int  `json:"n"`
	FailUntil int  `json:"fail_until"`
	Snooze    bool `json:"snooze"`
}

func (eventArgs) Kind() string { return "event" }

// runLog counts handler runs by outcome, per job.
type runLog struct {
	mu                        sync.Mutex
	ok, failed, snoozed, runs map[string]int
}

// first reports whether the job has not run before.
func (r *runLog) first(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id] == 0
}

func (r *runLog) add(m map[string]int, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m[id]++
	r.runs[id]++
}

// TestSubscribeHearsEveryOutcome: a client works a bucketed and a fanout
// queue, 150 jobs each, with failed attempts and snoozes; the events a
// subscriber hears match the handler runs one for one: one completion
// per job, one failure per failed run (none final), one snooze per
// snooze, each naming its queue and layout; a second subscriber that asks
// only for completions hears only those, and ending a subscription closes
// its channel.
func TestSubscribeHearsEveryOutcome(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	const each = 150
	runs := &runLog{ok: map[string]int{}, failed: map[string]int{}, snoozed: map[string]int{}, runs: map[string]int{}}
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[eventArgs](func(ctx context.Context, j *client.Job[eventArgs]) error {
		switch {
		case j.Args.Snooze && runs.first(j.ID):
			runs.add(runs.snoozed, j.ID)
			return skiplock.Snooze(time.Millisecond)
		case j.Attempts <= j.Args.FailUntil:
			runs.add(runs.failed, j.ID)
			return skiplock.RetryAfter(fmt.Errorf("attempt %d fails on purpose", j.Attempts), time.Millisecond)
		}
		runs.add(runs.ok, j.ID)
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), Queues: map[string]client.QueueConfig{
		"b": {MaxWorkers: 6}, "f": {MaxWorkers: 6, Layout: schema.LayoutFanout}}})
	if err != nil {
		t.Fatal(err)
	}
	all, endAll := c.Subscribe()
	done, endDone := c.Subscribe(client.EventJobCompleted)
	var params []client.InsertParams
	for _, q := range []string{"b", "f"} {
		for i := range each {
			params = append(params, client.InsertParams{Args: eventArgs{N: i, FailUntil: i % 3, Snooze: i%10 == 0}, Opts: &client.InsertOpts{Queue: q}})
		}
	}
	if _, err := c.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	heard := map[client.EventKind]map[string]int{}
	completed := 0
	hear := func(ev *client.Event) {
		if heard[ev.Kind] == nil {
			heard[ev.Kind] = map[string]int{}
		}
		heard[ev.Kind][ev.Job.ID]++
		if want := map[string]schema.Layout{"b": schema.LayoutBucketed, "f": schema.LayoutFanout}[ev.Queue]; ev.Layout != want || ev.Job.Queue != ev.Queue {
			t.Fatalf("event %s of job %s: queue %q layout %q, job's queue %q", ev.Kind, ev.Job.ID, ev.Queue, ev.Layout, ev.Job.Queue)
		}
		if ev.Kind == client.EventJobFailed && (ev.Final || ev.Err == nil) {
			t.Fatalf("failed attempt %d of job %s: final %v, error %v; want a retried failure with its error", ev.Job.Attempts, ev.Job.ID, ev.Final, ev.Err)
		}
		if ev.Kind == client.EventJobCompleted {
			completed++
		}
	}
	for completed < 2*each {
		select {
		case ev := <-all:
			hear(ev)
		case <-ctx.Done():
			t.Fatalf("%d of %d completions heard", completed, 2*each)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	endAll()
	// Events still in the channel's buffer were published before Stop
	// returned (a failed attempt's event may come after the completion of
	// the job's next attempt, which another worker ran meanwhile); the
	// ended subscription's channel then closes.
	for open := true; open; {
		select {
		case ev, ok := <-all:
			if open = ok; ok {
				hear(ev)
			}
		case <-ctx.Done():
			t.Fatal("the ended subscription's channel is still open")
		}
	}
	runs.mu.Lock()
	defer runs.mu.Unlock()
	// On PostgreSQL every run's outcome is written once, so the events
	// match the runs one for one. Under a personality that injects retry
	// errors and ambiguous commits, a run whose write failed runs again
	// and makes no event: each job still completes once, and no event
	// lacks its run.
	exact := !testdb.Emulated()
	for kind, want := range map[client.EventKind]map[string]int{client.EventJobCompleted: runs.ok, client.EventJobFailed: runs.failed, client.EventJobSnoozed: runs.snoozed} {
		if exact && fmt.Sprint(heard[kind]) != fmt.Sprint(want) {
			t.Errorf("%s: heard %d events for %d jobs, the handlers ran %d times for %d jobs", kind, sum(heard[kind]), len(heard[kind]), sum(want), len(want))
		}
		for id, n := range heard[kind] {
			if n > want[id] {
				t.Errorf("%s: %d events for job %s, which ran so %d times", kind, n, id, want[id])
			}
		}
	}
	if len(heard[client.EventJobCompleted]) != 2*each || sum(heard[client.EventJobCompleted]) != 2*each {
		t.Errorf("%d completion events for %d jobs, want one for each of %d", sum(heard[client.EventJobCompleted]), len(heard[client.EventJobCompleted]), 2*each)
	}
	if len(runs.ok) != 2*each || exact && sum(runs.ok) != 2*each {
		t.Errorf("%d successful runs for %d jobs, want one for each of %d", sum(runs.ok), len(runs.ok), 2*each)
	}
	if sum(runs.failed) == 0 || sum(runs.snoozed) == 0 {
		t.Errorf("the test made no failure (%d) or no snooze (%d)", sum(runs.failed), sum(runs.snoozed))
	}
	n := 0
	for ev := range drain(done, endDone) {
		if ev.Kind != client.EventJobCompleted {
			t.Fatalf("a completions-only subscription heard %s", ev.Kind)
		}
		n++
	}
	if n != 2*each {
		t.Errorf("the completions-only subscription heard %d, want %d", n, 2*each)
	}
}

// drain ends a subscription and yields what its channel held.
func drain(ch <-chan *client.Event, end func()) <-chan *client.Event {
	end()
	return ch
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestOperations: the client lists, gets, cancels, retries and deletes
// jobs of both layouts, and pauses and resumes queues, with the errors
// that name the fix where an action does not apply.
func TestOperations(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, s := openDB(t)
	ran := make(chan string, 10)
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[eventArgs](func(ctx context.Context, j *client.Job[eventArgs]) error {
		ran <- j.Queue
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Logger: testdb.Logger(t), Queues: map[string]client.QueueConfig{
		"b": {MaxWorkers: 2}, "f": {MaxWorkers: 2, Layout: schema.LayoutFanout}}})
	if err != nil {
		t.Fatal(err)
	}
	cancels, end := c.Subscribe(client.EventJobCancelled)
	defer end()
	ids := map[string]string{}
	for _, q := range []string{"b", "f"} {
		// Not started: the jobs wait.
		r, err := c.Insert(ctx, eventArgs{N: 1}, &client.InsertOpts{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		ids[q] = r.ID
	}
	for q, id := range ids {
		row, err := c.JobGet(ctx, id)
		if err != nil || row.Queue != q || row.Kind != "event" {
			t.Fatalf("JobGet %s of queue %s: %+v, %v", id, q, row, err)
		}
		list, err := c.JobList(ctx, &client.JobListParams{Queue: q})
		if err != nil || len(list) != 1 || list[0].ID != id {
			t.Fatalf("JobList of queue %s: %+v, %v; want job %s alone", q, list, err, id)
		}
		if err := c.JobCancel(ctx, id); err != nil {
			t.Fatalf("cancel the waiting job of queue %s: %v", q, err)
		}
		select {
		case ev := <-cancels:
			if ev.Job.ID != id || ev.Queue != q {
				t.Errorf("cancel event for job %s of %s, want %s of %s", ev.Job.ID, ev.Queue, id, q)
			}
		default:
			t.Errorf("no cancel event for job %s", id)
		}
		var se *skiplock.StateError
		if err := c.JobCancel(ctx, id); !errors.As(err, &se) {
			t.Errorf("a second cancel of job %s: %v, want a StateError", id, err)
		}
	}
	if _, err := c.JobGet(ctx, "123456789"); !errors.Is(err, skiplock.ErrNoJob) {
		t.Errorf("JobGet of an unknown id: %v, want ErrNoJob", err)
	}
	// Paused: a retried job waits; resumed, it runs.
	if err := c.QueuePause(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	qs, err := c.QueueList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused := map[string]bool{}
	for _, q := range qs {
		paused[q.Name] = q.Paused
	}
	if !paused["b"] || paused["f"] {
		t.Fatalf("QueueList after pausing b: %+v", qs)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // test end
	for _, q := range []string{"b", "f"} {
		if err := c.JobRetry(ctx, ids[q]); err != nil {
			t.Fatalf("retry the cancelled job of %s: %v", q, err)
		}
	}
	if got := <-ran; got != "f" {
		t.Fatalf("the job of paused queue b ran")
	}
	if row, err := c.JobGet(ctx, ids["b"]); err != nil || row.State != "queued" {
		t.Fatalf("paused queue b's job, retried before f's ran: %+v, %v; want it queued", row, err)
	}
	if err := c.QueueResume(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if got := <-ran; got != "b" {
		t.Fatalf("after resume, a job of %s ran, want b's", got)
	}
	// The bucketed job is Success now: it can be deleted, then it is gone.
	testdb.WaitFor(t, "the bucketed job's completion", 30*time.Second, func() bool {
		row, err := c.JobGet(ctx, ids["b"])
		return err == nil && row.State == "success"
	})
	if err := c.JobDelete(ctx, ids["b"]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JobGet(ctx, ids["b"]); !errors.Is(err, skiplock.ErrNoJob) {
		t.Errorf("JobGet after JobDelete: %v, want ErrNoJob", err)
	}
	if err := c.QueuePause(ctx, "bad\nname", nil); err == nil {
		t.Error("QueuePause took a queue name with a newline")
	}
}

// TestQueuePauseUnknown: pausing or resuming a queue the schema does not
// know is a usage error that names the known queues and records nothing;
// QueuePauseOpts.Create pauses it ahead of its first job.
func TestQueuePauseUnknown(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	c, err := client.New(ctx, db, &client.Config{Schema: s, Logger: testdb.Logger(t)})
	must(t, err)
	_, err = c.Insert(ctx, eventArgs{N: 1}, &client.InsertOpts{Queue: "mail"})
	must(t, err)
	for name, act := range map[string]func() error{
		"QueuePause":  func() error { return c.QueuePause(ctx, "mial", nil) },
		"QueueResume": func() error { return c.QueueResume(ctx, "mial", &client.QueuePauseOpts{Create: true}) },
	} {
		err := act()
		if !usage.Is(err) || !strings.Contains(err.Error(), `"mial" is unknown`) || !strings.Contains(err.Error(), "known queues: mail") {
			t.Fatalf("%s of an unknown queue: %v, want a usage error naming the known queues", name, err)
		}
	}
	queueRows := `SELECT count(*) FROM ` + sqlident.Quote(s) + `."skiplock_queue" WHERE "name" = 'mial'`
	if n := count(t, db, queueRows); n != 0 {
		t.Fatalf("a refused pause recorded %d rows", n)
	}
	must(t, c.QueuePause(ctx, "mail", nil))
	must(t, c.QueuePause(ctx, "mial", &client.QueuePauseOpts{Create: true}))
	qs, err := c.QueueList(ctx)
	must(t, err)
	// A queue is listed once per layout that has it: paused in each.
	paused := map[string]bool{}
	for _, q := range qs {
		was, seen := paused[q.Name]
		paused[q.Name] = q.Paused && (was || !seen)
	}
	if len(paused) != 2 || !paused["mail"] || !paused["mial"] {
		t.Fatalf("queues after pausing mail and creating mial: %+v", qs)
	}
	// Known now: it can be resumed.
	must(t, c.QueueResume(ctx, "mial", nil))
}
