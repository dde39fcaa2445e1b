// Package schema holds skiplock's tables for both layouts on every engine,
// and the migrations that create and upgrade them.
//
// # The model and the migrations
//
// Each table is described once ([Table]; [JobsTableDef] and the others):
// that model is the current schema, rendered for an engine from its
// [skiplock.Dialect], so the three engines' DDL cannot drift apart. Every
// identifier is quoted. Code that needs to know the schema (an index's
// predicate, a column list) reads the model.
//
// Migrate never runs the model, though. It runs numbered migrations frozen
// into files embedded in the binary,
// migration/<engine>/<layout>/NNN_<name>.up.sql: one per engine (postgres,
// yugabyte, cockroach), layout (core, bucketed, fanout) and version. Each file was written once from the
// model by `go generate ./schema` and is never edited or regenerated, so a
// version means the same statements on a fresh database as on every
// database that already recorded it. Statements are sqltext "-- name:"
// blocks run in order; options appear as /* TEMPLATE: key */ placeholders
// filled by [TemplateValues], and a "-- when: split|unsplit" line limits a
// block by [Conditions]. [DDL] (`skiplock schema print`) renders the same
// files.
//
// # Adding a migration
//
//  1. Change the model (layout.go).
//  2. Run SKIPLOCK_MIGRATION=<name> go generate ./schema. When the change
//     only adds statements (a table, an index), it writes version NNN+1
//     with them for every engine. When it changes something a frozen file
//     already creates (a column added to a table), it writes nothing and
//     says so: write that version by hand, for every engine (a file with
//     no block where an engine needs nothing), with idempotent statements.
//     The no-server drift test and the generator understand DROP INDEX IF
//     EXISTS followed by the index's new CREATE INDEX, and ALTER TABLE ...
//     ALTER COLUMN ... SET DEFAULT, and pass over a block named
//     "backfill_..." (it fills a table and creates nothing); anything else
//     needs them taught. A
//     frozen block that fails on some servers is replaced, never edited: a
//     block marked "-- replaces: NNN/<block>" runs in that block's place on
//     databases that have not applied NNN, and in its own version on those
//     that have, so it must be idempotent.
//  3. Run go test ./schema: its drift tests migrate a schema from zero and
//     compare it with one built from the model (PostgreSQL's catalog), and
//     compare what every engine's rendered files create together with the
//     model's statements.
//  4. Commit the new files. Never edit or renumber an old one.
//
// # Applying
//
// [Migrate] applies the migrations a schema lacks under a migration lock:
// a session advisory lock where the engine has real ones (PostgreSQL), a
// lease row where it does not (YugabyteDB, CockroachDB). It records what
// it applied in <schema>.skiplock_migration, so any number of processes
// may run it at once. [DryRun] reports what it would apply, and the SQL,
// without changing anything (`skiplock migrate --dry-run`).
package schema
