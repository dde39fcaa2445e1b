package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestWorkPanic: work --panic 0.5 panics in some attempts, each recorded
// as a failed attempt with the panic and its stack, never in a job's last
// attempt, so every job ends Success; jobs show prints such an error
// whole, stack included. --panic outside [0, 1] exits 2.
func TestWorkPanic(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db, s := testdb.Migrated(t, nil)
	for _, p := range []string{"1.5", "-0.1", "NaN", "x"} {
		if code, _, errs := cli(t, "--schema", s, "work", "--panic", p, "--until-empty"); code != 2 || !strings.Contains(errs, "panic") {
			t.Fatalf("work --panic %s: exit %d, want 2: %s", p, code, errs)
		}
	}
	const jobs = 20
	cliAll(t, []string{"--schema", s, "enqueue", "--count", "20", "--max-attempts", "3"})
	// --until-empty leaves jobs in a retry backoff: work again until none
	// is left (two backoffs, 1 s and 2 s, at most per job).
	for range 30 {
		code, out, errs := cli(t, "--schema", s, "--json", "work", "--workers", "4", "--panic", "0.5", "--until-empty")
		if code != 0 {
			t.Fatalf("work --panic 0.5: exit %d\n%s%s", code, out, errs)
		}
		var rep struct {
			ScheduledLater int64 `json:"scheduled_later"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("work --json: %v\n%s", err, out)
		}
		if rep.ScheduledLater == 0 {
			break
		}
	}
	q := func(where string) int64 {
		var n int64
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(s)+`."jobs" WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := q(`"status" = 'Success'`); n != jobs {
		t.Fatalf("%d of %d jobs Success", n, jobs)
	}
	panicked := `"errors"::TEXT LIKE '%handler panicked: demo handler: simulated panic%'`
	if n := q(panicked); n == 0 {
		t.Fatal("no attempt panicked with --panic 0.5")
	}
	if n := q(`"errors" @> '[{"attempt": 3}]'`); n != 0 {
		t.Fatalf("%d jobs failed their last attempt", n)
	}
	var id string
	if err := db.QueryRow(t.Context(), `SELECT "id"::TEXT FROM `+sqlident.Quote(s)+`."jobs" WHERE `+panicked+` LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "--schema", s, "jobs", "show", id)
	if code != 0 || !strings.Contains(out, "simulated panic") || !strings.Contains(out, "goroutine ") || !strings.Contains(out, "demoWork") {
		t.Fatalf("jobs show %s: exit %d, want the panic's whole text with its stack\n%s%s", id, code, out, errs)
	}
}
