package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/schema/internal/frozen"
)

// committed is the package's own migration directory.
const committed = "../../" + schema.MigrationDir

// snapshot reads every file under dir, by path relative to it.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".up.sql") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyMigrations copies the committed files to a new directory.
func copyMigrations(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for rel, text := range snapshot(t, committed) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// withJobsChange renders the model with the bucketed layout's statements
// changed by edit.
func withJobsChange(edit func(d *skiplock.Dialect, o *schema.Options, stmts []string) []string) modelFunc {
	return func(d *skiplock.Dialect, layout schema.Layout, o *schema.Options) ([]string, error) {
		stmts, err := schema.ModelStatements(d, layout, o)
		if err != nil || layout != schema.LayoutBucketed {
			return stmts, err
		}
		return edit(d, o, stmts), nil
	}
}

func TestCommittedFilesAreCurrent(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, committed, "", true, schema.ModelStatements); err != nil {
		t.Fatalf("%v\n(the model changed without a migration: run go generate ./schema)", err)
	}
	if n := strings.Count(out.String(), "up to date"); n != 3 {
		t.Fatalf("want three layouts up to date, got:\n%s", out.String())
	}
	for _, engine := range skiplock.Engines {
		for _, layout := range []schema.Layout{schema.LayoutCore, schema.LayoutBucketed, schema.LayoutFanout} {
			have, err := readVersions(committed, engine, layout)
			if err != nil {
				t.Fatal(err)
			}
			if err := verify(engine, layout, have, schema.ModelStatements); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestGenerationIsDeterministic generates every layout from nothing into
// two empty directories: the files are byte-identical, so what the
// generator writes depends on the model only. (The committed files
// themselves are checked against the model by TestCommittedFilesAreCurrent;
// from nothing the generator writes a layout's whole current model as its
// 001, so it cannot reproduce the committed 001 of a layout that has later
// versions.)
func TestGenerationIsDeterministic(t *testing.T) {
	var snaps []map[string]string
	for range 2 {
		dir := t.TempDir()
		var out bytes.Buffer
		if err := run(&out, dir, "", false, schema.ModelStatements); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, snapshot(t, dir))
	}
	if len(snaps[0]) != 9 || !maps.Equal(snaps[0], snaps[1]) {
		t.Fatalf("two generations from nothing differ or are not 9 files: %d and %d files", len(snaps[0]), len(snaps[1]))
	}
}

// TestNewStatementsMakeTheNextVersion adds an index to the model: the
// generator wants a name, then writes the next version for every engine
// with only that index, leaves the frozen files alone, and is up to date
// afterwards.
func TestNewStatementsMakeTheNextVersion(t *testing.T) {
	dir := copyMigrations(t)
	have, err := readVersions(dir, skiplock.EnginePostgres, schema.LayoutBucketed)
	if err != nil {
		t.Fatal(err)
	}
	next := frozen.Name(len(have)+1, "add_jobs_created")
	before := snapshot(t, dir)
	model := withJobsChange(func(d *skiplock.Dialect, o *schema.Options, stmts []string) []string {
		return append(stmts, `CREATE INDEX IF NOT EXISTS "jobs_created" ON `+sqlident.Quote(o.Schema)+`."jobs" ("create_ts")`)
	})
	var out bytes.Buffer
	if err := run(&out, dir, "", true, model); err == nil || !strings.Contains(err.Error(), "go generate") {
		t.Fatalf("check mode: want an error that says to generate, got %v", err)
	}
	if err := run(&out, dir, "", false, model); err == nil || !strings.Contains(err.Error(), "SKIPLOCK_MIGRATION=<name>") {
		t.Fatalf("no name: want an error that says how to name it, got %v", err)
	}
	if err := run(&out, dir, "add_jobs_created", false, model); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, dir)
	for rel, text := range before {
		if after[rel] != text {
			t.Errorf("%s changed", rel)
		}
	}
	for _, engine := range skiplock.Engines {
		rel := filepath.Join(string(engine), "bucketed", next)
		text, ok := after[rel]
		if !ok {
			t.Fatalf("no %s; wrote:\n%s", rel, out.String())
		}
		if !strings.Contains(text, "-- name: create_index_jobs_created\n") || strings.Count(text, "\n-- name: ") != 1 {
			t.Errorf("%s holds more or less than the new index:\n%s", rel, text)
		}
	}
	if len(after) != len(before)+3 {
		t.Errorf("wrote %d files, want 3", len(after)-len(before))
	}
	out.Reset()
	if err := run(&out, dir, "again", false, model); err != nil || strings.Count(out.String(), "up to date") != 3 {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
}

// TestChangedObjectIsRefused changes the jobs table: the generator writes
// nothing and says to write the ALTER by hand.
func TestChangedObjectIsRefused(t *testing.T) {
	dir := copyMigrations(t)
	before := snapshot(t, dir)
	model := withJobsChange(func(d *skiplock.Dialect, o *schema.Options, stmts []string) []string {
		for i, s := range stmts {
			if strings.HasPrefix(s, "CREATE TABLE") {
				stmts[i] = strings.Replace(s, `"unique_key" TEXT,`, `"unique_key" TEXT,`+"\n"+`  "tags" TEXT,`, 1)
			}
		}
		return stmts
	})
	var out bytes.Buffer
	err := run(&out, dir, "add_tags", false, model)
	if err == nil || !strings.Contains(err.Error(), "by hand") || !strings.Contains(err.Error(), "create_table_jobs") {
		t.Fatalf("want a refusal naming the changed statement, got %v", err)
	}
	if got := snapshot(t, dir); len(got) != len(before) {
		t.Fatalf("a refused run wrote %d files", len(got)-len(before))
	}
}

// TestTemplatingIsChecked proves verify catches a template that renders
// something else than the model for some options.
func TestTemplatingIsChecked(t *testing.T) {
	have, err := readVersions(committed, skiplock.EngineCockroach, schema.LayoutBucketed)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range have[0].stmts {
		have[0].stmts[i].SQL = strings.ReplaceAll(s.SQL, "/* TEMPLATE: buckets */", "8")
	}
	if err := verify(skiplock.EngineCockroach, schema.LayoutBucketed, have, schema.ModelStatements); err == nil {
		t.Fatal("a template with a fixed bucket count passed verify")
	}
}

// TestMissingFileIsRefused removes one engine's latest file: the generator
// does not write a new version for it beside the others, it says to
// restore it.
func TestMissingFileIsRefused(t *testing.T) {
	dir := copyMigrations(t)
	have, err := readVersions(dir, skiplock.EngineCockroach, schema.LayoutBucketed)
	if err != nil || len(have) == 0 {
		t.Fatalf("%v (%d versions)", err, len(have))
	}
	last := have[len(have)-1].path
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(&out, dir, "", false, schema.ModelStatements)
	if err == nil || !strings.Contains(err.Error(), "restore the missing files from git") {
		t.Fatalf("want a refusal, got %v", err)
	}
	if _, err := os.Stat(last); err == nil {
		t.Fatal("the generator recreated a removed frozen file")
	}
}
