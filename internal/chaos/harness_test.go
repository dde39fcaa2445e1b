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
func cli(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"--dsn", dsn}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("skiplock %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
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
	w.done = done
}

// kill sends SIGKILL, waits for the process to die and keeps its log.
func (w *workerProc) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited already
	<-w.done
	w.logs = append(w.logs, w.log.String())
}

// stop sends SIGTERM (graceful shutdown) and waits up to a minute.
func (w *workerProc) stop() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited already
	select {
	case err := <-w.done:
		w.logs = append(w.logs, w.log.String())
		return err
	case <-time.After(time.Minute):
		w.cmd.Process.Kill() //nolint:errcheck
		<-w.done
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
		w.logs = append(w.logs, w.log.String())
		return err
	case <-time.After(d):
		w.cmd.Process.Kill() //nolint:errcheck
		<-w.done
		w.logs = append(w.logs, w.log.String())
		return fmt.Errorf("still running after %v: killed", d)
	}
}

// allLogs is everything the process printed across its lives.
func (w *workerProc) allLogs() string { return strings.Join(w.logs, "\n") }

// jitterSleep sleeps a random time in [lo, hi).
func jitterSleep(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rand.Int64N(int64(hi-lo))))
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
	s := skiplock.QuoteIdent(schemaName)
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
