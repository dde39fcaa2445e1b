package chaos_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// exited reports whether the process has ended by itself (a poison job
// SIGKILLed it), keeping its log; start runs it again.
func (w *workerProc) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		w.logs = append(w.logs, w.log.String())
		return true
	default:
		return false
	}
}

// poisonScale is how many ordinary and poison jobs the poison test
// enqueues, and the poison jobs' max_attempts.
func poisonScale() (ordinary, poison, maxAttempts int) {
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		return 5000, 5, 3
	}
	return 400, 2, 3
}

// crashLine is what `work --crash-on-payload` says before it SIGKILLs its
// process: one line per handler start of a poison job.
var crashLine = regexp.MustCompile(`crash-on-payload: job (\S+) attempt \d+ of \d+: killing this process`)

// TestPoisonJobsKillTheirWorkers enqueues jobs whose handler SIGKILLs its
// own process on every attempt (`work --crash-on-payload`) among ordinary
// jobs, and restarts every worker process that dies until no job is live.
// Each poison job must end Failed after exactly max_attempts attempts
// (bucketed: the rescuer, last_error saying the lease expired) or in
// job_dead (fanout), its handler having started at least once and at
// most max_attempts times (fewer when a process that died of another
// poison job held it too: that attempt counts without a start); every
// ordinary job is done and recorded in work_log exactly once.
func TestPoisonJobsKillTheirWorkers(t *testing.T) {
	t.Parallel()
	ordinary, poison, maxAttempts := poisonScale()
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			dsn, name := setup(t, layout, ordinary)
			db := testdb.Open(t, nil)
			ctx := context.Background()
			s := sqlident.Quote(name)
			cli(t, dsn, "--schema", name, "enqueue", "--layout", layout, "--count", strconv.Itoa(poison),
				"--payload", `{"kind":"poison"}`, "--max-attempts", strconv.Itoa(maxAttempts))
			// The schema's maintenance leader, which rescues expired
			// leases (bucketed), runs in a process that works another
			// queue and so never dies here: a leader that dies is replaced
			// only when its 15 s lease runs out. Each worker process
			// competes for it too, as in production.
			rescue := "--rescue-interval=200ms"
			leader := startWorker(t, dsn, workArgs(name, layout, "--queue", "chaos_idle", "--workers", "1", rescue)...)
			defer leader.stop() //nolint:errcheck // its exit code is not the point
			waitLeader(t, db, name, leader.pid())
			args := workArgs(name, layout, "--crash-on-payload", "poison", rescue, "--record-attempts")
			procs := []*workerProc{startWorker(t, dsn, args...), startWorker(t, dsn, args...)}
			live := func() int64 {
				var n int64
				sql := `SELECT count(*) FROM ` + s + `."jobs" WHERE "status" IN ('Queued', 'Running')`
				if layout == "fanout" {
					sql = `SELECT count(*) FROM ` + s + `."job_queue"`
				}
				if err := db.QueryRow(ctx, sql).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			start, deaths := time.Now(), 0
			// Every worker that dies is started again, until no job is live.
			testdb.WaitFor(t, "no live job, the workers poison jobs kill started again", 4*time.Minute, func() bool {
				for _, p := range procs {
					if p.exited() {
						deaths++
						p.start()
						t.Logf("worker death %d after %v", deaths, time.Since(start).Round(time.Millisecond))
					}
				}
				return live() == 0
			})
			took := time.Since(start)
			logs := ""
			for _, p := range procs {
				p.stop() //nolint:errcheck // the exit code after SIGTERM is not the point
				logs += p.allLogs()
			}

			starts := map[string]int{}
			for _, m := range crashLine.FindAllStringSubmatch(logs, -1) {
				starts[m[1]]++
			}
			var poisonIDs []string
			attempts := 0 // the poison jobs' recorded attempts
			switch layout {
			case "bucketed":
				rows, err := db.Query(ctx, `SELECT "id"::TEXT, "status"::TEXT, "attempts", coalesce("last_error", '') FROM `+s+`."jobs" WHERE "payload" @> '{"kind":"poison"}'`)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id, status, lastError string
					var n int
					if err := rows.Scan(&id, &status, &n, &lastError); err != nil {
						t.Fatal(err)
					}
					poisonIDs = append(poisonIDs, id)
					attempts += n
					if status != "Failed" || n != maxAttempts || !strings.Contains(lastError, "lease expired") {
						t.Errorf("poison job %s: %s after %d attempts, last_error %q; want Failed after exactly %d, its lease expired",
							id, status, n, lastError, maxAttempts)
					}
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
			case "fanout":
				rows, err := db.Query(ctx, `SELECT "id", "attempts" FROM `+s+`."job_dead" WHERE "payload"::TEXT LIKE '%poison%'`)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id string
					var n int
					if err := rows.Scan(&id, &n); err != nil {
						t.Fatal(err)
					}
					poisonIDs = append(poisonIDs, id)
					attempts += n
					if n != maxAttempts {
						t.Errorf("poison job %s: in job_dead after %d attempts; want exactly %d", id, n, maxAttempts)
					}
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if layout == "fanout" {
				// The claim that finds a job's attempts used up buries it
				// without running it, and its Worker says so.
				buried := regexp.MustCompile(`msg="job moved to job_dead without running[^"]*".* job=(\S+)`).FindAllStringSubmatch(logs, -1)
				// A burial whose commit came back ambiguous (the cockroach
				// personality injects them) is in job_dead, checked below,
				// but its worker cannot say so.
				if len(buried) > poison || (len(buried) < poison && !testdb.Emulated()) {
					t.Errorf("%d burial(s) of poison jobs logged; want one per poison job (%d)", len(buried), poison)
				}
			}
			if len(poisonIDs) != poison {
				t.Errorf("%d of %d poison jobs ended Failed / in job_dead", len(poisonIDs), poison)
			}
			// work_attempt_log (--record-attempts): an attempt's row is
			// written before its handler runs, so a poison attempt has a
			// row even when the process died of another poison job before
			// this one logged its start. An attempt counted at the claim
			// whose handler never began (the job waited prefetched while
			// the other poison job killed the process) has none: under the
			// cockroach personality in CI, every attempt of one poison job
			// ended so. Each poison job has at most max_attempts rows,
			// none finished, at least as many as its logged starts, and
			// at least one once its handler started; crashes name poison
			// jobs only; and every work_log row is the span of a
			// succeeded attempt.
			rows := map[string]int{}
			var poisonFinished, joined int64
			lines := testdb.Lines(ctx, t, db, `SELECT "job_id" FROM `+s+`."work_attempt_log" WHERE "job_id" = ANY($1) AND "finished_at" IS NULL`, poisonIDs)
			for _, id := range lines {
				rows[id]++
			}
			if err := db.QueryRow(ctx, `SELECT
  count(*) FILTER (WHERE "finished_at" IS NOT NULL AND "job_id" = ANY($1)),
  (SELECT count(*) FROM `+s+`."work_log" AS l JOIN `+s+`."work_attempt_log" AS a
     ON a."job_id" = l."job_id" AND a."started_at" = l."started_at" AND a."finished_at" = l."finished_at" AND a."outcome" = 'succeeded')
FROM `+s+`."work_attempt_log"`, poisonIDs).Scan(&poisonFinished, &joined); err != nil {
				t.Fatal(err)
			}
			for _, id := range poisonIDs {
				if rows[id] > maxAttempts || starts[id] > rows[id] {
					t.Errorf("poison job %s: %d unfinished attempt rows, %d logged starts; want at most max_attempts = %d rows, no fewer than the starts", id, rows[id], starts[id], maxAttempts)
				}
			}
			for id := range starts {
				if !slices.Contains(poisonIDs, id) {
					t.Errorf("a handler crashed on job %s, which is not a poison job", id)
				}
			}
			if len(starts) < 1 || len(lines) > attempts || poisonFinished != 0 {
				t.Errorf("%d poison jobs logged a crash, %d unfinished and %d finished poison attempt rows; want some crashes, at most the %d attempts counted, none finished",
					len(starts), len(lines), poisonFinished, attempts)
			}
			if joined != int64(ordinary) {
				t.Errorf("%d work_log rows join their succeeding attempt in work_attempt_log; want every ordinary job's (%d)", joined, ordinary)
			}
			// Every ordinary job once: the poison jobs are the only ones
			// not done and never recorded.
			c := count(t, db, layout, name, int64(ordinary+poison))
			c.jobs, c.notDone = int64(ordinary), c.notDone-int64(len(poisonIDs))
			report(t, "poison", layout, c, fmt.Sprintf("poison_jobs=%d max_attempts=%d poison_attempts=%d poison_handler_starts=%d worker_deaths=%d seconds=%.1f",
				poison, maxAttempts, attempts, sumValues(starts), deaths, took.Seconds()))
			mustBeExact(t, c)
			if deaths < 1 || deaths > sumValues(starts) {
				t.Errorf("%d worker deaths for %d poison handler starts: every death should be a poison job's, and there should be some", deaths, sumValues(starts))
			}
		})
	}
}

// waitLeader waits until process pid holds the schema's maintenance
// leader lease.
func waitLeader(t *testing.T, db *skiplock.DB, schemaName string, pid int) {
	t.Helper()
	holder := fmt.Sprintf("%%/%d/%%", pid)
	testdb.WaitFor(t, fmt.Sprintf("process %d to become the maintenance leader", pid), time.Minute, func() bool {
		var leads bool
		err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM `+sqlident.Quote(schemaName)+
			`."skiplock_leader" WHERE "holder" LIKE $1 AND "expires_at" > now())`, holder).Scan(&leads)
		if err != nil {
			t.Fatal(err)
		}
		return leads
	})
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
