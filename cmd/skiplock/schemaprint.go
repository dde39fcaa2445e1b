package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "schema",
		usage:   "schema print --engine E --layout L [--buckets N] [--tablets N]",
		summary: "print the DDL for an engine and layout, without connecting",
		run:     runSchema,
	})
}

func runSchema(ctx context.Context, e *env, args []string) error {
	usage := "schema print --engine postgres|yugabyte|cockroach --layout bucketed|fanout [--buckets N] [--tablets N]"
	if len(args) == 0 || args[0] != "print" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(e.stderr, "usage: skiplock "+usage)
			return nil
		}
		return skiplock.Usagef("usage: skiplock %s", usage)
	}
	fs := e.flags("schema print", usage)
	layout := fs.String("layout", "", "bucketed or fanout")
	buckets := fs.Int("buckets", 0, fmt.Sprintf("bucketed: bucket count (default %d)", schema.DefaultBuckets))
	tablets := fs.Int("tablets", 0, fmt.Sprintf("fanout: tablets to pre-split into (default %d)", schema.DefaultTablets))
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	engine, err := e.parsedEngine()
	if err != nil {
		return err
	}
	if engine == skiplock.EngineAuto {
		return skiplock.Usagef("schema print needs --engine postgres, yugabyte or cockroach: it does not connect, so it cannot detect one")
	}
	l, err := schema.ParseLayout(*layout)
	if err != nil {
		return err
	}
	if err := countFlags(fs, "buckets", "tablets"); err != nil {
		return err
	}
	stmts, err := schema.DDL(engine.Dialect(), l, &schema.Options{Schema: e.schema, Buckets: *buckets, Tablets: *tablets})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "-- skiplock %s layout on %s, schema %s\n", l, engine, e.schema)
	fmt.Fprintln(e.stdout, strings.Join(stmts, ";\n\n")+";")
	return nil
}
