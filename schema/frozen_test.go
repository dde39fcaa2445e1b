package schema_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	. "github.com/skiplock/skiplock/schema"
)

// allLayouts are every layout with migrations, core included.
var allLayouts = []Layout{LayoutCore, LayoutBucketed, LayoutFanout}

// frozenOptions are the option sets the frozen files are checked with:
// defaults, the smallest and largest counts, one split, a schema name that
// needs quoting.
var frozenOptions = []Options{
	{},
	{Schema: "My$Schema", Buckets: 1, Tablets: 1},
	{Schema: "s", Buckets: 16, Tablets: 2},
	{Buckets: MaxBuckets, Tablets: MaxTablets},
}

// statementDiff reports how two statement lists differ as multisets, ""
// when they hold the same statements.
func statementDiff(frozen, model []string) string {
	count := map[string]int{}
	for _, s := range model {
		count[s]++
	}
	for _, s := range frozen {
		count[s]--
	}
	var msgs []string
	for s, n := range count {
		if n > 0 {
			msgs = append(msgs, "the model has, the migrations lack:\n"+s)
		} else if n < 0 {
			msgs = append(msgs, "the migrations have, the model lacks:\n"+s)
		}
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "\n")
}

// TestFrozenMigrationsCreateTheModel is the drift test for every engine,
// without a server: for each layout, what the frozen migrations create
// together, rendered with several option sets, is exactly the statements
// the current model renders. "Together" is frozen.Current: a hand-written
// version's DROP INDEX removes the earlier CREATE INDEX, its ALTER ... SET
// DEFAULT rewrites the earlier CREATE TABLE, and a "-- replaces:" block
// stands in the place of the block it replaces. A change to the model
// without a new migration fails it on every engine (PostgreSQL's catalog
// is also compared, in TestMigratedSchemaMatchesModel).
func TestFrozenMigrationsCreateTheModel(t *testing.T) {
	t.Parallel()
	for _, engine := range skiplock.Engines {
		d := engine.Dialect()
		for _, layout := range allLayouts {
			for _, o := range frozenOptions {
				model, err := ModelStatements(d, layout, &o)
				if err != nil {
					t.Fatal(err)
				}
				current, err := CurrentStatements(d, layout, o)
				if err != nil {
					t.Fatal(err)
				}
				if msg := statementDiff(current, model); msg != "" {
					t.Errorf("%s/%s with %+v: the frozen migrations differ from the model; run go generate ./schema (see schema/migration/README.md):\n%s", engine, layout, o, msg)
				}
			}
		}
	}
}

// TestFrozenCheckSeesModelChanges proves the check above can fail: a model
// with one more column, or one index changed, differs from the frozen
// migrations on every engine.
func TestFrozenCheckSeesModelChanges(t *testing.T) {
	t.Parallel()
	for _, engine := range skiplock.Engines {
		d := engine.Dialect()
		for name, change := range map[string]func(*Table){
			"added column":  func(tb *Table) { tb.Columns = append(tb.Columns, Column{Name: "tags", Type: TypeText}) },
			"changed index": func(tb *Table) { tb.Indexes[1].Where = `"status" = 'Failed'` },
		} {
			model, err := ModelStatements(d, LayoutBucketed, nil)
			if err != nil {
				t.Fatal(err)
			}
			changed := changedModel(t, d, model, DefaultSchema, change)
			current, err := CurrentStatements(d, LayoutBucketed, Options{})
			if err != nil {
				t.Fatal(err)
			}
			msg := statementDiff(current, changed)
			if msg == "" {
				t.Errorf("%s, %s: the check sees no difference", engine, name)
			}
		}
	}
}

// changedModel returns model with the jobs table's statements replaced by
// those of a copy of JobsTableDef that change has altered.
func changedModel(t *testing.T, d *skiplock.Dialect, model []string, schemaName string, change func(*Table)) []string {
	t.Helper()
	orig := JobsTableDef(DefaultBuckets).Create(d, schemaName)
	tb := JobsTableDef(DefaultBuckets)
	change(tb)
	altered := tb.Create(d, schemaName)
	out := slices.Clone(model)
	replaced := 0
	for i, s := range out {
		if j := slices.Index(orig, s); j >= 0 && altered[j] != s {
			out[i] = altered[j]
			replaced++
		}
	}
	if replaced == 0 {
		t.Fatalf("the change altered no statement of the model:\n%s", strings.Join(model, "\n"))
	}
	return out
}

// TestEveryEngineRendersEveryMigration checks that each migration renders
// on each engine with no placeholder left, and that the files are listed
// in apply order.
func TestEveryEngineRendersEveryMigration(t *testing.T) {
	t.Parallel()
	if len(Migrations) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range Migrations {
		for _, engine := range skiplock.Engines {
			stmts, err := m.Up(engine.Dialect(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if strings.Contains(s, "TEMPLATE") {
					t.Errorf("%s/%d on %s: placeholder left in %s", m.Layout, m.Version, engine, s)
				}
			}
		}
		if i > 0 && Migrations[i-1].Layout == m.Layout && Migrations[i-1].Version+1 != m.Version {
			t.Errorf("%s: version %d follows %d", m.Layout, m.Version, Migrations[i-1].Version)
		}
	}
	// Released versions keep their names: databases recorded them.
	for _, want := range []string{"core/1 work_log", "bucketed/1 jobs", "fanout/1 job_queue"} {
		if !slices.ContainsFunc(Migrations, func(m Migration) bool { return fmt.Sprintf("%s/%d %s", m.Layout, m.Version, m.Name) == want }) {
			t.Errorf("no migration %s", want)
		}
	}
}
