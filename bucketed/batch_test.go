package bucketed_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
)

// TestEnqueueManyAllOrNothing: a bad last job is refused before anything
// is written, and a later batch the database refuses rolls back the
// batches before it: EnqueueMany adds every job or none.
func TestEnqueueManyAllOrNothing(t *testing.T) {
	t.Parallel()
	q, name := newQueue(t, &bucketed.Config{EnqueueBatch: 1000})
	ctx := ctxT(t)
	db := q.DB()
	jobs := make([]skiplock.NewJob, 6000)
	for i := range jobs {
		jobs[i].Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	jobs[5999].Payload = []byte(`{"n":`)
	_, err := q.EnqueueMany(ctx, jobs)
	if !usage.Is(err) || !strings.Contains(err.Error(), "job 5999") {
		t.Fatalf("a bad last job: %v, want a usage error naming job 5999", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); n != 0 {
		t.Fatalf("a bad last job: %d jobs written, want 0", n)
	}
	// Valid JSON the database refuses: a constraint the test adds stands
	// for any rejection that validation lets through.
	if _, err := db.Exec(ctx, "ALTER TABLE "+jobsTable(name)+` ADD CONSTRAINT "no_poison" CHECK ("payload"::text NOT LIKE '%poison%')`); err != nil {
		t.Fatal(err)
	}
	jobs[5999].Payload = []byte(`{"poison":true}`)
	_, err = q.EnqueueMany(ctx, jobs)
	if skiplock.SQLState(err) != "23514" {
		t.Fatalf("a refused job in the last batch: %v, want the check violation", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+jobsTable(name)); n != 0 {
		t.Fatalf("a refused job in the last batch: %d jobs written, want 0 (the first 5 batches must roll back)", n)
	}
	jobs[5999].Payload = []byte(`{"n":5999}`)
	if n, err := q.EnqueueMany(ctx, jobs); err != nil || n != 6000 {
		t.Fatalf("EnqueueMany of good jobs: %d, %v", n, err)
	}
}

// poison makes the database refuse every write that takes a job whose
// payload holds "poison" out of Running (complete, fail, release) or
// extends its lease, as it would refuse bad data; the claim (Queued to
// Running) passes.
func poison(t *testing.T, q *bucketed.Queue, name string) {
	t.Helper()
	fn := sqlident.Quote(name) + `."poison"`
	for _, s := range []string{
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'poisoned job %', OLD."id" USING ERRCODE = '22023';
END $$`,
		`CREATE TRIGGER "poison" BEFORE UPDATE ON ` + jobsTable(name) + ` FOR EACH ROW
WHEN (OLD."status" = 'Running' AND OLD."payload"::text LIKE '%poison%') EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := q.DB().Exec(ctxT(t), s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchedWritesSurviveOneBadJob: in every batched lease write, one
// job the database refuses is reported alone in a *BatchError, and its
// batch-mates are written.
func TestBatchedWritesSurviveOneBadJob(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"complete", "fail", "extend", "release"} {
		t.Run(what, func(t *testing.T) {
			q, name := newQueue(t, nil)
			ctx := ctxT(t)
			poison(t, q, name)
			in := make([]skiplock.NewJob, 5)
			for i := range in {
				in[i].Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
			}
			in[2].Payload = []byte(`{"poison":true}`)
			if _, err := q.EnqueueMany(ctx, in); err != nil {
				t.Fatal(err)
			}
			jobs, err := q.Dequeue(ctx, skiplock.DefaultQueue, 5)
			if err != nil || len(jobs) != 5 {
				t.Fatalf("claim: %d jobs, %v", len(jobs), err)
			}
			var lost []*skiplock.Job
			want := map[string]string{"complete": "Success", "fail": "Queued", "extend": "Running", "release": "Queued"}[what]
			switch what {
			case "complete":
				lost, err = q.CompleteMany(ctx, jobs)
			case "fail":
				fs := make([]bucketed.Failure, len(jobs))
				for i, j := range jobs {
					fs[i] = bucketed.Failure{Job: j, Err: errors.New("boom")}
				}
				lost, err = q.FailMany(ctx, fs)
			case "extend":
				lost, err = q.ExtendMany(ctx, jobs, 10*time.Minute)
			case "release":
				lost, err = q.ReleaseMany(ctx, jobs)
			}
			var be *bucketed.BatchError
			if !errors.As(err, &be) || len(be.Rejected) != 1 || !strings.Contains(string(be.Rejected[0].Job.Payload), "poison") {
				t.Fatalf("%s with one poisoned job: %v, want a *BatchError naming that job alone", what, err)
			}
			if skiplock.SQLState(err) != "22023" {
				t.Fatalf("the rejected job's error %v does not carry the database's SQLSTATE", err)
			}
			if len(lost) != 0 {
				t.Fatalf("%d jobs reported lost, want 0", len(lost))
			}
			cond := `"status" = '` + want + `'`
			if what == "extend" {
				cond += ` AND "lease_expires_at" > now() + interval '5 minutes'`
			}
			if n := count(t, q.DB(), "SELECT count(*) FROM "+jobsTable(name)+" WHERE "+cond+` AND "payload"::text NOT LIKE '%poison%'`); n != 4 {
				t.Fatalf("%s: %d of the 4 good jobs written, want 4", what, n)
			}
			if n := count(t, q.DB(), "SELECT count(*) FROM "+jobsTable(name)+` WHERE "status" = 'Running' AND "payload"::text LIKE '%poison%'`); n != 1 {
				t.Fatalf("%s: the poisoned job is not left Running", what)
			}
		})
	}
}
