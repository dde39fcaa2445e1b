package chaos_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// signal sends sig to the worker's current process.
func (w *workerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v: %v", sig, err)
	}
}

// pid is the worker's current process id.
func (w *workerProc) pid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cmd.Process.Pid
}

// lostLine is the count of refused results in `work --json`'s report.
var lostLine = regexp.MustCompile(`"lost": (\d+)`)

// heldJob is a job a stopped worker holds: its id and lease token.
type heldJob struct {
	id    int64
	token int64
}

// TestStoppedWorkerOutlivesItsLease freezes a bucketed worker process
// (SIGSTOP) while it holds jobs, until every one of them has been taken
// by the other workers (its leases expired, 2 s), then lets it go on
// (SIGCONT): each of its late results must be refused by the lease fence
// (counted as lost in its report), and work_log must hold exactly one row
// per job. A job whose completion the process had already sent when it
// stopped may still commit under its lease: that one is not late.
func TestStoppedWorkerOutlivesItsLease(t *testing.T) {
	t.Parallel()
	jobs, stops := 300, 1
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		jobs, stops = 3000, 3
	}
	const layout = "bucketed"
	dsn, name := setup(t, layout, jobs)
	db := testdb.Open(t, nil)
	ctx := context.Background()
	table := sqlident.Quote(name) + `."jobs"`
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// The maintenance leader, whose rescuer puts expired leases back, runs
	// in a process of its own (working another queue) so that stopping the
	// victim never stops it; every worker competes for it too.
	rescue := "--rescue-interval=200ms"
	leader := startWorker(t, dsn, workArgs(name, layout, "--queue", "chaos_idle", "--workers", "1", rescue)...)
	defer leader.stop() //nolint:errcheck // its exit code is not the point
	waitLeader(t, db, name, leader.pid())
	args := func() []string {
		return append(workArgs(name, layout, "--work", "100ms", "--workers", "4", rescue), "--json")
	}
	victim := startWorker(t, dsn, args()...)
	defer func() {
		victim.mu.Lock()
		victim.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // a failed test's stopped process must not linger stopped
		victim.mu.Unlock()
	}()
	others := []*workerProc{startWorker(t, dsn, args()...), startWorker(t, dsn, args()...)}
	owner := host + ":" + strconv.Itoa(victim.pid())

	// held lists the Running jobs under the victim's leases.
	held := func() []heldJob {
		rows, err := db.Query(ctx, `SELECT "id", "lease_token" FROM `+table+` WHERE "status" = 'Running' AND "lease_owner" = $1`, owner)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []heldJob
		for rows.Next() {
			var h heldJob
			if err := rows.Scan(&h.id, &h.token); err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// takenOver reports whether every job in hs was claimed again or
	// finished under another lease.
	takenOver := func(hs []heldJob) bool {
		for _, h := range hs {
			var same bool
			if err := db.QueryRow(ctx, `SELECT "status" = 'Running' AND "lease_token" = $2 FROM `+table+` WHERE "id" = $1`, h.id, h.token).Scan(&same); err != nil {
				t.Fatal(err)
			}
			if same {
				return false
			}
		}
		return true
	}

	// completedByVictim reports whether h's job was completed under the
	// victim's own lease: a completion it had sent before it stopped.
	completedByVictim := func(h heldJob) bool {
		var mine bool
		if err := db.QueryRow(ctx, `SELECT "status" = 'Success' AND "lease_token" = $2 FROM `+table+` WHERE "id" = $1`, h.id, h.token).Scan(&mine); err != nil {
			t.Fatal(err)
		}
		return mine
	}

	totalHeld := 0
	var frozen time.Duration
	for stop := 0; stop < stops; stop++ {
		deadline := time.Now().Add(time.Minute)
		for tries := 1; ; tries++ {
			if time.Now().After(deadline) {
				t.Fatalf("stop %d: the worker held no job through its stop for a minute (%d tries)", stop+1, tries-1)
			}
			testdb.WaitFor(t, fmt.Sprintf("stop %d: the worker to hold jobs", stop+1), time.Minute, func() bool { return len(held()) > 0 })
			victim.signal(t, syscall.SIGSTOP)
			stoppedAt := time.Now()
			hs := held()
			if len(hs) == 0 { // its results went through first
				victim.signal(t, syscall.SIGCONT)
				continue
			}
			testdb.WaitFor(t, fmt.Sprintf("stop %d: the stopped worker's %d job(s) taken over (lease 2 s)", stop+1, len(hs)), time.Minute,
				func() bool { return takenOver(hs) })
			frozen += time.Since(stoppedAt)
			// The jobs it held while stopped: not those whose completion,
			// sent before the stop, committed after held() read them.
			late := 0
			for _, h := range hs {
				if !completedByVictim(h) {
					late++
				}
			}
			victim.signal(t, syscall.SIGCONT)
			if late > 0 {
				totalHeld += late
				break
			}
		}
	}

	// Let every job finish, then stop the workers and read their reports.
	testdb.WaitFor(t, "every job finished after the last SIGCONT", 3*time.Minute, func() bool {
		var live int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE "status" IN ('Queued', 'Running')`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		return live == 0
	})
	if err := victim.stop(); err != nil {
		t.Fatalf("the stopped worker did not exit cleanly after SIGCONT and SIGTERM: %v\n%s", err, tail(victim.allLogs(), 40))
	}
	for _, p := range others {
		p.stop() //nolint:errcheck // their exit codes are not the point
	}
	m := lostLine.FindStringSubmatch(victim.allLogs())
	if m == nil {
		t.Fatalf("the stopped worker printed no report with lost results:\n%s", tail(victim.allLogs(), 40))
	}
	lost, _ := strconv.Atoi(m[1])
	c := count(t, db, layout, name, int64(jobs))
	report(t, "sigstop", layout, c, fmt.Sprintf("stops=%d jobs_held_while_stopped=%d late_results_refused=%d stopped_for=%.1fs lease=2s",
		stops, totalHeld, lost, frozen.Seconds()))
	mustBeExact(t, c)
	if lost < totalHeld {
		t.Errorf("the stopped worker had %d result(s) refused; it held %d job(s) that others took over: some late result was accepted", lost, totalHeld)
	}
}
