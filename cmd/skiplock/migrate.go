package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
)

const migrateUsage = "migrate [--layout bucketed,fanout] [--buckets N] [--tablets N] [--dry-run]"

func init() {
	register(&command{
		name:    "migrate",
		usage:   migrateUsage,
		summary: "create or upgrade the schema (safe to run from many processes at once); --dry-run prints what it would apply",
		run:     runMigrate,
	})
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("migrate", migrateUsage)
	layouts := fs.String("layout", "bucketed,fanout", "layouts to create, comma-separated")
	buckets := fs.Int("buckets", 0, fmt.Sprintf("bucketed: bucket count (default %d; fixed once created)", schema.DefaultBuckets))
	tablets := fs.Int("tablets", 0, fmt.Sprintf("fanout: tablets or ranges to pre-split into (default %d; fixed once created)", schema.DefaultTablets))
	dryRun := fs.Bool("dry-run", false, "print the migrations that would be applied and their SQL; change nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	ls, err := schema.ParseLayouts(*layouts)
	if err != nil {
		return err
	}
	// Validate every option before connecting, so bad input changes nothing.
	if err := countFlags(fs, "buckets", "tablets"); err != nil {
		return err
	}
	opts := schema.Options{Schema: e.schema, Buckets: *buckets, Tablets: *tablets}
	if err := opts.Validate(); err != nil {
		return err
	}
	db, err := e.open(ctx, 4)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cfg := &schema.MigrateConfig{Options: opts, Layouts: ls, Logger: e.log}
	if *dryRun {
		plan, err := schema.DryRun(ctx, db, cfg)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(dryRunReport(e.schema, string(db.Engine()), plan))
		}
		printPlan(e.stdout, e.schema, string(db.Engine()), plan)
		return nil
	}
	applied, err := schema.Migrate(ctx, db, cfg)
	if err != nil {
		return err
	}
	if e.json {
		type row struct {
			Layout  string `json:"layout"`
			Version int    `json:"version"`
			Name    string `json:"name"`
		}
		out := []row{}
		for _, m := range applied {
			out = append(out, row{string(m.Layout), m.Version, m.Name})
		}
		report := map[string]any{"schema": e.schema, "engine": db.Engine(), "applied": out}
		if p := db.Personality(); p != skiplock.PersonalityNone {
			report["personality"], report["emulated"] = p, db.EmulationSkipped()
		}
		return e.printJSON(report)
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "schema %q on %s is up to date\n", e.schema, engineLabel(db))
	} else {
		fmt.Fprintf(e.stdout, "schema %q on %s: applied %d migration(s)\n", e.schema, engineLabel(db), len(applied))
	}
	return nil
}

// pendingJSON is one migration in `migrate --dry-run --json`.
type pendingJSON struct {
	Layout     string   `json:"layout"`
	Version    int      `json:"version"`
	Name       string   `json:"name"`
	Statements []string `json:"statements"`
}

// dryRunJSON is the report of `migrate --dry-run --json`: bootstrap holds
// the statements that create the schema and bookkeeping tables when they
// are missing, pending the migrations that would be applied, in order,
// and stand_ins a personality's stand-in indexes (schema.EmulationStandIns).
type dryRunJSON struct {
	Schema    string        `json:"schema"`
	Engine    string        `json:"engine"`
	DryRun    bool          `json:"dry_run"`
	Bootstrap []string      `json:"bootstrap"`
	Pending   []pendingJSON `json:"pending"`
	StandIns  []string      `json:"stand_ins,omitempty"`
}

func dryRunReport(schemaName, engine string, plan *schema.Plan) dryRunJSON {
	rep := dryRunJSON{Schema: schemaName, Engine: engine, DryRun: true, Bootstrap: plan.Bootstrap, Pending: []pendingJSON{}, StandIns: plan.StandIns}
	if rep.Bootstrap == nil {
		rep.Bootstrap = []string{}
	}
	for _, m := range plan.Pending {
		stmts := m.Statements
		if stmts == nil {
			stmts = []string{}
		}
		rep.Pending = append(rep.Pending, pendingJSON{string(m.Layout), m.Version, m.Name, stmts})
	}
	return rep
}

// printPlan writes a dry run as a summary line and the SQL, each migration
// under a comment that names it.
func printPlan(w io.Writer, schemaName, engine string, plan *schema.Plan) {
	if len(plan.Pending) == 0 && len(plan.Bootstrap) == 0 {
		fmt.Fprintf(w, "schema %q on %s is up to date (dry run: nothing was changed)\n", schemaName, engine)
		return
	}
	fmt.Fprintf(w, "schema %q on %s: %d migration(s) to apply (dry run: nothing was changed)\n", schemaName, engine, len(plan.Pending))
	if len(plan.Bootstrap) > 0 {
		fmt.Fprintf(w, "\n-- the schema and its bookkeeping tables\n%s;\n", strings.Join(plan.Bootstrap, ";\n\n"))
	}
	for _, m := range plan.Pending {
		fmt.Fprintf(w, "\n-- %s/%03d %s\n", m.Layout, m.Version, m.Name)
		if len(m.Statements) == 0 {
			fmt.Fprintf(w, "-- (no statement on %s: the version is only recorded)\n", engine)
			continue
		}
		fmt.Fprintf(w, "%s;\n", strings.Join(m.Statements, ";\n\n"))
	}
	if len(plan.StandIns) > 0 {
		fmt.Fprintf(w, "\n-- the personality's stand-in indexes (not migrations: created when missing)\n%s;\n", strings.Join(plan.StandIns, ";\n\n"))
	}
}

// engineLabel names the engine for people: "postgres", or "postgres under
// the cockroach personality (emulated: PostgreSQL's DDL)".
func engineLabel(db *skiplock.DB) string {
	if p := db.Personality(); p != skiplock.PersonalityNone {
		return fmt.Sprintf("postgres under the %s personality (emulated: the DDL is PostgreSQL's)", p)
	}
	return string(db.Engine())
}
