package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestMain gives every test in this package the throwaway PostgreSQL.
func TestMain(m *testing.M) { testdb.Main(m) }

// cli runs the CLI in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// cliAll runs each command line and fails the test on the first non-zero
// exit.
func cliAll(t *testing.T, lines ...[]string) {
	t.Helper()
	for _, args := range lines {
		if code, out, errs := cli(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
}

// workLog counts a schema's work_log rows and the distinct jobs in them.
func workLog(t *testing.T, db *skiplock.DB, schemaName string) (rows, jobs int64) {
	t.Helper()
	err := db.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT "job_id") FROM `+sqlident.Quote(schemaName)+`."work_log"`).Scan(&rows, &jobs)
	if err != nil {
		t.Fatal(err)
	}
	return rows, jobs
}

// statsReport is the part of `stats --json` the CLI contract fixes.
type statsReport struct {
	ByStatus      map[string]int64 `json:"by_status"`
	QueuedOldestS *float64         `json:"queued_oldest_s"`
	ByQueue       map[string]int64 `json:"by_queue"`
}

// statsJSON runs `stats --json` for a layout and decodes it, failing the
// test when the contract's fields are missing.
func statsJSON(t *testing.T, schemaName, layout string) (statsReport, string) {
	t.Helper()
	code, out, errs := cli(t, "--schema", schemaName, "--json", "stats", "--layout", layout)
	if code != 0 {
		t.Fatalf("stats: exit %d %s", code, errs)
	}
	var st statsReport
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.QueuedOldestS == nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	return st, out
}
