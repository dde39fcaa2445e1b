package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
)

// counter gives the connection that a claimed job's attempt is counted
// over in job_attempt before its handler runs, outside the claim's
// transaction (and taken back when the attempt turns out not to be the
// job's failure: countAttempt, giveBackAttempt). The caller holds the
// job's row lock throughout, so no other claim counts the job at the same
// time. withConn does not cut the statement short when ctx ends (only
// recordTimeout bounds it), so that the caller knows whether the count
// was applied.
type counter interface {
	withConn(ctx context.Context, fn func(context.Context, skiplock.Conn) error) error
	// forget drops the count of job id, whose removal has committed
	// (forget in fanout.sql). It reports no error: a count it leaves
	// behind is the pruner's.
	forget(ctx context.Context, id string)
}

// countAttempt adds one attempt to job id over c and returns its new
// count.
func (q *Queue) countAttempt(ctx context.Context, c counter, id string) (int, error) {
	var got map[string]int
	err := c.withConn(ctx, func(ctx context.Context, conn skiplock.Conn) (err error) {
		got, err = q.countMany(ctx, conn, []string{id})
		return err
	})
	return got[id], err
}

// giveBackAttempt takes one attempt back from job id over c.
func (q *Queue) giveBackAttempt(ctx context.Context, c counter, id string) error {
	return c.withConn(ctx, func(ctx context.Context, conn skiplock.Conn) error {
		_, err := conn.Exec(ctx, q.sql.giveBack, []string{id})
		return err
	})
}

// poolCounter counts through the Queue's pool, one statement per job: for
// Process called on its own. It takes a second connection from the pool
// while the claim's transaction holds the first, so goroutines that call
// Process concurrently need a pool of one more connection than there are
// of them; when none frees up within poolCountWait it fails with that
// advice rather than wait for a connection its own callers hold.
type poolCounter struct{ q *Queue }

// poolCountWait bounds poolCounter's wait for a free connection.
const poolCountWait = 5 * time.Second

// withConn runs fn on a connection of the pool.
func (p poolCounter) withConn(ctx context.Context, fn func(context.Context, skiplock.Conn) error) error {
	actx, cancel := context.WithTimeout(ctx, poolCountWait)
	c, err := p.q.db.Acquire(actx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("no connection of the pool (%d at most) came free within %v to count the attempt while the job's transaction holds another: goroutines that call Process need a pool of one more connection than there are of them (a Worker reserves it): %w",
			p.q.db.Stats().Max, poolCountWait, err)
	}
	defer c.Release()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	return fn(sctx, c)
}

// forget drops job id's count at once, over the pool.
func (p poolCounter) forget(ctx context.Context, id string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	p.q.db.Exec(sctx, p.q.sql.forget, []string{id}) //nolint:errcheck // the pruner removes what this leaves
}

// countMany counts one attempt for each of ids (distinct) in one
// statement and returns their new counts.
func (q *Queue) countMany(ctx context.Context, db skiplock.Querier, ids []string) (map[string]int, error) {
	got := make(map[string]int, len(ids))
	err := each(ctx, db, q.sql.count, []any{ids, q.cfg.RetryBase.Seconds(), q.cfg.RetryMax.Seconds()}, func(r skiplock.Rows) error {
		var id string
		var n int32
		if err := r.Scan(&id, &n); err != nil {
			return err
		}
		got[id] = int(n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			return nil, fmt.Errorf("the count of job %s's attempts came back without it", id)
		}
	}
	return got, nil
}

// recordTimeout bounds one statement of a recorder, so that a worker
// waiting for its count gets an error rather than hanging on a database
// that does not answer.
const recordTimeout = 30 * time.Second

// recorder counts the attempts of a Worker's goroutines over connections
// of its own (RecorderConns), reserved from the pool for the Worker's
// life. Every worker holds a connection for its transaction while it
// counts, so the count must not need one of theirs: with a pool of
// exactly Workers connections, counting through the pool would deadlock.
// A worker takes a free reserved connection and sends its count itself:
// no goroutine hands the request on (under a loaded CPU each hand-off
// waits to be scheduled), and counts of several workers commit in
// parallel rather than each waiting behind a shared batch's commit.
type recorder struct {
	q     *Queue
	log   *slog.Logger
	slots chan *recorderSlot
	n     int
	once  sync.Once

	// forgotten are the ids of jobs whose removal committed and whose
	// counts are still to drop: one statement per forgetBatch jobs, and
	// the rest at close.
	fmu       sync.Mutex
	forgotten []string
}

// forgetBatch is how many finished jobs' counts one forget statement
// drops.
const forgetBatch = 128

// recorderSlot is one reserved connection, nil until first used and
// after a failure.
type recorderSlot struct{ conn skiplock.Conn }

// RecorderConns is how many connections a Worker of n goroutines keeps to
// count attempts: one per 4 goroutines, at least 1 and at most 8. A count
// is one short statement while a job's own transaction takes at least
// three, so a few connections serve many workers.
func RecorderConns(workers int) int {
	return min(8, max(1, workers/4))
}

func newRecorder(q *Queue, workers int, log *slog.Logger) *recorder {
	n := RecorderConns(workers)
	r := &recorder{q: q, log: log, slots: make(chan *recorderSlot, n), n: n}
	for range n {
		r.slots <- &recorderSlot{}
	}
	return r
}

// withConn runs fn on a reserved connection.
func (r *recorder) withConn(ctx context.Context, fn func(context.Context, skiplock.Conn) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	s := <-r.slots
	defer func() { r.slots <- s }()
	if s.conn == nil {
		c, err := r.q.db.Acquire(sctx)
		if err != nil {
			return fmt.Errorf("take a connection that records attempts: %w", err)
		}
		s.conn = c
	}
	err := fn(sctx, s.conn)
	if err != nil {
		r.log.Warn("recording an attempt failed", logs.Err(err))
		s.conn.Release() // a fresh connection for the next count
		s.conn = nil
	}
	return err
}

// forget drops job id's count with the next batch.
func (r *recorder) forget(ctx context.Context, id string) {
	r.fmu.Lock()
	r.forgotten = append(r.forgotten, id)
	var batch []string
	if len(r.forgotten) >= forgetBatch {
		batch, r.forgotten = r.forgotten, nil
	}
	r.fmu.Unlock()
	if batch != nil {
		r.forgetNow(ctx, batch)
	}
}

// forgetNow drops the counts of ids over a reserved connection; a failure
// is logged by withConn and left to the pruner.
func (r *recorder) forgetNow(ctx context.Context, ids []string) {
	r.withConn(ctx, func(ctx context.Context, c skiplock.Conn) error { //nolint:errcheck // logged; the pruner removes what is left
		_, err := c.Exec(ctx, r.q.sql.forget, ids)
		return err
	})
}

// close drops the counts still to forget and releases the reserved
// connections. Call it once every worker has returned; later calls do
// nothing.
func (r *recorder) close() {
	r.once.Do(func() {
		r.fmu.Lock()
		batch := r.forgotten
		r.forgotten = nil
		r.fmu.Unlock()
		if len(batch) > 0 {
			r.forgetNow(context.Background(), batch)
		}
		for range r.n {
			if s := <-r.slots; s.conn != nil {
				s.conn.Release()
			}
		}
	})
}
