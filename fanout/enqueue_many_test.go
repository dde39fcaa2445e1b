package fanout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestEnqueueManyAllOrNothing: a bad last job of 6,000 is refused before
// anything is written, and a later batch the database refuses rolls back
// the batches before it.
func TestEnqueueManyAllOrNothing(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 0, &fanout.Config{EnqueueBatch: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := jobs(6000)
	in[5999].Payload = []byte(`{"n":`)
	if _, err := q.EnqueueMany(ctx, in); !usage.Is(err) || !strings.Contains(err.Error(), "5999") {
		t.Fatalf("a bad last job: %v, want a usage error naming job 5999", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, "job_queue")); n != 0 {
		t.Fatalf("a bad last job: %d jobs written, want 0", n)
	}
	// Valid JSON the database refuses, standing for any rejection that
	// validation lets through.
	if _, err := db.Exec(ctx, "ALTER TABLE "+table(s, "job_queue")+` ADD CONSTRAINT "no_poison" CHECK ("payload"::text NOT LIKE '%poison%')`); err != nil {
		t.Fatal(err)
	}
	in[5999].Payload = []byte(`{"poison":true}`)
	if _, err := q.EnqueueMany(ctx, in); skiplock.SQLState(err) != "23514" {
		t.Fatalf("a refused job in the last batch: %v, want the check violation", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+table(s, "job_queue")); n != 0 {
		t.Fatalf("a refused job in the last batch: %d jobs written, want 0", n)
	}
	in[5999].Payload = []byte(fmt.Sprintf(`{"n":%d}`, 5999))
	if n, err := q.EnqueueMany(ctx, in); err != nil || n != 6000 {
		t.Fatalf("EnqueueMany of good jobs: %d added, %v", n, err)
	}
}
