package schema_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/internal/usage"
	. "github.com/skiplock/skiplock/schema"
)

// TestMigrateConcurrently runs Migrate from 8 goroutines at once, on the
// engine's own lock and on the lock row, and checks that they end with one
// applied set and no error.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, lockRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("lockRow=%v", lockRow), func(t *testing.T) {
			db := testdb.Open(t, nil)
			name := testdb.Schema(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			applied := make([][]Migration, n)
			start := make(chan struct{})
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					<-start
					cfg := &MigrateConfig{Options: Options{Schema: name}}
					if lockRow {
						ForceLockRow(cfg)
					}
					applied[i], errs[i] = Migrate(ctx, db, cfg)
				}(i)
			}
			close(start)
			wg.Wait()
			total := 0
			for i := range errs {
				if errs[i] != nil {
					t.Errorf("migrator %d: %v", i, errs[i])
				}
				total += len(applied[i])
			}
			if total != len(Migrations) {
				t.Errorf("migrators applied %d migrations between them, want each of the %d exactly once", total, len(Migrations))
			}
			rec, err := AppliedMigrations(ctx, db, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(rec) != len(Migrations) {
				t.Fatalf("skiplock_migration has %d rows, want %d: %+v", len(rec), len(Migrations), rec)
			}
			// The tables exist and take rows.
			for _, table := range []string{JobsTable, JobQueueTable, DeadJobTable, WorkLogTable} {
				var c int
				if err := db.QueryRow(ctx, "SELECT count(*) FROM "+sqlident.Quote(name)+"."+sqlident.Quote(table)).Scan(&c); err != nil {
					t.Errorf("table %s: %v", table, err)
				}
			}
			// Running it again applies nothing.
			again, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name}})
			if err != nil || len(again) != 0 {
				t.Fatalf("second migrate: applied %d, err %v", len(again), err)
			}
		})
	}
}

func TestMigrateRecordsSettingsAndRefusesChanges(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := context.Background()
	if _, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name, Buckets: 5, Tablets: 3}}); err != nil {
		t.Fatal(err)
	}
	if b, err := Buckets(ctx, db, name); err != nil || b != 5 {
		t.Fatalf("Buckets = %d, %v; want 5", b, err)
	}
	if n, err := Tablets(ctx, db, name); err != nil || n != 3 {
		t.Fatalf("Tablets = %d, %v; want 3", n, err)
	}
	_, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name, Buckets: 6}})
	if !usage.Is(err) {
		t.Fatalf("changing buckets: want a usage error, got %v", err)
	}
	if b, _ := Buckets(ctx, db, name); b != 5 {
		t.Fatalf("a refused migrate changed buckets to %d", b)
	}
	// The same count, or none, is fine.
	if _, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name, Buckets: 5}}); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateOneLayoutThenTheOther(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := context.Background()
	got, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name}, Layouts: []Layout{LayoutFanout}})
	if err != nil {
		t.Fatal(err)
	}
	count := func(l Layout) int {
		n := 0
		for _, m := range Migrations {
			if m.Layout == l {
				n++
			}
		}
		return n
	}
	core, fanout, bucketed := count(LayoutCore), count(LayoutFanout), count(LayoutBucketed)
	only := func(ms []Migration, l Layout) bool {
		return !slices.ContainsFunc(ms, func(m Migration) bool { return m.Layout != l })
	}
	if len(got) != core+fanout || !only(got[:core], LayoutCore) || !only(got[core:], LayoutFanout) {
		t.Fatalf("applied %+v, want core (%d) then fanout (%d)", got, core, fanout)
	}
	if _, err := Buckets(ctx, db, name); err == nil {
		t.Fatal("Buckets on a fanout-only schema should say to migrate")
	}
	got, err = Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name}, Layouts: []Layout{LayoutBucketed}})
	if err != nil || len(got) != bucketed || !only(got, LayoutBucketed) {
		t.Fatalf("applied %+v, %v; want bucketed (%d)", got, err, bucketed)
	}
}

func TestReadSettingsOnEmptySchemaSaysMigrate(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	_, err := Buckets(context.Background(), db, "no_such_schema_here")
	if err == nil || !contains(err.Error(), "skiplock migrate") {
		t.Fatalf("want an error that says to migrate, got %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestMigrateSaysWhoHoldsTheLock: a migrate that waits for the lock row
// says whom it waits for, once, and its error names the holder when it
// gives up.
func TestMigrateSaysWhoHoldsTheLock(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := context.Background()
	first := &MigrateConfig{Options: Options{Schema: name}}
	ForceLockRow(first)
	if _, err := Migrate(ctx, db, first); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+sqlident.Quote(name)+`.`+sqlident.Quote(LockTable)+` ("name", "holder", "expires_at")
VALUES ('migrate', 'other-host/4242/cafe', now() + interval '10 minutes')
ON CONFLICT ("name") DO UPDATE SET "holder" = excluded."holder", "expires_at" = excluded."expires_at"`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	cfg := &MigrateConfig{Options: Options{Schema: name}, Logger: logs.To(func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	})}
	ForceLockRow(cfg)
	wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	_, err := Migrate(wctx, db, cfg)
	if err == nil || !strings.Contains(err.Error(), "held by other-host/4242/cafe") {
		t.Errorf("a migrate that gave up: %v, want the holder named", err)
	}
	mu.Lock()
	defer mu.Unlock()
	waits := 0
	for _, l := range lines {
		if strings.Contains(l, `msg="waiting for the migration lock" held_by="held by other-host/4242/cafe`) {
			waits++
		}
	}
	if waits != 1 {
		t.Errorf("%d lines say whom it waits for, want 1: %q", waits, lines)
	}
}

// TestWorkflowNodesBackfilled: bucketed/014 gives the workflow jobs a
// database already holds their job_workflow_node rows, and remakes
// jobs_workflow over the waiting jobs only. The database here has
// everything before 014 recorded (its statements and those after it are
// idempotent), with workflow jobs and no names.
func TestWorkflowNodesBackfilled(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, nil)
	name := testdb.Schema(t, db)
	ctx := context.Background()
	if _, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name}, Layouts: []Layout{LayoutBucketed}}); err != nil {
		t.Fatal(err)
	}
	q := sqlident.Quote(name)
	for _, stmt := range []string{
		`DELETE FROM ` + q + `."skiplock_migration" WHERE "layout" = 'bucketed' AND "version" >= 14`,
		`DROP TABLE ` + q + `."job_workflow_node"`,
		`INSERT INTO ` + q + `."jobs" ("status", "workflow_id", "workflow_node", "deps_left") VALUES ('Success', 7, 'a', NULL), ('Queued', 7, 'b', 1), ('Queued', 8, 'a', NULL)`,
	} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Migrate(ctx, db, &MigrateConfig{Options: Options{Schema: name}, Layouts: []Layout{LayoutBucketed}})
	if err != nil || len(got) == 0 || got[0].Version != 14 || got[len(got)-1].Version != latest(LayoutBucketed) {
		t.Fatalf("applied %+v, %v; want bucketed/014 and the versions after it", got, err)
	}
	var names string
	if err := db.QueryRow(ctx, `SELECT string_agg(n."workflow_id" || '/' || n."node" || '=' || j."workflow_node", ' ' ORDER BY 1)
FROM `+q+`."job_workflow_node" AS n JOIN `+q+`."jobs" AS j ON j."id" = n."job_id" AND j."workflow_id" = n."workflow_id"`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	if names != "7/a=a 7/b=b 8/a=a" {
		t.Errorf("job_workflow_node after 014: %q; want each workflow job named, by its id", names)
	}
	var pred string
	if err := db.QueryRow(ctx, `SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i WHERE i.indexrelid = to_regclass($1)`, q+`."jobs_workflow"`).Scan(&pred); err != nil {
		t.Fatal(err)
	}
	if pred != "(deps_left IS NOT NULL)" {
		t.Errorf("jobs_workflow's predicate %q; want the waiting jobs only", pred)
	}
}

// latest is the last version of layout's migrations.
func latest(layout Layout) int {
	n := 0
	for _, m := range Migrations {
		if m.Layout == layout {
			n = max(n, m.Version)
		}
	}
	return n
}
