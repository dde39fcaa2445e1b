package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestEnqueuePayloadFile: a payload too long for an argument comes from a
// file or standard input, bounded by --max-payload; a larger one, or
// both --payload and --payload-file, changes nothing.
func TestEnqueuePayloadFile(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	cliAll(t, []string{"--schema", name, "migrate", "--layout", "bucketed"})
	big := `{"blob":"` + strings.Repeat("x", 300<<10) + `"}`
	path := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	cliAll(t, []string{"--schema", name, "enqueue", "--payload-file", path})
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs" WHERE length("payload"::text) > 300000`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d jobs with the 300 KiB payload (%v), want 1", n, err)
	}
	for _, args := range [][]string{
		{"--schema", name, "enqueue", "--payload-file", path, "--max-payload", "1000"},
		{"--schema", name, "enqueue", "--payload-file", path, "--payload", "{}"},
		{"--schema", name, "enqueue", "--payload-file", filepath.Join(t.TempDir(), "missing.json")},
	} {
		if code, _, errs := cli(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d %q, want a usage error", args[3:], code, errs)
		}
	}
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM `+sqlident.Quote(name)+`."jobs"`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d jobs after the refused ones (%v), want 1", n, err)
	}
}
