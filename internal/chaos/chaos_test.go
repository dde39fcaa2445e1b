package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/faultproxy"
	"github.com/skiplock/skiplock/internal/testdb"
)

var layouts = []string{"bucketed", "fanout"}

// setup migrates a fresh schema for layout and enqueues n jobs.
func setup(t *testing.T, layout string, n int) (dsn, name string) {
	t.Helper()
	db := testdb.Open(t, nil)
	name = testdb.Schema(t, db)
	dsn = testdb.DSN(t)
	cli(t, dsn, "--schema", name, "migrate", "--layout", layout)
	cli(t, dsn, "--schema", name, "enqueue", "--layout", layout, "--count", strconv.Itoa(n))
	return dsn, name
}

func workArgs(name, layout string, extra ...string) []string {
	return append([]string{"--schema", name, "work", "--layout", layout, "--workers", "8", "--work", "20ms",
		"--record", "--visibility-timeout", "2s"}, extra...)
}

// drain runs one last worker until nothing is queued or leased anywhere:
// it waits for the leases of killed workers to expire and works those jobs,
// under the personality's injected errors.
func drain(t *testing.T, dsn, name, layout string, extra ...string) {
	t.Helper()
	runCLI(t, true, dsn, append(workArgs(name, layout, append([]string{"--until-empty"}, extra...)...), "--work", "0s")...)
}

func report(t *testing.T, what, layout string, c tally, extra string) {
	t.Helper()
	line := fmt.Sprintf("chaos: %s layout=%s %s %s", what, layout, c, extra)
	t.Log(line)
	fmt.Println(line)
}

// TestWorkerCrashes kills worker processes with SIGKILL at random moments
// (every 100 to 400 jobs recorded) and restarts them, then checks that every job was done and recorded
// exactly once: each layout, and bucketed with held claims (work
// --held-claims), whose killed claims' jobs wait for the rescuer to count
// their attempt.
func TestWorkerCrashes(t *testing.T) {
	t.Parallel()
	sc := suiteScale()
	runs := []struct {
		name, layout string
		extra        []string
	}{{"bucketed", "bucketed", nil}, {"fanout", "fanout", nil}, {"bucketed-held", "bucketed", []string{"--held-claims"}}}
	for _, r := range runs {
		layout := r.layout
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			if len(r.extra) > 0 && testdb.Emulated() {
				t.Skip("held claims are PostgreSQL's own (no personality has them)")
			}
			dsn, name := setup(t, layout, sc.jobs)
			db := testdb.Open(t, nil)
			args := workArgs(name, layout, r.extra...)
			procs := []*workerProc{startWorker(t, dsn, args...), startWorker(t, dsn, args...)}
			busyKills := 0
			for k := 0; k < sc.kills; k++ {
				afterProgress(t, db, name, int64(sc.jobs), 100, 400)
				if c := count(t, db, layout, name, int64(sc.jobs)); c.logJobs < c.jobs {
					busyKills++
				}
				p := procs[rand.IntN(len(procs))]
				p.kill()
				p.start()
			}
			for _, p := range procs {
				p.stop() //nolint:errcheck // a worker's exit code after SIGTERM is not the point
			}
			drain(t, dsn, name, layout, r.extra...)
			c := count(t, db, layout, name, int64(sc.jobs))
			report(t, "worker-crash", r.name, c, fmt.Sprintf("kills=%d kills_with_work_left=%d", sc.kills, busyKills))
			mustBeExact(t, c)
		})
	}
}

// TestDatabaseRestarts restarts PostgreSQL (fast shutdown) during a run,
// every 200 to 600 jobs recorded; workers must reconnect by themselves,
// say so, and lose nothing.
func TestDatabaseRestarts(t *testing.T) {
	sc := suiteScale()
	testdb.DSN(t) // starts the harness's server unless SKIPLOCK_TEST_DSN is set
	server := testdb.Server()
	if server == nil {
		t.Skip("SKIPLOCK_TEST_DSN points at an outside server: this test restarts the harness's own server")
	}
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			dsn, name := setup(t, layout, sc.jobs*2)
			procs := []*workerProc{startWorker(t, dsn, workArgs(name, layout)...), startWorker(t, dsn, workArgs(name, layout)...)}
			watch := testdb.Open(t, nil) // its connections die with each restart: its reads then fail, and are retried
			for r := 0; r < sc.restarts; r++ {
				afterProgress(t, watch, name, int64(sc.jobs*2), 200, 600)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				if err := server.Restart(ctx); err != nil {
					cancel()
					t.Fatal(err)
				}
				cancel()
			}
			// The workers are back: they record jobs again.
			afterProgress(t, watch, name, int64(sc.jobs*2), 50, 51)
			logs := ""
			for _, p := range procs {
				p.stop() //nolint:errcheck
				logs += p.allLogs()
			}
			drain(t, dsn, name, layout)
			db := testdb.Open(t, nil)
			c := count(t, db, layout, name, int64(sc.jobs*2))
			reconnects := strings.Count(logs, "recovered")
			report(t, "db-restart", layout, c, fmt.Sprintf("restarts=%d worker_recoveries_logged=%d", sc.restarts, reconnects))
			mustBeExact(t, c)
			if !strings.Contains(logs, "retry_in=") {
				t.Errorf("no worker said it was retrying after %d restarts; logs:\n%s", sc.restarts, tail(logs, 40))
			}
		})
	}
}

// TestUntilEmptyRidesARestart: `work --until-empty` through a database
// restart ends by itself once every job is done, exit 0, nothing lost or
// recorded twice. Its backlog probe used to end the command with the
// restart's 57P01 or 57P03, though the workers rode it out.
func TestUntilEmptyRidesARestart(t *testing.T) {
	server := restartableServer(t)
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			const jobs = 1500
			dsn, name := setup(t, layout, jobs)
			p := startWorker(t, dsn, append(workArgs(name, layout), "--until-empty", "--work", "5ms")...)
			// Into the run: the workers are busy.
			afterProgress(t, testdb.Open(t, nil), name, jobs, 100, 400)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err := server.Restart(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.wait(3 * time.Minute); err != nil {
				t.Fatalf("work --until-empty through a restart: %v\n%s", err, tail(p.allLogs(), 30))
			}
			c := count(t, testdb.Open(t, nil), layout, name, jobs)
			report(t, "until-empty-restart", layout, c, "restarts=1")
			mustBeExact(t, c)
		})
	}
}

// TestConnectionFaults puts a proxy between workers and PostgreSQL that
// cuts connections mid-statement and delays traffic, and terminates random
// worker backends on top; ambiguous commits must resolve by the layouts'
// rules, and nothing may be lost or recorded twice.
func TestConnectionFaults(t *testing.T) {
	t.Parallel()
	sc := suiteScale()
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			dsn, name := setup(t, layout, sc.jobs)
			u, err := url.Parse(dsn)
			if err != nil || u.Host == "" {
				t.Skip("test DSN is not a URL with a host")
			}
			proxy, err := faultproxy.Start(u.Host, faultproxy.Config{CutRate: 0.01, DelayRate: 0.05, Delay: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			pu := *u
			pu.Host = proxy.Addr()
			q := pu.Query()
			q.Set("application_name", "chaos_worker")
			pu.RawQuery = q.Encode()
			faulty := pu.String()

			procs := []*workerProc{startWorker(t, faulty, workArgs(name, layout)...), startWorker(t, faulty, workArgs(name, layout)...)}
			db := testdb.Open(t, nil)
			var terminated atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(300 * time.Millisecond):
					}
					var killed bool
					err := db.QueryRow(context.Background(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM
						(SELECT pid FROM pg_stat_activity WHERE application_name = 'chaos_worker' ORDER BY random() LIMIT 1) s`).Scan(&killed)
					if err == nil && killed {
						terminated.Add(1)
					}
				}
			}()
			// The faults go on while the workers record half of the jobs. A
			// worker the proxy cut off as it started (work exits when it
			// cannot connect at start) is started again.
			restarts := 0
			testdb.WaitFor(t, fmt.Sprintf("%d jobs recorded through the faults", sc.jobs/2), 3*time.Minute, func() bool {
				for _, p := range procs {
					if p.exited() {
						restarts++
						p.start()
					}
				}
				n, err := recordedNow(db, name)
				return err == nil && n >= int64(sc.jobs/2)
			})
			close(stop)
			wg.Wait()
			for _, p := range procs {
				p.stop() //nolint:errcheck
			}
			proxy.Close()
			accepted, cut, delayed := proxy.Stats()
			drain(t, dsn, name, layout)
			c := count(t, db, layout, name, int64(sc.jobs))
			report(t, "conn-faults", layout, c, fmt.Sprintf("connections=%d cut=%d delayed_chunks=%d backends_terminated=%d worker_restarts=%d", accepted, cut, delayed, terminated.Load(), restarts))
			mustBeExact(t, c)
			if cut == 0 && terminated.Load() == 0 {
				t.Error("no fault was injected: the test proved nothing")
			}
		})
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// restartableServer is the harness's own server, for a fault test that
// restarts it; the test is skipped outside fault runs, or where
// SKIPLOCK_TEST_DSN points at an outside server.
func restartableServer(t *testing.T) *cluster.Postgres {
	t.Helper()
	faultsOnly(t)
	testdb.DSN(t) // starts the harness's server unless SKIPLOCK_TEST_DSN is set
	server := testdb.Server()
	if server == nil {
		t.Skip("SKIPLOCK_TEST_DSN points at an outside server: this test restarts the harness's own server")
	}
	return server
}
