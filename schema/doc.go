// Package schema holds skiplock's tables for both layouts on every engine,
// and the migrations that create and upgrade them.
//
// Each table is described once ([Table]); the DDL for an engine is rendered
// from that description and the engine's [skiplock.Dialect], so the three
// engines' DDL cannot drift apart. Every identifier is quoted.
//
// [Migrate] applies numbered migrations, embedded in the binary, under a
// migration lock: a session advisory lock where the engine has real ones
// (PostgreSQL), a lease row where it does not (YugabyteDB, CockroachDB). It
// records what it applied in <schema>.skiplock_migration, so any number of
// processes may run it at once.
package schema
