package bucketed

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/queryrows"
)

// Statements renders every statement for an engine, for grammar checks.
func Statements(d *skiplock.Dialect, schemaName string) []string {
	s := buildStatements(d, schemaName)
	return s.all()
}

// PermittedClaim renders the claim of jobs to run under a Worker's
// permits (claim_permitted) for an engine.
func PermittedClaim(d *skiplock.Dialect, schemaName string) string {
	return buildStatements(d, schemaName).claimPermitted
}

// ClaimTx runs the claim statement inside tx without committing, as a
// second session would, and with no hints, so a test can hold the locks.
func (q *Queue) ClaimTx(ctx context.Context, tx skiplock.Querier, queue string, n int) ([]*skiplock.Job, error) {
	n0 := int(q.branches.Load())
	order, prio, at, ids := make([]int16, n0), make([]int32, n0), make([]time.Time, n0), make([]int64, n0)
	for b := range order {
		order[b], prio[b], at[b] = int16(b), noHintPriority, noHintTime
	}
	claimed, err := claimRows(ctx, tx, q.sql.claim, claimParams{
		Queue: queue, Limit: n, Owner: "test", Token: newToken(), LeaseSeconds: q.cfg.VisibilityTimeout.Seconds(),
		Buckets: order, HintPriorities: prio, HintRunAts: at, HintIDs: ids,
	}.args())
	jobs := make([]*skiplock.Job, len(claimed))
	for i := range claimed {
		jobs[i] = claimed[i].job
	}
	return jobs, err
}

// HintsSet counts the buckets of queue that hold a watermark.
func (q *Queue) HintsSet(queue string) int {
	return q.hints.Count(queue)
}

// UseDialect renders q's statements for d and sizes its claim branches as
// New does, so that a test on PostgreSQL can run another engine's
// statement shapes (the CockroachDB claim, with d.KeyJoinDML and
// d.ShardedIndexFansOut set) against a real server.
func UseDialect(q *Queue, d *skiplock.Dialect) {
	q.sql = buildStatements(d, q.cfg.Schema)
	branches := q.buckets.Load()
	if d.ShardedIndexFansOut {
		branches = 1
	}
	q.branches.Store(branches)
	q.hints.init(int(branches), q.cfg.HintMaxAge)
}

// ClaimSQL is the claim statement q sends.
func (q *Queue) ClaimSQL() string { return q.sql.claim }

// CompletedWith runs the ambiguous-commit check of q's completions: which
// of these leases did complete.
func (q *Queue) CompletedWith(ctx context.Context, ids, tokens []int64) ([]int64, error) {
	return queryrows.Int64s(ctx, q.db, q.sql.completedWith, ids, tokens)
}

// CompleteSQL is the completion statement q sends.
func (q *Queue) CompleteSQL() string { return q.sql.complete }

// PendingSQL and BacklogSQL are the checks for work left q sends, and
// AllBuckets their bucket list ($2).
func (q *Queue) PendingSQL() string { return q.sql.pending }

// BacklogSQL: see PendingSQL.
func (q *Queue) BacklogSQL() string { return q.sql.backlog }

// AllBuckets: see PendingSQL.
func (q *Queue) AllBuckets() []int16 { return q.allBuckets() }

// ClaimHeld takes a held claim of up to n jobs of queue and returns its
// jobs and a function that ends it writing no result (each job stays
// Queued, its attempt not counted).
func (q *Queue) ClaimHeld(ctx context.Context, queue string, n int) ([]*skiplock.Job, func() error, error) {
	h, err := q.claimHeld(ctx, queue, n, "test", time.Minute)
	if err != nil || h == nil {
		return nil, func() error { return nil }, err
	}
	return h.jobs, func() error { return q.finishHeld(ctx, h, sortedResults{}, nil) }, nil
}

// SettlePartitionsAt sets how long SetLimits waits after a change of a
// partitioning, for this package's tests (TestMain, before any runs):
// each test's Queues read the changes they make themselves.
func SettlePartitionsAt(d time.Duration) { partitionSettle = d }

// LimitsStaleMax is the oldest view of a queue's limits a claim uses.
const LimitsStaleMax = limitsStaleMax

// ProbeSoon makes the next claim of queue due for the heads probe, as a
// second's wait would (a probe's own duration can push that further out
// on a loaded machine).
func (q *Queue) ProbeSoon(queue string) { q.hints.ProbeSoon(queue) }
