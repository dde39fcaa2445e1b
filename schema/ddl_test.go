package schema_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	. "github.com/skiplock/skiplock/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The CockroachDB DDL of every layout is parsed with CockroachDB's grammar
// by internal/crdbcheck (its own module, which keeps the parser out of
// go.mod), and so are the golden testdata/cockroach_*.sql.

func TestCockroachBucketedIsHashSharded(t *testing.T) {
	t.Parallel()
	stmts, err := DDL(skiplock.EngineCockroach.Dialect(), LayoutBucketed, &Options{Buckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(stmts, "\n")
	want := `CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON "skiplock"."jobs" ("queue", "priority", "run_at", "id") USING HASH WITH (bucket_count = 16) WHERE "status" = 'Queued'`
	if !strings.Contains(all, want) {
		t.Fatalf("no hash-sharded dequeue index in:\n%s", all)
	}
}

func TestCockroachFanoutSplitsAtValues(t *testing.T) {
	t.Parallel()
	stmts, err := DDL(skiplock.EngineCockroach.Dialect(), LayoutFanout, &Options{Tablets: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := `ALTER TABLE "skiplock"."job_queue" SPLIT AT VALUES ('40000000-0000-0000-0000-000000000000'), ('80000000-0000-0000-0000-000000000000'), ('c0000000-0000-0000-0000-000000000000')`
	if !strings.Contains(strings.Join(stmts, "\n"), want) {
		t.Fatalf("missing %s", want)
	}
}

// TestGoldenDDL compares each engine's DDL with testdata/<engine>_<layout>.sql.
// YugabyteDB's extensions have no parser here, so their golden files are
// the review surface: they were checked by hand against the YugabyteDB job-queue data model (HASH
// bucket key, ASC create order, INCLUDE) and the scalable-job-queue article (ASC text key, SPLIT
// AT VALUES at 2000..., 4000..., ...). Run with -update to rewrite.
func TestGoldenDDL(t *testing.T) {
	t.Parallel()
	for _, engine := range skiplock.Engines {
		for _, layout := range Layouts {
			stmts, err := DDL(engine.Dialect(), layout, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(stmts, ";\n\n") + ";\n"
			path := filepath.Join("testdata", string(engine)+"_"+string(layout)+".sql")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./schema -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file; run go test ./schema -update and review the diff.\ngot:\n%s", path, got)
			}
		}
	}
}

// TestYugabyteDDLFollowsSeeds checks the facts the golden files were
// reviewed for, so a careless -update cannot silently drop them.
func TestYugabyteDDLFollowsSeeds(t *testing.T) {
	t.Parallel()
	d := skiplock.EngineYugabyte.Dialect()
	bucketed, _ := DDL(d, LayoutBucketed, &Options{Buckets: 4})
	fanout, _ := DDL(d, LayoutFanout, &Options{Tablets: 8})
	b, f := strings.Join(bucketed, "\n"), strings.Join(fanout, "\n")
	for _, want := range []string{
		`CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON "skiplock"."jobs" ("bucket" HASH, "queue" ASC, "priority" ASC, "run_at" ASC, "id" ASC) WHERE "status" = 'Queued'`,
		`"bucket" SMALLINT NOT NULL DEFAULT floor(random() * 4)::SMALLINT`,
		// Inside the DO block's single-quoted body, so its quotes are doubled.
		`CREATE TYPE "skiplock"."job_status" AS ENUM (''Queued'', ''Running'', ''Canceled'', ''Failed'', ''Success'')`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("bucketed YugabyteDB DDL lacks %s", want)
		}
	}
	for _, want := range []string{
		`PRIMARY KEY ("id" ASC)`,
		`) SPLIT AT VALUES (
  ('20000000-0000-0000-0000-000000000000'),`,
		`('e0000000-0000-0000-0000-000000000000')
)`,
	} {
		if !strings.Contains(f, want) {
			t.Errorf("fanout YugabyteDB DDL lacks %s", want)
		}
	}
	// CockroachDB's syntax: hash-sharded indexes, and splits as a separate
	// ALTER TABLE ... SPLIT AT (YSQL splits in CREATE TABLE). ALTER TABLE
	// ... SET DEFAULT (fanout/003) is YSQL too.
	if strings.Contains(b+f, "USING HASH") || regexp.MustCompile(`ALTER TABLE \S+ SPLIT AT`).MatchString(b+f) {
		t.Error("YugabyteDB DDL uses CockroachDB syntax")
	}
	// With transactional DDL on, DDL inside a PL/pgSQL exception block (a
	// subtransaction) is refused (transactional-ddl.md, yugabyte-db#31810):
	// no statement of a fresh database may have one.
	if strings.Contains(b+f, "EXCEPTION") {
		t.Error("YugabyteDB DDL has an exception block")
	}
}

func TestUUIDSplitPoints(t *testing.T) {
	t.Parallel()
	got := UUIDSplitPoints(8)
	if len(got) != 7 || got[0] != "20000000-0000-0000-0000-000000000000" || got[6] != "e0000000-0000-0000-0000-000000000000" {
		t.Fatalf("UUIDSplitPoints(8) = %v", got)
	}
	if len(UUIDSplitPoints(1)) != 0 {
		t.Fatal("one tablet needs no split")
	}
	for _, n := range []int{3, 7, 100, MaxTablets} {
		pts := UUIDSplitPoints(n)
		for i := 1; i < len(pts); i++ {
			if pts[i] <= pts[i-1] {
				t.Fatalf("n=%d: split points not increasing at %d: %s <= %s", n, i, pts[i], pts[i-1])
			}
		}
	}
}

func TestOptionsRejectBadInput(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Schema: `x"; DROP TABLE y; --`},
		{Schema: "1abc"},
		{Schema: "pg_catalog"},
		{Buckets: -1},
		{Buckets: MaxBuckets + 1},
		{Tablets: -3},
	} {
		if _, err := DDL(skiplock.EnginePostgres.Dialect(), LayoutBucketed, &o); !usage.Is(err) {
			t.Errorf("%+v: want a usage error, got %v", o, err)
		}
	}
	if _, err := ParseLayout("queue"); !usage.Is(err) || !strings.Contains(err.Error(), "bucketed or fanout") {
		t.Errorf("ParseLayout: %v", err)
	}
}

func TestQuotedIdentifiersEverywhere(t *testing.T) {
	t.Parallel()
	// A schema name with a dollar sign is valid and must come out quoted.
	for _, engine := range skiplock.Engines {
		for _, layout := range Layouts {
			stmts, err := DDL(engine.Dialect(), layout, &Options{Schema: "My$Schema"})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if strings.Contains(s, "My$Schema") && !strings.Contains(s, `"My$Schema"`) {
					t.Errorf("%s/%s: unquoted schema in %s", engine, layout, s)
				}
			}
		}
	}
}

func TestConflictTargetRepeatsTheIndex(t *testing.T) {
	t.Parallel()
	var got []string
	for _, ix := range JobsTableDef(DefaultBuckets).Indexes {
		if ix.Unique {
			got = append(got, ix.ConflictTarget())
		}
	}
	want := `("queue", "unique_key") WHERE "unique_key" IS NOT NULL AND ("status" IN ('Queued', 'Running') OR "status" = ANY ("unique_states"))`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("the jobs table's conflict targets are %q, want one: %s", got, want)
	}
	if got := (Index{Name: "x", Columns: []IndexColumn{{Name: `we"ird`}}, Unique: true}).ConflictTarget(); got != `("we""ird")` {
		t.Fatalf("ConflictTarget = %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a non-unique index made a conflict target")
		}
	}()
	_ = Index{Name: "y", Columns: []IndexColumn{{Name: "a"}}}.ConflictTarget()
}

// TestEmulationStandIns: only a personality whose engine merges a
// hash-sharded index's shards (cockroach) gets the merged stand-in, the
// dequeue index without its bucket column, and only with the bucketed
// layout; the engines themselves and PostgreSQL get none, and PostgreSQL
// under its own rules drops them.
func TestEmulationStandIns(t *testing.T) {
	t.Parallel()
	emulated := func(p skiplock.Personality) *skiplock.Dialect {
		d := *p.Engine().Dialect()
		d.Engine, d.Emulates, d.HashShardedDDL = skiplock.EnginePostgres, p, false
		return &d
	}
	want := `CREATE INDEX IF NOT EXISTS "jobs_dequeue_merged" ON "s"."jobs" ("queue", "priority", "run_at", "id") WHERE "status" = 'Queued' AND "deps_left" IS NULL`
	got := EmulationStandIns(emulated(skiplock.PersonalityCockroach), Layouts, "s")
	if len(got) != 1 || got[0] != want {
		t.Errorf("cockroach personality: %q, want [%q]", got, want)
	}
	for name, tc := range map[string]struct {
		d       *skiplock.Dialect
		layouts []Layout
	}{
		"postgres":                   {skiplock.EnginePostgres.Dialect(), Layouts},
		"cockroach itself":           {skiplock.EngineCockroach.Dialect(), Layouts},
		"yugabyte personality":       {emulated(skiplock.PersonalityYugabyte), Layouts},
		"cockroach, fanout only":     {emulated(skiplock.PersonalityCockroach), []Layout{LayoutCore, LayoutFanout}},
		"yugabyte-snapshot personal": {emulated(skiplock.PersonalityYugabyteSnapshot), Layouts},
	} {
		if got := EmulationStandIns(tc.d, tc.layouts, "s"); len(got) != 0 {
			t.Errorf("%s: %q, want none", name, got)
		}
	}
	// PostgreSQL under its own rules (and under a personality that wants
	// none) drops what a cockroach-emulated migrate made; the cockroach
	// personality and the engines themselves drop nothing.
	drop := `DROP INDEX IF EXISTS "s"."jobs_dequeue_merged"`
	for name, d := range map[string]*skiplock.Dialect{"postgres": skiplock.EnginePostgres.Dialect(), "yugabyte personality": emulated(skiplock.PersonalityYugabyte)} {
		if got := DropEmulationStandIns(d, "s"); len(got) != 1 || got[0] != drop {
			t.Errorf("%s: drops %q, want [%q]", name, got, drop)
		}
	}
	for name, d := range map[string]*skiplock.Dialect{"cockroach personality": emulated(skiplock.PersonalityCockroach), "cockroach itself": skiplock.EngineCockroach.Dialect(), "yugabyte itself": skiplock.EngineYugabyte.Dialect()} {
		if got := DropEmulationStandIns(d, "s"); len(got) != 0 {
			t.Errorf("%s: drops %q, want none", name, got)
		}
	}
}
