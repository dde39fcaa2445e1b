package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestBucketedCLI enqueues, works with --record until empty, and checks
// work_log (each job recorded exactly once) and stats --json.
func TestBucketedCLI(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, args := range [][]string{
		{"--schema", name, "migrate", "--layout", "bucketed"},
		{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "3000", "--batch", "1000"},
		{"--schema", name, "enqueue", "--layout", "bucketed", "--queue", "later", "--run-at", "1h"},
		{"--schema", name, "work", "--layout", "bucketed", "--workers", "8", "--until-empty", "--record"},
	} {
		if code, out, errs := cli(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
	var total, distinct int64
	err := db.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT "job_id") FROM `+skiplock.QuoteIdent(name)+`."work_log"`).Scan(&total, &distinct)
	if err != nil || total != 3000 || distinct != 3000 {
		t.Fatalf("work_log: %d rows, %d distinct jobs (%v); want 3000 and 3000", total, distinct, err)
	}
	code, out, errs := cli(t, "--schema", name, "--json", "stats", "--layout", "bucketed")
	if code != 0 {
		t.Fatalf("stats: exit %d %s", code, errs)
	}
	var st struct {
		ByStatus      map[string]int64 `json:"by_status"`
		QueuedOldestS *float64         `json:"queued_oldest_s"`
		ByQueue       map[string]int64 `json:"by_queue"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.QueuedOldestS == nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
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
