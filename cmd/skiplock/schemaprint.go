package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

func init() {
	register(&command{
		name:    "schema",
		usage:   "schema print|grant ...",
		summary: "print the DDL for an engine and layout, or the grants for a worker role, without connecting",
		run:     runSchema,
	})
}

const (
	schemaPrintUsage = "schema print --engine postgres|yugabyte|cockroach --layout bucketed|fanout [--buckets N] [--tablets N]"
	schemaGrantUsage = "schema grant --role R [--engine E] [--layout bucketed,fanout]"
)

func runSchema(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "grant" {
		return runSchemaGrant(e, args[1:])
	}
	if len(args) == 0 || args[0] != "print" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(e.stderr, "usage: skiplock %s\n       skiplock %s\n", schemaPrintUsage, schemaGrantUsage)
			return nil
		}
		return usage.Errorf("usage: skiplock %s\n       skiplock %s", schemaPrintUsage, schemaGrantUsage)
	}
	synopsis := schemaPrintUsage
	fs := e.flags("schema print", synopsis)
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
		return usage.Errorf("schema print needs --engine postgres, yugabyte or cockroach: it does not connect, so it cannot detect one")
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

// runSchemaGrant prints the GRANT statements that let a role enqueue and
// work without owning anything: the owner migrates, then runs these.
func runSchemaGrant(e *env, args []string) error {
	fs := e.flags("schema grant", schemaGrantUsage)
	role := fs.String("role", "", "the role that enqueues and works")
	layouts := fs.String("layout", "bucketed,fanout", "layouts the role works, comma-separated")
	if err := parse(fs, args); err != nil {
		return err
	}
	engine, err := e.parsedEngine()
	if err != nil {
		return err
	}
	if engine == skiplock.EngineAuto {
		engine = skiplock.EnginePostgres
	}
	ls, err := schema.ParseLayouts(*layouts)
	if err != nil {
		return err
	}
	stmts, err := schema.WorkerGrants(engine.Dialect(), e.schema, *role, ls)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "-- run as the schema's owner, after skiplock migrate\n%s;\n", strings.Join(stmts, ";\n"))
	return nil
}
