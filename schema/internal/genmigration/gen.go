package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
	"github.com/skiplock/skiplock/schema/internal/frozen"
)

// modelFunc renders the model's statements for a layout; tests pass a
// changed model in place of schema.ModelStatements.
type modelFunc func(d *skiplock.Dialect, layout schema.Layout, o *schema.Options) ([]string, error)

// sentinel are the options the model is rendered with to find where each
// placeholder goes: values unlikely to occur anywhere else in the DDL. The
// result is checked against real renderings (verify), so a collision is
// caught, never written.
var sentinel = schema.Options{Schema: "skiplock_template_schema", Buckets: 997, Tablets: 3989}

// checkOptions are the option sets verify renders with: defaults, the
// smallest and largest counts, one split, a schema name that needs quoting.
var checkOptions = []schema.Options{
	{Schema: schema.DefaultSchema, Buckets: schema.DefaultBuckets, Tablets: schema.DefaultTablets},
	{Schema: "My$Schema", Buckets: 1, Tablets: 1},
	{Schema: "s", Buckets: 16, Tablets: 2},
	{Schema: "skiplock", Buckets: schema.MaxBuckets, Tablets: schema.MaxTablets},
	sentinel,
}

// templateModel renders the model for an engine and layout as frozen
// statements: the options' values replaced by placeholders, and the
// statements that differ between a split and an unsplit table marked with
// their condition.
func templateModel(engine skiplock.Engine, layout schema.Layout, model modelFunc) ([]frozen.Statement, error) {
	d := engine.Dialect()
	unsplit := *d
	unsplit.RangeSplits = false // renders what one tablet renders
	split, err := model(d, layout, &sentinel)
	if err != nil {
		return nil, err
	}
	plain, err := model(&unsplit, layout, &sentinel)
	if err != nil {
		return nil, err
	}
	values := schema.TemplateValues(d, sentinel)
	split, plain = substitute(split, values), substitute(plain, values)

	// Merge the two lists in order: shared statements run always, the
	// others under their condition.
	var out []frozen.Statement
	i, j := 0, 0
	for i < len(split) || j < len(plain) {
		switch {
		case i < len(split) && j < len(plain) && split[i] == plain[j]:
			out = append(out, frozen.Statement{SQL: split[i]})
			i, j = i+1, j+1
		case j < len(plain) && !slices.Contains(split[i:], plain[j]):
			out = append(out, frozen.Statement{SQL: plain[j], When: frozen.WhenUnsplit})
			j++
		default:
			out = append(out, frozen.Statement{SQL: split[i], When: frozen.WhenSplit})
			i++
		}
	}
	return out, nil
}

// substitute replaces each value in stmts by its placeholder, longest value
// first so that no value is replaced inside a longer one.
func substitute(stmts []string, values map[string]string) []string {
	keys := make([]string, 0, len(values))
	for k, v := range values {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		if la, lb := len(values[keys[a]]), len(values[keys[b]]); la != lb {
			return la > lb
		}
		return keys[a] < keys[b]
	})
	out := make([]string, len(stmts))
	for i, s := range stmts {
		for _, k := range keys {
			s = strings.ReplaceAll(s, values[k], "/* TEMPLATE: "+k+" */")
		}
		out[i] = s
	}
	return out
}

var namePatterns = []struct {
	re     *regexp.Regexp
	prefix string
}{
	{regexp.MustCompile(`^CREATE EXTENSION IF NOT EXISTS "(\w+)"`), "create_extension_"},
	{regexp.MustCompile(`CREATE TYPE (?:IF NOT EXISTS )?/\* TEMPLATE: schema \*/\."(\w+)"`), "create_type_"},
	{regexp.MustCompile(`^CREATE TABLE IF NOT EXISTS /\* TEMPLATE: schema \*/\."(\w+)"`), "create_table_"},
	{regexp.MustCompile(`^ALTER TABLE /\* TEMPLATE: schema \*/\."(\w+)" SPLIT AT`), "split_"},
	{regexp.MustCompile(`^CREATE (?:UNIQUE )?INDEX IF NOT EXISTS "(\w+)"`), "create_index_"},
	{regexp.MustCompile(`^INSERT INTO /\* TEMPLATE: schema \*/\."(\w+)"`), "insert_"},
}

// nameStatements gives each statement a block name from what it creates,
// unique in the file: statements that would share a name carry their
// condition as a suffix, then a number.
func nameStatements(stmts []frozen.Statement) {
	base := make([]string, len(stmts))
	count := map[string]int{}
	for i, st := range stmts {
		base[i] = fmt.Sprintf("statement_%d", i+1)
		for _, p := range namePatterns {
			if m := p.re.FindStringSubmatch(st.SQL); m != nil {
				base[i] = p.prefix + strings.ToLower(m[1])
				break
			}
		}
		count[base[i]]++
	}
	used := map[string]bool{}
	for i := range stmts {
		name := base[i]
		if count[name] > 1 && stmts[i].When != "" {
			name += "_" + stmts[i].When
		}
		for n := 2; used[name]; n++ {
			name = fmt.Sprintf("%s_%d", base[i], n)
		}
		used[name] = true
		stmts[i].Name = name
	}
}

// version is one frozen file of an engine and layout.
type version struct {
	number int
	name   string
	path   string
	stmts  []frozen.Statement
}

// readVersions reads the frozen files of dir/<engine>/<layout>, in
// version order.
func readVersions(dir string, engine skiplock.Engine, layout schema.Layout) ([]version, error) {
	sub := filepath.Join(dir, string(engine), string(layout))
	entries, err := os.ReadDir(sub)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []version
	for _, e := range entries {
		n, name, ok := frozen.ParseFileName(e.Name())
		if !ok {
			return nil, fmt.Errorf("%s: not a migration file name (NNN_<name>.up.sql): rename or remove it", filepath.Join(sub, e.Name()))
		}
		p := filepath.Join(sub, e.Name())
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		stmts, err := frozen.Parse(p, string(src))
		if err != nil {
			return nil, err
		}
		out = append(out, version{number: n, name: name, path: p, stmts: stmts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].number < out[j].number })
	return out, nil
}

// current returns what the frozen versions create together
// (frozen.Resolve, then frozen.Current): hand-written DROP INDEX and ALTER
// ... SET DEFAULT applied to the statements before them, and replacing
// blocks in the place of the blocks they replace.
func current(have []version) ([]frozen.Statement, error) {
	files := make([]frozen.File, len(have))
	for i, v := range have {
		files[i] = frozen.File{Version: v.number, Path: v.path, Stmts: v.stmts}
	}
	resolved, err := frozen.Resolve(files)
	if err != nil {
		return nil, err
	}
	return frozen.Current(resolved)
}

// diff compares what the frozen versions create with the model's
// statements: added are the model's statements the frozen files do not
// create (what a new version must hold), removed the frozen statements the
// model no longer renders (an object that changed or went away).
func diff(have []version, want []frozen.Statement) (added, removed []frozen.Statement, err error) {
	key := func(s frozen.Statement) string { return s.When + "\x00" + s.SQL }
	inModel := map[string]bool{}
	for _, s := range want {
		inModel[key(s)] = true
	}
	stmts, err := current(have)
	if err != nil {
		return nil, nil, err
	}
	frozenSet := map[string]bool{}
	for _, s := range stmts {
		frozenSet[key(s)] = true
		if !inModel[key(s)] {
			removed = append(removed, s)
		}
	}
	for _, s := range want {
		if !frozenSet[key(s)] {
			added = append(added, s)
		}
	}
	return added, removed, nil
}

// verify renders what the frozen versions create together (current) for
// each of checkOptions and checks that it is exactly the statements the
// model renders.
func verify(engine skiplock.Engine, layout schema.Layout, versions []version, model modelFunc) error {
	d := engine.Dialect()
	stmts, err := current(versions)
	if err != nil {
		return err
	}
	for _, o := range checkOptions {
		got, err := frozen.Render(string(engine)+"/"+string(layout), stmts, schema.TemplateValues(d, o), schema.Conditions(d, o))
		if err != nil {
			return err
		}
		want, err := model(d, layout, &o)
		if err != nil {
			return err
		}
		if msg := compare(got, want); msg != "" {
			return fmt.Errorf("%s/%s with %+v: the frozen migrations differ from the model: %s", engine, layout, o, msg)
		}
	}
	return nil
}

// compare reports, as text, how two statement lists differ as multisets;
// "" when they hold the same statements.
func compare(got, want []string) string {
	count := map[string]int{}
	for _, s := range want {
		count[s]++
	}
	for _, s := range got {
		count[s]--
	}
	var msgs []string
	for s, n := range count {
		switch {
		case n > 0:
			msgs = append(msgs, "the model has, the migrations lack:\n"+s)
		case n < 0:
			msgs = append(msgs, "the migrations have, the model lacks:\n"+s)
		}
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "\n")
}
