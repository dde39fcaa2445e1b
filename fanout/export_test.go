package fanout

import (
	"strconv"

	"github.com/skiplock/skiplock/internal/watermark"
	"github.com/skiplock/skiplock/schema"
)

// Statements exposes the rendered SQL to the external tests.
func Statements(schemaName string) map[string]string { return render(schemaName).all() }

// ClaimSQL is q's claim statement: see ClaimArgs.
func ClaimSQL(q *Queue) string { return q.sql.claim }

// SetDurableLocks replaces the statement q runs first in the transactions
// that hold a claimed row's lock (Dialect.DurableLocks), so that a test on
// PostgreSQL can watch it run.
func SetDurableLocks(q *Queue, stmt string) { q.holding = durableLocksBeginner{db: q.db, stmt: stmt} }

// ClaimArgs are the claim's arguments with no watermarks, visiting every
// shard from its head, starting at shard start: the inclusive and
// exclusive lower bounds, the upper bounds, and queue.
func ClaimArgs(start int, queue string) []any {
	order := make([]int, schema.FanoutShards)
	for k := range order {
		order[k] = (start + k) % len(order)
	}
	lo, after, hi := claimBounds(order, make([]watermark.Mark[idMark], len(order)))
	return []any{lo, after, hi, queue}
}

// ShardOf is the shard of a fanout id, from its first two hex digits.
func ShardOf(id string) int {
	n, _ := strconv.ParseUint(id[:2], 16, 8)
	return int(n) * schema.FanoutShards / 256
}

// ShardPrefix is the lowest two hex digits of shard s's ids.
func ShardPrefix(s int) string { return shardLo[s] }

// MarksSet counts the shards of queue that hold a watermark.
func MarksSet(q *Queue, queue string) int { return q.marks.Count(queue) }
