package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestFanoutCLI enqueues, works with --record until empty, and checks
// work_log (each job recorded exactly once) and stats --json.
func TestFanoutCLI(t *testing.T) {
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	cliAll(t,
		[]string{"--schema", name, "migrate", "--layout", "fanout"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--count", "2000", "--batch", "700"},
		[]string{"--schema", name, "enqueue", "--layout", "fanout", "--queue", "other"},
		[]string{"--schema", name, "work", "--layout", "fanout", "--workers", "8", "--until-empty", "--record"},
	)
	if total, distinct := workLog(t, db, name); total != 2000 || distinct != 2000 {
		t.Fatalf("work_log: %d rows, %d distinct jobs; want 2000 and 2000", total, distinct)
	}
	st, out := statsJSON(t, name, "fanout")
	// The other queue's job is still there: work served "default" only.
	if st.ByStatus["Queued"] != 1 || st.ByStatus["Dead"] != 0 || st.ByQueue["other"] != 1 || *st.QueuedOldestS < 0 {
		t.Fatalf("stats: %s", out)
	}
}

func TestFanoutCLIRefusesBadInput(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	if code, _, errs := cli(t, "--schema", name, "migrate", "--layout", "fanout"); code != 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"work", "--mode", "lease", "--until-empty"}, "--layout bucketed"},
		{[]string{"work", "--batch", "10", "--until-empty"}, "one job per transaction"},
		{[]string{"enqueue", "--run-at", "1h"}, "scheduled jobs"},
		{[]string{"enqueue", "--priority", "2"}, "no priorities"},
	} {
		args := append([]string{"--schema", name}, c.args[0], "--layout", "fanout")
		args = append(args, c.args[1:]...)
		code, _, errs := cli(t, args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errs, exitUsage, c.want)
		}
	}
	allowed, err := db.ServerMaxConnections(t.Context())
	if err != nil {
		t.Skipf("no max_connections: %v", err)
	}
	code, _, errs := cli(t, "--schema", name, "work", "--layout", "fanout", "--workers", fmt.Sprint(allowed), "--until-empty")
	// The client's pool (client.Config.Connections: one per worker, one
	// that counts attempts, the listener's, maintenance's and spares) and
	// fanout.SpareConns more.
	want := fmt.Sprintf("server allows %d connections; these queues need a pool of", allowed)
	// The same usage error as the bucketed layout's: exit 2.
	if code != exitUsage || !strings.Contains(errs, want) {
		t.Errorf("too many workers: exit %d %q; want exit 2 and %q", code, errs, want)
	}
}
