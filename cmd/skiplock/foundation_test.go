package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

func TestSchemaPrint(t *testing.T) {
	code, out, errs := cli(t, "schema", "print", "--engine", "yugabyte", "--layout", "fanout")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"SPLIT AT VALUES", "('20000000-0000-0000-0000-000000000000')", "('e0000000-0000-0000-0000-000000000000')", `PRIMARY KEY ("id" ASC)`} {
		if !strings.Contains(out, want) {
			t.Errorf("yugabyte fanout DDL lacks %s", want)
		}
	}
	code, out, errs = cli(t, "schema", "print", "--engine", "cockroach", "--layout", "bucketed", "--buckets", "16")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "USING HASH WITH (bucket_count = 16)") {
		t.Fatalf("no hash-sharded index:\n%s", out)
	}
	// What it prints is schema.DDL, statement by statement, which
	// internal/crdbcheck parses with CockroachDB's grammar as printed.
	stmts, err := schema.DDL(skiplock.EngineCockroach.Dialect(), schema.LayoutBucketed, &schema.Options{Schema: schema.DefaultSchema, Buckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(stmts, ";\n\n") + ";\n"; !strings.HasSuffix(out, "\n"+want) {
		t.Errorf("schema print does not print schema.DDL:\n%s", out)
	}
}

// TestUsageErrorsExit2AndCreateNothing feeds bad input to every
// foundation command and checks the exit code, the message, and that the
// database has no new schema.
func TestUsageErrorsExit2AndCreateNothing(t *testing.T) {
	dsn := testdb.DSN(t)
	db := testdb.Open(t, nil)
	before := schemas(t, db)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcommand"}, "unknown command"},
		{[]string{"--engine", "mysql", "migrate"}, `unknown engine "mysql"`},
		{[]string{"migrate", "--layout", "queue"}, `unknown layout "queue"`},
		{[]string{"--schema", `x"; DROP SCHEMA public; --`, "migrate"}, "not an identifier"},
		{[]string{"--schema", "1x", "migrate"}, "not an identifier"},
		{[]string{"migrate", "--buckets", "0"}, "--buckets 0"},
		{[]string{"migrate", "--tablets", "-1"}, "--tablets -1"},
		{[]string{"schema", "print", "--layout", "fanout"}, "needs --engine"},
		{[]string{"schema", "print", "--engine", "yugabyte", "--layout", "fanout", "--tablets", "0"}, "--tablets 0"},
		{[]string{"schema", "print", "--engine", "cockroach", "--layout", "bucketed", "--buckets", "-5"}, "--buckets -5"},
		{[]string{"migrate", "stray"}, "unexpected argument"},
		{[]string{"local", "explode"}, "unknown local subcommand"},
		{[]string{"bench", "latency", "--rtt", "-1ms"}, "--rtt -1ms cannot be negative"},
		{[]string{"bench", "tombstones", "--workers", "3"}, "claims on one connection"},
		{[]string{"bench", "tombstones", "--duration", "5s"}, "leave --duration and --work out"},
		{[]string{"bench", "nosuch"}, "use latency, lock, throughput or tombstones"},
	} {
		code, _, errs := cli(t, append([]string{"--dsn", dsn}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	if after := schemas(t, db); after != before {
		t.Fatalf("bad input created schemas: %d before, %d after", before, after)
	}
}

func TestBadDSNIsARuntimeErrorWithoutThePassword(t *testing.T) {
	code, _, errs := cli(t, "--dsn", "postgres://u:hunter2pw@127.0.0.1:1/db?connect_timeout=2", "migrate")
	if code != exitError || strings.Contains(errs, "hunter2pw") || !strings.Contains(errs, "check that the server is running") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	code, _, errs = cli(t, "--dsn", "postgres://u:hunter2pw@[::1/db", "migrate")
	if code == 0 || strings.Contains(errs, "hunter2pw") {
		t.Fatalf("unparseable DSN: exit %d, stderr %q", code, errs)
	}
}

func TestMigrateTwiceThenJSON(t *testing.T) {
	dsn := testdb.DSN(t)
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	code, out, errs := cli(t, "--dsn", dsn, "--schema", name, "migrate", "--buckets", "4")
	if want := fmt.Sprintf("applied %d migration(s)", len(schema.Migrations)); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	code, out, errs = cli(t, "--dsn", dsn, "--schema", name, "--json", "migrate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Applied []any  `json:"applied"`
		Engine  string `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Applied) != 0 || rep.Engine != "postgres" {
		t.Fatalf("second migrate: %s (%v)", out, err)
	}
	// Changing the bucket count afterwards is refused with exit 2.
	code, _, errs = cli(t, "--dsn", dsn, "--schema", name, "migrate", "--buckets", "5")
	if code != exitUsage || !strings.Contains(errs, "cannot change it") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestLocalCommands drives local start/status/dsn/stop against a private
// data directory.
func TestLocalCommands(t *testing.T) {
	dir, err := os.MkdirTemp("", "skiplock-local-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SKIPLOCK_LOCAL_DIR", dir+"/pg")
	t.Setenv("SKIPLOCK_DSN", "")
	t.Setenv("DATABASE_URL", "")
	defer cli(t, "local", "stop")

	code, out, _ := cli(t, "local", "status")
	if code != 0 || !strings.Contains(out, "not created") {
		t.Fatalf("status before start: %d %q", code, out)
	}
	code, out, errs := cli(t, "local", "start", "--max-connections", "60", "--no-fsync")
	if code != 0 || !strings.Contains(out, "running") || strings.Contains(out, "@127.0.0.1") && !strings.Contains(out, "xxxxx") {
		t.Fatalf("start: %d %q %q", code, out, errs)
	}
	code, dsn, _ := cli(t, "local", "dsn")
	dsn = strings.TrimSpace(dsn)
	if code != 0 || !strings.HasPrefix(dsn, "postgres://postgres:") {
		t.Fatalf("dsn: %d %q", code, dsn)
	}
	// Without a DSN, commands use the embedded server.
	code, out, errs = cli(t, "migrate", "--layout", "fanout")
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate on the embedded server: %d %q %q", code, out, errs)
	}
	db, err := skiplock.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = db.QueryRow(context.Background(), `SELECT count(*) FROM "skiplock"."job_queue"`).Scan(&n)
	db.Close()
	if err != nil {
		t.Fatalf("the embedded server has no fanout table: %v", err)
	}
	code, out, _ = cli(t, "--json", "local", "status")
	var st struct {
		Running bool `json:"running"`
		Port    int  `json:"port"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Running || st.Port == 0 {
		t.Fatalf("status --json: %d %q", code, out)
	}
	code, out, _ = cli(t, "--json", "local", "dsn")
	var d struct {
		DSN string `json:"dsn"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.DSN != dsn {
		t.Fatalf("dsn --json: %d %q, want {\"dsn\": %q}", code, out, dsn)
	}
	if code, _, errs = cli(t, "local", "stop"); code != 0 {
		t.Fatalf("stop: %d %s", code, errs)
	}
	code, _, errs = cli(t, "local", "dsn")
	if code != exitError || !strings.Contains(errs, "local start") {
		t.Fatalf("dsn after stop: %d %q", code, errs)
	}
}

func schemas(t *testing.T, db *skiplock.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
