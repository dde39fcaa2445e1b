package fanout

// Statements exposes the rendered SQL to the external tests.
func Statements(schemaName string) map[string]string { return render(schemaName).all() }

// ClaimSQL is q's claim statement: $1 the start, $2 the queue.
func ClaimSQL(q *Queue) string { return q.sql.claim }

// SetDurableLocks replaces the statement q runs first in the transactions
// that hold a claimed row's lock (Dialect.DurableLocks), so that a test on
// PostgreSQL can watch it run.
func SetDurableLocks(q *Queue, stmt string) { q.holding = durableLocksBeginner{db: q.db, stmt: stmt} }
