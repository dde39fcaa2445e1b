package fanout

import (
	"context"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/watermark"
	"github.com/skiplock/skiplock/schema"
)

// Statements exposes the SQL a Queue sends on d's engine to the external
// tests.
func Statements(d *skiplock.Dialect, schemaName string) map[string]string {
	return render(d, schemaName).all()
}

// UseDialect renders q's statements for d, so that a test on PostgreSQL
// can run another engine's statement shapes against a real server: with
// d.KeyJoinDML set, CockroachDB's shard unions (shards_after and
// claim_shard per shard, heads_union, exists_after_union) in place of the
// LATERAL claim, heads probe and exists_after.
func UseDialect(q *Queue, d *skiplock.Dialect) { q.sql = render(d, q.cfg.Schema) }

// CockroachForms is q's dialect with KeyJoinDML set: UseDialect(q,
// CockroachForms(q)) makes q send CockroachDB's fanout statements, and
// nothing else of that engine's (its durable-locks statement, its
// isolation).
func CockroachForms(q *Queue) *skiplock.Dialect {
	d := *q.db.Dialect()
	d.KeyJoinDML = true
	return &d
}

// UsesUnions says whether q sends the shard unions.
func UsesUnions(q *Queue) bool { return q.sql.unions }

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

// EnqueueManyIDs is q.EnqueueMany returning the jobs' ids, in order, for
// the tests that follow particular jobs.
func EnqueueManyIDs(ctx context.Context, q *Queue, jobs []skiplock.NewJob) ([]string, error) {
	return q.enqueueMany(ctx, jobs)
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

// countingTx counts the statements sent through it.
type countingTx struct {
	skiplock.Tx
	n int
}

func (c *countingTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	c.n++
	return c.Tx.Exec(ctx, sql, args...)
}

func (c *countingTx) Query(ctx context.Context, sql string, args ...any) (skiplock.Rows, error) {
	c.n++
	return c.Tx.Query(ctx, sql, args...)
}

func (c *countingTx) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	c.n++
	return c.Tx.QueryRow(ctx, sql, args...)
}

// ClaimCounted runs one claim of q's queue in tx, as Process does (the
// heads probe first when it is due), and counts the statements it sent.
// A claimed job stays locked until tx ends; nothing is counted or deleted.
func ClaimCounted(ctx context.Context, q *Queue, tx skiplock.Tx) (*skiplock.Job, int, error) {
	c := &countingTx{Tx: tx}
	job, _, err := q.claim(ctx, c, q.cfg.Queue, -1, nil)
	return job, c.n, err
}

// LimitReads is how many reads of its queues' limits q has made.
func LimitReads(q *Queue) int64 { return q.limits.reads.Load() }

// Committed is q.committed: whether an ambiguous commit of job's attempt
// (job.Attempts, its count) committed, read from the data. between runs
// after the first read.
func Committed(ctx context.Context, q *Queue, job *skiplock.Job, between func()) bool {
	betweenResolveReads = between
	defer func() { betweenResolveReads = func() {} }()
	return q.committed(ctx, job)
}
