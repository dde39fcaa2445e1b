package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// auditTable records every hook round as an interval, written inside the
// round's fenced transaction.
func createAudit(t *testing.T, db *skiplock.DB, s string) string {
	t.Helper()
	table := sqlident.Quote(s) + `."audit"`
	if _, err := db.Exec(context.Background(), `CREATE TABLE `+table+` (
  "holder" TEXT NOT NULL, "started" TIMESTAMPTZ NOT NULL, "ended" TIMESTAMPTZ NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return table
}

// auditHook records its round from its first statement to its last,
// sleeping pause in between: a round that overlaps another holder's shows
// up as overlapping intervals.
func auditHook(table, holder string, interval time.Duration, pause func() time.Duration) maintenance.Hook {
	return maintenance.Hook{Name: "audit", Interval: interval, Run: func(ctx context.Context, tx skiplock.Tx) error {
		var started time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		if err := sleepInTx(ctx, tx, pause()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2, clock_timestamp())`, holder, started)
		return err
	}}
}

func sleepInTx(ctx context.Context, tx skiplock.Tx, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_sleep($1::FLOAT8)`, d.Seconds())
	return err
}

// checkDisjoint fails when rounds of two different holders overlap in
// time, and returns how many rounds and holders it saw.
func checkDisjoint(t *testing.T, db *skiplock.DB, table string) (rounds int, holders int) {
	t.Helper()
	ctx := context.Background()
	var overlaps int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` a JOIN `+table+` b
  ON a."holder" <> b."holder" AND a."started" < b."ended" AND b."started" < a."ended"`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps > 0 {
		t.Errorf("%d pairs of maintenance rounds of different holders overlapped: two leaders acted at once", overlaps/2)
	}
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT "holder") FROM `+table).Scan(&rounds, &holders); err != nil {
		t.Fatal(err)
	}
	return rounds, holders
}

// TestOneLeaderActsAtATime: five services on one schema with a lease far
// shorter than some of their rounds, so leases expire mid-round and others
// take over while the deposed leader is still working; services also stop
// and start. No two holders' rounds may overlap.
func TestOneLeaderActsAtATime(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil)
	table := createAudit(t, db, s)
	ctx := context.Background()
	var mu sync.Mutex
	n := 0
	start := func() *maintenance.Service {
		mu.Lock()
		n++
		holder := fmt.Sprintf("svc-%d", n)
		mu.Unlock()
		round := 0
		svc, err := maintenance.Start(ctx, db, &maintenance.Config{
			Schema: s, Holder: holder, LeaseTTL: 300 * time.Millisecond, ElectInterval: 20 * time.Millisecond,
			Hooks: []maintenance.Hook{auditHook(table, holder, 10*time.Millisecond, func() time.Duration {
				round++
				if round%5 == 0 {
					return 500 * time.Millisecond // outlives the lease
				}
				return 5 * time.Millisecond
			})},
		})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svcs := []*maintenance.Service{start(), start(), start(), start(), start()}
	// The services run in steps of a few rounds each; every other step
	// ends with one of them replaced.
	auditRounds := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 15 {
		want := auditRounds() + 3
		testdb.WaitFor(t, fmt.Sprintf("step %d: 3 more maintenance rounds", i), time.Minute, func() bool { return auditRounds() >= want })
		if i%2 == 1 { // replace one service, leader or not
			k := i % len(svcs)
			if err := svcs[k].Stop(ctx); err != nil {
				t.Fatal(err)
			}
			svcs[k] = start()
		}
	}
	var elected, lost int64
	for _, svc := range svcs {
		if err := svc.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, svc := range svcs {
		st := svc.Stats()
		elected += st.Elected
		lost += st.Lost
	}
	rounds, holders := checkDisjoint(t, db, table)
	t.Logf("%d rounds by %d holders; the last five services were elected %d times and lost the lease %d times", rounds, holders, elected, lost)
	if rounds < 20 || holders < 3 {
		t.Errorf("only %d rounds by %d holders: the test did not exercise takeovers", rounds, holders)
	}
}

// TestHelperProcess is not a test: it is the body of the worker processes
// TestLeaderKilledHandsOver starts and SIGKILLs.
func TestHelperProcess(t *testing.T) {
	holder := os.Getenv("MAINT_HELPER_HOLDER")
	if holder == "" {
		t.Skip("helper process for TestLeaderKilledHandsOver")
	}
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("SKIPLOCK_TEST_DSN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := os.Getenv("MAINT_HELPER_SCHEMA")
	table := sqlident.Quote(s) + `."audit"`
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{
		Schema: s, Holder: holder, LeaseTTL: time.Second, ElectInterval: 100 * time.Millisecond,
		Hooks: []maintenance.Hook{auditHook(table, holder, 20*time.Millisecond, func() time.Duration { return 10 * time.Millisecond })},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(ctx) //nolint:errcheck // the parent kills this process
	// Until the parent kills it, or dies itself: its end of the pipe then
	// closes.
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // EOF or an error alike end the helper
}

// TestLeaderKilledHandsOver: three processes compete; the leader is
// SIGKILLed twice. Each time another process takes over after the dead
// leader's lease runs out, with a higher token, and no two processes'
// rounds ever overlap.
func TestLeaderKilledHandsOver(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil)
	table := createAudit(t, db, s)
	ctx := context.Background()
	procs := map[string]*exec.Cmd{}
	for i := 1; i <= 3; i++ {
		holder := fmt.Sprintf("proc-%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+testdb.DSN(t), "MAINT_HELPER_HOLDER="+holder, "MAINT_HELPER_SCHEMA="+s)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		// The helper lives while this pipe is open (TestHelperProcess).
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[holder] = cmd
		t.Cleanup(func() {
			cmd.Process.Kill() //nolint:errcheck // may be dead already
			cmd.Wait()         //nolint:errcheck // killed
		})
	}
	// waitLeader waits for a live leader other than not, with a token above
	// after.
	waitLeader := func(not string, after int64) *maintenance.Leader {
		t.Helper()
		var l *maintenance.Leader
		testdb.WaitFor(t, fmt.Sprintf("a new leader (not %q, token above %d)", not, after), 30*time.Second, func() bool {
			var err error
			if l, err = maintenance.CurrentLeader(ctx, db, s); err != nil {
				t.Fatal(err)
			}
			return l != nil && l.Live && l.Holder != not && l.Token > after
		})
		return l
	}
	// waitRound waits until holder has done a round as leader.
	waitRound := func(holder string) {
		t.Helper()
		testdb.WaitFor(t, "a round of the leader "+holder, 30*time.Second, func() bool {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE "holder" = $1`, holder).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
	}
	leader := waitLeader("", 0)
	for kill := 1; kill <= 2; kill++ {
		waitRound(leader.Holder)
		killedAt := time.Now()
		if err := procs[leader.Holder].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		next := waitLeader(leader.Holder, leader.Token)
		t.Logf("kill %d: %s (token %d) SIGKILLed; %s took over with token %d after %v (lease 1 s)",
			kill, leader.Holder, leader.Token, next.Holder, next.Token, time.Since(killedAt).Round(time.Millisecond))
		leader = next
	}
	waitRound(leader.Holder)
	rounds, holders := checkDisjoint(t, db, table)
	if holders != 3 {
		t.Errorf("rounds came from %d holders, want 3 (two killed leaders and the last)", holders)
	}
	t.Logf("%d rounds by %d holders, none overlapping", rounds, holders)
}

// TestRescuer: jobs whose lease expired go back to Queued while they have
// attempts left and become Failed when they have none; the old holder's
// late completion is refused, and a job with no attempts left is never
// claimed again.
func TestRescuer(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed)
	ctx := context.Background()
	// Watermarks off: the rescued job sorts before the first claim's
	// watermark and would wait for the next heads probe.
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: s, HintMaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, max := range []int{1, 3} {
		if _, err := q.Enqueue(ctx, skiplock.NewJob{MaxAttempts: max, Payload: []byte(fmt.Sprintf(`{"max":%d}`, max))}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := q.Dequeue(ctx, "default", 10)
	if err != nil || len(held) != 2 {
		t.Fatalf("dequeue: %d jobs, %v", len(held), err)
	}
	// The worker "dies": its leases run out.
	jobs := sqlident.Quote(s) + `."jobs"`
	if _, err := db.Exec(ctx, `UPDATE `+jobs+` SET "lease_expires_at" = now() - INTERVAL '1 second'`); err != nil {
		t.Fatal(err)
	}
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: s, RescueInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(ctx) //nolint:errcheck // test end
	testdb.WaitFor(t, "the rescuer to rescue both jobs", 30*time.Second, func() bool { st := svc.Stats(); return st.Rescued+st.RescuedFailed == 2 })
	if st := svc.Stats(); st.Rescued != 1 || st.RescuedFailed != 1 {
		t.Fatalf("stats %+v: want one rescued, one failed", st)
	}
	for _, job := range held {
		got, err := q.LookupJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := skiplock.StatusQueued
		if job.MaxAttempts == 1 {
			want = skiplock.StatusFailed
		}
		if got.Status != want || !strings.Contains(got.LastError, "lease expired during attempt 1 of") {
			t.Errorf("job max_attempts=%d: status %s, last_error %q; want %s and a lease-expired error", job.MaxAttempts, got.Status, got.LastError, want)
		}
		if err := q.Complete(ctx, job); !errors.Is(err, skiplock.ErrLeaseLost) {
			t.Errorf("late completion of job max_attempts=%d: %v, want ErrLeaseLost", job.MaxAttempts, err)
		}
	}
	again, err := q.Dequeue(ctx, "default", 10)
	if err != nil || len(again) != 1 || again[0].MaxAttempts != 3 {
		t.Fatalf("second dequeue: %d jobs (%v); want only the job with attempts left", len(again), err)
	}
}

// TestPruner: finished jobs older than their state's age and old dead
// letters are deleted; younger ones, live ones and states kept forever stay.
func TestPruner(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil, schema.LayoutBucketed, schema.LayoutFanout)
	ctx := context.Background()
	jobs := sqlident.Quote(s) + `."jobs"`
	dead := sqlident.Quote(s) + `."job_dead"`
	// 5 of each (status, age in hours): ages 1 h and 48 h.
	if _, err := db.Exec(ctx, `INSERT INTO `+jobs+` ("status", "finished_at")
SELECT st::`+sqlident.Quote(s)+`."job_status", now() - h * INTERVAL '1 hour'
FROM unnest(ARRAY['Success', 'Canceled', 'Failed']) AS st, unnest(ARRAY[1, 48]) AS h, generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+jobs+` ("status") SELECT 'Queued' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+dead+` ("id", "died_at")
SELECT gen_random_uuid()::TEXT, now() - h * INTERVAL '1 hour' FROM unnest(ARRAY[1, 200]) AS h, generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	// fanout attempt counts: a live job's, and those of jobs gone from the
	// queue (their workers died before dropping them), three old and one
	// just written.
	queue := sqlident.Quote(s) + `."job_queue"`
	attempt := sqlident.Quote(s) + `."job_attempt"`
	if _, err := db.Exec(ctx, `INSERT INTO `+queue+` ("id") VALUES ('live')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+attempt+` ("job_id", "attempts", "started_at", "retry_at")
SELECT id, 1, now() - age * INTERVAL '1 minute', now() FROM (VALUES ('live', 10), ('gone1', 10), ('gone2', 10), ('gone3', 10), ('recent', 0)) AS a (id, age)`); err != nil {
		t.Fatal(err)
	}
	var pruneRounds atomic.Int64
	svc, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: s, PruneInterval: 10 * time.Millisecond, BatchSize: 2,
		Retention: maintenance.Retention{Completed: 24 * time.Hour, Canceled: maintenance.KeepForever, Failed: 0},
		AfterTask: func(task string, err error) {
			if task == "pruner" && err == nil {
				pruneRounds.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(ctx) //nolint:errcheck // test end
	// Success 48 h (5) and dead 200 h (5, older than the 7-day default) go;
	// Failed 48 h stays under its 7-day default, Canceled is kept forever.
	testdb.WaitFor(t, "10 jobs pruned", 30*time.Second, func() bool { return svc.Stats().Pruned == 10 })
	rows, err := db.Query(ctx, `SELECT "status"::TEXT, count(*) FROM `+jobs+` GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		got[st] = n
	}
	rows.Close()
	want := map[string]int64{"Canceled": 10, "Failed": 10, "Queued": 5, "Success": 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("jobs by status after pruning: %v, want %v", got, want)
	}
	var deadLeft int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+dead).Scan(&deadLeft); err != nil || deadLeft != 5 {
		t.Errorf("dead letters left: %d (%v), want 5", deadLeft, err)
	}
	testdb.WaitFor(t, "the orphaned attempt counts pruned", 30*time.Second, func() bool {
		return len(testdb.Lines(ctx, t, db, `SELECT "job_id" FROM `+attempt)) == 2
	})
	if got := strings.Join(testdb.Lines(ctx, t, db, `SELECT "job_id" FROM `+attempt+` ORDER BY 1`), ","); got != "live,recent" {
		t.Errorf("attempt counts left: %s, want the live job's and the recent one", got)
	}
	// Further rounds find nothing more: the second round to end from here
	// began after every check above.
	further := pruneRounds.Load() + 2
	testdb.WaitFor(t, "two more pruner rounds", 30*time.Second, func() bool { return pruneRounds.Load() >= further })
	if p := svc.Stats().Pruned; p != 10 {
		t.Errorf("pruned %d, want 10", p)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil)
	ctx := context.Background()
	for name, cfg := range map[string]maintenance.Config{
		"negative TTL":       {Schema: s, LeaseTTL: -time.Second},
		"tiny TTL":           {Schema: s, LeaseTTL: time.Millisecond},
		"negative retention": {Schema: s, Retention: maintenance.Retention{Failed: -2 * time.Hour}},
		"hook without run":   {Schema: s, Hooks: []maintenance.Hook{{Name: "x", Interval: time.Second}}},
		"bad schema":         {Schema: "no such schema"},
	} {
		if _, err := maintenance.Start(ctx, db, &cfg); !usage.Is(err) {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
	}
	if _, err := maintenance.Start(ctx, db, &maintenance.Config{Schema: "unmigrated"}); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Errorf("unmigrated schema: err = %v, want one that says to migrate", err)
	}
	if _, err := maintenance.New(ctx, db, &maintenance.Config{Schema: "unmigrated"}); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Errorf("New on an unmigrated schema: err = %v, want one that says to migrate", err)
	}
}

// TestNewWritesNothingUntilStart: New reads the schema and starts
// nothing (no lease row is written, so no leader); the Service's Start
// starts competing, once.
func TestNewWritesNothingUntilStart(t *testing.T) {
	t.Parallel()
	db, s := testdb.Migrated(t, nil)
	ctx := context.Background()
	svc, err := maintenance.New(ctx, db, &maintenance.Config{Schema: s, Holder: "h", Logger: testdb.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	leaderRows := func() int64 {
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(s)+"."+sqlident.Quote(schema.LeaderTable)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := leaderRows(); n != 0 {
		t.Fatalf("New wrote %d lease rows, want none", n)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(context.Background()) }) //nolint:errcheck // test end
	testdb.WaitFor(t, "the started service to lead", 30*time.Second, svc.IsLeader)
	if err := svc.Start(ctx); err == nil {
		t.Error("a second Start: no error")
	}
}
