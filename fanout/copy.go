package fanout

import (
	"context"
	"fmt"
	"slices"

	"github.com/skiplock/skiplock/internal/copyio"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/copyrows"
	"github.com/skiplock/skiplock/schema"
)

// The COPY path (docs/design.md, "Enqueue: COPY and one round trip"): a
// batch goes by COPY ... FROM STDIN where the engine has it, inside a
// transaction, when it is at least Config.CopyMin jobs. The rows are the
// INSERT's: the ids come first from the id column's own default, on the
// server (new_ids), so that they keep its format and clock, and the other
// columns COPY leaves out take their defaults as the INSERT's do.

// copier is the Copier to send n jobs through db, or nil when they take
// the INSERT.
func (q *Queue) copier(db skiplock.Querier, n int) copyio.Copier {
	if !q.db.BulkCopy() || q.cfg.CopyMin < 0 || n < q.cfg.CopyMin {
		return nil
	}
	// Only in a transaction: the ids, the COPY and the notification must
	// commit together, and the INSERT through a pool is one statement.
	if _, ok := db.(skiplock.Tx); !ok {
		return nil
	}
	c, _ := db.(copyio.Copier)
	return c
}

// copyJobs writes jobs lo..hi-1 of c by COPY through tx (cp is tx as a
// Copier) and returns their ids in order.
func (q *Queue) copyJobs(ctx context.Context, tx skiplock.Querier, cp copyio.Copier, c jobColumnsIn, lo, hi int) ([]string, error) {
	n := hi - lo
	ids, err := appendIDs(ctx, tx, make([]string, 0, n), q.sql.newIDs, n)
	if err != nil {
		return nil, fmt.Errorf("make %d job ids: %w", n, err)
	}
	if len(ids) != n {
		return nil, fmt.Errorf("make %d job ids: got %d", n, len(ids))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = lo + i
	}
	// kind and metadata go only where some job differs from the column's
	// default ('' and '{}'): the server then parses no metadata JSON.
	cols := []copyrows.Column{{Name: "id", Value: func(i int) any { return ids[i-lo] }},
		{Name: "queue", Value: func(i int) any { return c.queues[i] }},
		{Name: "payload", Value: func(i int) any { return c.payloads[i] }},
		{Name: "max_attempts", Value: func(i int) any { return c.maxAttempts[i] }}}
	if copyrows.Any(c.kinds[lo:hi], "") {
		cols = append(cols, copyrows.Column{Name: "kind", Value: func(i int) any { return c.kinds[i] }})
	}
	if copyrows.Any(c.metadata[lo:hi], "{}") {
		cols = append(cols, copyrows.Column{Name: "metadata", Value: func(i int) any { return c.metadata[i] }})
	}
	names, src := copyrows.New(idx, cols)
	copied, err := cp.CopyFrom(ctx, []string{q.cfg.Schema, schema.JobQueueTable}, names, src)
	if err != nil {
		return nil, err
	}
	if copied != int64(n) {
		return nil, fmt.Errorf("COPY wrote %d of %d jobs", copied, n)
	}
	if c.notify != "" {
		if _, err := tx.Exec(ctx, q.sql.notify, c.notify, slices.Compact(slices.Sorted(slices.Values(c.queues[lo:hi])))); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
