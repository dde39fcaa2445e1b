package main

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "migrate",
		usage:   "migrate [--layout bucketed,fanout] [--buckets N] [--tablets N]",
		summary: "create or upgrade the schema (safe to run from many processes at once)",
		run:     runMigrate,
	})
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("migrate", "migrate [--layout bucketed,fanout] [--buckets N] [--tablets N]")
	layouts := fs.String("layout", "bucketed,fanout", "layouts to create, comma-separated")
	buckets := fs.Int("buckets", 0, fmt.Sprintf("bucketed: bucket count (default %d; fixed once created)", schema.DefaultBuckets))
	tablets := fs.Int("tablets", 0, fmt.Sprintf("fanout: tablets or ranges to pre-split into (default %d; fixed once created)", schema.DefaultTablets))
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
	applied, err := schema.Migrate(ctx, db, &schema.MigrateConfig{Options: opts, Layouts: ls, Logf: e.logf})
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
		return e.printJSON(map[string]any{"schema": e.schema, "engine": db.Engine(), "applied": out})
	}
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "schema %q on %s is up to date\n", e.schema, db.Engine())
	} else {
		fmt.Fprintf(e.stdout, "schema %q on %s: applied %d migration(s)\n", e.schema, db.Engine(), len(applied))
	}
	return nil
}
