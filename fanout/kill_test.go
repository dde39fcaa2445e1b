//go:build unix

package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// Environment of the helper process TestPoisonJobsKillTheirWorkers starts.
const (
	helperEnv       = "SKIPLOCK_FANOUT_KILL_HELPER"
	helperSchemaEnv = "SKIPLOCK_FANOUT_KILL_SCHEMA"
	helperRetryBase = 20 * time.Millisecond
)

// TestHelperProcess is not a test: TestPoisonJobsKillTheirWorkers runs the
// test binary again with only this test, as a worker process. It runs one
// fanout Worker (one goroutine, so that a kill never cuts another job's
// attempt short) until the queue has no pending job. A job whose payload
// says "poison" logs its start in kill_start, outside its transaction,
// and then SIGKILLs the process; other jobs record a work_log row in
// their transaction.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("only run as TestPoisonJobsKillTheirWorkers's worker process")
	}
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("SKIPLOCK_TEST_DSN"), &skiplock.OpenConfig{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := os.Getenv(helperSchemaEnv)
	q, err := fanout.New(ctx, db, &fanout.Config{Schema: s, RetryBase: helperRetryBase, RetryMax: 4 * helperRetryBase})
	if err != nil {
		t.Fatal(err)
	}
	record := recordHandler(s)
	start := "INSERT INTO " + table(s, "kill_start") + " (job_id, attempt) VALUES ($1, $2)"
	w := startWorker(t, ctx, q, &fanout.WorkerConfig{
		Workers: 1,
		Handler: func(ctx context.Context, tx skiplock.Tx, job *skiplock.Job) error {
			if !strings.Contains(string(job.Payload), "poison") {
				return record(ctx, tx, job)
			}
			if _, err := db.Exec(ctx, start, job.ID, job.Attempts); err != nil {
				return err
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck // the point
			select {}
		},
		IdleMin: time.Millisecond, IdleMax: 10 * time.Millisecond,
		Logger: testdb.Logger(t),
	})
	testdb.WaitFor(t, "no job pending", time.Minute, func() bool {
		more, err := q.HasQueued(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return !more
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("helper %d: %+v", os.Getpid(), w.Stats())
}

// TestPoisonJobsKillTheirWorkers: jobs whose handler SIGKILLs its worker
// process are counted all the same (the count commits before the handler
// runs) and end in job_dead after exactly max_attempts handler starts,
// with last_error saying the worker died; the ordinary jobs of the same
// queue complete exactly once. Worker processes are started two at a time
// until no job is pending.
func TestPoisonJobsKillTheirWorkers(t *testing.T) {
	t.Parallel()
	const poison, ordinary, maxAttempts = 4, 40, 3
	q, db, s := setup(t, 0, nil)
	ctx := context.Background()
	if _, err := db.Exec(ctx, "CREATE TABLE "+table(s, "kill_start")+
		" (job_id TEXT NOT NULL, attempt INT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	in := jobs(poison + ordinary)
	for i := range in[:poison] {
		in[i].Payload = []byte(fmt.Sprintf(`{"poison":%d}`, i))
	}
	for i := range in {
		in[i].MaxAttempts = maxAttempts
	}
	ids := enqueueIDs(t, q, db, s, in)
	poisonIDs, ordinaryIDs := ids[:poison], ids[poison:]

	dsn := testdb.DSN(t)
	killed, clean := 0, 0
	for round := 0; ; round++ {
		more, err := q.HasQueued(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
		if round == 30 {
			t.Fatalf("jobs still pending after %d rounds of worker processes (%d killed)", round, killed)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wasKilled, err := runHelper(dsn, s)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case wasKilled:
					killed++
				default:
					clean++
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d worker processes killed themselves, %d ended cleanly", killed, clean)

	if killed != poison*maxAttempts {
		t.Errorf("%d processes were killed, want %d (one per poison attempt)", killed, poison*maxAttempts)
	}
	for _, id := range poisonIDs {
		if got := count(t, db, "SELECT count(*) FROM "+table(s, "kill_start")+" WHERE job_id = $1", id); got != maxAttempts {
			t.Errorf("poison job %s: its handler started %d times, want %d", id, got, maxAttempts)
		}
		// Each start saw its own attempt number.
		if got := count(t, db, "SELECT count(DISTINCT attempt) FROM "+table(s, "kill_start")+" WHERE job_id = $1 AND attempt BETWEEN 1 AND $2", id, maxAttempts); got != maxAttempts {
			t.Errorf("poison job %s: %d distinct attempt numbers among its starts, want 1..%d", id, got, maxAttempts)
		}
	}
	dead := table(s, schema.DeadJobTable)
	if got := count(t, db, "SELECT count(*) FROM "+dead+" WHERE id = ANY($1) AND attempts = $2 AND last_error LIKE '%worker died%'", poisonIDs, maxAttempts); got != poison {
		t.Errorf("%d of %d poison jobs are in job_dead with attempts %d and a last error saying their worker died", got, poison, maxAttempts)
	}
	if got := count(t, db, "SELECT count(*) FROM "+dead); got != poison {
		t.Errorf("job_dead has %d rows, want the %d poison jobs", got, poison)
	}
	wl := table(s, schema.WorkLogTable)
	if got := count(t, db, "SELECT count(*) FROM "+wl+" WHERE job_id = ANY($1)", ordinaryIDs); got != ordinary {
		t.Errorf("work_log has %d rows for %d ordinary jobs", got, ordinary)
	}
	if got := count(t, db, "SELECT count(DISTINCT job_id) FROM "+wl+" WHERE job_id = ANY($1)", ordinaryIDs); got != ordinary {
		t.Errorf("%d of %d ordinary jobs completed", got, ordinary)
	}
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobQueueTable)); got != 0 {
		t.Errorf("job_queue has %d rows left", got)
	}
	// A killed worker leaves the counts of jobs it finished but had not
	// dropped yet (fanout drops them after the commit, in batches): none
	// may belong to a job still queued; the pruner drops them.
	if got := count(t, db, "SELECT count(*) FROM "+table(s, schema.JobAttemptTable)+" a JOIN "+table(s, schema.JobQueueTable)+" j ON j.id = a.job_id"); got != 0 {
		t.Errorf("job_attempt has %d rows of queued jobs left", got)
	}
}

// runHelper runs one worker process to its end and reports whether it
// was killed by SIGKILL (the poison handler); any other failure is an
// error with its output.
func runHelper(dsn, schemaName string) (killed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "SKIPLOCK_TEST_DSN="+dsn, helperSchemaEnv+"="+schemaName)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && ctx.Err() == nil {
			return true, nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("worker process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "helper ") {
		return false, fmt.Errorf("worker process did not run the helper:\n%s", out)
	}
	return false, nil
}
