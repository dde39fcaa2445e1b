package schema

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
)

// Migration is one numbered schema change for a layout, applied from a
// frozen file per engine (see the package doc). Versions count up from 1
// per layout and are never reused; a released migration's files are never
// edited, only followed by a new migration.
type Migration struct {
	// Layout is the layout the migration belongs to (core for the tables
	// both share).
	Layout Layout
	// Version is the migration's number within its layout, from 1.
	Version int
	// Name is the file name's <name> part, recorded in skiplock_migration.
	Name string
}

// Migrations lists every migration, in the order they apply, as the
// embedded files under migration/ define them.
var Migrations = loadMigrations()

// ModelStatements renders, from the table model ([JobsTableDef] and the
// others), the statements that create layout from nothing: the current
// schema as the model describes it. LayoutCore gives work_log,
// work_attempt_log, skiplock_leader, skiplock_queue, skiplock_periodic, and the rollups'
// skiplock_stat, skiplock_rollup and skiplock_client. Migrate
// never runs these: `go generate ./schema` freezes them into a new
// migration file, and the tests check that the frozen migrations create
// exactly this schema.
func ModelStatements(d *skiplock.Dialect, layout Layout, o *Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var stmts []string
	switch layout {
	case LayoutCore:
		stmts = WorkLogTableDef().Create(d, opts.Schema)
		stmts = append(stmts, WorkAttemptLogTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, LeaderTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, QueueStateTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, PeriodicTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, StatTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, RollupTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, ClientTableDef().Create(d, opts.Schema)...)
	case LayoutBucketed:
		stmts = []string{createStatusType(d, opts.Schema)}
		stmts = append(stmts, JobsTableDef(opts.Buckets).Create(d, opts.Schema)...)
		stmts = append(stmts, upsertSetting(opts.Schema, SettingBuckets, strconv.Itoa(opts.Buckets)))
		stmts = append(stmts, JobHoldTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, JobSlotTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, JobRateTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, JobBatchTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, JobWorkflowTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, JobWorkflowNodeTableDef().Create(d, opts.Schema)...)
	case LayoutFanout:
		if d.UUIDExtension != "" {
			// Only where the server lacks gen_random_uuid: YugabyteDB
			// 2025.1 and later have it in core (PostgreSQL 15), and
			// creating pgcrypto needs superuser or yb_extension there.
			stmts = append(stmts, "DO "+sqlident.QuoteLiteral("BEGIN IF to_regproc('gen_random_uuid') IS NULL THEN CREATE EXTENSION IF NOT EXISTS "+sqlident.Quote(d.UUIDExtension)+"; END IF; END"))
		}
		stmts = append(stmts, JobQueueTableDef(opts.Tablets).Create(d, opts.Schema)...)
		stmts = append(stmts, DeadJobTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, upsertSetting(opts.Schema, SettingTablets, strconv.Itoa(opts.Tablets)))
		stmts = append(stmts, JobAttemptTableDef().Create(d, opts.Schema)...)
		stmts = append(stmts, FanoutSlotTableDef().Create(d, opts.Schema)...)
	default:
		return nil, usage.Errorf("unknown layout %q: use core, bucketed or fanout", layout)
	}
	return stmts, nil
}

// Setting names kept in skiplock_setting: what the DDL was made with, so
// queue code reads the bucket count from the database it talks to.
const (
	SettingBuckets = "bucketed.buckets"
	SettingTablets = "fanout.tablets"
)

// bootstrap renders the bookkeeping tables every migration run needs.
func bootstrap(d *skiplock.Dialect, schemaName string) []string {
	q := sqlident.Quote(schemaName)
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + q,
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "layout" TEXT NOT NULL,
  "version" INTEGER NOT NULL,
  "name" TEXT NOT NULL,
  "applied_at" %s NOT NULL DEFAULT %s,
  PRIMARY KEY ("layout", "version")
)`, q, sqlident.Quote(MigrationTable), d.Timestamp, d.Now),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "name" TEXT NOT NULL PRIMARY KEY,
  "value" TEXT NOT NULL
)`, q, sqlident.Quote(SettingTable)),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "name" TEXT NOT NULL PRIMARY KEY,
  "holder" TEXT NOT NULL,
  "expires_at" %s NOT NULL
)`, q, sqlident.Quote(LockTable), d.Timestamp),
	}
}

func upsertSetting(schemaName, name, value string) string {
	return fmt.Sprintf(`INSERT INTO %s.%s ("name", "value") VALUES (%s, %s) ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value"`,
		sqlident.Quote(schemaName), sqlident.Quote(SettingTable), sqlident.QuoteLiteral(name), sqlident.QuoteLiteral(value))
}

// pending returns the migrations of layouts (core always included) that
// are not in applied, in apply order.
func pending(layouts []Layout, applied map[Layout]int) []Migration {
	want := map[Layout]bool{LayoutCore: true}
	for _, l := range layouts {
		want[l] = true
	}
	var out []Migration
	for _, m := range Migrations {
		if want[m.Layout] && m.Version > applied[m.Layout] {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return layoutOrder(out[i].Layout) < layoutOrder(out[j].Layout) })
	return out
}

func layoutOrder(l Layout) int {
	switch l {
	case LayoutCore:
		return 0
	case LayoutBucketed:
		return 1
	}
	return 2
}

// DDL renders every statement that creates layout on the dialect's engine
// from scratch, as Migrate would run them: the bookkeeping tables, then the
// frozen migrations of core and of the layout. It needs no connection;
// `skiplock schema print` shows it.
func DDL(d *skiplock.Dialect, layout Layout, o *Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	stmts := bootstrap(d, opts.Schema)
	for _, m := range pending([]Layout{layout}, nil) {
		up, err := m.Up(d, opts)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, up...)
	}
	return stmts, nil
}
