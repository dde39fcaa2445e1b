package schema

// ForceLockRow makes PostgreSQL take the lock row, so the tests prove the
// path YugabyteDB and CockroachDB use on the engine this machine has.
func ForceLockRow(c *MigrateConfig) { c.forceLockRow = true }
