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
