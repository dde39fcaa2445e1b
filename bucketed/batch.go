package bucketed

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

// NewBatch makes a batch of size jobs in db (a transaction, which then
// inserts the jobs with NewJob.BatchID set to the id it returns) whose
// callback job is inserted once, by the maintenance leader, when none of
// them is left Queued or Running. The callback's metadata gains "batch":
// {"id", "size", "counts": {"success", "failed", "canceled", "gone"}},
// gone counting jobs deleted before the batch finished (completed jobs
// under Config.DeleteCompleted, or an operator's delete). The callback
// takes a queue, kind, payload, metadata and max attempts; a run time,
// priority, unique key or partition key is refused with a usage error,
// as is a size under 1.
func (q *Queue) NewBatch(ctx context.Context, db skiplock.Querier, size int, callback skiplock.NewJob) (string, error) {
	if size < 1 || size > 1<<31-1 {
		return "", usage.Errorf("bucketed: a batch of %d jobs: give it 1 or more", size)
	}
	if callback.Queue == "" {
		callback.Queue = q.cfg.Queue
	}
	if err := callback.Normalize(q.cfg.MaxPayloadBytes); err != nil {
		return "", usage.Errorf("bucketed: the batch's callback: %v", err)
	}
	switch {
	case !callback.RunAt.IsZero(), callback.Priority != 0, callback.UniqueKey != "", callback.PartitionKey != "", callback.BatchID != "":
		return "", usage.Errorf("bucketed: the batch's callback takes a queue, kind, payload, metadata and max attempts only: it runs when the batch has finished, at the default priority, in no partition or batch")
	}
	var id int64
	err := db.QueryRow(ctx, q.sql.batchNew, int32(size), callback.Queue, callback.Kind, string(callback.Payload), string(callback.Metadata), int32(min(callback.MaxAttempts, 1<<31-1))).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("bucketed: make a batch: %w", err)
	}
	return FormatID(id), nil
}
