// Command genmigration freezes the table model into migration files; `go
// generate ./schema` runs it. For each layout it compares the model with
// the layout's frozen files on every engine:
//
//   - no file yet: it writes version 001 with the whole model;
//   - the model only adds statements (a table, an index, a type): it writes
//     the next version with those, named by -name (SKIPLOCK_MIGRATION=name
//     go generate ./schema);
//   - the model changed or dropped something a frozen file creates: it
//     writes nothing and says so: such a change needs a hand-written
//     migration (ALTER TABLE ...), which the drift test checks;
//   - nothing changed: it says the layout is up to date.
//
// It never overwrites or edits an existing file, and it writes nothing
// unless the new files, rendered for several option sets, create exactly
// what the model renders.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/schema/internal/frozen"
)

func main() {
	dir := flag.String("dir", schema.MigrationDir, "directory of the frozen migrations")
	name := flag.String("name", "", "name of the new version, e.g. add_jobs_tags (letters, digits, _)")
	check := flag.Bool("check", false, "write nothing; exit 1 if the model has changes no migration holds")
	flag.Parse()
	if err := run(os.Stdout, *dir, *name, *check, schema.ModelStatements); err != nil {
		fmt.Fprintln(os.Stderr, "genmigration:", err)
		os.Exit(1)
	}
}

// firstNames name each layout's version 001.
var firstNames = map[schema.Layout]string{
	schema.LayoutCore:     "work_log",
	schema.LayoutBucketed: "jobs",
	schema.LayoutFanout:   "job_queue",
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// run does the work of main for every layout, reporting on out.
func run(out io.Writer, dir, name string, check bool, model modelFunc) error {
	for _, layout := range []schema.Layout{schema.LayoutCore, schema.LayoutBucketed, schema.LayoutFanout} {
		if err := generate(out, dir, layout, name, check, model); err != nil {
			return err
		}
	}
	return nil
}

// enginePlan is what generate found for one engine of a layout.
type enginePlan struct {
	engine skiplock.Engine
	have   []version
	added  []frozen.Statement
}

// generate compares one layout's model with its frozen files on every
// engine and writes the next version when the model only adds statements.
func generate(out io.Writer, dir string, layout schema.Layout, name string, check bool, model modelFunc) error {
	var plans []enginePlan
	var removed []string
	latest, changed := -1, false
	for _, engine := range skiplock.Engines {
		have, err := readVersions(dir, engine, layout)
		if err != nil {
			return err
		}
		n := 0
		if len(have) > 0 {
			n = have[len(have)-1].number
		}
		if latest >= 0 && n != latest {
			return fmt.Errorf("layout %s has %d versions on %s but %d on %s: every engine needs a file for every version; restore the missing files from git", layout, latest, plans[0].engine, n, engine)
		}
		for i, v := range have {
			if v.number != i+1 {
				return fmt.Errorf("%s: expected version %d here: versions count up from 001 without gaps; restore the missing file from git", v.path, i+1)
			}
			if len(plans) > 0 && v.name != plans[0].have[i].name {
				return fmt.Errorf("%s is named %q on %s but %q on %s: a version has one name on every engine", v.path, v.name, engine, plans[0].have[i].name, plans[0].engine)
			}
		}
		latest = n
		want, err := templateModel(engine, layout, model)
		if err != nil {
			return err
		}
		added, gone, err := diff(have, want)
		if err != nil {
			return err
		}
		for _, s := range gone {
			removed = append(removed, fmt.Sprintf("  %s, block %s: %s", engine, s.Name, firstLine(s.SQL)))
		}
		changed = changed || len(added) > 0
		plans = append(plans, enginePlan{engine: engine, have: have, added: added})
	}
	if len(removed) > 0 {
		return fmt.Errorf("layout %s: the model no longer renders these frozen statements (changed or removed):\n%s\n"+
			"frozen files are never edited, and this generator writes only new statements: write version %03d by hand "+
			"(ALTER TABLE ..., one \"-- name:\" block per statement, for every engine) as %s, then run go test ./schema, "+
			"whose drift test checks that the migrations create what the model describes",
			layout, strings.Join(removed, "\n"), latest+1, filepath.Join(dir, "<engine>", string(layout), frozen.Name(latest+1, "<name>")))
	}
	if !changed {
		fmt.Fprintf(out, "%s: up to date at version %03d\n", layout, latest)
		return nil
	}
	if check {
		return fmt.Errorf("layout %s: the model has statements no migration holds: run SKIPLOCK_MIGRATION=<name> go generate ./schema and commit the new files", layout)
	}
	if first, ok := firstNames[layout]; ok && latest == 0 {
		name = first
	}
	if !validName.MatchString(name) {
		return fmt.Errorf("layout %s: the model has new statements for version %03d, which needs a name of lower-case letters, digits and _ (got %q): run SKIPLOCK_MIGRATION=<name> go generate ./schema", layout, latest+1, name)
	}

	// Check every engine's new file before writing any.
	type newFile struct{ path, text string }
	var files []newFile
	for _, p := range plans {
		sub := filepath.Join(dir, string(p.engine), string(layout))
		nameStatements(p.added)
		v := version{number: latest + 1, name: name, path: filepath.Join(sub, frozen.Name(latest+1, name)), stmts: p.added}
		text := frozen.Format(header(p.engine, layout, v), p.added)
		reparsed, err := frozen.Parse(v.path, text)
		if err != nil {
			return fmt.Errorf("generated %s does not parse back: %w", v.path, err)
		}
		v.stmts = reparsed
		if err := verify(p.engine, layout, append(p.have, v), model); err != nil {
			return fmt.Errorf("refusing to write %s: %w", v.path, err)
		}
		files = append(files, newFile{v.path, text})
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		// O_EXCL: an existing file, frozen, is never replaced.
		w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("refusing to overwrite a frozen migration: %w", err)
		}
		if _, err := io.WriteString(w, f.text); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", f.path)
	}
	return nil
}

// header is the comment at the top of a new frozen file.
func header(engine skiplock.Engine, layout schema.Layout, v version) []string {
	h := []string{
		fmt.Sprintf("skiplock migration %s/%03d %s, %s.", layout, v.number, v.name, engine),
		"",
		"Generated once by `go generate ./schema` from the table model, then",
		"frozen: databases record this version as applied, so this file is never",
		"edited or regenerated. To change the schema, change the model and run",
		"go generate again: it adds the next version.",
		"",
		"One \"-- name:\" block per statement, run in order; \"-- when:\" limits a",
		"block to split or unsplit tables (schema.Conditions). Placeholders are",
		"filled by schema.TemplateValues.",
	}
	if len(v.stmts) == 0 {
		h = append(h, "", "This version changes nothing on "+string(engine)+".")
	}
	return h
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
