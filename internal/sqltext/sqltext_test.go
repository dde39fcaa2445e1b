package sqltext

import (
	"strings"
	"testing"
)

const sample = `-- Statements of a test layout.

-- name: claim
-- Claims one job.
SELECT "id" FROM /* TEMPLATE: schema */."jobs"
WHERE "queue" = $1 /* TEMPLATE: extra */;

-- name: done
DELETE FROM /* TEMPLATE: schema */."jobs" WHERE "id" = $1
`

func TestParseAndRender(t *testing.T) {
	f, err := Parse("sample.sql", sample)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Names(), ","); got != "claim,done" {
		t.Fatalf("names = %s", got)
	}
	if f.Blocks[0].Line != 3 || strings.Contains(f.Blocks[0].SQL, "Claims one job") {
		t.Fatalf("block 0 = %+v", f.Blocks[0])
	}
	out, err := f.Render(map[string]string{"schema": `"s"`, "extra": "AND true"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "SELECT \"id\" FROM \"s\".\"jobs\"\nWHERE \"queue\" = $1 AND true"; out["claim"] != want {
		t.Fatalf("claim = %q, want %q", out["claim"], want)
	}
	if want := `DELETE FROM "s"."jobs" WHERE "id" = $1`; out["done"] != want {
		t.Fatalf("done = %q", out["done"])
	}
	if got := Placeholders(f.Blocks[0].SQL); strings.Join(got, ",") != "extra,schema" {
		t.Fatalf("placeholders = %v", got)
	}
}

func TestRenderErrors(t *testing.T) {
	f := MustParse("sample.sql", sample)
	if _, err := f.Render(map[string]string{"schema": `"s"`}); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("missing value: err = %v", err)
	}
	if _, err := f.Render(map[string]string{"schema": `"s"`, "extra": "", "typo": "x"}); err == nil || !strings.Contains(err.Error(), "typo") {
		t.Fatalf("unused value: err = %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for name, src := range map[string]string{
		"sql before marker": "SELECT 1;\n-- name: a\nSELECT 2",
		"duplicate":         "-- name: a\nSELECT 1\n-- name: a\nSELECT 2",
		"empty block":       "-- name: a\n-- only a comment\n-- name: b\nSELECT 1",
	} {
		if _, err := Parse("x.sql", src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFill(t *testing.T) {
	f := MustParse("sample.sql", sample)
	vars := map[string]string{"schema": `"s"`, "extra": ""}
	var claim, done string
	if err := f.Fill(vars, map[string]*string{"claim": &claim, "done": &done}); err != nil {
		t.Fatal(err)
	}
	if claim != "SELECT \"id\" FROM \"s\".\"jobs\"\nWHERE \"queue\" = $1 " || done != `DELETE FROM "s"."jobs" WHERE "id" = $1` {
		t.Fatalf("claim = %q, done = %q", claim, done)
	}
	err := f.Fill(vars, map[string]*string{"claim": &claim})
	if err == nil || !strings.Contains(err.Error(), `block "done" is used by no statement`) {
		t.Fatalf("unused block: err = %v", err)
	}
	err = f.Fill(vars, map[string]*string{"claim": &claim, "done": &done, "dequeue": new(string)})
	if err == nil || !strings.Contains(err.Error(), `no block "dequeue"`) {
		t.Fatalf("missing block: err = %v", err)
	}
	if err := f.Fill(map[string]string{}, map[string]*string{"claim": &claim, "done": &done}); err == nil {
		t.Fatal("missing template value: no error")
	}
}

func TestRegister(t *testing.T) {
	before := len(Sources())
	f := MustParse("z/test.sql", sample)
	Register(Source{Path: "z/test.sql", File: f})
	Register(Source{Path: "a/test.sql", File: f})
	got := Sources()
	if len(got) != before+2 || got[0].Path != "a/test.sql" || got[len(got)-1].Path != "z/test.sql" {
		t.Fatalf("sources = %+v", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a path twice did not panic")
		}
	}()
	Register(Source{Path: "a/test.sql", File: f})
}

func TestTemplate(t *testing.T) {
	f := MustParse("sample.sql", sample)
	if got := f.Template("done"); got != `DELETE FROM /* TEMPLATE: schema */."jobs" WHERE "id" = $1` {
		t.Fatalf("Template(done) = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Template of a missing block did not panic")
		}
	}()
	f.Template("nosuch")
}
