package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/schema"
)

// TestMigrateDryRunChangesNothing prints the plan for a schema that does
// not exist, then for a half-migrated one, and checks that neither run
// created the schema or recorded a migration.
func TestMigrateDryRunChangesNothing(t *testing.T) {
	dsn := testdb.DSN(t)
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := t.Context()
	schemaExists := func() bool {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	code, out, errs := cli(t, "--dsn", dsn, "--schema", name, "migrate", "--dry-run", "--buckets", "4")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errs)
	}
	count := func(l schema.Layout) int {
		n := 0
		for _, m := range schema.Migrations {
			if m.Layout == l {
				n++
			}
		}
		return n
	}
	for _, want := range []string{
		fmt.Sprintf("%d migration(s) to apply (dry run: nothing was changed)", len(schema.Migrations)),
		`CREATE SCHEMA IF NOT EXISTS "` + name + `"`,
		"-- core/001 work_log\n",
		"-- bucketed/001 jobs\n",
		"-- fanout/001 job_queue\n",
		`"bucket" SMALLINT NOT NULL DEFAULT floor(random() * 4)::SMALLINT`,
		`CREATE TABLE IF NOT EXISTS "` + name + `"."job_queue"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if schemaExists() {
		t.Fatal("migrate --dry-run created the schema")
	}

	// With one layout applied, a dry run lists only the other, as JSON.
	cliAll(t, []string{"--dsn", dsn, "--schema", name, "migrate", "--layout", "fanout"})
	code, out, errs = cli(t, "--dsn", dsn, "--schema", name, "--json", "migrate", "--dry-run")
	if code != 0 {
		t.Fatalf("dry run --json: exit %d: %s", code, errs)
	}
	var rep dryRunJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if !rep.DryRun || rep.Engine != "postgres" || rep.Schema != name || len(rep.Bootstrap) != 0 {
		t.Fatalf("report header: %+v", rep)
	}
	if len(rep.Pending) != count(schema.LayoutBucketed) || rep.Pending[0].Layout != "bucketed" || rep.Pending[0].Version != 1 || len(rep.Pending[0].Statements) == 0 {
		t.Fatalf("pending = %+v, want bucketed's %d versions from 1, with their statements", rep.Pending, count(schema.LayoutBucketed))
	}
	var rows int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(name)+"."+sqlident.Quote(schema.MigrationTable)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if want := count(schema.LayoutCore) + count(schema.LayoutFanout); rows != want {
		t.Fatalf("skiplock_migration has %d rows after the dry run, want the %d of core and fanout", rows, want)
	}
	var tables int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2", name, schema.JobsTable).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("jobs table after the dry run: %d (%v)", tables, err)
	}

	// A dry run refuses what Migrate refuses, and says the schema is up to
	// date once it is.
	cliAll(t, []string{"--dsn", dsn, "--schema", name, "migrate", "--buckets", "4"})
	if code, _, errs := cli(t, "--dsn", dsn, "--schema", name, "migrate", "--dry-run", "--buckets", "5"); code != exitUsage || !strings.Contains(errs, "cannot change it") {
		t.Fatalf("dry run with another bucket count: exit %d: %s", code, errs)
	}
	code, out, _ = cli(t, "--dsn", dsn, "--schema", name, "migrate", "--dry-run")
	if code != 0 || !strings.Contains(out, "is up to date (dry run") {
		t.Fatalf("dry run on a current schema: exit %d: %s", code, out)
	}
}
