package schema

// ForceLockRow makes PostgreSQL take the lock row, so the tests prove the
// path YugabyteDB and CockroachDB use on the engine this machine has.
func ForceLockRow(c *MigrateConfig) { c.forceLockRow = true }

// Bootstrap renders the bookkeeping tables, so the drift test can build a
// schema from the model the way Migrate builds one from the migrations.
var Bootstrap = bootstrap
