package main

import (
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestBucketedCLI enqueues, works with --record until empty, and checks
// work_log (each job recorded exactly once) and stats --json.
func TestBucketedCLI(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t,
		[]string{"--schema", name, "migrate", "--layout", "bucketed"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "3000", "--batch", "1000"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "later", "--run-at", "1h"},
		[]string{"--schema", name, "work", "--layout", "bucketed", "--workers", "8", "--until-empty", "--record"},
	)
	if total, distinct := workLog(t, db, name); total != 3000 || distinct != 3000 {
		t.Fatalf("work_log: %d rows, %d distinct jobs; want 3000 and 3000", total, distinct)
	}
	st, out := statsJSON(t, name, "bucketed")
	if st.ByStatus["Success"] != 3000 || st.ByStatus["Queued"] != 1 || st.ByStatus["Running"] != 0 || st.ByQueue["later"] != 1 || *st.QueuedOldestS != 0 {
		t.Fatalf("stats: %s", out)
	}
}

func TestBucketedCLIRefusesBadInput(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	if code, _, errs := cli(t, "--schema", name, "migrate", "--layout", "bucketed"); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs := cli(t, "--schema", name, "work", "--layout", "bucketed", "--mode", "tx", "--until-empty")
	if code != exitUsage || !strings.Contains(errs, "--mode lease") {
		t.Fatalf("--mode tx: exit %d %s", code, errs)
	}
	if err := bucketedPoolFits(500, 20); err == nil || !strings.Contains(err.Error(), "server allows 20 connections") || !strings.Contains(err.Error(), "raise max_connections") {
		t.Fatalf("pool check: %v", err)
	}
	if err := bucketedPoolFits(500, 100); err != nil {
		t.Fatalf("a capped pool fits 100 connections: %v", err)
	}
}
