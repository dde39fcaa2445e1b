package fanout

// Statements exposes the rendered SQL to the external tests.
func Statements(schemaName string) map[string]string { return render(schemaName).all() }

// ClaimSQL is q's claim statement: $1 the start, $2 the queue.
func ClaimSQL(q *Queue) string { return q.sql.claim }
