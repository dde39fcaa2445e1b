package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testdb"
)

// TestEmulateCLI: the command lines under each personality: enqueue,
// then work with a third of the attempts failing and --record until empty
// (bucketed: again until nothing is left, since --until-empty leaves a
// retry that waits out its backoff), and every job is recorded exactly
// once. migrate and bench name the personality.
func TestEmulateCLI(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	for _, p := range []string{"cockroach", "yugabyte-snapshot"} {
		for _, layout := range []string{"fanout", "bucketed"} {
			t.Run(p+"/"+layout, func(t *testing.T) {
				t.Parallel()
				name := testdb.Schema(t, db)
				code, out, errs := cli(t, "--emulate", p, "--schema", name, "migrate")
				if code != 0 || !strings.Contains(out, "under the "+p+" personality") {
					t.Fatalf("%s migrate: exit %d\n%s%s", p, code, out, errs)
				}
				cliAll(t, []string{"--emulate", p, "--schema", name, "enqueue", "--layout", layout, "--count", "300"})
				for range 5 {
					cliAll(t, []string{"--emulate", p, "--schema", name, "work", "--layout", layout, "--workers", "8", "--fail", "0.3",
						"--retry-backoff", "50ms", "--until-empty", "--record"})
					if rows, _ := workLog(t, db, name); rows >= 300 {
						break
					}
				}
				if rows, jobs := workLog(t, db, name); rows != 300 || jobs != 300 {
					t.Errorf("%s %s: work_log has %d rows for %d jobs, want 300 and 300", p, layout, rows, jobs)
				}
			})
		}
	}
	// A bench report names the personality and what of it did not run.
	name := testdb.Schema(t, db)
	code, out, errs := cli(t, "--emulate", "cockroach", "--schema", name, "--json", "bench", "throughput", "--jobs", "200")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, errs)
	}
	var rep struct {
		Engine struct {
			Name, Version, Personality string
			Emulated                   []string
		} `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Engine.Personality != "cockroach" || len(rep.Engine.Emulated) == 0 || !strings.Contains(rep.Engine.Version, "CockroachDB") {
		t.Errorf("bench --json engine: %+v (%v)\n%s", rep.Engine, err, out)
	}
}

// TestEmulateCLIRefusesBadFlags: a personality or option the CLI cannot
// read is a usage error before anything runs.
func TestEmulateCLIRefusesBadFlags(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	for _, args := range [][]string{
		{"--emulate", "oracle", "migrate"},
		{"--emulate", "cockroach", "--emulate-opts", "inject=lots", "migrate"},
		{"--emulate", "cockroach", "--emulate-opts", "colour=blue", "migrate"},
		{"--emulate", "yugabyte", "--emulate-opts", "inject=0.1/0", "migrate"},
		{"--emulate-opts", "notify", "migrate"},
	} {
		if code, _, errs := cli(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, %q; want a usage error (2)", args, code, errs)
		}
	}
}
