package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// explode is the panicking handler's own frame, which the log must show.
func explode(n int) error { panic(fmt.Sprintf("kaboom %d", n)) }

// TestWorkerLogsFailures: a Worker's Logger hears every failed attempt and
// every panic as it is recorded (attempt n of max, the error's first line,
// whether the job runs again or went to job_dead, a panic's first frames).
// A job that fails and then succeeds leaves no row behind: only job_dead
// keeps errors.
func TestWorkerLogsFailures(t *testing.T) {
	t.Parallel()
	q, db, s := setup(t, 8, &fanout.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	enqueue := func(payload string, maxAttempts int) string {
		id := enqueueOne(t, q, db, s, skiplock.NewJob{Payload: []byte(payload), MaxAttempts: maxAttempts})
		return id
	}
	failing, panicking, flaky := enqueue(`"fail"`, 7), enqueue(`"panic"`, 2), enqueue(`"flaky"`, 3)
	var log testdb.Records
	// about is the "job failed" and "job panicked" records of job id,
	// in attempt order.
	about := func(id string) []testdb.Record {
		var out []testdb.Record
		for _, r := range log.Job(id) {
			if strings.HasPrefix(r.Msg, "job failed") || strings.HasPrefix(r.Msg, "job panicked") {
				out = append(out, r)
			}
		}
		return out
	}
	var flakyRuns sync.Map
	w, err := q.NewWorker(&fanout.WorkerConfig{
		Workers: 2, IdleMin: 5 * time.Millisecond, IdleMax: 20 * time.Millisecond, NoMaintenance: true,
		Logger: log.Logger(),
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			switch string(job.Payload) {
			case `"fail"`:
				return fmt.Errorf("smtp refused attempt %d\nsecond line of the error", job.Attempts)
			case `"panic"`:
				return explode(job.Attempts)
			case `"flaky"`:
				if _, again := flakyRuns.LoadOrStore(job.ID, true); !again {
					return errors.New("flaky: first attempt fails\nmore detail")
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "no job queued", 90*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)) == 0
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	got := about(failing)
	// A claim may find the last attempt's count used up before that
	// attempt's failure is recorded (the row is unlocked in between): it
	// buries the job and logs so, and the failing worker's own record then
	// comes without "no attempts left". Both records are then right.
	racedLast := false
	for _, r := range log.Job(failing) {
		racedLast = racedLast || strings.Contains(r.Msg, "moved to job_dead without running")
	}
	if len(got) != 7 {
		t.Fatalf("the failing job's 7 failed attempts logged %d times:\n%s", len(got), log.String())
	}
	for i, rec := range got {
		then := "retry in "
		switch {
		case i < 6:
		case racedLast:
			then = ""
		default:
			then = "no attempts left: moved to job_dead"
		}
		a := rec.Attrs
		if rec.Msg != "job failed" || a["attempt"] != strconv.Itoa(i+1) || a["max_attempts"] != "7" || a["layout"] != "fanout" ||
			a["err"] != fmt.Sprintf("smtp refused attempt %d", i+1) || !strings.HasPrefix(a["then"], then) {
			t.Errorf("failed attempt %d logged as %s; want \"job failed\", attempt %d of 7, only the error's first line, then %q", i+1, rec, i+1, then)
		}
	}
	got = about(panicking)
	if len(got) != 2 {
		t.Fatalf("the panicking job's 2 attempts logged %d times:\n%s", len(got), log.String())
	}
	for i, rec := range got {
		a := rec.Attrs
		if rec.Msg != "job panicked" || a["attempt"] != strconv.Itoa(i+1) || a["err"] != fmt.Sprintf("handler panicked: kaboom %d", i+1) ||
			!strings.Contains(a["stack"], "fanout_test.explode") || !strings.Contains(a["stack"], "failurelog_test.go") {
			t.Errorf("panic %d logged without its attempt or the panic site's frame: %s", i+1, rec)
		}
	}
	if got[1].Attrs["then"] != "no attempts left: moved to job_dead" {
		t.Errorf("the last panic does not say the job is dead: %s", got[1])
	}
	if got = about(flaky); len(got) != 1 || got[0].Attrs["attempt"] != "1" || got[0].Attrs["err"] != "flaky: first attempt fails" || !strings.HasPrefix(got[0].Attrs["then"], "retry in ") {
		t.Errorf("the flaky job's one failure logged as %v", got)
	}
	// The flaky job succeeded: its row is gone, and job_dead holds only
	// the two dead jobs, with their last errors.
	if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable)+" WHERE id = $1", flaky); n != 0 {
		t.Errorf("the flaky job is in job_dead")
	}
	for id, want := range map[string]string{failing: "smtp refused attempt 7", panicking: "kaboom 2"} {
		if n := count(t, db, "SELECT count(*) FROM "+table(s, schema.DeadJobTable)+" WHERE id = $1 AND strpos(last_error, $2) > 0", id, want); n != 1 {
			t.Errorf("job %s: not in job_dead with %q", id, want)
		}
	}
}
