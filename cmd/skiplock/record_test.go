package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestWorkRecordsAttempts: with --record-attempts every handler run has
// one work_attempt_log row (counted against --runs-log, which notes each
// run as it returns) with its end and outcome, failed attempts included;
// and with --record every completed job has one work_log row whose
// started_at and finished_at are its succeeding attempt's, so the two
// tables join. On each layout and through the client (--queues).
func TestWorkRecordsAttempts(t *testing.T) {
	db := testdb.Open(t, nil)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	const jobs = 60
	for _, tc := range []struct {
		name, layout string
		work         []string
	}{
		{"bucketed", "bucketed", []string{"--layout", "bucketed", "--workers", "6"}},
		{"fanout", "fanout", []string{"--layout", "fanout", "--workers", "6"}},
		{"client", "fanout", []string{"--layout", "fanout", "--queues", "default=6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := testdb.Schema(t, db)
			s := sqlident.Quote(name)
			runs := filepath.Join(t.TempDir(), "runs.log")
			cliAll(t,
				[]string{"--schema", name, "migrate", "--layout", tc.layout},
				[]string{"--schema", name, "enqueue", "--layout", tc.layout, "--count", "60"},
			)
			args := append([]string{"--schema", name, "work", "--work", "10ms", "--fail", "0.3", "--retry-backoff", "10ms",
				"--until-empty", "--record", "--record-attempts", "--runs-log", runs}, tc.work...)
			// Bucketed --until-empty leaves retries waiting out their
			// backoff: run again until every job is recorded.
			for i := 0; ; i++ {
				cliAll(t, args)
				if n, _ := workLog(t, db, name); n == jobs || i == 20 {
					break
				}
			}
			if rows, distinct := workLog(t, db, name); rows != jobs || distinct != jobs {
				t.Fatalf("work_log: %d rows, %d jobs; want %d and %d", rows, distinct, jobs, jobs)
			}
			raw, err := os.ReadFile(runs)
			if err != nil {
				t.Fatal(err)
			}
			var ok, failed int64
			for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
				switch {
				case strings.HasSuffix(line, " ok"):
					ok++
				case strings.HasSuffix(line, " failed"):
					failed++
				}
			}
			if ok != jobs || failed == 0 {
				t.Fatalf("--runs-log: %d ok and %d failed runs; want %d ok and some failed", ok, failed, jobs)
			}
			var succeeded, failedRows, open, short, joined, unspanned int64
			q := `SELECT
  count(*) FILTER (WHERE "outcome" = 'succeeded'),
  count(*) FILTER (WHERE "outcome" = 'failed'),
  count(*) FILTER (WHERE "finished_at" IS NULL OR "outcome" IS NULL),
  count(*) FILTER (WHERE "finished_at" < "started_at" + INTERVAL '10 milliseconds'),
  (SELECT count(*) FROM ` + s + `."work_log" AS l JOIN ` + s + `."work_attempt_log" AS a
     ON a."job_id" = l."job_id" AND a."started_at" = l."started_at" AND a."finished_at" = l."finished_at" AND a."outcome" = 'succeeded'),
  (SELECT count(*) FROM ` + s + `."work_log" WHERE "started_at" IS NULL OR "finished_at" IS NULL)
FROM ` + s + `."work_attempt_log"`
			if err := db.QueryRow(t.Context(), q).Scan(&succeeded, &failedRows, &open, &short, &joined, &unspanned); err != nil {
				t.Fatal(err)
			}
			if succeeded != ok || failedRows != failed || open != 0 || short != 0 {
				t.Errorf("work_attempt_log: %d succeeded, %d failed, %d unfinished, %d shorter than --work; want %d, %d, 0, 0 (the runs log's)",
					succeeded, failedRows, open, short, ok, failed)
			}
			if joined != jobs || unspanned != 0 {
				t.Errorf("work_log: %d rows join their succeeding attempt, %d lack a span; want %d and 0", joined, unspanned, jobs)
			}
		})
	}
}
