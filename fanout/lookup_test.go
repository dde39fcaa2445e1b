package fanout_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// TestLookupJob: LookupJob reads a pending job from job_queue with its
// fields (and, after a failed attempt, its count and backoff from
// job_attempt), without waiting for a worker that holds it; a dead job from
// job_dead, UUID ids from before the ordered ids included; an unknown id is
// skiplock.ErrNoJob, and text that is no fanout id a usage error.
func TestLookupJob(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{Queue: "mail", RetryBase: time.Hour, RetryMax: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sameJSON := func(got json.RawMessage, want string) bool {
		var g, w any
		return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && reflect.DeepEqual(g, w)
	}

	// A queued job, never claimed.
	e, err := q.Enqueue(ctx, skiplock.NewJob{Payload: []byte(`{"to":"a@example.com"}`), MaxAttempts: 3,
		Kind: "welcome", Metadata: []byte(`{"trace":"t1"}`)})
	if err != nil || e.ID == "" || e.Duplicate {
		t.Fatalf("Enqueue: %+v %v", e, err)
	}
	j, err := q.LookupJob(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != e.ID || j.Queue != "mail" || !sameJSON(j.Payload, `{"to":"a@example.com"}`) || j.Status != skiplock.StatusQueued ||
		j.Attempts != 0 || j.MaxAttempts != 3 || j.Kind != "welcome" || !sameJSON(j.Metadata, `{"trace":"t1"}`) ||
		j.LastError != "" || j.CreatedAt.IsZero() || !j.RunAt.Equal(j.CreatedAt) {
		t.Fatalf("queued job: %+v", j)
	}

	// A pending job held by a worker's transaction is read without waiting.
	tx, err := db.Begin(ctx, skiplock.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table(s, schema.JobQueueTable)+` WHERE "id" = $1 FOR UPDATE`, e.ID); err != nil {
		t.Fatal(err)
	}
	if j, err := q.LookupJob(ctx, e.ID); err != nil || j.Status != skiplock.StatusQueued {
		t.Fatalf("job held by a transaction: %+v %v", j, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// After a failed attempt: its count, error and hour's backoff.
	res, err := q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return errors.New("smtp: 421 try later") })
	if err != nil || res.Job == nil || res.Job.ID != e.ID || res.Dead {
		t.Fatalf("failing attempt: %+v %v", res, err)
	}
	j, err = q.LookupJob(ctx, e.ID)
	if err != nil || j.Status != skiplock.StatusQueued || j.Attempts != 1 || j.LastError != "smtp: 421 try later" ||
		j.RunAt.Before(time.Now().Add(29*time.Minute)) {
		t.Fatalf("job after a failed attempt: %+v %v", j, err)
	}

	// A dead job, read from job_dead (the pending one waits out its backoff,
	// so this one is claimed).
	dead, err := q.Enqueue(ctx, skiplock.NewJob{Payload: []byte(`2`), MaxAttempts: 1, Kind: "bounce"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = q.Process(ctx, func(context.Context, skiplock.Tx, *skiplock.Job) error { return errors.New("smtp: 550 no such user") })
	if err != nil || res.Job == nil || res.Job.ID != dead.ID || !res.Dead {
		t.Fatalf("last attempt: %+v %v", res, err)
	}
	if n := count(t, db, `SELECT count(*) FROM `+table(s, schema.JobQueueTable)+` WHERE "id" = $1`, dead.ID); n != 0 {
		t.Fatalf("the dead job is still in job_queue")
	}
	j, err = q.LookupJob(ctx, dead.ID)
	if err != nil || j.ID != dead.ID || j.Queue != "mail" || !sameJSON(j.Payload, `2`) || j.Status != skiplock.StatusFailed ||
		j.Attempts != 1 || j.MaxAttempts != 1 || j.Kind != "bounce" || !strings.Contains(j.LastError, "smtp: 550 no such user") {
		t.Fatalf("dead job: %+v %v", j, err)
	}
	// A cancelled job is dead too, its last error saying why.
	if err := q.CancelJob(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if j, err := q.LookupJob(ctx, e.ID); err != nil || j.Status != skiplock.StatusFailed || !strings.Contains(j.LastError, "cancelled") {
		t.Fatalf("cancelled job: %+v %v", j, err)
	}
	// A job with a random UUID, as jobs from before the ordered ids have.
	uuid := "6f1c2b9e-3d4a-4e5f-8a7b-0c1d2e3f4a5b"
	if _, err := db.Exec(ctx, `INSERT INTO `+table(s, schema.DeadJobTable)+` ("id", "queue", "last_error") VALUES ($1, 'old', 'x')`, uuid); err != nil {
		t.Fatal(err)
	}
	if j, err := q.LookupJob(ctx, uuid); err != nil || j.ID != uuid || j.Queue != "old" || j.Status != skiplock.StatusFailed {
		t.Fatalf("dead job with a UUID id: %+v %v", j, err)
	}

	// Unknown ids, in both forms.
	for _, id := range []string{"0c" + strings.Repeat("0", 30), "00000000-0000-4000-8000-000000000001"} {
		if j, err := q.LookupJob(ctx, id); !errors.Is(err, skiplock.ErrNoJob) || !strings.Contains(err.Error(), id) || j != nil {
			t.Errorf("LookupJob(%q): %+v %v, want an error wrapping ErrNoJob that names the id", id, j, err)
		}
	}
	// Text no fanout job id has: a usage error, and no statement sent.
	for _, id := range []string{"", "42", "not-a-uuid", strings.Repeat("g", 32), "0c" + strings.Repeat("0", 29),
		"6f1c2b9e-3d4a-4e5f-8a7b-0c1d2e3f4a5", "6f1c2b9e3d4a-4e5f-8a7b-0c1d-2e3f4a5b", "'; DROP TABLE job_queue; --"} {
		j, err := q.LookupJob(ctx, id)
		if !usage.Is(err) || errors.Is(err, skiplock.ErrNoJob) || skiplock.SQLState(err) != "" ||
			!strings.Contains(err.Error(), "not a fanout job id") || j != nil {
			t.Errorf("LookupJob(%q): %+v %v, want a usage error saying it is not a fanout job id", id, j, err)
		}
	}
}
