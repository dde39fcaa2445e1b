package schema

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/skiplock/skiplock"
)

// Migration is one numbered, embedded schema change for a layout. Versions
// count up from 1 per layout and are never reused; a released migration is
// never edited, only followed by a new one.
type Migration struct {
	Layout  Layout
	Version int
	Name    string
	// Up renders the statements for an engine. Each must be idempotent
	// (IF NOT EXISTS), since engines without transactional DDL cannot roll
	// a half-applied migration back and run it again instead.
	Up func(d *skiplock.Dialect, o Options) []string
}

// Migrations lists every migration, in the order they apply.
var Migrations = []Migration{
	{Layout: LayoutCore, Version: 1, Name: "work_log", Up: func(d *skiplock.Dialect, o Options) []string {
		return WorkLogTableDef().Create(d, o.Schema)
	}},
	{Layout: LayoutCore, Version: 2, Name: "leader", Up: func(d *skiplock.Dialect, o Options) []string {
		return LeaderTableDef().Create(d, o.Schema)
	}},
	{Layout: LayoutBucketed, Version: 1, Name: "jobs", Up: func(d *skiplock.Dialect, o Options) []string {
		stmts := []string{createStatusType(d, o.Schema)}
		stmts = append(stmts, JobsTableDef(o.Buckets).Create(d, o.Schema)...)
		return append(stmts, upsertSetting(o.Schema, SettingBuckets, strconv.Itoa(o.Buckets)))
	}},
	{Layout: LayoutFanout, Version: 1, Name: "job_queue", Up: func(d *skiplock.Dialect, o Options) []string {
		var stmts []string
		if d.UUIDExtension != "" {
			stmts = append(stmts, "CREATE EXTENSION IF NOT EXISTS "+skiplock.QuoteIdent(d.UUIDExtension))
		}
		stmts = append(stmts, JobQueueTableDef(o.Tablets).Create(d, o.Schema)...)
		stmts = append(stmts, DeadJobTableDef().Create(d, o.Schema)...)
		return append(stmts, upsertSetting(o.Schema, SettingTablets, strconv.Itoa(o.Tablets)))
	}},
}

// Setting names kept in skiplock_setting: what the DDL was made with, so
// queue code reads the bucket count from the database it talks to.
const (
	SettingBuckets = "bucketed.buckets"
	SettingTablets = "fanout.tablets"
)

// bootstrap renders the bookkeeping tables every migration run needs.
func bootstrap(d *skiplock.Dialect, schemaName string) []string {
	q := skiplock.QuoteIdent(schemaName)
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + q,
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "layout" TEXT NOT NULL,
  "version" INTEGER NOT NULL,
  "name" TEXT NOT NULL,
  "applied_at" %s NOT NULL DEFAULT %s,
  PRIMARY KEY ("layout", "version")
)`, q, skiplock.QuoteIdent(MigrationTable), d.Timestamp, d.Now),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "name" TEXT NOT NULL PRIMARY KEY,
  "value" TEXT NOT NULL
)`, q, skiplock.QuoteIdent(SettingTable)),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  "name" TEXT NOT NULL PRIMARY KEY,
  "holder" TEXT NOT NULL,
  "expires_at" %s NOT NULL
)`, q, skiplock.QuoteIdent(LockTable), d.Timestamp),
	}
}

func upsertSetting(schemaName, name, value string) string {
	return fmt.Sprintf(`INSERT INTO %s.%s ("name", "value") VALUES (%s, %s) ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value"`,
		skiplock.QuoteIdent(schemaName), skiplock.QuoteIdent(SettingTable), skiplock.QuoteLiteral(name), skiplock.QuoteLiteral(value))
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
// from scratch: the bookkeeping tables, core, then the layout's migrations.
// It needs no connection; `skiplock schema print` shows it.
func DDL(d *skiplock.Dialect, layout Layout, o *Options) ([]string, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	stmts := bootstrap(d, opts.Schema)
	for _, m := range pending([]Layout{layout}, nil) {
		stmts = append(stmts, m.Up(d, opts)...)
	}
	return stmts, nil
}
