package main

import (
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
)

// TestMissingSchemaHint: a command on a schema that does not exist, or
// exists without skiplock's tables, names the schema and the exact fix,
// --schema included.
func TestMissingSchemaHint(t *testing.T) {
	t.Setenv("SKIPLOCK_DSN", testdb.DSN(t))
	db := testdb.Open(t, nil)
	empty := testdb.Schema(t, db)
	if _, err := db.Exec(t.Context(), `CREATE SCHEMA IF NOT EXISTS `+sqlident.Quote(empty)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{empty + "_none", empty} {
		for _, args := range [][]string{
			{"jobs", "list"}, {"jobs", "show", "1"}, {"queues", "list"}, {"queues", "pause", "q"}, {"periodic", "list"}, {"stats"},
		} {
			code, out, errs := cli(t, append([]string{"--schema", s}, args...)...)
			if code == 0 || !strings.Contains(errs, "skiplock migrate --schema "+s+"`") {
				t.Errorf("%v on schema %s: exit %d, want an error with the fix `skiplock migrate --schema %s`\n%s%s", args, s, code, s, out, errs)
			}
		}
	}
}

// TestEmbeddedServerQuiet: a command that uses the running embedded
// PostgreSQL (no DSN) says nothing about it at the default log level, and
// a debug record with --log-level debug or -v; local start says it runs, and
// where.
func TestEmbeddedServerQuiet(t *testing.T) {
	testdb.DSN(t) // starts the harness's server unless SKIPLOCK_TEST_DSN is set
	pg := testdb.Server()
	if pg == nil {
		t.Skip("SKIPLOCK_TEST_DSN names the server: no embedded one")
	}
	_, s := testdb.Migrated(t, nil)
	t.Setenv("SKIPLOCK_LOCAL_DIR", pg.Dir())
	for _, v := range []string{"SKIPLOCK_DSN", "DATABASE_URL", "SKIPLOCK_LOG_LEVEL"} {
		t.Setenv(v, "")
	}
	code, out, errs := cli(t, "--schema", s, "queues", "list")
	if code != 0 || errs != "" {
		t.Fatalf("queues list on the embedded server: exit %d, stderr %q, want nothing\n%s", code, errs, out)
	}
	for _, verbose := range [][]string{{"--log-level", "debug"}, {"-v"}} {
		code, _, errs = cli(t, append(append([]string{"--schema", s}, verbose...), "queues", "list")...)
		if code != 0 || !strings.Contains(errs, "level=DEBUG") || !strings.Contains(errs, "PostgreSQL already running") {
			t.Fatalf("queues list %s: exit %d, want the debug record\n%s", strings.Join(verbose, " "), code, errs)
		}
	}
	code, out, errs = cli(t, "local", "start")
	if code != 0 || !strings.Contains(out, "embedded PostgreSQL: running") || !strings.Contains(out, pg.Dir()) {
		t.Fatalf("local start on the running server: exit %d, want a line saying it runs, and where\n%s%s", code, out, errs)
	}
}
