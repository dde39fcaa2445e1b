// Package skiplock is a job queue that lives in SQL and scales out on
// distributed SQL: PostgreSQL, YugabyteDB and CockroachDB.
//
// This package holds what every part shares: the [Engine] and its detection,
// the driver-neutral [DB] handle that opens a pool with the right driver
// (jackc/pgx for PostgreSQL and CockroachDB, the YugabyteDB smart driver for
// YugabyteDB), the [Querier]/[Tx] seam through which all queue code runs SQL,
// the per-engine [Dialect], [Job] and [Status], and the error taxonomy.
//
// The two queue layouts live in their own packages: bucketed (a status
// lifecycle with leases, retries and dead jobs) and fanout (lock, process
// and delete in one transaction). DDL and migrations live in schema.
package skiplock
