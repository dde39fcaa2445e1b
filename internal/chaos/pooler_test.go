package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// pooler starts PgBouncer in mode in front of the test server, stopped
// when the test ends. The pooler tests run under make test-faults
// (SKIPLOCK_FAULTS=1), which make setup prepares by installing PgBouncer;
// make test skips them.
func pooler(t *testing.T, mode string) *cluster.PgBouncer {
	t.Helper()
	faultsOnly(t)
	b, err := cluster.StartPgBouncer(context.Background(), &cluster.PgBouncerConfig{Upstream: testdb.DSN(t), Mode: mode, PoolSize: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) }) //nolint:errcheck // test end
	return b
}

// TestPoolerDetected: Open tells a transaction pooler from a session
// pooler and from a direct connection.
func TestPoolerDetected(t *testing.T) {
	for mode, want := range map[string]bool{"transaction": true, "session": false} {
		b := pooler(t, mode)
		db, err := skiplock.Open(context.Background(), b.DSN(), &skiplock.OpenConfig{MaxConns: 4})
		if err != nil {
			t.Fatalf("%s pooling: %v", mode, err)
		}
		if got := db.TransactionPooled(); got != want {
			t.Errorf("%s pooling: TransactionPooled() = %v, want %v", mode, got, want)
		}
		db.Close()
	}
	if db := testdb.Open(t, nil); db.TransactionPooled() {
		t.Error("a direct connection reads as transaction pooled")
	}
}

// TestMigrateThroughTransactionPooler: six migrates at once through a
// transaction pooler all finish within 30 s, apply each migration once,
// and leave no lock behind. A session advisory lock taken and released
// on different server sessions used to let two migrate at once and hang
// the rest.
func TestMigrateThroughTransactionPooler(t *testing.T) {
	b := pooler(t, "transaction")
	db := testdb.Open(t, nil)
	s := testdb.Schema(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	outs := make([]string, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.CommandContext(ctx, binary(t), "--dsn", b.DSN(), "--schema", s, "migrate").CombinedOutput()
			errs[i], outs[i] = err, string(out)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrate %d: %v\n%s", i, err, outs[i])
		}
	}
	var applied, distinct, advisory int64
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT ("layout", "version")) FROM `+sqlident.Quote(s)+`."skiplock_migration"`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != int64(len(schema.Migrations)) || distinct != applied {
		t.Errorf("%d migrations recorded (%d distinct), want each of %d once", applied, distinct, len(schema.Migrations))
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE "locktype" = 'advisory'`).Scan(&advisory); err != nil || advisory != 0 {
		t.Errorf("%d advisory locks left (%v)", advisory, err)
	}
	// A direct migrate afterwards does not wait for anyone.
	if out, err := exec.CommandContext(ctx, binary(t), "--dsn", testdb.DSN(t), "--schema", s, "migrate").CombinedOutput(); err != nil {
		t.Errorf("a direct migrate after them: %v\n%s", err, out)
	}
}

// TestSettingsStayInTheirTransactions: a DB opened through a transaction
// pooler with a statement timeout has it inside its own transactions, and
// an unrelated client of the pool never sees it (a connection-wide SET
// used to reach every client that got that server session next).
func TestSettingsStayInTheirTransactions(t *testing.T) {
	b := pooler(t, "transaction")
	ctx := context.Background()
	db, err := skiplock.Open(ctx, b.DSN(), &skiplock.OpenConfig{MaxConns: 8, StatementTimeout: time.Second, IdleInTransactionTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.TransactionPooled() {
		t.Fatal("the transaction pooler was not detected")
	}
	for range 20 {
		tx, err := db.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		var st, idle string
		if err := tx.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&st, &idle); err != nil {
			t.Fatal(err)
		}
		tx.Rollback(ctx) //nolint:errcheck // read only
		if st != "1s" || idle != "7s" {
			t.Fatalf("inside a transaction: statement_timeout %s, idle_in_transaction_session_timeout %s; want 1s and 7s", st, idle)
		}
	}
	cc, err := pgx.ParseConfig(b.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	for i := range 5 {
		other, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		var st string
		err = other.QueryRow(ctx, "SELECT current_setting('statement_timeout') FROM pg_sleep(1.2)").Scan(&st)
		other.Close(ctx)
		if err != nil || st != "0" {
			t.Fatalf("an unrelated client, try %d: statement_timeout %q, %v; want the server's 0 and no cancel", i, st, err)
		}
	}
}

// TestWorkThroughPoolers: both layouts, and a client working a queue of
// each, through PgBouncer in transaction and session mode, the default
// DSN (no exec mode asked for), a fifth of the attempts failing: every
// job completed and recorded once, and every handler run counted (the
// processes' --runs-log): one successful run per job, none repeated.
func TestWorkThroughPoolers(t *testing.T) {
	for _, mode := range []string{"transaction", "session"} {
		b := pooler(t, mode)
		for _, layout := range layouts {
			t.Run(mode+"/"+layout, func(t *testing.T) {
				db := testdb.Open(t, nil)
				s := testdb.Schema(t, db)
				jobs := int64(600)
				if os.Getenv("SKIPLOCK_CHAOS") == "full" {
					jobs = 5000
				}
				cli(t, b.DSN(), "--schema", s, "migrate")
				cli(t, b.DSN(), "--schema", s, "enqueue", "--layout", layout, "--count", fmt.Sprint(jobs))
				runsLog := filepath.Join(t.TempDir(), "runs")
				for range 6 {
					cli(t, b.DSN(), "--schema", s, "work", "--layout", layout, "--workers", "8", "--fail", "0.2", "--retry-backoff", "50ms", "--until-empty", "--record", "--runs-log", runsLog)
					if recorded(t, db, s) >= jobs {
						break
					}
				}
				var rows, distinct int64
				if err := db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT "job_id") FROM `+sqlident.Quote(s)+`."work_log"`).Scan(&rows, &distinct); err != nil {
					t.Fatal(err)
				}
				if rows != jobs || distinct != jobs {
					t.Errorf("work_log: %d rows for %d jobs, want %d of each", rows, distinct, jobs)
				}
				runs := readRuns(t, runsLog)
				checkRuns(t, db, layout, s, runs, jobs, true)
				mustHaveFailed(t, runs)
				t.Logf("%s pooling, %s: %d jobs, %s", mode, layout, jobs, runs)
			})
		}
		// The client: a bucketed and a fanout queue worked by one client.Client.
		t.Run(mode+"/client", func(t *testing.T) {
			db := testdb.Open(t, nil)
			s := testdb.Schema(t, db)
			const each = 300
			cli(t, b.DSN(), "--schema", s, "migrate")
			cli(t, b.DSN(), "--schema", s, "enqueue", "--layout", "bucketed", "--queue", "a", "--count", fmt.Sprint(each))
			cli(t, b.DSN(), "--schema", s, "enqueue", "--layout", "fanout", "--queue", "b", "--count", fmt.Sprint(each))
			runsLog := filepath.Join(t.TempDir(), "runs")
			for range 6 {
				cli(t, b.DSN(), "--schema", s, "work", "--queues", "a=4,b=4:fanout", "--fail", "0.2", "--retry-backoff", "50ms", "--until-empty", "--record", "--runs-log", runsLog)
				if recorded(t, db, s) >= 2*each {
					break
				}
			}
			var rows, distinct int64
			if err := db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT "job_id") FROM `+sqlident.Quote(s)+`."work_log"`).Scan(&rows, &distinct); err != nil {
				t.Fatal(err)
			}
			if rows != 2*each || distinct != 2*each {
				t.Errorf("work_log: %d rows for %d jobs, want %d of each", rows, distinct, 2*each)
			}
			runs := readRuns(t, runsLog)
			checkRuns(t, db, "both layouts", s, runs, 2*each, true)
			mustHaveFailed(t, runs)
			t.Logf("%s pooling, client: %d jobs, %s", mode, 2*each, runs)
		})
	}
}

// mustHaveFailed fails a --fail run in which no handler run failed: the
// retries it means to put through the pooler did not happen.
func mustHaveFailed(t *testing.T, r handlerRuns) {
	t.Helper()
	if len(r.failed) == 0 {
		t.Errorf("no handler run failed under --fail 0.2 (%s)", r)
	}
}

// recorded counts a schema's work_log rows.
func recorded(t *testing.T, db *skiplock.DB, s string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+sqlident.Quote(s)+`."work_log"`).Scan(&n); err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	return n
}

// TestClientThroughTransactionPooler: LISTEN hears nothing through a
// transaction pooler (the server session that listens goes back to the
// pool); the client finds that out at start, says so once, and polls, and
// its jobs run. With a direct listen DSN (OpenConfig.ListenDSN) it hears
// the inserts' notifications through the pooler, and so it does through a
// session pooler: there it polls once an hour and still picks jobs up.
func TestClientThroughTransactionPooler(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		direct   bool
		wantLine int
	}{{"transaction", false, 1}, {"transaction", true, 0}, {"session", false, 0}} {
		b := pooler(t, tc.mode)
		mode, wantLine := tc.mode, tc.wantLine
		poll := 100 * time.Millisecond
		oc := &skiplock.OpenConfig{MaxConns: 12}
		if wantLine == 0 {
			poll = time.Hour
		}
		if tc.direct {
			oc.ListenDSN = testdb.DSN(t)
			mode += " with a direct listen DSN"
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		db, err := skiplock.Open(ctx, b.DSN(), oc)
		if err != nil {
			t.Fatal(err)
		}
		_, s := testdb.MigratedOn(t, db, nil)
		var logs testdb.Records
		ran := make(chan int, 10)
		ws := client.NewWorkers()
		if err := client.AddWorker(ws, client.WorkFunc[probeArgs](func(ctx context.Context, j *client.Job[probeArgs]) error {
			ran <- 1
			return nil
		}), nil); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, FetchPollInterval: poll,
			Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}, NoMaintenance: true,
			Logger: logs.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// Another client's inserts: only a notification (or a poll) tells
		// this one.
		inserter, err := client.New(ctx, db, &client.Config{Schema: s})
		if err != nil {
			t.Fatal(err)
		}
		// A first job, however it is found: the claim that returns it
		// drains the queue, and the worker then waits for a notification
		// (or its poll).
		if _, err := inserter.Insert(ctx, probeArgs{}, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-ctx.Done():
			t.Fatalf("%s pooling: the first job never ran", mode)
		}
		for range 3 {
			if _, err := inserter.Insert(ctx, probeArgs{}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			select {
			case <-ran:
			case <-ctx.Done():
				t.Fatalf("%s pooling: %d of 3 jobs ran", mode, i)
			}
		}
		c.Stop(ctx) //nolint:errcheck // test end
		if got := len(logs.Matching("LISTEN/NOTIFY does not work")); got != wantLine {
			t.Errorf("%s pooling: %d log lines say notifications do not work, want %d:\n%s", mode, got, wantLine, logs.String())
		}
		db.Close()
		cancel()
	}
}

// probeArgs is a job kind with nothing to do.
type probeArgs struct{}

func (probeArgs) Kind() string { return "probe" }

// faultsOnly skips a test outside make test-faults (SKIPLOCK_FAULTS=1).
func faultsOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("SKIPLOCK_FAULTS") == "" {
		t.Skip("a fault run of its own: make test-faults (SKIPLOCK_FAULTS=1)")
	}
}
