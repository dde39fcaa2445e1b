package chaos_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// withAppName sets application_name on a DSN, so the test can find the
// process's sessions in pg_stat_activity.
func withAppName(t *testing.T, dsn, app string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " application_name=" + app
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

func scalar(t *testing.T, db *skiplock.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// lockWaiters counts the sessions of application $1 whose statement on
// work_log waits on a lock.
const lockWaiters = `SELECT count(*) FROM pg_stat_activity WHERE "application_name" = $1 AND "wait_event_type" = 'Lock' AND "query" LIKE '%work_log%'`

// TestStalledWorker stops a worker process with SIGSTOP while it holds
// jobs inside open transactions, keeps it stopped past the lease (or the
// fanout job budget), and checks that another process works every job,
// each recorded exactly once, within about one lease (the sessions'
// idle_in_transaction_session_timeout ends the stopped process's
// transactions). Bucketed: the stopped worker's completion, with its
// --record INSERT, was waiting on a lock another session held, so the
// completion sits idle in its transaction holding the jobs' rows.
// Fanout: stopped mid-handler, each of its jobs locked by its own
// transaction.
func TestStalledWorker(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			const n = 300
			dsn, name := setup(t, layout, n)
			db := testdb.Open(t, nil)
			ctx := context.Background()
			s := sqlident.Quote(name)
			app := "skiplock-stall-" + layout
			var args []string
			var budget time.Duration // how long a stopped process may hold its jobs
			switch layout {
			case "bucketed":
				budget = 3 * time.Second
				args = []string{"--schema", name, "work", "--layout", layout, "--workers", "8", "--work", "20ms", "--record", "--visibility-timeout", budget.String()}
			case "fanout":
				budget = 3*time.Second + 10*time.Second // --job-timeout plus fanout.SessionMargin
				args = []string{"--schema", name, "work", "--layout", layout, "--workers", "8", "--work", "1s", "--record", "--job-timeout", "3s"}
			}
			var lock skiplock.Tx
			if layout == "bucketed" {
				var err error
				if lock, err = db.Begin(ctx, skiplock.TxOptions{}); err != nil {
					t.Fatal(err)
				}
				defer lock.Rollback(ctx) //nolint:errcheck // committed below
				if _, err := lock.Exec(ctx, "LOCK TABLE "+s+`."work_log" IN EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			}
			a := startWorker(t, withAppName(t, dsn, app), args...)
			stoppedA := false
			defer func() {
				if !stoppedA {
					a.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // so that the kill is not delayed
					a.kill()
				}
			}()
			switch layout {
			case "bucketed":
				testdb.WaitFor(t, "the worker's --record INSERT to wait on the lock", time.Minute, func() bool {
					return scalar(t, db, lockWaiters, app) > 0
				})
				// Let it claim more: four rounds of jobs for its 8
				// goroutines beyond those it holds now (their results wait
				// behind the blocked completion).
				running := func() int64 {
					return scalar(t, db, `SELECT count(*) FROM `+s+`."jobs" WHERE "status" = 'Running' AND "lease_owner" LIKE $1`, "%:"+strconv.Itoa(a.cmd.Process.Pid))
				}
				more := running() + 32
				testdb.WaitFor(t, "the worker to claim 32 more jobs", time.Minute, func() bool { return running() >= more })
			case "fanout":
				testdb.WaitFor(t, "the worker's 8 jobs to be in flight", time.Minute, func() bool {
					return scalar(t, db, `SELECT count(*) FROM pg_stat_activity WHERE "application_name" = $1 AND "state" LIKE 'idle in transaction%'`, app) >= 8
				})
			}
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			if layout == "bucketed" {
				// Under load the blocked completion can give up (its jobs'
				// leases end) and the next one not yet wait on the lock when
				// the signal lands: then nothing would go idle in its
				// transaction. A stopped process changes nothing, so check
				// now, and stop it again once a completion waits.
				for try := 0; scalar(t, db, lockWaiters, app) == 0; try++ {
					if try == 10 {
						t.Fatalf("stopped the worker 10 times and never with its completion waiting on the lock")
					}
					a.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // stopped again below
					testdb.WaitFor(t, "the worker's --record INSERT to wait on the lock again", time.Minute, func() bool {
						return scalar(t, db, lockWaiters, app) > 0
					})
					if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
				}
			}
			stopped := time.Now()
			if lock != nil {
				if err := lock.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				// The INSERT goes on and the completion is then idle in
				// its transaction, its client stopped.
				testdb.WaitFor(t, "the stopped worker's completion to be idle in transaction", 30*time.Second, func() bool {
					return scalar(t, db, `SELECT count(*) FROM pg_stat_activity WHERE "application_name" = $1 AND "state" LIKE 'idle in transaction%'`, app) > 0
				})
			}
			var held int64
			switch layout {
			case "bucketed":
				held = scalar(t, db, `SELECT count(*) FROM `+s+`."jobs" WHERE "status" = 'Running' AND "lease_owner" LIKE $1`, "%:"+strconv.Itoa(a.cmd.Process.Pid))
			case "fanout":
				held = scalar(t, db, `SELECT count(*) FROM pg_stat_activity WHERE "application_name" = $1 AND "state" LIKE 'idle in transaction%'`, app)
			}
			// Another process works everything, the stalled one's jobs
			// included, and exits.
			bArgs := append(append([]string{}, args...), "--until-empty", "--work", "0s")
			b := startWorker(t, dsn, bArgs...)
			limit := budget*4 + 30*time.Second
			select {
			case err := <-b.done:
				if err != nil {
					t.Fatalf("the other worker failed: %v\n%s", err, b.log.String())
				}
			case <-time.After(limit):
				b.cmd.Process.Kill() //nolint:errcheck
				<-b.done
				c := count(t, db, layout, name, n)
				t.Fatalf("the other worker's --until-empty still waiting %v after the SIGSTOP: the stopped process keeps its jobs (%s)", limit, c)
			}
			recovered := time.Since(stopped)
			// Wake the stopped process and stop it: its late writes, which
			// its graceful stop waits for, must not record anything twice.
			a.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck
			a.stop()                              //nolint:errcheck // its exit code after losing its sessions is not the point
			stoppedA = true
			c := count(t, db, layout, name, n)
			report(t, "stalled-worker", layout, c, fmt.Sprintf("held_when_stopped=%d budget=%v all_done_after_sigstop=%v", held, budget, recovered.Round(100*time.Millisecond)))
			mustBeExact(t, c)
			if held == 0 {
				t.Fatalf("the stopped worker held no jobs: the test did not stall anything")
			}
		})
	}
}
