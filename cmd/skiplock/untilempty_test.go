package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestWorkUntilEmptyLeavesScheduledJobs: `work --until-empty` exits once
// nothing can run now and nothing is running, although jobs of its queue
// are scheduled hours ahead, and says how many and when the next is due;
// the scheduled jobs stay Queued.
func TestWorkUntilEmptyLeavesScheduledJobs(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	before := time.Now() // before the enqueues: the due time is counted from them
	cliAll(t,
		[]string{"--schema", name, "migrate", "--layout", "bucketed"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "40"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "2", "--run-at", "3h"},
		[]string{"--schema", name, "enqueue", "--layout", "bucketed", "--count", "1", "--run-at", "2h"},
	)
	// Before the fix this waited for the scheduled jobs: a deadline turns
	// that into a failure instead of a hung test.
	work := func(args ...string) (int, string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"--schema", name}, args...), &out, &errb)
		if ctx.Err() != nil {
			t.Fatalf("work --until-empty was still waiting after 90 s (for the scheduled jobs?)\n%s%s", out.String(), errb.String())
		}
		return code, out.String(), errb.String()
	}
	code, out, errs := work("work", "--layout", "bucketed", "--workers", "4", "--until-empty", "--record")
	if code != 0 {
		t.Fatalf("work: exit %d\n%s%s", code, out, errs)
	}
	m := regexp.MustCompile(`handled 40 job\(s\).*\n3 job\(s\) of queue "default" are scheduled for later; the next is due at (\S+) \(in (?:1h59m5\ds|2h0m0s)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("work --until-empty did not report the 40 jobs handled and the 3 scheduled for later, the next due in 2h:\n%s", out)
	}
	next, err := time.Parse(time.RFC3339, m[1])
	// The report prints whole seconds.
	if err != nil || next.Before(before.Add(2*time.Hour).Truncate(time.Second)) || next.After(time.Now().Add(2*time.Hour+time.Second)) {
		t.Errorf("next due %q (%v): want about 2h from the enqueue", m[1], err)
	}
	if total, distinct := workLog(t, db, name); total != 40 || distinct != 40 {
		t.Errorf("work_log: %d rows, %d distinct jobs; want 40 and 40", total, distinct)
	}
	if st, raw := statsJSON(t, name, "bucketed"); st.ByStatus["Queued"] != 3 || st.ByStatus["Success"] != 40 {
		t.Errorf("the scheduled jobs should stay Queued: %s", raw)
	}

	// The same in JSON; nothing due at all: it exits at once.
	code, out, errs = work("--json", "work", "--layout", "bucketed", "--until-empty")
	var rep struct {
		Handled        int64      `json:"handled"`
		Lost           *int64     `json:"lost"`
		ScheduledLater int64      `json:"scheduled_later"`
		NextDue        *time.Time `json:"next_due"`
		NextDueInS     float64    `json:"next_due_in_s"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("work --json: exit %d\n%s%s", code, out, errs)
	}
	if rep.Handled != 0 || rep.Lost == nil || *rep.Lost != 0 || rep.ScheduledLater != 3 || rep.NextDue == nil || rep.NextDue.Sub(next).Abs() > time.Second ||
		rep.NextDueInS < 7000 || rep.NextDueInS > 7200 {
		t.Errorf("work --json report: %s", out)
	}
	if strings.Contains(out, "scheduled for later;") {
		t.Errorf("--json printed text too: %s", out)
	}
}

// TestWorkCrashOnPayloadLeavesOtherJobs: --crash-on-payload is a
// documented work flag (in the usage text) and leaves jobs whose payload
// does not match alone, in both layouts. internal/chaos runs the jobs
// that match.
func TestWorkCrashOnPayloadLeavesOtherJobs(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, layout := range []string{"bucketed", "fanout"} {
		cliAll(t,
			[]string{"--schema", name, "migrate", "--layout", layout},
			[]string{"--schema", name, "enqueue", "--layout", layout, "--count", "5", "--payload", `{"kind":"fine"}`},
			[]string{"--schema", name, "work", "--layout", layout, "--workers", "2", "--until-empty", "--crash-on-payload", "poison"},
		)
	}
	code, _, errs := cli(t, "work", "--help")
	if code != 0 || !strings.Contains(errs, "--crash-on-payload") {
		t.Errorf("work --help: exit %d, no --crash-on-payload in\n%s", code, errs)
	}
}

// TestWorkRefusesBadRescueInterval: a --rescue-interval out of range is a
// usage error (exit 2) that names the range, before anything runs.
func TestWorkRefusesBadRescueInterval(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, v := range []string{"1ms", "-1s", "2h"} {
		code, _, errs := cli(t, "work", "--rescue-interval", v, "--until-empty")
		if code != exitUsage || !strings.Contains(errs, "use 100ms to 1h") {
			t.Errorf("--rescue-interval %s: exit %d\n%s", v, code, errs)
		}
	}
}
