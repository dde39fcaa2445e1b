package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// scale is how hard the suite pushes: small inside make test, the issue's
// figures under make test-chaos.
type scale struct {
	jobs, kills, restarts int
}

func suiteScale() scale {
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		return scale{jobs: 20000, kills: 10, restarts: 2}
	}
	return scale{jobs: 3000, kills: 4, restarts: 2}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the real skiplock command once per test binary.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "skiplock-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "skiplock")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/skiplock/skiplock/cmd/skiplock").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// cli runs the binary to completion and fails the test on a non-zero exit.
// It runs the personality the suite runs under (SKIPLOCK_EMULATE) without
// its injected errors: these are a test's setup and checks, not its
// subject, and a setup enqueue answered with an injected ambiguous commit
// rightly exits 1 (the outcome is unknown), which would fail the test
// before the workers under test, which keep the injection, ran at all.
func cli(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	return runCLI(t, false, dsn, args...)
}

// runCLI is cli, with the personality's injected errors kept where
// injected says so (a worker under test).
func runCLI(t *testing.T, injected bool, dsn string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"--dsn", dsn}, args...)...)
	if !injected {
		cmd.Env = append(os.Environ(), "SKIPLOCK_EMULATE_OPTS="+withoutInjection(os.Getenv("SKIPLOCK_EMULATE_OPTS")))
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("skiplock %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// withoutInjection is personality options (--emulate-opts) without their
// inject= option.
func withoutInjection(opts string) string {
	var kept []string
	for _, o := range strings.Split(opts, ",") {
		if o = strings.TrimSpace(o); o != "" && !strings.HasPrefix(o, "inject=") {
			kept = append(kept, o)
		}
	}
	return strings.Join(kept, ",")
}

// workerProc is one `skiplock work` process that can be killed and
// started again with the same arguments.
type workerProc struct {
	t    *testing.T
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *bytes.Buffer
	logs []string
	done chan error
	// ended says this life's end was taken in (kill, stop, wait): stop
	// then returns at once.
	ended bool
}

func startWorker(t *testing.T, dsn string, args ...string) *workerProc {
	w := &workerProc{t: t, args: append([]string{"--dsn", dsn}, args...)}
	w.start()
	return w
}

func (w *workerProc) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmd = exec.Command(binary(w.t), w.args...)
	w.log = &bytes.Buffer{}
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	cmd := w.cmd
	go func() { done <- cmd.Wait() }()
	w.done, w.ended = done, false
}

// kill sends SIGKILL, waits for the process to die and keeps its log.
func (w *workerProc) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited already
	<-w.done
	w.logs, w.ended = append(w.logs, w.log.String()), true
}

// stop sends SIGTERM (graceful shutdown) and waits up to a minute.
func (w *workerProc) stop() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil
	}
	w.ended = true
	w.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited already
	select {
	case err := <-w.done:
		w.logs = append(w.logs, w.log.String())
		return err
	case <-time.After(time.Minute):
		w.cmd.Process.Kill() //nolint:errcheck
		<-w.done
		w.logs = append(w.logs, w.log.String())
		return fmt.Errorf("worker ignored SIGTERM for a minute")
	}
}

// wait waits up to d for the process to end by itself and keeps its log;
// after d it kills it and says so.
func (w *workerProc) wait(d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case err := <-w.done:
		w.logs, w.ended = append(w.logs, w.log.String()), true
		return err
	case <-time.After(d):
		w.cmd.Process.Kill() //nolint:errcheck
		<-w.done
		w.logs, w.ended = append(w.logs, w.log.String()), true
		return fmt.Errorf("still running after %v: killed", d)
	}
}

// allLogs is everything the process printed across its lives.
func (w *workerProc) allLogs() string { return strings.Join(w.logs, "\n") }

// recordedNow reads how many rows a schema's work_log holds; an error
// (a server restarting, a pool's connection it killed) is returned, not
// fatal.
func recordedNow(db *skiplock.DB, schemaName string) (int64, error) {
	var n int64
	err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+sqlident.Quote(schemaName)+`."work_log"`).Scan(&n)
	return n, err
}

// waitRecorded waits until the workers have recorded n jobs in the
// schema's work_log: their progress is the chaos tests' clock. A read
// that fails (the server restarting) counts as not yet.
func waitRecorded(t *testing.T, db *skiplock.DB, schemaName string, n int64, limit time.Duration) {
	t.Helper()
	var got int64
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("%s's work_log held %d rows when the wait ended (last read: %v)", schemaName, got, err)
		}
	}()
	testdb.WaitFor(t, fmt.Sprintf("%d jobs recorded in %s's work_log", n, schemaName), limit, func() bool {
		got, err = recordedNow(db, schemaName)
		return err == nil && got >= n
	})
}

// logsOnFailure stops the workers and logs the last lines of each one's
// output when the test has failed by the time it returns (defer it).
func logsOnFailure(t *testing.T, procs []*workerProc) {
	if !t.Failed() {
		return
	}
	for i, p := range procs {
		p.stop() //nolint:errcheck // the logs are the point
		t.Logf("worker %d's last lines:\n%s", i, tail(p.allLogs(), 30))
	}
}

// afterProgress waits until the workers have recorded a random number
// of jobs in [lo, hi) more than now, or all jobs when fewer are left:
// faults strike at random points of the work.
func afterProgress(t *testing.T, db *skiplock.DB, schemaName string, jobs, lo, hi int64) {
	t.Helper()
	var from int64
	testdb.WaitFor(t, "the work_log of "+schemaName+" to read", time.Minute, func() bool {
		var err error
		from, err = recordedNow(db, schemaName)
		return err == nil
	})
	waitRecorded(t, db, schemaName, min(from+lo+rand.Int64N(hi-lo), jobs), 2*time.Minute)
}

// tally is what the database says after a run.
type tally struct {
	jobs         int64 // jobs enqueued
	notDone      int64 // bucketed: not Success; fanout: still queued or dead
	logRows      int64 // work_log rows
	logJobs      int64 // distinct jobs in work_log
	redeliveries int64 // bucketed: claims beyond the first
}

func (c tally) String() string {
	return fmt.Sprintf("jobs=%d not_done=%d work_log_rows=%d distinct=%d duplicates=%d redeliveries=%d",
		c.jobs, c.notDone, c.logRows, c.logJobs, c.logRows-c.logJobs, c.redeliveries)
}

func count(t *testing.T, db *skiplock.DB, layout, schemaName string, enqueued int64) tally {
	t.Helper()
	ctx := context.Background()
	s := sqlident.Quote(schemaName)
	c := tally{jobs: enqueued}
	scan := func(sql string, dest ...any) {
		if err := db.QueryRow(ctx, sql).Scan(dest...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	scan(`SELECT count(*), count(DISTINCT "job_id") FROM `+s+`."work_log"`, &c.logRows, &c.logJobs)
	switch layout {
	case "bucketed":
		scan(`SELECT count(*) FILTER (WHERE "status" <> 'Success'), coalesce(sum("attempts") - count(*), 0) FROM `+s+`."jobs"`, &c.notDone, &c.redeliveries)
	case "fanout":
		var queued, dead int64
		scan(`SELECT (SELECT count(*) FROM `+s+`."job_queue"), (SELECT count(*) FROM `+s+`."job_dead")`, &queued, &dead)
		c.notDone = queued + dead
	}
	return c
}

// mustBeExact fails unless every job was done and recorded exactly once:
// both layouts record work_log inside the transaction that finishes the job
// (fanout: the job's own; bucketed: the fenced completion), so a dead
// worker's or a dead lease's execution can never be recorded.
func mustBeExact(t *testing.T, c tally) {
	t.Helper()
	if c.notDone != 0 || c.logJobs != c.jobs || c.logRows != c.jobs {
		t.Fatalf("jobs lost or recorded twice: %s", c)
	}
}

// handlerRuns is what the demo handlers wrote to a --runs-log: per job,
// the runs that returned ok and those that failed.
type handlerRuns struct {
	ok, failed map[string]int
}

// readRuns reads a --runs-log file ("<job id> <attempt> ok|failed" lines).
func readRuns(t *testing.T, path string) handlerRuns {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the handlers' runs log: %v", err)
	}
	r := handlerRuns{ok: map[string]int{}, failed: map[string]int{}}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[2] == "ok":
			r.ok[f[0]]++
		case len(f) == 3 && f[2] == "failed":
			r.failed[f[0]]++
		default:
			t.Fatalf("runs log line %q: want \"<job id> <attempt> ok|failed\"", line)
		}
	}
	return r
}

// total is every handler run the log holds.
func (r handlerRuns) total() int { return sumValues(r.ok) + sumValues(r.failed) }

func (r handlerRuns) String() string {
	return fmt.Sprintf("handler_runs=%d ok=%d failed=%d jobs_run_ok=%d", r.total(), sumValues(r.ok), sumValues(r.failed), len(r.ok))
}

// checkRuns holds the handlers' runs against the database: every job
// recorded in work_log had a run that returned ok, every job run is one
// the schema holds, and (exact) no job's successful run was repeated.
// Bucketed jobs also ran no more often than they were claimed: every run
// follows a claim that counted an attempt.
func checkRuns(t *testing.T, db *skiplock.DB, layout, schemaName string, r handlerRuns, jobs int64, exact bool) {
	t.Helper()
	ctx := context.Background()
	s := sqlident.Quote(schemaName)
	for _, id := range testdb.Lines(ctx, t, db, `SELECT "job_id"::TEXT FROM `+s+`."work_log"`) {
		if r.ok[id] == 0 {
			t.Errorf("job %s is recorded done, but no handler run of it returned ok (%s)", id, r)
			break
		}
	}
	if int64(len(r.ok)) != jobs {
		t.Errorf("%d jobs had a successful handler run, want %d (%s)", len(r.ok), jobs, r)
	}
	if exact && int64(sumValues(r.ok)) != jobs {
		t.Errorf("%d successful handler runs for %d jobs: succeeded work ran again with no fault to explain it (%s)", sumValues(r.ok), jobs, r)
	}
	if layout != "bucketed" {
		return
	}
	attempts := map[string]int{}
	rows, err := db.Query(ctx, `SELECT "id"::TEXT, "attempts" FROM `+s+`."jobs"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		attempts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, n := range r.ok {
		if runs := n + r.failed[id]; runs > attempts[id] {
			t.Errorf("bucketed job %s: %d handler runs for %d counted attempts (a run without a claim)", id, runs, attempts[id])
			return
		}
	}
	for id := range r.failed {
		if _, ok := attempts[id]; !ok {
			t.Errorf("a handler ran job %s, which the schema does not hold", id)
			return
		}
	}
}
