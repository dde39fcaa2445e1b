package bucketed

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/copyrows"
	"github.com/skiplock/skiplock/schema"
)

// The COPY path (docs/design.md, "Enqueue: COPY and one round trip"): a
// batch goes by COPY ... FROM STDIN where the engine has it, inside a
// transaction, when it is at least Config.CopyMin jobs and none has a
// unique key. The rows it writes are the INSERT's, column for column: the
// columns COPY leaves out take the same defaults (bucket, status,
// create_ts, last_updated, unique_key NULL), run_at is left to its
// default now() for the jobs that set none, as the INSERT's
// COALESCE(run_at, now()) does, and ids, where the caller needs them,
// come from the column's own sequence before the COPY.

// copier is the Copier to send a's jobs through db, or nil when they take
// the INSERT.
func (q *Queue) copier(db skiplock.Querier, a insertParams) skiplock.Copier {
	if !q.db.Dialect().BulkCopy || q.cfg.CopyMin < 0 || len(a.Queues) < q.cfg.CopyMin {
		return nil
	}
	// Only in a transaction: the ids, the COPY and the notification must
	// commit together, and the INSERT through a pool is one statement.
	if _, ok := db.(skiplock.Tx); !ok {
		return nil
	}
	c, ok := db.(skiplock.Copier)
	if !ok {
		return nil
	}
	for _, k := range a.UniqueKeys {
		if k != nil {
			return nil
		}
	}
	return c
}

// copyJobs writes a's jobs by COPY through tx (c is tx as a Copier).
// withIDs: reserve the jobs' ids first and return them in the jobs'
// order; otherwise the column's default numbers them and ids is nil.
func (q *Queue) copyJobs(ctx context.Context, tx skiplock.Querier, c skiplock.Copier, a insertParams, withIDs bool) ([]int64, error) {
	n := len(a.Queues)
	var ids []int64
	if withIDs {
		var err error
		ids, err = queryIDs(ctx, tx, q.sql.reserveIDs, skiplock.QuoteIdent(q.cfg.Schema)+"."+skiplock.QuoteIdent(schema.JobsTable), n)
		if err != nil {
			return nil, fmt.Errorf("reserve %d job ids: %w", n, err)
		}
		if len(ids) != n {
			return nil, fmt.Errorf("reserve %d job ids: got %d", n, len(ids))
		}
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
	for _, group := range [][]int{now, at} {
		if len(group) == 0 {
			continue
		}
		withRunAt := len(at) > 0 && group[0] == at[0]
		cols := []string{"queue", "payload", "priority", "max_attempts", "kind", "metadata"}
		if withRunAt {
			cols = append(cols, "run_at")
		}
		if withIDs {
			cols = append(cols, "id")
		}
		src := copyrows.New(group, len(cols), func(i int, row []any) {
			row[0], row[1], row[2], row[3], row[4], row[5] = a.Queues[i], a.Payloads[i], a.Priorities[i], a.MaxAttempts[i], a.Kinds[i], a.Metadata[i]
			k := 6
			if withRunAt {
				row[k] = *a.RunAts[i]
				k++
			}
			if withIDs {
				row[k] = ids[i]
			}
		})
		copied, err := c.CopyFrom(ctx, table, cols, src)
		if err != nil {
			return nil, err
		}
		if copied != int64(len(group)) {
			return nil, fmt.Errorf("COPY wrote %d of %d jobs", copied, len(group))
		}
	}
	return ids, nil
}
