package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// explode is the panicking handler's own frame, which the log must show.
func explode(n int) error { panic(fmt.Sprintf("kaboom %d", n)) }

// TestWorkerLogsFailuresAndKeepsLastError: a Worker's Logger hears every
// failed attempt and every panic as it is recorded (the job, queue, kind,
// attempt and max_attempts as attributes, the error's first line, the
// retry or the death, a panic's first frames),
// and a job that fails and then succeeds keeps its last failure's text in
// last_error.
func TestWorkerLogsFailuresAndKeepsLastError(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	q := queueOn(t, db, s, &bucketed.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	enqueue := func(payload string, maxAttempts int) string {
		return enqueueOne(t, q, skiplock.NewJob{Payload: json.RawMessage(payload), MaxAttempts: maxAttempts}).ID
	}
	failing, panicking, flaky := enqueue(`"fail"`, 7), enqueue(`"panic"`, 2), enqueue(`"flaky"`, 3)
	var log testdb.Records
	var done testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 2, Logger: log.Logger(), IdleMin: 5 * time.Millisecond, IdleMax: 20 * time.Millisecond,
		AfterResult: settled(&done),
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			switch string(job.Payload) {
			case `"fail"`:
				return fmt.Errorf("smtp refused attempt %d\nsecond line of the error", job.Attempts)
			case `"panic"`:
				return explode(job.Attempts)
			case `"flaky"`:
				if job.Attempts == 1 {
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
	done.Wait(t, "jobs ended (Success, or Failed with no attempt left)", 3, 90*time.Second)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	got := log.Job(failing)
	if len(got) != 7 {
		t.Fatalf("the failing job's 7 failed attempts logged %d times:\n%s", len(got), log.String())
	}
	for i, rec := range got {
		then, level := "retry in ", slog.LevelWarn
		if i == 6 {
			then, level = "no attempts left: the job is Failed (dead)", slog.LevelError
		}
		a := rec.Attrs
		if rec.Msg != "job failed" || rec.Level != level || a["attempt"] != strconv.Itoa(i+1) || a["max_attempts"] != "7" ||
			a["queue"] != skiplock.DefaultQueue || a["layout"] != "bucketed" ||
			a["err"] != fmt.Sprintf("smtp refused attempt %d", i+1) || !strings.HasPrefix(a["then"], then) {
			t.Errorf("failed attempt %d logged as %s; want %v \"job failed\", attempt %d of 7 on queue %q, only the error's first line, then %q", i+1, rec, level, i+1, skiplock.DefaultQueue, then)
		}
	}
	got = log.Job(panicking)
	if len(got) != 2 {
		t.Fatalf("the panicking job's 2 attempts logged %d times:\n%s", len(got), log.String())
	}
	for i, rec := range got {
		a := rec.Attrs
		if rec.Msg != "job panicked" || rec.Level != slog.LevelError || a["attempt"] != strconv.Itoa(i+1) || a["err"] != fmt.Sprintf("handler panicked: kaboom %d", i+1) ||
			!strings.Contains(a["stack"], "bucketed_test.explode") || !strings.Contains(a["stack"], "failurelog_test.go") {
			t.Errorf("panic %d logged without its attempt or the panic site's frame: %s", i+1, rec)
		}
	}
	if !strings.Contains(got[1].Attrs["then"], "no attempts left") {
		t.Errorf("the last panic does not say the job is dead: %s", got[1])
	}
	if got = log.Job(flaky); len(got) != 1 || got[0].Attrs["attempt"] != "1" || got[0].Attrs["err"] != "flaky: first attempt fails" || !strings.HasPrefix(got[0].Attrs["then"], "retry in ") {
		t.Errorf("the flaky job's one failure logged as %v", got)
	}

	// last_error after a later success: kept, the last failed attempt's
	// whole text, as history.
	j, err := q.LookupJob(ctx, flaky)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != skiplock.StatusSuccess || j.Attempts != 2 || j.LastError != "flaky: first attempt fails\nmore detail" {
		t.Errorf("flaky job after its success: %s after %d attempts, last_error %q; want Success after 2 with the first attempt's error kept",
			j.Status, j.Attempts, j.LastError)
	}
	for id, want := range map[string]string{failing: "smtp refused attempt 7", panicking: "kaboom 2"} {
		if j, err := q.LookupJob(ctx, id); err != nil || j.Status != skiplock.StatusFailed || !strings.Contains(j.LastError, want) {
			t.Errorf("job %s: %+v %v; want Failed with %q", id, j, err, want)
		}
	}
	if st := w.Stats(); st.Failed != 7+2+1 || st.Completed != 1 {
		t.Errorf("stats %+v: want 10 failed attempts and 1 completion", st)
	}
}
