package schema

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema/internal/frozen"
)

// migrationFiles holds the frozen migrations, one directory per engine and
// layout: migration/<engine>/<layout>/NNN_<name>.up.sql.
//
//go:embed migration
var migrationFiles embed.FS

// MigrationDir is the directory, relative to this package, that holds the
// frozen migration files.
const MigrationDir = "migration"

// migrationPath is the path of a migration's file for an engine, relative
// to this package's directory.
func migrationPath(engine skiplock.Engine, layout Layout, version int, name string) string {
	return path.Join(MigrationDir, string(engine), string(layout), frozen.Name(version, name))
}

// frozenStatements holds every embedded file, parsed, by its path, with
// each block that a later block replaces carrying the replacement
// (frozen.Resolve): what Up runs.
var frozenStatements = map[string][]frozen.Statement{}

// frozenFiles holds every engine's and layout's files, resolved, in
// version order, by filesKey.
var frozenFiles = map[string][]frozen.File{}

func filesKey(engine skiplock.Engine, layout Layout) string {
	return string(engine) + "/" + string(layout)
}

// loadMigrations parses every embedded file and lists the migrations they
// make, ordered by layout (core first) and version. Every engine must have
// the same versions with the same names, numbered from 1 without gaps: the
// files are part of the binary, so a mistake here is a build mistake, and
// it panics (the package's tests load them too).
func loadMigrations() []Migration {
	type key struct {
		layout  Layout
		version int
	}
	names := map[key]string{}
	seen := map[skiplock.Engine]map[key]bool{}
	for _, engine := range skiplock.Engines {
		seen[engine] = map[key]bool{}
		for _, layout := range []Layout{LayoutCore, LayoutBucketed, LayoutFanout} {
			dir := path.Join(MigrationDir, string(engine), string(layout))
			entries, err := fs.ReadDir(migrationFiles, dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				panic(fmt.Sprintf("schema: read frozen migrations in %s: %v", dir, err))
			}
			for _, ent := range entries {
				v, name, ok := frozen.ParseFileName(ent.Name())
				if !ok {
					panic(fmt.Sprintf("schema: %s/%s is not named NNN_<name>.up.sql", dir, ent.Name()))
				}
				k := key{layout, v}
				if have, ok := names[k]; ok && have != name {
					panic(fmt.Sprintf("schema: %s/%d is %q on one engine and %q on %s: every engine's version has one name", layout, v, have, name, engine))
				}
				names[k] = name
				seen[engine][k] = true
				p := path.Join(dir, ent.Name())
				src, err := migrationFiles.ReadFile(p)
				if err != nil {
					panic(err)
				}
				stmts, err := frozen.Parse(p, string(src))
				if err != nil {
					panic("schema: " + err.Error())
				}
				fk := filesKey(engine, layout)
				frozenFiles[fk] = append(frozenFiles[fk], frozen.File{Version: v, Path: p, Stmts: stmts})
			}
		}
	}
	for k, files := range frozenFiles {
		sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
		resolved, err := frozen.Resolve(files)
		if err != nil {
			panic("schema: " + err.Error())
		}
		frozenFiles[k] = resolved
		for _, f := range resolved {
			frozenStatements[f.Path] = f.Stmts
		}
	}
	var out []Migration
	for k, name := range names {
		for _, engine := range skiplock.Engines {
			if !seen[engine][k] {
				panic(fmt.Sprintf("schema: migration %s/%d %s has no file for %s", k.layout, k.version, name, engine))
			}
		}
		out = append(out, Migration{Layout: k.layout, Version: k.version, Name: name})
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := layoutOrder(out[i].Layout), layoutOrder(out[j].Layout); a != b {
			return a < b
		}
		return out[i].Version < out[j].Version
	})
	for i, m := range out {
		if i == 0 || out[i-1].Layout != m.Layout {
			if m.Version != 1 {
				panic(fmt.Sprintf("schema: layout %s's first migration is version %d, not 1", m.Layout, m.Version))
			}
		} else if m.Version != out[i-1].Version+1 {
			panic(fmt.Sprintf("schema: layout %s has no migration %d before %d", m.Layout, out[i-1].Version+1, m.Version))
		}
	}
	return out
}

// Up renders the migration's frozen file for the dialect's engine and the
// options (defaults filled in). Each statement is idempotent (IF NOT
// EXISTS, or an upsert), since engines without transactional DDL cannot
// roll a half-applied migration back and run it again instead.
func (m Migration) Up(d *skiplock.Dialect, o Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	p := migrationPath(d.Engine, m.Layout, m.Version, m.Name)
	stmts, ok := frozenStatements[p]
	if !ok {
		return nil, fmt.Errorf("migration %s/%d %s has no file for engine %q (%s)", m.Layout, m.Version, m.Name, d.Engine, p)
	}
	return frozen.Render(p, stmts, TemplateValues(d, opts), Conditions(d, opts))
}

// currentStatements renders what the frozen migrations of a layout create
// together on the dialect's engine (frozen.Current): every statement from
// nothing, with later DROP INDEX and ALTER ... SET DEFAULT statements
// applied to the earlier ones. The drift tests compare it with the model.
func currentStatements(d *skiplock.Dialect, layout Layout, o Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	k := filesKey(d.Engine, layout)
	stmts, err := frozen.Current(frozenFiles[k])
	if err != nil {
		return nil, err
	}
	return frozen.Render(k, stmts, TemplateValues(d, opts), Conditions(d, opts))
}

// TemplateValues returns the value of each placeholder a frozen migration
// file may use, for the dialect's engine and options (defaults already
// filled in):
//
//   - schema: the schema name, quoted as an identifier (internal/sqlident).
//   - buckets: the bucketed layout's bucket count, in decimal.
//   - tablets: the fanout layout's tablet count, in decimal.
//   - split_values: the fanout table's split points for the tablet count
//     ([UUIDSplitPoints]), each as ('<point>'), separated by ", " where
//     the split is its own ALTER TABLE statement and by ",\n  " (one per
//     line) where it is part of CREATE TABLE; empty for one tablet.
//
// Applied migrations were rendered with these exact values: this function
// is part of the frozen files' contract and must never change what it
// returns for given inputs. A new kind of value gets a new key.
func TemplateValues(d *skiplock.Dialect, o Options) map[string]string {
	points := UUIDSplitPoints(o.Tablets)
	values := make([]string, len(points))
	for i, p := range points {
		values[i] = "(" + sqlident.QuoteLiteral(p) + ")"
	}
	sep := ", "
	if d.SplitInCreate {
		sep = ",\n  "
	}
	return map[string]string{
		"schema":       sqlident.Quote(o.Schema),
		"buckets":      strconv.Itoa(o.Buckets),
		"tablets":      strconv.Itoa(o.Tablets),
		"split_values": strings.Join(values, sep),
	}
}

// Conditions says which "-- when:" conditions of a frozen file hold for
// the dialect's engine and options: "split" when the engine pre-splits
// tables at chosen keys and the tablet count asks for more than one range,
// "unsplit" otherwise. Like [TemplateValues], this is part of the frozen
// files' contract.
func Conditions(d *skiplock.Dialect, o Options) map[string]bool {
	split := d.RangeSplits && len(UUIDSplitPoints(o.Tablets)) > 0
	return map[string]bool{frozen.WhenSplit: split, frozen.WhenUnsplit: !split}
}
