package schema_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	. "github.com/skiplock/skiplock/schema"
)

// catalogQueries read what a schema holds, one text line per fact, from
// PostgreSQL's catalog; $1 is the schema name.
var catalogQueries = []struct{ what, sql string }{
	{"relation", `SELECT c.relname || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`},
	{"column", `SELECT table_name || '.' || column_name || ' #' || ordinal_position || ' ' || data_type || ' ' || udt_schema || '.' || udt_name ||
  ' nullable=' || is_nullable || ' default=' || coalesce(column_default, '-') || ' identity=' || is_identity || ':' || coalesce(identity_generation, '-') ||
  ' generated=' || is_generated || ' collation=' || coalesce(collation_name, '-')
FROM information_schema.columns WHERE table_schema = $1`},
	{"index", `SELECT tablename || ': ' || indexdef FROM pg_indexes WHERE schemaname = $1`},
	{"constraint", `SELECT coalesce(cl.relname, '-') || '.' || co.conname || ' ' || co.contype::text || ' ' || pg_get_constraintdef(co.oid)
FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace LEFT JOIN pg_class cl ON cl.oid = co.conrelid WHERE n.nspname = $1`},
	{"type", `SELECT t.typname || ' ' || t.typtype::text || coalesce(' labels=' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1`},
	{"sequence", `SELECT c.relname || ' ' || format_type(s.seqtypid, NULL) || ' start=' || s.seqstart || ' inc=' || s.seqincrement || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`},
	{"trigger", `SELECT pg_get_triggerdef(tg.oid) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT tg.tgisinternal`},
}

// catalog describes a schema as sorted lines, with its name replaced by
// <schema> so that two schemas compare. It includes skiplock_setting's
// rows, which the migrations write.
func catalog(t *testing.T, db *skiplock.DB, schemaName string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lines []string
	read := func(what, sql string, args ...any) {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, what+" "+strings.ReplaceAll(s, schemaName, "<schema>"))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
	}
	for _, q := range catalogQueries {
		read(q.what, q.sql, schemaName)
	}
	read("setting", fmt.Sprintf(`SELECT "name" || '=' || "value" FROM %s.%s`, sqlident.Quote(schemaName), sqlident.Quote(SettingTable)))
	slices.Sort(lines)
	return lines
}

// catalogDiff lists the lines only one catalog has; "" when they are equal.
func catalogDiff(migrated, model []string) string {
	var out []string
	for _, l := range migrated {
		if !slices.Contains(model, l) {
			out = append(out, "only migrated: "+l)
		}
	}
	for _, l := range model {
		if !slices.Contains(migrated, l) {
			out = append(out, "only in model: "+l)
		}
	}
	return strings.Join(out, "\n")
}

// modelSchema creates a scratch schema straight from the model's
// statements (bootstrap, then core and both layouts), changed by edit when
// it is not nil, and returns its name.
func modelSchema(t *testing.T, db *skiplock.DB, o Options, edit func(model []string, schemaName string) []string) string {
	t.Helper()
	name := testdb.Schema(t, db)
	o.Schema = name
	d := db.Dialect()
	stmts := Bootstrap(d, name)
	for _, layout := range allLayouts {
		model, err := ModelStatements(d, layout, &o)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil && layout == LayoutBucketed {
			model = edit(model, name)
		}
		stmts = append(stmts, model...)
	}
	// Migrate adds a personality's stand-ins after the migrations.
	stmts = append(stmts, EmulationStandIns(d, allLayouts, name)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatalf("model schema: %v\n%s", err, s)
		}
	}
	return name
}

// TestMigratedSchemaMatchesModel migrates a schema from nothing with the
// frozen migrations, builds another straight from the current model, and
// compares PostgreSQL's catalog of the two: tables, columns with their
// types, nullability and defaults, indexes as pg_get_indexdef gives them,
// constraints, the enum's labels, sequences and settings. A model change
// without a new migration fails it; the subtests prove that it would.
func TestMigratedSchemaMatchesModel(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	if db.Engine() != skiplock.EnginePostgres {
		t.Skipf("reads PostgreSQL's catalog; the server is %s", db.Engine())
	}
	for _, o := range []Options{{}, {Buckets: 3, Tablets: 1}} {
		t.Run(fmt.Sprintf("buckets=%d,tablets=%d", o.Buckets, o.Tablets), func(t *testing.T) {
			mig := testdb.Schema(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := &MigrateConfig{Options: o}
			cfg.Schema = mig
			if _, err := Migrate(ctx, db, cfg); err != nil {
				t.Fatal(err)
			}
			got := catalog(t, db, mig)
			if len(got) < 50 {
				t.Fatalf("the catalog read only %d facts:\n%s", len(got), strings.Join(got, "\n"))
			}
			if msg := catalogDiff(got, catalog(t, db, modelSchema(t, db, o, nil))); msg != "" {
				t.Errorf("a schema migrated from zero differs from the model; add a migration (go generate ./schema, see schema/migration/README.md):\n%s", msg)
			}
		})
	}

	// A model changed without a migration is reported: one more column,
	// one index changed.
	mig := testdb.Schema(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: mig}}); err != nil {
		t.Fatal(err)
	}
	migrated := catalog(t, db, mig)
	for name, c := range map[string]struct {
		change func(*Table)
		want   string
	}{
		"added column":  {func(tb *Table) { tb.Columns = append(tb.Columns, Column{Name: "tags", Type: TypeText}) }, "only in model: column jobs.tags"},
		"changed index": {func(tb *Table) { tb.Indexes[1].Where = `"status" = 'Failed'` }, "only in model: index jobs: CREATE INDEX jobs_lease_expiry"},
	} {
		t.Run(name, func(t *testing.T) {
			model := modelSchema(t, db, Options{}, func(stmts []string, schemaName string) []string {
				return changedModel(t, db.Dialect(), stmts, schemaName, c.change)
			})
			msg := catalogDiff(migrated, catalog(t, db, model))
			if !strings.Contains(msg, c.want) {
				t.Fatalf("the comparison does not report %q; it says:\n%s", c.want, msg)
			}
		})
	}
}

// fitVersions are the first versions that fit the schema to the
// distributed engines (docs/design.md, "The status type is created without
// an exception block" and "No index is led by a growing key"); a database
// migrated before them has every earlier version.
var fitVersions = map[Layout]int{LayoutCore: 3, LayoutBucketed: 2}

// TestUpgradeThroughFitVersions builds a schema the way the releases
// before the fit versions did (each earlier file as released, the old
// status-type block included, recorded as applied, with jobs in it), then
// runs Migrate: it applies exactly the fit versions, twice is a no-op,
// and the schema ends equal to one built from the model.
func TestUpgradeThroughFitVersions(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	if db.Engine() != skiplock.EnginePostgres {
		t.Skipf("reads PostgreSQL's catalog; the server is %s", db.Engine())
	}
	d := db.Dialect()
	name := testdb.Schema(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Schema: name}
	stmts := Bootstrap(d, name)
	var old []Migration
	for _, m := range Migrations {
		if v, ok := fitVersions[m.Layout]; ok && m.Version >= v {
			continue
		}
		up, err := UpAsReleased(m, d, o)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, up...)
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s."skiplock_migration" ("layout", "version", "name") VALUES (%s, %d, %s)`,
			sqlident.Quote(name), sqlident.QuoteLiteral(string(m.Layout)), m.Version, sqlident.QuoteLiteral(m.Name)))
		old = append(old, m)
	}
	if !slices.ContainsFunc(stmts, func(s string) bool { return strings.Contains(s, "EXCEPTION WHEN duplicate_object") }) {
		t.Fatal("the released bucketed/001 no longer renders its exception block: this test no longer builds an old schema")
	}
	stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s."jobs" ("queue") SELECT 'q' || (i %% 3) FROM generate_series(1, 100) AS i`, sqlident.Quote(name)))
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatalf("old schema: %v\n%s", err, s)
		}
	}

	applied, err := Migrate(ctx, db, &MigrateConfig{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range applied {
		got = append(got, fmt.Sprintf("%s/%d", m.Layout, m.Version))
	}
	if want := len(Migrations) - len(old); len(applied) != want || !slices.Contains(got, "core/3") || !slices.Contains(got, "bucketed/2") || !slices.Contains(got, "bucketed/3") {
		t.Fatalf("the upgrade applied %v, want the %d versions after the old set, core/3, bucketed/2 and bucketed/3 among them", got, want)
	}
	if again, err := Migrate(ctx, db, &MigrateConfig{Options: o}); err != nil || len(again) != 0 {
		t.Fatalf("a second Migrate applied %v, %v", again, err)
	}
	var jobs int
	if err := db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s."jobs"`, sqlident.Quote(name))).Scan(&jobs); err != nil || jobs != 100 {
		t.Fatalf("jobs after the upgrade: %d, %v", jobs, err)
	}
	if msg := catalogDiff(catalog(t, db, name), catalog(t, db, modelSchema(t, db, Options{}, nil))); msg != "" {
		t.Errorf("an upgraded schema differs from the model:\n%s", msg)
	}
}
