package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestJobsCommands: list both layouts as JSON with the contract's fields,
// show a job, cancel with one unknown id (exit 1, the id named), act on a
// state in bulk, and refuse bad usage with exit 2.
func TestJobsCommands(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	_, s := testdb.Migrated(t, nil)
	cliAll(t,
		[]string{"--schema", s, "enqueue", "--layout", "bucketed", "--count", "3", "--payload", `{"n":1}`},
		[]string{"--schema", s, "enqueue", "--layout", "fanout", "--count", "2"},
	)
	code, out, errs := cli(t, "--schema", s, "--json", "jobs", "list")
	if code != 0 {
		t.Fatalf("jobs list: exit %d %s", code, errs)
	}
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs) != 5 {
		t.Fatalf("jobs list --json: %d jobs (%v):\n%s", len(jobs), err, out)
	}
	for _, k := range []string{"id", "layout", "queue", "kind", "state", "priority", "attempts", "max_attempts", "run_at", "created_at", "finished_at", "last_error"} {
		if _, ok := jobs[0][k]; !ok {
			t.Fatalf("a listed job has no %q: %v", k, jobs[0])
		}
	}
	code, out, _ = cli(t, "--schema", s, "--json", "jobs", "show", "1")
	if code != 0 || !strings.Contains(out, `"payload": {`) || !strings.Contains(out, `"layout": "bucketed"`) {
		t.Fatalf("jobs show 1: exit %d\n%s", code, out)
	}
	code, out, errs = cli(t, "--schema", s, "jobs", "cancel", "1", "424242")
	if code != 1 || !strings.Contains(out, "cancelled 1 job(s): 1") || !strings.Contains(out, "job 424242: not cancelled") {
		t.Fatalf("jobs cancel 1 424242: exit %d, want 1\n%s%s", code, out, errs)
	}
	code, out, _ = cli(t, "--schema", s, "--json", "jobs", "retry", "--state", "CANCELED")
	if code != 0 || !strings.Contains(out, `"changed": [`) || !strings.Contains(out, `"1"`) {
		t.Fatalf("jobs retry --state CANCELED: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "--schema", s, "jobs", "list", "--state", "queued", "--layout", "fanout")
	if code != 0 || strings.Count(out, "fanout") != 2 {
		t.Fatalf("jobs list --state queued --layout fanout: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"jobs"}, {"jobs", "frob"}, {"jobs", "list", "--state", "sleepy"}, {"jobs", "list", "--limit", "0"},
		{"jobs", "show"}, {"jobs", "cancel"}, {"jobs", "delete", "--state", "failed", "--limit", "500"},
		{"jobs", "retry", "--state", "failed", "7"},
	} {
		if code, _, errs := cli(t, append([]string{"--schema", s}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
}

// TestQueuesCommands: queues list shows counts per state and the paused
// flag; pause and resume change it; bad usage exits 2.
func TestQueuesCommands(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	_, s := testdb.Migrated(t, nil)
	cliAll(t,
		[]string{"--schema", s, "enqueue", "--layout", "bucketed", "--queue", "mail", "--count", "3"},
		[]string{"--schema", s, "enqueue", "--layout", "fanout", "--queue", "ledger", "--count", "2"},
		[]string{"--schema", s, "queues", "pause", "mail"},
	)
	code, out, errs := cli(t, "--schema", s, "--json", "queues", "list")
	if code != 0 {
		t.Fatalf("queues list: exit %d %s", code, errs)
	}
	var qs []struct {
		Name   string           `json:"name"`
		Counts map[string]int64 `json:"counts"`
		Paused bool             `json:"paused"`
		Oldest *float64         `json:"oldest_queued_s"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 2 {
		t.Fatalf("queues list --json: %v\n%s", err, out)
	}
	if qs[0].Name != "ledger" || qs[0].Counts["queued"] != 2 || qs[0].Paused || qs[1].Name != "mail" || qs[1].Counts["queued"] != 3 || !qs[1].Paused || qs[1].Oldest == nil {
		t.Fatalf("queues: %+v", qs)
	}
	if code, out, _ := cli(t, "--schema", s, "--json", "stats", "--layout", "bucketed"); code != 0 || !strings.Contains(out, `"paused_queues": [
    "mail"
  ]`) {
		t.Fatalf("stats while mail is paused: exit %d\n%s", code, out)
	}
	cliAll(t, []string{"--schema", s, "queues", "resume", "mail"})
	if code, out, _ := cli(t, "--schema", s, "queues", "list"); code != 0 || strings.Contains(out, "true") {
		t.Fatalf("after resume: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"queues"}, {"queues", "pause"}, {"queues", "pause", "a", "b"}, {"queues", "list", "x"}, {"queues", "hold", "a"}} {
		if code, _, errs := cli(t, append([]string{"--schema", s}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
}
