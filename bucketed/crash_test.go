package bucketed_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// TestHelperCrashingWorker is not a test: it is the worker process
// TestJobThatKillsItsWorkerEndsFailed starts again and again. Its handler
// records each start outside the job's lease (an autocommit INSERT), then
// SIGKILLs its own process for a poison job. One worker goroutine and no
// prefetch, so a claimed job always reaches its handler before a sibling
// can kill the process (a prefetched job's claim counts an attempt it may
// never start).
func TestHelperCrashingWorker(t *testing.T) {
	s := os.Getenv("CRASH_HELPER_SCHEMA")
	if s == "" {
		t.Skip("helper process for TestJobThatKillsItsWorkerEndsFailed")
	}
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("SKIPLOCK_TEST_DSN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s, VisibilityTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	starts := sqlident.Quote(s) + `."starts"`
	w, err := q.NewWorker(&bucketed.WorkerConfig{
		Workers: 1, Prefetch: -1, HeldClaims: os.Getenv("CRASH_HELPER_HELD") != "", Heartbeat: 300 * time.Millisecond, IdleMin: 5 * time.Millisecond, IdleMax: 50 * time.Millisecond,
		Maintenance: &maintenance.Config{LeaseTTL: time.Second, RescueInterval: 100 * time.Millisecond},
		Handler: func(ctx context.Context, job *skiplock.Job) error {
			// Recorded whatever the handler's context says: a held claim's
			// handlers end at its deadline (one second here), which a
			// loaded machine can pass while this insert waits, and the
			// attempt then counts as a failure after its handler started.
			if _, err := db.Exec(context.WithoutCancel(ctx), `INSERT INTO `+starts+` VALUES ($1)`, job.ID); err != nil {
				return err
			}
			if strings.Contains(string(job.Payload), "poison") {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck // does not return
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
	// Until killed by a poison job or by the parent: the parent holds this
	// process's stdin open, so EOF says it is gone.
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // EOF or an error: either way the parent is gone
}

// TestJobThatKillsItsWorkerEndsFailed: jobs whose handler SIGKILLs its
// process on every attempt, among ordinary jobs, with worker processes
// restarted as they die. Each poison job's handler starts exactly
// max_attempts times, after which the rescuer makes it Failed with an
// error that says its lease expired; every ordinary job succeeds. The
// same with held claims (WorkerConfig.HeldClaims), where the rescuer counts
// each dead claim's attempt from its hold row and the error says so.
func TestJobThatKillsItsWorkerEndsFailed(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "held"}[held], func(t *testing.T) {
			t.Parallel()
			if held && testdb.Emulated() {
				// The helper processes run plain PostgreSQL, where held claims
				// are; make test runs this subtest.
				t.Skip("held claims are PostgreSQL's only (WorkerConfig.HeldClaims)")
			}
			testJobThatKillsItsWorker(t, held)
		})
	}
}

func testJobThatKillsItsWorker(t *testing.T, held bool) {
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := ctxT(t)
	q := queueOn(t, db, s, nil)
	if _, err := db.Exec(ctx, `CREATE TABLE `+sqlident.Quote(s)+`."starts" ("job_id" TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const maxAttempts = 3
	jobs := nJobs(20, "default")
	for range 3 {
		jobs = append(jobs, skiplock.NewJob{MaxAttempts: maxAttempts, Payload: json.RawMessage(`"poison"`)})
	}
	mustEnqueue(t, q, jobs...)

	// Two worker processes at a time; each one that dies is replaced.
	died := make(chan *exec.Cmd, 16)
	var procs []*exec.Cmd
	start := func() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrashingWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+testdb.DSN(t), "CRASH_HELPER_SCHEMA="+s)
		if held {
			cmd.Env = append(cmd.Env, "CRASH_HELPER_HELD=1")
		}
		// Held open until the process ends: the helper runs until then
		// (cmd.Wait closes it).
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		go func() {
			cmd.Wait() //nolint:errcheck // killed by its own poison job, or by the test
			died <- cmd
		}()
	}
	defer func() {
		for _, p := range procs {
			p.Process.Kill() //nolint:errcheck // may be dead already
		}
	}()
	start()
	start()
	live := func() int64 {
		return count(t, db, `SELECT count(*) FROM `+jobsTable(s)+` WHERE "status" IN ('Queued', 'Running')`)
	}
	deaths := 0
	deadline := time.Now().Add(90 * time.Second)
	for n := live(); n > 0; n = live() {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still live after 90 s and %d worker deaths", n, deaths)
		}
		select {
		case <-died:
			deaths++
			start()
		case <-time.After(50 * time.Millisecond):
		}
	}
	rows, err := db.Query(ctx, `SELECT j."status"::TEXT, j."attempts", COALESCE(j."last_error", ''), count(st."job_id"), j."errors"::TEXT
FROM `+jobsTable(s)+` j LEFT JOIN `+sqlident.Quote(s)+`."starts" st ON st."job_id" = j."id"::TEXT
WHERE j."payload" = '"poison"' GROUP BY j."id", j."status", j."attempts", j."last_error", j."errors"::TEXT`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	reason := "lease expired"
	if held {
		reason = "held claim ended without a result"
	}
	poison := 0
	for rows.Next() {
		var status, lastError, history string
		var attempts, starts int
		if err := rows.Scan(&status, &attempts, &lastError, &starts, &history); err != nil {
			t.Fatal(err)
		}
		poison++
		if status != "Failed" || attempts != maxAttempts || starts != maxAttempts || !strings.Contains(lastError, reason) {
			t.Errorf("poison job: %s after %d attempts and %d handler starts (%q); want Failed after exactly %d: %s; its attempts' errors: %s",
				status, attempts, starts, lastError, maxAttempts, reason, history)
		}
	}
	if poison != 3 {
		t.Fatalf("%d poison jobs found", poison)
	}
	if ok := count(t, db, `SELECT count(*) FROM `+jobsTable(s)+` WHERE "status" = 'Success'`); ok != 20 {
		t.Errorf("%d of 20 ordinary jobs succeeded", ok)
	}
	t.Logf("%d worker processes died; every poison job failed after exactly %d starts", deaths, maxAttempts)
}
