package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// migrated is a throwaway schema with both layouts, for the CLI
// (SKIPLOCK_DSN), and a DB on it.
func migrated(t *testing.T) (*skiplock.DB, string) {
	t.Helper()
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t, []string{"--schema", name, "migrate"})
	return db, name
}

// workJSON runs a work command with --json and decodes its report.
func workJSON(t *testing.T, args ...string) workReport {
	t.Helper()
	code, out, errs := cli(t, append([]string{"--json"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
	}
	var rep workReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return rep
}

// TestWorkQueuesRecord works a bucketed and a fanout queue with one
// client and --record: every job is recorded exactly once, both queues
// are drained, a queue not listed is left alone, and the report counts
// each queue.
func TestWorkQueuesRecord(t *testing.T) {
	db, name := migrated(t)
	cliAll(t,
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "a", "--kind", "", "--count", "300"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--queue", "b", "--kind", "", "--count", "200"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "c"},
	)
	rep := workJSON(t, "--schema", name, "work", "--queues", "a=3,b=2:fanout", "--until-empty", "--record")
	if rep.Handled != 500 || rep.Failed != 0 || rep.Workers != 5 || rep.Layout != "bucketed+fanout" || rep.Mode != "lease+tx" {
		t.Fatalf("report: %+v", rep)
	}
	if a, b := rep.Queues["a"], rep.Queues["b"]; a.Handled != 300 || a.Layout != "bucketed" || a.Workers != 3 || b.Handled != 200 || b.Layout != "fanout" || b.Workers != 2 {
		t.Fatalf("per-queue report: %+v", rep.Queues)
	}
	var dups int64
	err := db.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT "job_id" FROM `+sqlident.Quote(name)+`."work_log" GROUP BY "job_id" HAVING count(*) > 1) d`).Scan(&dups)
	if err != nil {
		t.Fatal(err)
	}
	if total, distinct := workLog(t, db, name); total != 500 || distinct != 500 || dups != 0 {
		t.Fatalf("work_log: %d rows, %d distinct jobs, %d jobs recorded more than once; want 500, 500, 0", total, distinct, dups)
	}
	st, out := statsJSON(t, name, "bucketed")
	if st.ByStatus["Success"] != 300 || st.ByStatus["Queued"] != 1 || st.ByStatus["Running"] != 0 || st.ByQueue["c"] != 1 {
		t.Fatalf("bucketed stats: %s", out)
	}
	if st, out := statsJSON(t, name, "fanout"); st.ByStatus["Queued"] != 0 || st.ByStatus["Dead"] != 0 {
		t.Fatalf("fanout stats: %s", out)
	}
}

// TestWorkFail fails half the attempts on both layouts: every job ends
// in Success (--fail never fails a job's last attempt) after failed
// attempts were counted.
func TestWorkFail(t *testing.T) {
	db, name := migrated(t)
	cliAll(t,
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "f", "--count", "200", "--max-attempts", "10"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--queue", "g", "--count", "100", "--max-attempts", "10"},
	)
	var failed int64
	// Bucketed retries scheduled for later do not hold --until-empty:
	// run again until every job is done.
	for run := 0; ; run++ {
		rep := workJSON(t, "--schema", name, "work", "--queues", "f=8,g=4:fanout", "--fail", "0.5", "--retry-backoff", "10ms", "--until-empty")
		failed += rep.Failed
		st, out := statsJSON(t, name, "bucketed")
		if st.ByStatus["Success"] == 200 {
			break
		}
		if run == 50 || st.ByStatus["Failed"] != 0 {
			t.Fatalf("after %d runs: %s", run+1, out)
		}
	}
	if failed == 0 {
		t.Fatal("--fail 0.5 failed no attempt")
	}
	if st, out := statsJSON(t, name, "fanout"); st.ByStatus["Queued"] != 0 || st.ByStatus["Dead"] != 0 {
		t.Fatalf("fanout stats: %s", out)
	}
	var attempts int64
	if err := db.QueryRow(t.Context(), `SELECT sum("attempts") FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts <= 200 {
		t.Fatalf("the bucketed jobs took %d attempts: want more than 200 with --fail 0.5", attempts)
	}
	t.Logf("%d failed attempts; bucketed attempts %d", failed, attempts)
}

// TestWorkKinds stores enqueue --kind and runs only the kinds given to
// work --kinds (and ""): a job of another kind fails as unknown.
func TestWorkKinds(t *testing.T) {
	db, name := migrated(t)
	cliAll(t,
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--kind", "send_email", "--count", "3"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "2"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--kind", "other", "--max-attempts", "1"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--queue", "f", "--kind", "ledger", "--count", "2"},
	)
	var ledger int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."job_queue" WHERE "kind" = 'ledger'`).Scan(&ledger); err != nil || ledger != 2 {
		t.Fatalf("fanout jobs of kind ledger: %d (%v); want 2", ledger, err)
	}
	if code, _, errs := cli(t, "--schema", name, "enqueue", "--kind", strings.Repeat("k", 300)); code != exitUsage || !strings.Contains(errs, "nothing was written") {
		t.Fatalf("enqueue with a kind too long: exit %d %q", code, errs)
	}
	var mail, none, other int
	err := db.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE "kind" = 'send_email'), count(*) FILTER (WHERE "kind" = ''), count(*) FILTER (WHERE "kind" = 'other') FROM `+
		sqlident.Quote(name)+`."jobs"`).Scan(&mail, &none, &other)
	if err != nil || mail != 3 || none != 2 || other != 1 {
		t.Fatalf("kinds stored: send_email %d, \"\" %d, other %d (%v); want 3, 2, 1", mail, none, other, err)
	}
	code, out, errs := cli(t, "--schema", name, "work", "--kinds", "send_email", "--until-empty")
	if code != 0 || !strings.Contains(out, "handled 5 job(s), 1 failed") || !strings.Contains(errs, `no worker for kind \"other\"`) {
		t.Fatalf("work --kinds send_email: exit %d\n%s%s", code, out, errs)
	}
	if st, out := statsJSON(t, name, "bucketed"); st.ByStatus["Success"] != 5 || st.ByStatus["Failed"] != 1 {
		t.Fatalf("stats: %s", out)
	}
}

// TestWorkQueuesRefusesBadInput checks that bad --queues specs, --fail
// values and flag combinations exit 2 with a message naming the problem.
func TestWorkQueuesRefusesBadInput(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--queues", "a=0"}, `queue "a": 0 workers: use 1 to 10000`},
		{[]string{"--queues", "a=x"}, `queue "a": workers "x" is not a whole number`},
		{[]string{"--queues", "=3"}, `entry "=3" has no queue name`},
		{[]string{"--queues", "a"}, `entry "a" has no =workers`},
		{[]string{"--queues", "a=3:heap"}, `queue "a": layout "heap": use bucketed or fanout`},
		{[]string{"--queues", "a=3,b=1,a=2"}, `queue "a" is listed twice`},
		{[]string{"--queues", "a=3,,b=1"}, "empty entry"},
		{[]string{"--queues", "a=3", "--workers", "4"}, "--workers with --queues"},
		{[]string{"--queues", "a=3", "--batch", "4"}, "leave --batch out"},
		{[]string{"--queues", "a=3,b=1:fanout", "--mode", "tx"}, `--mode tx: queue "a" is bucketed, which works with --mode lease`},
		{[]string{"--kinds", "x", "--layout", "fanout", "--mode", "lease"}, `queue "default" is fanout, which works with --mode tx`},
		{[]string{"--fail", "1.5"}, "--fail 1.5: use a fraction from 0"},
		{[]string{"--fail", "-0.1"}, "--fail -0.1: use a fraction from 0"},
		{[]string{"--queues", "a=1", "--fail", "2"}, "--fail 2: use a fraction from 0"},
		{[]string{"--retry-backoff", "-1s"}, "--retry-backoff -1s"},
	} {
		args := append([]string{"work", "--until-empty"}, c.args...)
		code, _, errs := cli(t, args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errs, exitUsage, c.want)
		}
	}
	if code, _, errs := cli(t, "work", "--kinds", strings.Repeat("k", 300), "--until-empty"); code != exitUsage || !strings.Contains(errs, "--kinds") {
		t.Errorf("a kind too long: exit %d %q", code, errs)
	}
	// More fanout workers than the server has connections: refused
	// before anything runs, in the words of the single-queue check.
	allowed, err := testdb.Open(t, nil).ServerMaxConnections(t.Context())
	if err != nil {
		t.Skipf("no max_connections: %v", err)
	}
	code, _, errs := cli(t, "work", "--queues", fmt.Sprintf("a=2,b=%d:fanout", allowed), "--until-empty")
	if want := fmt.Sprintf("server allows %d connections; these queues need a pool of", allowed); code != exitUsage || !strings.Contains(errs, want) || !strings.Contains(errs, "raise max_connections") {
		t.Errorf("too many workers: exit %d %q; want exit 2 and %q", code, errs, want)
	}
}
