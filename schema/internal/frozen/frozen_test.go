package frozen

import (
	"reflect"
	"strings"
	"testing"
)

func TestFormatParseRender(t *testing.T) {
	stmts := []Statement{
		{Name: "create_t", SQL: "CREATE TABLE /* TEMPLATE: schema */.\"t\" (\n  \"id\" TEXT\n)"},
		{Name: "split_t", When: WhenSplit, SQL: "ALTER TABLE /* TEMPLATE: schema */.\"t\" SPLIT AT VALUES /* TEMPLATE: split_values */"},
		{Name: "plain_t", When: WhenUnsplit, SQL: "SELECT 1"},
	}
	text := Format([]string{"a header", "", "more"}, stmts)
	got, err := Parse("x.up.sql", text)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, stmts) {
		t.Fatalf("Parse(Format) = %+v\nfile:\n%s", got, text)
	}
	vars := map[string]string{"schema": `"s"`, "split_values": "('8')"}
	split, err := Render("x", got, vars, map[string]bool{WhenSplit: true})
	if err != nil || len(split) != 2 || split[1] != `ALTER TABLE "s"."t" SPLIT AT VALUES ('8')` {
		t.Fatalf("split: %q, %v", split, err)
	}
	plain, err := Render("x", got, vars, map[string]bool{WhenUnsplit: true})
	if err != nil || len(plain) != 2 || plain[1] != "SELECT 1" {
		t.Fatalf("unsplit: %q, %v", plain, err)
	}
	if _, err := Render("x", got, map[string]string{}, nil); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Fatalf("missing value: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for name, src := range map[string]string{
		"unknown condition": "-- name: a\n-- when: sometimes\nSELECT 1",
		"two conditions":    "-- name: a\n-- when: split\n-- when: unsplit\nSELECT 1",
		"no marker":         "SELECT 1",
	} {
		if _, err := Parse("x.sql", src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if stmts, err := Parse("x.sql", "-- only a header\n"); err != nil || len(stmts) != 0 {
		t.Errorf("a file without statements: %v, %v", stmts, err)
	}
}

func TestFileNames(t *testing.T) {
	if v, n, ok := ParseFileName(Name(12, "add_x")); !ok || v != 12 || n != "add_x" {
		t.Fatalf("round trip: %d %q %v", v, n, ok)
	}
	for _, bad := range []string{"1_x.up.sql", "001_X.up.sql", "001_x.sql", "000_x.up.sql", "README.md"} {
		if _, _, ok := ParseFileName(bad); ok {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestReplacesParsesAndFormats(t *testing.T) {
	stmts := []Statement{{Name: "create_t", Replaces: "001/create_t", SQL: "SELECT 2"}}
	got, err := Parse("x.sql", Format(nil, stmts))
	if err != nil || !reflect.DeepEqual(got, stmts) {
		t.Fatalf("Parse(Format) = %+v, %v", got, err)
	}
	for name, src := range map[string]string{
		"bad reference": "-- name: a\n-- replaces: create_t\nSELECT 1",
		"two":           "-- name: a\n-- replaces: 001/a\n-- replaces: 001/b\nSELECT 1",
	} {
		if _, err := Parse("x.sql", src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestResolveAndCurrent(t *testing.T) {
	v1 := File{Version: 1, Path: "001", Stmts: []Statement{
		{Name: "create_type_s", SQL: "OLD TYPE"},
		{Name: "create_table_t", SQL: "CREATE TABLE IF NOT EXISTS \"s\".\"t\" (\n  \"id\" BIGINT DEFAULT unique_rowid() NOT NULL,\n  \"q\" TEXT NOT NULL DEFAULT 'a',\n  PRIMARY KEY (\"id\")\n)"},
		{Name: "create_index_i", SQL: `CREATE INDEX IF NOT EXISTS "i" ON "s"."t" ("q")`},
		{Name: "create_index_j", SQL: `CREATE UNIQUE INDEX IF NOT EXISTS "j" ON "s"."t" ("id")`},
	}}
	v2 := File{Version: 2, Path: "002", Stmts: []Statement{
		{Name: "create_type_s", Replaces: "001/create_type_s", SQL: "NEW TYPE"},
		{Name: "set_default", SQL: `ALTER TABLE "s"."t" ALTER COLUMN "id" SET DEFAULT unordered_unique_rowid()`},
		{Name: "set_default_q", SQL: `ALTER TABLE "s"."t" ALTER COLUMN "q" SET DEFAULT 'b'`},
		{Name: "add_column_k", SQL: `ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "k" TEXT NOT NULL DEFAULT ''`},
		{Name: "fillfactor_t", SQL: `ALTER TABLE "s"."t" SET (fillfactor = 50)`},
		{Name: "fillfactor_t_again", SQL: `ALTER TABLE "s"."t" SET (fillfactor = 10)`},
		{Name: "drop_index_i", SQL: `DROP INDEX IF EXISTS "s"."t"@"i"`},
		{Name: "create_index_i", SQL: `CREATE INDEX IF NOT EXISTS "i" ON "s"."t" ("q") USING HASH`},
	}}
	resolved, err := Resolve([]File{v1, v2})
	if err != nil {
		t.Fatal(err)
	}
	if resolved[0].Stmts[0].SQL != "NEW TYPE" || v1.Stmts[0].SQL != "OLD TYPE" || resolved[1].Stmts[0].SQL != "NEW TYPE" {
		t.Fatalf("Resolve: %+v (input %+v)", resolved, v1)
	}
	cur, err := Current(resolved)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range cur {
		got = append(got, st.SQL)
	}
	want := []string{
		"NEW TYPE",
		"CREATE TABLE IF NOT EXISTS \"s\".\"t\" (\n  \"id\" BIGINT DEFAULT unordered_unique_rowid() NOT NULL,\n  \"q\" TEXT NOT NULL DEFAULT 'b',\n  \"k\" TEXT NOT NULL DEFAULT '',\n  PRIMARY KEY (\"id\")\n) WITH (fillfactor = 10)",
		`CREATE UNIQUE INDEX IF NOT EXISTS "j" ON "s"."t" ("id")`,
		`CREATE INDEX IF NOT EXISTS "i" ON "s"."t" ("q") USING HASH`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Current:\n%q\nwant\n%q", got, want)
	}

	// What finds nothing to change is an error, not a silent pass.
	for name, st := range map[string]Statement{
		"drop of an unknown index":       {Name: "x", SQL: `DROP INDEX IF EXISTS "s"."nope"`},
		"default of an unknown col":      {Name: "x", SQL: `ALTER TABLE "s"."t" ALTER COLUMN "nope" SET DEFAULT 1`},
		"default of an unknown table":    {Name: "x", SQL: `ALTER TABLE "s"."u" ALTER COLUMN "id" SET DEFAULT 1`},
		"column of an unknown table":     {Name: "x", SQL: `ALTER TABLE "s"."u" ADD COLUMN IF NOT EXISTS "k" TEXT`},
		"fillfactor of an unknown table": {Name: "x", SQL: `ALTER TABLE "s"."u" SET (fillfactor = 10)`},
	} {
		if _, err := Current([]File{v1, {Version: 2, Path: "002", Stmts: []Statement{st}}}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for name, st := range map[string]Statement{
		"unknown block":   {Name: "x", Replaces: "001/nope", SQL: "X"},
		"later version":   {Name: "x", Replaces: "003/x", SQL: "X"},
		"other condition": {Name: "x", Replaces: "001/create_type_s", When: WhenSplit, SQL: "X"},
	} {
		files := []File{v1, {Version: 2, Path: "002", Stmts: []Statement{st}}}
		if name == "later version" {
			files = append(files, File{Version: 3, Path: "003", Stmts: []Statement{{Name: "x", SQL: "Y"}}})
		}
		if _, err := Resolve(files); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Resolve([]File{v1, v2, {Version: 3, Path: "003", Stmts: []Statement{{Name: "again", Replaces: "001/create_type_s", SQL: "X"}}}}); err == nil {
		t.Error("two replacements of one block: no error")
	}
}
