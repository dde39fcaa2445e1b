package bucketed_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestActionsByID: cancel, retry and delete by id, without a lease, in the
// states each applies to; clear errors elsewhere, and nothing changed.
func TestActionsByID(t *testing.T) {
	t.Parallel()
	q, name := newQueue(t, nil)
	ctx := ctxT(t)
	status := func(id string) string {
		t.Helper()
		n, err := bucketed.ParseID(id)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if err := q.DB().QueryRow(ctx, `SELECT "status"::TEXT FROM `+jobsTable(name)+` WHERE "id" = $1`, n).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	enq := func(key string) string {
		t.Helper()
		e, err := q.Enqueue(ctx, skiplock.NewJob{Payload: json.RawMessage(`1`), UniqueKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	stateErr := func(err error, action, state string) {
		t.Helper()
		var se *skiplock.StateError
		if !errors.As(err, &se) || se.Action != action || se.State != state {
			t.Fatalf("%s: err = %v, want a StateError for a %s job", action, err, state)
		}
	}

	// A Queued job is cancelled and never claimed; cancelling it again,
	// or deleting an unknown id, says why not.
	queued := enq("")
	if err := q.CancelJob(ctx, queued); err != nil {
		t.Fatal(err)
	}
	if s := status(queued); s != "Canceled" {
		t.Fatalf("cancelled Queued job is %s", s)
	}
	if got, err := q.Dequeue(ctx, "default", 5); err != nil || len(got) != 0 {
		t.Fatalf("claimed %d jobs after the only one was cancelled (%v)", len(got), err)
	}
	stateErr(q.CancelJob(ctx, queued), "cancel", "Canceled")
	if err := q.DeleteJob(ctx, bucketed.FormatID(1<<60)); !errors.Is(err, skiplock.ErrNoJob) || !strings.Contains(err.Error(), strconv.FormatInt(1<<60, 10)) {
		t.Fatalf("delete of an unknown id: %v", err)
	}
	// A fanout job's id (or any text) names no bucketed job.
	if err := q.CancelJob(ctx, "0a06613b3d4b5a7d08fded28be0250f5"); !errors.Is(err, skiplock.ErrNoJob) {
		t.Fatalf("cancel of a fanout job's id: %v, want ErrNoJob", err)
	}

	// A Running job is cancelled under its holder: the holder's heartbeat
	// and completion find the lease gone.
	running := enq("")
	held, err := q.Dequeue(ctx, "default", 1)
	if err != nil || len(held) != 1 {
		t.Fatalf("dequeue: %d, %v", len(held), err)
	}
	stateErr(q.RetryJob(ctx, running), "retry", "Running")
	stateErr(q.DeleteJob(ctx, running), "delete", "Running")
	if err := q.CancelJob(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := q.Extend(ctx, held[0], 0); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("heartbeat after cancel: %v, want ErrLeaseLost", err)
	}
	if err := q.Complete(ctx, held[0]); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("completion after cancel: %v, want ErrLeaseLost", err)
	}
	if s := status(running); s != "Canceled" {
		t.Fatalf("cancelled Running job is %s after its holder's completion", s)
	}

	// Retry brings a Canceled job back with its attempts reset; it runs.
	if err := q.RetryJob(ctx, running); err != nil {
		t.Fatal(err)
	}
	again, err := q.Dequeue(ctx, "default", 5)
	if err != nil || len(again) != 1 || again[0].Attempts != 1 {
		t.Fatalf("after retry: %d jobs, %v", len(again), err)
	}
	if err := q.Complete(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
	stateErr(q.RetryJob(ctx, running), "retry", "Success")
	stateErr(q.CancelJob(ctx, running), "cancel", "Success")
	if err := q.DeleteJob(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteJob(ctx, running); !errors.Is(err, skiplock.ErrNoJob) {
		t.Fatalf("second delete: %v", err)
	}

	// A retry that would make two live jobs of one unique key is refused.
	first := enq("k")
	if err := q.CancelJob(ctx, first); err != nil {
		t.Fatal(err)
	}
	enq("k") // the key is free again: a new live job takes it
	if err := q.RetryJob(ctx, first); !usage.Is(err) || !strings.Contains(err.Error(), "unique key") {
		t.Fatalf("retry into a held unique key: %v", err)
	}
	if s := status(first); s != "Canceled" {
		t.Fatalf("refused retry changed the job to %s", s)
	}
}
