package bucketed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// logLines collects what a Worker's Logf hears.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// about returns the lines that mention job id, in attempt order (single
// digits here): one completer's log call can come after another's of the
// next attempt.
func (l *logLines) about(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, "job "+id+" ") {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// explode is the panicking handler's own frame, which the log must show.
func explode(n int) error { panic(fmt.Sprintf("kaboom %d", n)) }

// TestWorkerLogsFailuresAndKeepsLastError: a Worker's Logf hears every
// failed attempt and every panic as it is recorded (attempt n of max, the
// error's first line, the retry or the death, a panic's first frames),
// and a job that fails and then succeeds keeps its last failure's text in
// last_error.
func TestWorkerLogsFailuresAndKeepsLastError(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	q := queueOn(t, db, s, &bucketed.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	enqueue := func(payload string, maxAttempts int) string {
		e, err := q.Enqueue(ctx, skiplock.NewJob{Payload: json.RawMessage(payload), MaxAttempts: maxAttempts})
		if err != nil {
			t.Fatal(err)
		}
		return e.JobID()
	}
	failing, panicking, flaky := enqueue(`"fail"`, 7), enqueue(`"panic"`, 2), enqueue(`"flaky"`, 3)
	var log logLines
	var done testdb.Counter
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 2, Logf: log.logf, IdleMin: 5 * time.Millisecond, IdleMax: 20 * time.Millisecond,
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

	got := log.about(failing)
	if len(got) != 7 {
		t.Fatalf("the failing job's 7 failed attempts logged %d times:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, line := range got {
		want := fmt.Sprintf("job %s failed, attempt %d of 7: smtp refused attempt %d; ", failing, i+1, i+1)
		if i < 6 {
			want += "retry in "
		} else {
			want += "no attempts left: the job is Failed (dead)"
		}
		if !strings.Contains(line, want) || strings.Contains(line, "second line") {
			t.Errorf("failed attempt %d logged as %q; want %q and only the error's first line", i+1, line, want)
		}
	}
	got = log.about(panicking)
	if len(got) != 2 {
		t.Fatalf("the panicking job's 2 attempts logged %d times:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, line := range got {
		if !strings.Contains(line, fmt.Sprintf("job %s panicked, attempt %d of 2: handler panicked: kaboom %d", panicking, i+1, i+1)) ||
			!strings.Contains(line, "bucketed_test.explode") || !strings.Contains(line, "failurelog_test.go") {
			t.Errorf("panic %d logged without its attempt or the panic site's frame:\n%s", i+1, line)
		}
	}
	if !strings.Contains(got[1], "no attempts left") {
		t.Errorf("the last panic does not say the job is dead: %s", got[1])
	}
	if got = log.about(flaky); len(got) != 1 || !strings.Contains(got[0], "attempt 1 of 3: flaky: first attempt fails; retry in ") {
		t.Errorf("the flaky job's one failure logged as %q", got)
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
