package client_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/maintenance"
)

type tickArgs struct{}

func (tickArgs) Kind() string { return "tick" }

// periodicClient is a started client whose periodic job ticks every
// period; holder names it in the maintenance lease.
func periodicClient(t testing.TB, ctx context.Context, db *skiplock.DB, s, holder string, period time.Duration) *client.Client {
	t.Helper()
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[tickArgs](func(context.Context, *client.Job[tickArgs]) error { return nil }), nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws,
		Queues:       map[string]client.QueueConfig{"default": {MaxWorkers: 1}},
		PeriodicJobs: []client.PeriodicJob{{Name: "heartbeat", Every: period, Args: tickArgs{}, RunOnStart: true}},
		// These tests check that no tick is lost across failovers, so the
		// next leader catches every missed tick up, not just the latest.
		PeriodicCatchUp: 100,
		Maintenance:     &maintenance.Config{Holder: holder, LeaseTTL: time.Second, ElectInterval: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// tickCount is how many distinct ticks of the heartbeat have been
// enqueued.
func tickCount(t *testing.T, db *skiplock.DB, s string) int64 {
	t.Helper()
	return count(t, db, `SELECT count(DISTINCT "metadata"->>'tick') FROM `+sqlident.Quote(s)+`."jobs" WHERE "metadata"->>'periodic' = 'heartbeat'`)
}

// waitTicks waits until n distinct ticks have been enqueued.
func waitTicks(t *testing.T, db *skiplock.DB, s string, n int64, limit time.Duration) {
	t.Helper()
	testdb.WaitFor(t, fmt.Sprintf("%d ticks enqueued", n), limit, func() bool { return tickCount(t, db, s) >= n })
}

// ticks reads the ticks enqueued, in order, and checks each is there
// once and the schedule's ticks follow one another without a gap.
func checkTicks(t *testing.T, db *skiplock.DB, s string, period time.Duration) int {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT ("metadata"->>'tick')::timestamptz, count(*) FROM `+sqlident.Quote(s)+`."jobs"
WHERE "metadata"->>'periodic' = 'heartbeat' GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ticks []time.Time
	for rows.Next() {
		var tick time.Time
		var n int
		if err := rows.Scan(&tick, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("tick %s enqueued %d times", tick.Format(time.RFC3339Nano), n)
		}
		ticks = append(ticks, tick)
	}
	if len(ticks) < 3 {
		t.Fatalf("%d ticks enqueued", len(ticks))
	}
	// The first is the run-on-start tick; the rest are on the schedule.
	for i := 2; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != period {
			t.Errorf("tick %d at %s follows the one before by %v, want %v (a tick lost or doubled)", i, ticks[i].Format(time.RFC3339Nano), d, period)
		}
	}
	if ticks[1].Sub(ticks[0]) > period {
		t.Errorf("the first scheduled tick came %v after the run-on-start one", ticks[1].Sub(ticks[0]))
	}
	return len(ticks)
}

// TestPeriodicOncePerTick: three started clients with the same periodic
// job; every tick of a 100 ms schedule is enqueued once, with no gap.
func TestPeriodicOncePerTick(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	const period = 100 * time.Millisecond
	var cs []*client.Client
	for i := range 3 {
		cs = append(cs, periodicClient(t, ctx, db, s, fmt.Sprint("p", i), period))
	}
	waitTicks(t, db, s, 15, time.Minute)
	for _, c := range cs {
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := checkTicks(t, db, s, period)
	t.Logf("%d ticks, each once", n)
	var sched string
	if err := db.QueryRow(ctx, `SELECT "schedule" FROM `+sqlident.Quote(s)+`."skiplock_periodic" WHERE "name" = 'heartbeat'`).Scan(&sched); err != nil || sched != "every 100ms" {
		t.Fatalf("schedule record %q, %v", sched, err)
	}
}

// TestHelperPeriodicProcess is not a test: it is one of the processes of
// TestPeriodicSurvivesLeaderKills.
func TestHelperPeriodicProcess(t *testing.T) {
	s := os.Getenv("PERIODIC_HELPER_SCHEMA")
	if s == "" {
		t.Skip("helper process for TestPeriodicSurvivesLeaderKills")
	}
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("SKIPLOCK_TEST_DSN"), &skiplock.OpenConfig{MaxConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	periodicClient(t, ctx, db, s, os.Getenv("PERIODIC_HELPER_HOLDER"), time.Second)
	holdUntilKilled()
}

// TestPeriodicSurvivesLeaderKills: three processes share a 1-second
// schedule; the leader is SIGKILLed twice. Every tick from the first to
// the last is enqueued exactly once: the ticks missed while no process
// led (about a lease TTL, 1 s here) are caught up by the next leader. 12
// ticks here, a kill after the 4th and the 8th; 60 with
// SKIPLOCK_CHAOS=full.
func TestPeriodicSurvivesLeaderKills(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	ticks := int64(12)
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		ticks = 60
	}
	procs := map[string]*exec.Cmd{}
	start := func(holder string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPeriodicProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+testdb.DSN(t), "PERIODIC_HELPER_SCHEMA="+s, "PERIODIC_HELPER_HOLDER="+holder)
		helperStdin(t, cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[holder] = cmd
	}
	defer func() {
		for _, p := range procs {
			p.Process.Kill() //nolint:errcheck // may be dead already
			p.Wait()         //nolint:errcheck // killed
		}
	}()
	for i := range 3 {
		start(fmt.Sprint("proc", i))
	}
	// Each third of the ticks but the last ends with the live leader
	// killed: the ticks missed while nobody leads are caught up by the
	// next leader before the next third is done.
	began := time.Now()
	limit := time.Minute + time.Duration(ticks)*time.Second
	for kill := int64(1); kill <= 2; kill++ {
		waitTicks(t, db, s, kill*ticks/3, limit)
		var h string
		testdb.WaitFor(t, "one of the live processes leading", time.Minute, func() bool {
			l, err := maintenance.CurrentLeader(ctx, db, s)
			if err != nil {
				t.Fatal(err)
			}
			if l == nil || !l.Live || procs[l.Holder] == nil {
				return false
			}
			h = l.Holder
			return true
		})
		p := procs[h]
		p.Process.Kill() //nolint:errcheck // the test's point
		p.Wait()         //nolint:errcheck // killed
		delete(procs, h)
		t.Logf("killed the leader %s at %v, after tick %d", h, time.Since(began).Round(time.Millisecond), tickCount(t, db, s))
		start(h + "x") // a replacement joins
	}
	waitTicks(t, db, s, ticks, limit)
	for _, p := range procs {
		p.Process.Kill() //nolint:errcheck // done
	}
	n := checkTicks(t, db, s, time.Second)
	if n < int(ticks) {
		t.Fatalf("%d ticks, want %d", n, ticks)
	}
	t.Logf("%d ticks over %v with 2 leader kills, each once, none missing", n, time.Since(began).Round(time.Second))
}

// TestPeriodicList: the admin view of the schedule records.
func TestPeriodicList(t *testing.T) {
	t.Parallel()
	db, s := openDB(t)
	ctx := ctxT(t)
	c := periodicClient(t, ctx, db, s, "solo", 200*time.Millisecond)
	waitTicks(t, db, s, 3, time.Minute)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(ctx, db, s)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := a.PeriodicJobs(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "heartbeat" || ps[0].NextTick.Sub(ps[0].LastTick) != 200*time.Millisecond {
		t.Fatalf("periodic jobs %+v, %v", ps, err)
	}
}

// TestPeriodicCatchUp: an hourly job whose last recorded tick is 50
// hours old, as after an outage. By default the next leader enqueues one
// job for the gap, the latest missed tick; PeriodicCatchUp 5 enqueues the
// latest 5. Before the default was 1, it enqueued all 50 at once.
func TestPeriodicCatchUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		catchUp, want int
	}{{0, 1}, {5, 5}} {
		t.Run(fmt.Sprint("catch-up ", tc.catchUp), func(t *testing.T) {
			t.Parallel()
			db, s := openDB(t)
			ctx := ctxT(t)
			now := time.Now().UTC().Truncate(time.Hour)
			if _, err := db.Exec(ctx, `INSERT INTO `+sqlident.Quote(s)+`."skiplock_periodic" ("name", "schedule", "last_tick", "next_tick", "updated_at")
VALUES ('heartbeat', 'every 1h0m0s', $1, $2, $1)`, now.Add(-50*time.Hour), now.Add(-49*time.Hour)); err != nil {
				t.Fatal(err)
			}
			ws := client.NewWorkers()
			must(t, client.AddWorker(ws, client.WorkFunc[tickArgs](func(context.Context, *client.Job[tickArgs]) error { return nil }), nil))
			c, err := client.New(ctx, db, &client.Config{Schema: s, Logger: testdb.Logger(t), Workers: ws,
				Queues:          map[string]client.QueueConfig{"default": {MaxWorkers: 1}},
				PeriodicJobs:    []client.PeriodicJob{{Name: "heartbeat", Every: time.Hour, Args: tickArgs{}}},
				PeriodicCatchUp: tc.catchUp,
				Maintenance:     &maintenance.Config{Holder: "solo", LeaseTTL: time.Second, ElectInterval: 100 * time.Millisecond},
			})
			must(t, err)
			must(t, c.Start(ctx))
			// The round that enqueues the catch-up records the latest tick
			// in the same transaction.
			testdb.WaitFor(t, "the catch-up round", time.Minute, func() bool {
				return count(t, db, `SELECT count(*) FROM `+sqlident.Quote(s)+`."skiplock_periodic" WHERE "last_tick" >= '`+now.Format(time.RFC3339)+`'`) == 1
			})
			must(t, c.Stop(ctx))
			// Ticks up to now only: an hour that turns during the test adds
			// its own, on-time tick.
			rows := testdb.Lines(ctx, t, db, `SELECT "metadata"->>'tick' FROM `+sqlident.Quote(s)+`."jobs"
WHERE "metadata"->>'periodic' = 'heartbeat' AND ("metadata"->>'tick')::timestamptz <= $1 ORDER BY 1`, now)
			if len(rows) != tc.want {
				t.Fatalf("PeriodicCatchUp %d: %d jobs for 50 missed ticks, want %d (the latest): %v", tc.catchUp, len(rows), tc.want, rows)
			}
			if latest, _ := time.Parse(time.RFC3339Nano, rows[len(rows)-1]); !latest.Equal(now) {
				t.Fatalf("the last job caught up is tick %s, want the latest missed, %s", rows[len(rows)-1], now.Format(time.RFC3339))
			}
		})
	}
}
