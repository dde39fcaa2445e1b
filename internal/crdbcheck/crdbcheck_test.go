package crdbcheck

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"

	// The packages that register embedded .sql files (sqltext.Register).
	// A package with a .sql file that is not imported here leaves its file
	// unregistered, and TestEverySQLFileIsChecked fails.
	_ "github.com/skiplock/skiplock/admin"
	_ "github.com/skiplock/skiplock/bucketed"
	_ "github.com/skiplock/skiplock/client"
	_ "github.com/skiplock/skiplock/cluster"
	_ "github.com/skiplock/skiplock/fanout"
	_ "github.com/skiplock/skiplock/maintenance"
	_ "github.com/skiplock/skiplock/skiplocktest"
)

// schemas are the schema names DDL and registered files are rendered for:
// the default, and one that needs quoting. Registered files are rendered
// for oddSchema too, which no configuration accepts, to prove the quoting.
var schemas = []string{schema.DefaultSchema, "My$Schema"}

const oddSchema = `odd "schema"`

// testFiles are files of named blocks that only tests send, with the
// template values that render them.
var testFiles = map[string]map[string]string{
	"retry/testdata/cockroach.sql": {"schema": `"t_0123456789ab"`},
}

// scriptFiles match files of plain CockroachDB statements, parsed whole:
// the golden DDL, which is what `skiplock schema print` prints, and the
// golden claims of the bucketed layout: CockroachDB's, and YugabyteDB's,
// which CockroachDB's grammar parses too (it is plain PostgreSQL; no
// parser checks YSQL's extensions, and it uses none).
var scriptFiles = []string{"schema/testdata/cockroach_*.sql", "bucketed/testdata/*_claim.sql"}

// migrationFiles match the frozen CockroachDB migrations, which
// TestCockroachDDLParses checks as schema.DDL renders them (for split and
// unsplit tables, which choose between their conditional blocks).
var migrationFiles = []string{"schema/migration/cockroach/*/*.up.sql"}

// otherFiles match .sql files that are not CockroachDB SQL, and say why.
var otherFiles = map[string]string{
	"schema/migration/postgres/*/*.up.sql": "frozen PostgreSQL migrations, applied by the schema tests to a real server",
	"schema/migration/yugabyte/*/*.up.sql": "frozen YugabyteDB migrations (no parser checks YSQL; the schema goldens cover them)",
	"schema/testdata/postgres_*.sql":       "golden PostgreSQL DDL",
	"schema/testdata/yugabyte_*.sql":       "golden YugabyteDB DDL (no parser checks YSQL; reviewers read the diff)",
	"cluster/testdata/yugabyte-status.sql": "golden YSQL of the YugabyteDB status report",
	"scripts/*.sql":                        "pgbench scripts for PostgreSQL, with pgbench meta-commands",
}

// repoRoot is the repository root: the test runs in internal/crdbcheck.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/skiplock/skiplock\n") {
		t.Fatalf("%s is not skiplock's root (go.mod: %v)", root, err)
	}
	return root
}

// sqlFiles lists the repository's .sql files as slash paths from root,
// skipping hidden directories.
func sqlFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".sql") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func matchAny(patterns []string, name string) (string, bool) {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return p, true
		}
	}
	return "", false
}

// TestEverySQLFileIsChecked walks every .sql file of the repository and
// parses each of its statements with CockroachDB's grammar: registered
// files rendered as their packages render them, for the CockroachDB
// dialect and several schemas; test files with their values; golden
// CockroachDB DDL whole. A .sql file that fits none of these, or a list
// entry that matches no file, fails the test.
func TestEverySQLFileIsChecked(t *testing.T) {
	root := repoRoot(t)
	registered := map[string]sqltext.Source{}
	for _, src := range sqltext.Sources() {
		registered[src.Path] = src
	}
	others := make([]string, 0, len(otherFiles))
	for p := range otherFiles {
		others = append(others, p)
	}
	used := map[string]bool{}
	for _, name := range sqlFiles(t, root) {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		if reg, ok := registered[name]; ok {
			used[name] = true
			t.Run(name, func(t *testing.T) { checkRegistered(t, reg, string(src)) })
			continue
		}
		if vars, ok := testFiles[name]; ok {
			used[name] = true
			t.Run(name, func(t *testing.T) { checkBlocks(t, name, string(src), vars) })
			continue
		}
		if p, ok := matchAny(scriptFiles, name); ok {
			used[p] = true
			t.Run(name, func(t *testing.T) {
				if n, err := Parse(string(src)); err != nil || n == 0 {
					t.Errorf("%d statements, %v", n, err)
				}
			})
			continue
		}
		if p, ok := matchAny(migrationFiles, name); ok {
			used[p] = true
			continue
		}
		if p, ok := matchAny(others, name); ok {
			used[p] = true
			continue
		}
		if strings.Contains(string(src), "-- name:") {
			t.Errorf("%s has named blocks but is not registered: register it with sqltext.Register from its package's init, and import that package in this test (or, for a test-only file, add it to testFiles)", name)
		} else {
			t.Errorf("%s is not checked: add it to scriptFiles if it is CockroachDB SQL, or to otherFiles with the reason it is not", name)
		}
	}
	for p := range registered {
		if !used[p] {
			t.Errorf("registered file %s does not exist: its Source.Path is wrong", p)
		}
	}
	for p := range testFiles {
		if !used[p] {
			t.Errorf("testFiles lists %s, which does not exist", p)
		}
	}
	for _, p := range slices.Concat(scriptFiles, migrationFiles, others) {
		if !used[p] {
			t.Errorf("%s matches no file", p)
		}
	}
}

// checkRegistered checks that reg was parsed from src (so its path is
// right), then renders it for CockroachDB and parses every block.
func checkRegistered(t *testing.T, reg sqltext.Source, src string) {
	disk, err := sqltext.Parse(reg.Path, src)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(disk.Blocks, reg.File.Blocks) {
		t.Fatalf("the registered %s differs from the file on disk", reg.Path)
	}
	d := skiplock.EngineCockroach.Dialect()
	for _, s := range append(slices.Clone(schemas), oddSchema) {
		out, err := reg.File.Render(reg.Vars(d, s))
		if err != nil {
			t.Fatal(err)
		}
		parseEach(t, out)
	}
}

func checkBlocks(t *testing.T, name, src string, vars map[string]string) {
	f, err := sqltext.Parse(name, src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Render(vars)
	if err != nil {
		t.Fatal(err)
	}
	parseEach(t, out)
}

// parseEach parses each rendered block, which must be one statement.
func parseEach(t *testing.T, blocks map[string]string) {
	t.Helper()
	if len(blocks) == 0 {
		t.Fatal("no blocks")
	}
	for name, sql := range blocks {
		if n, err := Parse(sql); err != nil || n != 1 {
			t.Errorf("block %s: %d statements, %v", name, n, err)
		}
	}
}

// TestCockroachDDLParses parses every layout's CockroachDB DDL, statement
// by statement and as `skiplock schema print` prints it.
func TestCockroachDDLParses(t *testing.T) {
	for _, layout := range schema.Layouts {
		for i, s := range schemas {
			tablets := 8
			if i%2 == 1 {
				tablets = 1 // an unsplit table: the other conditional blocks
			}
			stmts, err := schema.DDL(skiplock.EngineCockroach.Dialect(), layout, &schema.Options{Schema: s, Buckets: 16, Tablets: tablets})
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range stmts {
				if n, err := Parse(stmt); err != nil || n != 1 {
					t.Errorf("%s: %d statements, %v", layout, n, err)
				}
			}
			printed := "-- skiplock " + string(layout) + " layout\n" + strings.Join(stmts, ";\n\n") + ";"
			if n, err := Parse(printed); err != nil || n != len(stmts) {
				t.Errorf("%s as printed: %d statements of %d, %v", layout, n, len(stmts), err)
			}
		}
	}
}

// TestCockroachDialectStatementsParse parses the statements the CockroachDB
// dialect itself carries: the durable-locking SET LOCAL the fanout layout
// runs first in its claim transactions, and the BEGIN of its isolation
// level as both drivers spell it.
func TestCockroachDialectStatementsParse(t *testing.T) {
	d := skiplock.EngineCockroach.Dialect()
	if d.DurableLocks == "" || d.DefaultIsolation == skiplock.IsoDefault {
		t.Fatalf("the CockroachDB dialect states no durable-locking statement (%q) or no isolation (%q)", d.DurableLocks, d.DefaultIsolation)
	}
	for _, sql := range []string{d.DurableLocks, "begin isolation level " + string(d.DefaultIsolation)} {
		if n, err := Parse(sql); err != nil || n != 1 {
			t.Errorf("%q: %d statements, %v", sql, n, err)
		}
	}
}

// TestParseRejects keeps the check honest: the grammar refuses what
// CockroachDB refuses, including YugabyteDB's extensions.
func TestParseRejects(t *testing.T) {
	for _, sql := range []string{
		"SELEC 1",
		`CREATE TABLE t (id TEXT, PRIMARY KEY (id ASC)) SPLIT AT VALUES (('a'))`,
		`CREATE TABLE t (a INT8 PRIMARY KEY) SPLIT INTO 3 TABLETS`,
		`SELECT 1 FROM t FOR UPDATE SKIP LOCKED NOWAIT`,
	} {
		if _, err := Parse(sql); err == nil {
			t.Errorf("CockroachDB's grammar accepts %q", sql)
		}
	}
}
