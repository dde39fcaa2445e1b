package bucketed

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/copyrows"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
)

// The COPY path (docs/design.md, "Enqueue: COPY and one round trip"): a
// batch goes by COPY ... FROM STDIN where the engine has it, inside a
// transaction, when it is at least Config.CopyMin jobs and none has a
// unique key. The rows it writes are the INSERT's, column for column: the
// columns COPY leaves out take the same defaults (status, create_ts,
// last_updated, unique_key NULL; kind and metadata when every job has the
// default), the bucket is drawn as its default draws it, run_at is left to its
// default now() for the jobs that set none, as the INSERT's
// COALESCE(run_at, now()) does, and ids, where the caller needs them,
// come from the column's own sequence before the COPY.

// copier is the Copier to send a's jobs through db, or nil when they take
// the INSERT: the INSERT gives jobs of a partitioned queue, or with a
// partition key, their partition, which a COPY cannot.
func (q *Queue) copier(db skiplock.Querier, a insertParams) copyio.Copier {
	if !q.db.BulkCopy() || q.cfg.CopyMin < 0 || len(a.Queues) < q.cfg.CopyMin {
		return nil
	}
	// Only in a transaction: the ids, the COPY and the notification must
	// commit together, and the INSERT through a pool is one statement.
	if _, ok := db.(skiplock.Tx); !ok {
		return nil
	}
	c, ok := db.(copyio.Copier)
	if !ok {
		return nil
	}
	for i := range a.UniqueKeys {
		if a.UniqueKeys[i] != nil || a.PartitionKeys[i] != nil || a.PartitionBys[i] != nil || a.UniqueStates[i] != nil || a.BatchIDs[i] != nil {
			return nil
		}
	}
	return c
}

// copyJobs writes a's jobs by COPY through tx (c is tx as a Copier).
// withIDs: reserve the jobs' ids first and return them in the jobs'
// order; otherwise the column's default numbers them and ids is nil.
// extra are more columns, such as a workflow's (workflow.go).
func (q *Queue) copyJobs(ctx context.Context, tx skiplock.Querier, c copyio.Copier, a insertParams, withIDs bool, extra ...copyrows.Column) ([]int64, error) {
	n := len(a.Queues)
	var ids []int64
	if withIDs {
		var err error
		ids, err = queryrows.Int64s(ctx, tx, q.sql.reserveIDs, sqlident.Quote(q.cfg.Schema)+"."+sqlident.Quote(schema.JobsTable), n)
		if err != nil {
			return nil, fmt.Errorf("reserve %d job ids: %w", n, err)
		}
		if len(ids) != n {
			return nil, fmt.Errorf("reserve %d job ids: got %d", n, len(ids))
		}
	}
	// The bucket is drawn here, uniformly as the column's default draws
	// it, so that the rows can go in bucket order: consecutive rows then
	// land next to each other in the dequeue index, which is led by the
	// bucket (less server time per row: docs/benchmarks.md, "Enqueue").
	// The count is read in this transaction, so it is the one the default
	// would use now.
	buckets, err := schema.Buckets(ctx, tx, q.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("read the bucket count: %w", err)
	}
	if buckets < 1 || buckets > 1<<15 {
		return nil, fmt.Errorf("schema %s reports %d buckets: run skiplock migrate --layout bucketed", q.cfg.Schema, buckets)
	}
	bucket := make([]int16, n)
	for i := range bucket {
		bucket[i] = int16(rand.IntN(buckets))
	}
	// A COPY names the same columns for every row, so jobs with a run_at
	// and jobs left to now() go in two.
	var now, at []int
	for i, r := range a.RunAts {
		if r == nil {
			now = append(now, i)
		} else {
			at = append(at, i)
		}
	}
	table := []string{q.cfg.Schema, schema.JobsTable}
	// kind and metadata go only where some job differs from the column's
	// default ('' and '{}'): the server then parses no metadata JSON.
	var cols []copyrows.Column
	cols = append(cols, copyrows.Column{Name: "bucket", Value: func(i int) any { return bucket[i] }},
		copyrows.Column{Name: "queue", Value: func(i int) any { return a.Queues[i] }},
		copyrows.Column{Name: "payload", Value: func(i int) any { return a.Payloads[i] }},
		copyrows.Column{Name: "priority", Value: func(i int) any { return a.Priorities[i] }},
		copyrows.Column{Name: "max_attempts", Value: func(i int) any { return a.MaxAttempts[i] }})
	if copyrows.Any(a.Kinds, "") {
		cols = append(cols, copyrows.Column{Name: "kind", Value: func(i int) any { return a.Kinds[i] }})
	}
	if copyrows.Any(a.Metadata, "{}") {
		cols = append(cols, copyrows.Column{Name: "metadata", Value: func(i int) any { return a.Metadata[i] }})
	}
	if withIDs {
		cols = append(cols, copyrows.Column{Name: "id", Value: func(i int) any { return ids[i] }})
	}
	cols = append(cols, extra...)
	for _, group := range [][]int{now, at} {
		if len(group) == 0 {
			continue
		}
		// Stable: a bucket's jobs keep their order, and so their ids'.
		slices.SortStableFunc(group, func(x, y int) int { return cmp.Compare(bucket[x], bucket[y]) })
		gcols := cols
		if len(at) > 0 && group[0] == at[0] {
			gcols = append(cols[:len(cols):len(cols)], copyrows.Column{Name: "run_at", Value: func(i int) any { return *a.RunAts[i] }})
		}
		names, src := copyrows.New(group, gcols)
		copied, err := c.CopyFrom(ctx, table, names, src)
		if err != nil {
			return nil, err
		}
		if copied != int64(len(group)) {
			return nil, fmt.Errorf("COPY wrote %d of %d jobs", copied, len(group))
		}
	}
	return ids, nil
}
