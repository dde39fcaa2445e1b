package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
)

// counter gives the connection that a claimed job's attempt is counted
// over in job_attempt before its handler runs, outside the claim's
// transaction (and taken back when the attempt turns out not to be the
// job's failure: countAhead, giveBackAttempt). The caller holds the
// job's row lock throughout, so no other claim counts the job at the same
// time.
type counter interface {
	// take lends a connection, waiting for one while ctx lives; give
	// returns it, err being what its statement met (a failed connection
	// is dropped).
	take(ctx context.Context) (c skiplock.Conn, give func(err error), err error)
	// forget drops the count of job id, whose removal has committed
	// (forget in fanout.sql). It reports no error: a count it leaves
	// behind is the pruner's.
	forget(ctx context.Context, id string)
}

// counting is an attempt's count on its way: sent before the handler
// runs, answered while it runs (countAhead).
type counting struct {
	done chan struct{} // closed once the answer is read
	n    int           // the job's count with this attempt
	err  error
}

// wait returns the count once it is answered.
func (c *counting) wait() (int, error) {
	<-c.done
	return c.n, c.err
}

// countAhead counts an attempt of job id over c (count in fanout.sql,
// one autocommit statement), and returns once the count has been written to the server, without
// waiting for its answer (txhook.Ahead; with a driver that cannot send
// ahead, once it is answered): the handler runs while the count travels,
// and a worker that dies in the handler has sent its count already, so
// the server applies it (it runs a statement it received whether or not
// its client is still there to hear the answer). Its answer is read on a
// goroutine of its own, which then gives the connection back.
func (q *Queue) countAhead(ctx context.Context, c counter, id string) (*counting, error) {
	conn, give, err := c.take(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	rows, err := conn.Query(txhook.Ahead(sctx), q.sql.count, []string{id}, q.cfg.RetryBase.Seconds(), q.cfg.RetryMax.Seconds())
	if err != nil {
		give(err)
		cancel()
		return nil, err
	}
	out := &counting{done: make(chan struct{})}
	go func() {
		defer close(out.done)
		defer cancel()
		got, err := readCounts(rows, []string{id})
		out.n, out.err = got[id], err
		give(err)
	}()
	return out, nil
}

// withConn runs fn on a connection c lends, under a context that ctx's
// end does not cut short (only recordTimeout bounds it), so that the
// caller knows whether the statement was applied.
func withConn(ctx context.Context, c counter, fn func(context.Context, skiplock.Conn) error) error {
	conn, give, err := c.take(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err = fn(sctx, conn)
	give(err)
	return err
}

// giveBackAttempt takes one attempt back from job id over c.
func (q *Queue) giveBackAttempt(ctx context.Context, c counter, id string) error {
	return withConn(ctx, c, func(ctx context.Context, conn skiplock.Conn) error {
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

// take lends a connection of the pool, waiting at most poolCountWait.
func (p poolCounter) take(ctx context.Context) (skiplock.Conn, func(error), error) {
	actx, cancel := context.WithTimeout(ctx, poolCountWait)
	defer cancel()
	c, err := p.q.db.Acquire(actx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("no connection of the pool (%d at most) came free within %v to count the attempt while the job's transaction holds another: goroutines that call Process need a pool of one more connection than there are of them (a Worker reserves it): %w",
			p.q.db.Stats().Max, poolCountWait, err)
	}
	return c, func(error) { c.Release() }, nil
}

// forget drops job id's count at once, over the pool.
func (p poolCounter) forget(ctx context.Context, id string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	p.q.db.Exec(sctx, p.q.sql.forget, []string{id}) //nolint:errcheck // the pruner removes what this leaves
}

// readCounts reads a count's answer for ids, and closes rows.
func readCounts(rows skiplock.Rows, ids []string) (map[string]int, error) {
	defer rows.Close()
	got := make(map[string]int, len(ids))
	for rows.Next() {
		var id string
		var n int32
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		got[id] = int(n)
	}
	if err := rows.Err(); err != nil {
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
// count attempts: one per goroutine, at most 16. A count holds its
// connection for one round trip while its handler runs (countAhead), and
// a job whose removal takes the next claim along (chain) takes little
// more than one, so fewer connections than goroutines would leave the
// counts waiting for one.
func RecorderConns(workers int) int {
	return min(16, max(1, workers))
}

func newRecorder(q *Queue, workers int, log *slog.Logger) *recorder {
	n := RecorderConns(workers)
	r := &recorder{q: q, log: log, slots: make(chan *recorderSlot, n), n: n}
	for range n {
		r.slots <- &recorderSlot{}
	}
	return r
}

// take lends a reserved connection, opening it first when it is not (or
// no longer) open; ctx's end does not cut that short (recordTimeout
// bounds it). A failed statement's connection is logged and dropped.
func (r *recorder) take(ctx context.Context) (skiplock.Conn, func(error), error) {
	s := <-r.slots
	if s.conn == nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		c, err := r.q.db.Acquire(actx)
		cancel()
		if err != nil {
			r.slots <- s
			return nil, nil, fmt.Errorf("take a connection that records attempts: %w", err)
		}
		s.conn = c
	}
	return s.conn, func(err error) {
		if err != nil {
			r.log.Warn("recording an attempt failed", logs.Err(err))
			s.conn.Release() // a fresh connection for the next count
			s.conn = nil
		}
		r.slots <- s
	}, nil
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
// is logged by take's give and left to the pruner.
func (r *recorder) forgetNow(ctx context.Context, ids []string) {
	withConn(ctx, r, func(ctx context.Context, c skiplock.Conn) error { //nolint:errcheck // logged; the pruner removes what is left
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
