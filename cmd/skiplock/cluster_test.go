package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestClusterUsageErrors(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no yugabyted, no cockroach
	base := filepath.Join(t.TempDir(), "c")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster"}, "usage: skiplock cluster up|down|status|dsn"},
		{[]string{"cluster", "frob", "--engine", "yugabyte"}, `unknown cluster subcommand "frob"`},
		{[]string{"cluster", "up"}, "--engine auto: a local cluster is --engine yugabyte or --engine cockroach"},
		{[]string{"cluster", "up", "--engine", "postgres"}, "a local cluster is --engine yugabyte or --engine cockroach"},
		{[]string{"cluster", "up", "--engine", "yugabyte", "--nodes", "0", "--base-dir", base}, "--nodes 0: use a count of at least 1"},
		{[]string{"cluster", "up", "--engine", "yugabyte", "--nodes", "10", "--base-dir", base}, "--nodes 10: use 1 to 9"},
		{[]string{"cluster", "up", "--engine", "yugabyte", "--base-dir", base}, "yugabyted not found on PATH: install YugabyteDB"},
		{[]string{"cluster", "up", "--engine", "cockroach", "--base-dir", base}, "cockroach not found on PATH: install CockroachDB"},
		{[]string{"cluster", "up", "--engine", "crdb", "--base-dir", base, "--bin", "/nonexistent/cockroach"}, "--bin /nonexistent/cockroach is not an executable file"},
		{[]string{"cluster", "status", "--engine", "yugabyte", "--base-dir", base, "--schema", "bad name"}, "schema"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("a refused command created %s", base)
	}
}

func TestClusterStatusAndDownWithoutCluster(t *testing.T) {
	base := filepath.Join(t.TempDir(), "none")
	code, stdout, stderr := runCLI(t, "cluster", "status", "--engine", "cockroach", "--base-dir", base)
	if code != exitOK || !strings.Contains(stdout, "cockroach cluster: none in "+base) {
		t.Errorf("status: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "--json", "cluster", "status", "--engine", "yugabyte", "--base-dir", base)
	if code != exitOK || !strings.Contains(stdout, `"exists": false`) {
		t.Errorf("status --json: exit %d, stdout %q", code, stdout)
	}
	code, _, stderr = runCLI(t, "cluster", "down", "--engine", "yugabyte", "--base-dir", base)
	if code != exitOK || !strings.Contains(stderr, "nothing to do") {
		t.Errorf("down: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "cluster", "dsn", "--engine", "yugabyte", "--base-dir", base)
	if code != exitError || !strings.Contains(stderr, "run skiplock cluster up --engine yugabyte") {
		t.Errorf("dsn: exit %d, stderr %q", code, stderr)
	}
}

// TestClusterUpFailureExitsOne runs up against a stand-in yugabyted that
// fails to start node 1: exit 1, the stand-in's words in the error, and
// nothing left behind.
func TestClusterUpFailureExitsOne(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-yugabyted")
	script := "#!/usr/bin/env bash\n# fake-yugabyted: a test stand-in for yugabyted whose start fails.\n" +
		"[ \"$1\" = start ] || exit 0\necho \"fake-yugabyted: cannot start: $1\" >&2\nexit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "yb")
	code, _, stderr := runCLI(t, "cluster", "up", "--engine", "yugabyte", "--nodes", "1", "--base-dir", base, "--bin", bin)
	if code == exitUsage && strings.Contains(stderr, "ports already taken") {
		t.Skipf("YugabyteDB's ports are in use on this machine: %s", stderr)
	}
	if code != exitError || !strings.Contains(stderr, "start node 1") || !strings.Contains(stderr, "fake-yugabyted: cannot start: start") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("failed up left %s behind", base)
	}
}
