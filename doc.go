// Package skiplock is a job queue that lives in SQL and scales out on
// distributed SQL: PostgreSQL, YugabyteDB and CockroachDB.
//
// Most programs need three things: [Open] a [DB], create the schema with
// schema.Migrate, and make one client.Client (package
// github.com/skiplock/skiplock/client), which inserts jobs (alone, in
// batches, or in the caller's transaction), works them with typed
// handlers on queues of either layout, and operates on jobs and queues:
//
//	db, err := skiplock.Open(ctx, dsn, nil)
//	...
//	if _, err := schema.Migrate(ctx, db, &schema.MigrateConfig{}); err != nil { ... }
//	c, err := client.New(ctx, db, &client.Config{Workers: workers,
//		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 10}}})
//
// This package holds what the client and the layouts share: [DB] (the pool,
// opened with the right driver for the engine it finds) and its [Tx],
// [Job] and [NewJob], [Status], and the errors a caller tests for
// ([ErrNoJob], [StateError], [SnoozeError], [RetryError], [PanicError]).
//
// The two queue layouts are engines under the client: bucketed (a status
// lifecycle with leases, retries and dead jobs) and fanout (lock, process
// and delete in one transaction). Their packages can be used directly,
// but most users want the client. DDL and migrations live in schema.
package skiplock
