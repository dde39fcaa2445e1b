package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cluster"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestFailover: a primary with a synchronous streaming replica, both
// started here; workers on a multi-host DSN with
// target_session_attrs=read-write run `work --until-empty` on both layouts
// while the primary is SIGKILLed and the replica promoted. Every job ends
// done and recorded exactly once, each command exits 0 by itself, and the
// handlers' runs (--runs-log) account for every recorded job; bucketed
// runs never outnumber the attempts their claims counted.
// Before that, a worker pointed at the replica alone refuses to start and
// says the server is a standby.
func TestFailover(t *testing.T) {
	faultsOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "skiplock-failover-")
	if err != nil {
		t.Fatal(err)
	}
	// The servers run as user postgres (as root), who must enter it.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	cfg := func(dir string) *cluster.PostgresConfig {
		return &cluster.PostgresConfig{Dir: filepath.Join(base, dir), MaxConnections: 200, SharedBuffers: "128MB", Logger: testdb.Logger(t)}
	}
	primary := cluster.NewPostgres(cfg("primary"))
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop(context.Background()) }) //nolint:errcheck // it may be dead already
	standby, err := primary.Standby(ctx, filepath.Join(base, "standby"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop(context.Background()) }) //nolint:errcheck // test end
	admin, err := skiplock.Open(ctx, primary.DSN(), &skiplock.OpenConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Synchronous: a commit the primary acknowledged is on the replica.
	for _, stmt := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	admin.Close()
	multi := strings.Replace(primary.DSN(), fmt.Sprintf("127.0.0.1:%d", primary.Port()), fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", primary.Port(), standby.Port()), 1) + "&target_session_attrs=read-write"

	jobs := 3000
	if os.Getenv("SKIPLOCK_CHAOS") == "full" {
		jobs = 20000
	}
	var procs []*workerProc
	runsLogs := map[string]string{}
	for _, layout := range layouts {
		runsLogs[layout] = filepath.Join(t.TempDir(), layout+"-runs")
		s := "failover_" + layout
		cli(t, multi, "--schema", s, "migrate")
		cli(t, multi, "--schema", s, "enqueue", "--layout", layout, "--count", fmt.Sprint(jobs))
		if layout == layouts[0] {
			// The replica alone: named as a standby at start.
			out, err := exec.CommandContext(ctx, binary(t), "--dsn", standby.DSN(), "--schema", s, "work", "--layout", layout, "--workers", "2", "--until-empty").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "read-only standby") {
				t.Errorf("work on the standby: %v, want a refusal naming it a standby:\n%s", err, out)
			}
		}
		procs = append(procs, startWorker(t, multi, append(workArgs(s, layout), "--until-empty", "--work", "10ms", "--runs-log", runsLogs[layout])...))
	}
	// Into the run: the workers are busy, on both layouts.
	before, err := skiplock.Open(ctx, primary.DSN(), &skiplock.OpenConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, layout := range layouts {
		waitRecorded(t, before, "failover_"+layout, 100, time.Minute)
	}
	before.Close()
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := skiplock.Open(ctx, standby.DSN(), &skiplock.OpenConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	for i, layout := range layouts {
		if err := procs[i].wait(3 * time.Minute); err != nil {
			t.Errorf("%s: work --until-empty through the failover: %v\n%s", layout, err, tail(procs[i].allLogs(), 30))
			continue
		}
		logs := procs[i].allLogs()
		if !strings.Contains(logs, "retry_in=") && !strings.Contains(logs, "not answering") {
			t.Errorf("%s: nothing in the worker's log says it met the failover (it finished before the kill?):\n%s", layout, tail(logs, 20))
		}
		c := count(t, after, layout, "failover_"+layout, int64(jobs))
		runs := readRuns(t, runsLogs[layout])
		report(t, "failover", layout, c, "primary=SIGKILL standby=promoted "+runs.String())
		mustBeExact(t, c)
		// A run whose commit the failover took may run again: counted,
		// not refused.
		checkRuns(t, after, layout, "failover_"+layout, runs, int64(jobs), false)
	}
}
