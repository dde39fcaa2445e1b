package bucketed

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

// DefaultDeleteBatch is how many rows one retention DELETE removes when
// DeleteFinished is given no batch size.
const DefaultDeleteBatch = 1000

// DeleteFinished is retention: it deletes Success, Canceled and Failed
// jobs that finished more than olderThan ago, batch rows per statement
// (0 means DefaultDeleteBatch), each batch its own short transaction so
// that locks and undo stay bounded, until none is left or ctx ends. It
// returns how many it deleted.
func (q *Queue) DeleteFinished(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < 0 {
		return 0, usage.Errorf("retention age %v is negative: use 0 (every finished job) or more", olderThan)
	}
	if batch < 0 {
		return 0, usage.Errorf("retention batch %d is negative: use 0 for the default (%d)", batch, DefaultDeleteBatch)
	}
	if batch == 0 {
		batch = DefaultDeleteBatch
	}
	var total int64
	for {
		var n int64
		err := q.run(ctx, func(ctx context.Context, tx skiplock.Tx) error {
			var err error
			n, err = tx.Exec(ctx, q.sql.deleteFinished, olderThan.Seconds(), batch)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("bucketed: retention after %d deleted: %w", total, err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Stats are a schema's job counts.
type Stats struct {
	// ByStatus counts jobs per status; every status is present.
	ByStatus map[skiplock.Status]int64
	// ByQueue counts live (Queued or Running) jobs per queue.
	ByQueue map[string]int64
	// ByBucket counts live jobs per bucket.
	ByBucket map[int]int64
	// QueuedOldest is how long the longest-waiting runnable Queued job has
	// waited (now - run_at); 0 when none is waiting.
	QueuedOldest time.Duration
	// InFlightLeases counts Running jobs whose lease has not expired.
	InFlightLeases int64
}

// Stats counts the jobs of queue, or of every queue when queue is "". It
// reads the whole table: for dashboards and the CLI, not hot paths.
func (q *Queue) Stats(ctx context.Context, queue string) (Stats, error) {
	st := Stats{ByStatus: map[skiplock.Status]int64{}, ByQueue: map[string]int64{}, ByBucket: map[int]int64{}}
	for _, s := range skiplock.Statuses {
		st.ByStatus[s] = 0
	}
	rows, err := q.db.Query(ctx, q.sql.stats, queue)
	if err != nil {
		return st, fmt.Errorf("bucketed: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status, qn      string
			bucket, n, live int64
			oldest          *time.Time
			now             time.Time
		)
		if err := rows.Scan(&status, &qn, &bucket, &n, &oldest, &live, &now); err != nil {
			return st, fmt.Errorf("bucketed: stats: %w", err)
		}
		s := skiplock.Status(status)
		st.ByStatus[s] += n
		if !s.Final() {
			st.ByQueue[qn] += n
			st.ByBucket[int(bucket)] += n
		}
		st.InFlightLeases += live
		if oldest != nil {
			st.QueuedOldest = max(st.QueuedOldest, now.Sub(*oldest))
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("bucketed: stats: %w", err)
	}
	return st, nil
}

// Pending reports whether queue has any job that may still run: Queued
// (now or later) or Running (leased, or with an expired lease waiting to
// be claimed again). Both checks read the partial indexes (the Queued one
// bucket by bucket), so it stays cheap however many finished jobs the
// table holds.
func (q *Queue) Pending(ctx context.Context, queue string) (bool, error) {
	var b bool
	if err := q.db.QueryRow(ctx, q.sql.pending, queue, q.allBuckets()).Scan(&b); err != nil {
		return false, fmt.Errorf("bucketed: pending: %w", err)
	}
	return b, nil
}

// allBuckets lists the bucket scans a check for work left makes: every
// bucket, or the one branch where the index fans out.
func (q *Queue) allBuckets() []int16 {
	b := make([]int16, q.branches.Load())
	for i := range b {
		b[i] = int16(i)
	}
	return b
}

// Backlog is what a queue has left to run, as Queue.Backlog reads it.
type Backlog struct {
	// Due is true when a Queued job's run_at has come: it can be claimed
	// now.
	Due bool
	// Running is true when a job is Running: leased, or with an expired
	// lease, waiting to be claimed again or failed by the rescuer.
	Running bool
	// Later counts Queued jobs whose run_at is still ahead (scheduled, or
	// waiting out a retry's backoff), and NextAt is the earliest of their
	// run_at (zero when Later is 0). Both are read only when Due and
	// Running are false, and are zero otherwise.
	Later  int64
	NextAt time.Time
	// Now is the database's clock at the reading, to compare NextAt with.
	Now time.Time
	// Waiting counts the Queued jobs that wait for workflow dependencies
	// to finish (not in Later); read as Later is.
	Waiting int64
}

// Backlog reads what queue has left: whether a job is due or Running,
// and, when neither, the jobs scheduled for later. A worker that should
// stop once nothing can run now (skiplock work --until-empty) stops when
// Due and Running are both false, and can say when the next job is due.
func (q *Queue) Backlog(ctx context.Context, queue string) (Backlog, error) {
	var b Backlog
	var next *time.Time
	if err := q.db.QueryRow(ctx, q.sql.backlog, queue, q.allBuckets()).Scan(&b.Due, &b.Running, &b.Later, &next, &b.Now, &b.Waiting); err != nil {
		return Backlog{}, fmt.Errorf("bucketed: backlog: %w", err)
	}
	if next != nil {
		b.NextAt = *next
	}
	return b, nil
}

// LookupJob reads one job by id, in the form skiplock.Job.ID, EnqueueIn
// and skiplock.Enqueued carry it (decimal text), for tools and tests. It
// returns an error wrapping skiplock.ErrNoJob when no job has the id, and
// a usage error when the id is not a bucketed one (ParseID).
func (q *Queue) LookupJob(ctx context.Context, id string) (*skiplock.Job, error) {
	n, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, q.sql.lookup, n)
	if err != nil {
		return nil, fmt.Errorf("bucketed: lookup %d: %w", n, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("bucketed: lookup %d: %w", n, err)
		}
		return nil, fmt.Errorf("%w: id %s", skiplock.ErrNoJob, FormatID(n))
	}
	j, _, err := scanJob(rows)
	if err != nil {
		return nil, fmt.Errorf("bucketed: lookup %d: %w", n, err)
	}
	return j, nil
}
