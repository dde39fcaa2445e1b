package client

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// BatchResult reports an InsertBatch: the batch's id (the callback finds
// it in its metadata) and each job's InsertResult, in order.
type BatchResult struct {
	ID   string
	Jobs []*InsertResult
}

// InsertBatch adds jobs as one batch, in one transaction with the batch,
// and the callback job that the maintenance leader inserts once none of
// them is left Queued or Running (within maintenance.Config.BatchInterval
// of the last one finishing). The callback's metadata then holds "batch":
// {"id", "size", "counts": {"success", "failed", "canceled", "gone"}} (gone:
// jobs deleted before the batch finished, such as completed jobs under
// Config.DeleteCompleted); a worker reads it from Job.Metadata.
//
// Bucketed queues only, for the jobs and the callback: a fanout job leaves
// no row to count once it succeeds. A batch's jobs cannot be unique (a
// skipped duplicate would count as gone), and the callback takes a queue,
// kind, args, metadata and max attempts only. Bad input is a usage error
// and inserts nothing. Some process's client must run maintenance (not
// NoMaintenance), or no callback is inserted.
func (c *Client) InsertBatch(ctx context.Context, params []InsertParams, callback InsertParams) (*BatchResult, error) {
	cb, err := c.newJob(callback)
	if err != nil {
		return nil, fmt.Errorf("client: the batch's callback: %w", err)
	}
	if l := c.layoutOf(cb.Queue); l != schema.LayoutBucketed {
		return nil, usage.Errorf("client: the batch's callback goes to %s queue %q: batches are bucketed only", l, cb.Queue)
	}
	if _, err := c.engineOf(cb.Queue); err != nil {
		return nil, fmt.Errorf("client: the batch's callback: %w", err)
	}
	var out *BatchResult
	err = retry.Run(ctx, c.db, c.retryOptions(), func(ctx context.Context, tx skiplock.Tx) error {
		id, err := c.bq.NewBatch(ctx, tx, len(params), *cb)
		if err != nil {
			return err
		}
		jobs, err := c.newJobs(params, id)
		if err != nil {
			return err
		}
		res, err := c.writeJobs(ctx, tx, jobs, false)
		out = &BatchResult{ID: id, Jobs: res}
		return err
	})
	if err != nil {
		return nil, err
	}
	if m := c.leader.Load(); m != nil {
		m.PokeBatches() // the batcher may be looking only every few seconds
	}
	return out, nil
}

// inBatch puts j in batch, if it may be.
func (c *Client) inBatch(j *skiplock.NewJob, batch string) error {
	if l := c.layoutOf(j.Queue); l != schema.LayoutBucketed {
		return usage.Errorf("queue %q is %s: batches are bucketed only (a fanout job leaves no row to count once it succeeds)", j.Queue, l)
	}
	if j.UniqueKey != "" {
		return usage.Errorf("a batch's jobs cannot be unique: a duplicate skipped would leave the batch one job short")
	}
	j.BatchID = batch
	return nil
}
