package fanout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
)

// counter counts a claimed job's attempt in job_attempt before its
// handler runs, outside the claim's transaction, and takes the count back
// when the attempt turns out not to be the job's failure. The caller
// holds the job's row lock throughout, so no other claim counts the job
// at the same time.
type counter interface {
	// count adds one attempt to job id and returns its new count.
	count(ctx context.Context, id string) (int, error)
	// giveBack takes one attempt back from job id.
	giveBack(ctx context.Context, id string) error
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

func (p poolCounter) count(ctx context.Context, id string) (int, error) {
	var got map[string]int
	err := p.withConn(ctx, func(ctx context.Context, c skiplock.Conn) (err error) {
		got, err = p.q.countMany(ctx, c, []string{id})
		return err
	})
	return got[id], err
}

func (p poolCounter) giveBack(ctx context.Context, id string) error {
	return p.withConn(ctx, func(ctx context.Context, c skiplock.Conn) error {
		_, err := c.Exec(ctx, p.q.sql.giveBack, []string{id})
		return err
	})
}

// withConn runs fn on a connection of the pool. The statement itself is
// not cut short by ctx (only bounded by recordTimeout), so that the caller
// knows whether the count was applied.
func (p poolCounter) withConn(ctx context.Context, fn func(context.Context, skiplock.Conn) error) error {
	actx, cancel := context.WithTimeout(ctx, poolCountWait)
	c, err := p.q.db.Acquire(actx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("no connection of the pool (%d at most) came free within %v to count the attempt while the job's transaction holds another: goroutines that call Process need a pool of one more connection than there are of them (or use StartWorker, which reserves it): %w",
			p.q.db.Stats().Max, poolCountWait, err)
	}
	defer c.Release()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	return fn(sctx, c)
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

// recorder counts the attempts of a Worker's goroutines through one
// connection of its own, reserved from the pool for the Worker's life.
// Every worker holds a connection for its transaction while it waits for
// its count, so the count must not need one of theirs: with a pool of
// exactly Workers connections, counting through the pool would deadlock.
// The requests that arrive while a statement runs are batched into the
// next one (unnest of their ids), so a job costs one shared round trip
// however many workers claim at once.
type recorder struct {
	q    *Queue
	logf func(format string, args ...any)
	reqs chan *recordReq
	stop chan struct{}
	done chan struct{}
	once sync.Once
	conn skiplock.Conn // nil until the first batch, and after a failure
}

// recordReq is one worker's request; the recorder answers on reply
// (buffered, so it never blocks).
type recordReq struct {
	id       string
	giveBack bool
	reply    chan recordReply
}

type recordReply struct {
	n   int
	err error
}

func newRecorder(q *Queue, workers int, logf func(string, ...any)) *recorder {
	r := &recorder{
		q: q, logf: logf,
		reqs: make(chan *recordReq, workers),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go r.loop()
	return r
}

// ask sends a request and waits for its answer. It does not give up when
// ctx ends: a count the recorder sends is applied or not as one statement,
// and the worker must know which (the recorder's own timeout bounds the
// wait).
func (r *recorder) ask(id string, giveBack bool) recordReply {
	req := &recordReq{id: id, giveBack: giveBack, reply: make(chan recordReply, 1)}
	r.reqs <- req
	return <-req.reply
}

func (r *recorder) count(_ context.Context, id string) (int, error) {
	rep := r.ask(id, false)
	return rep.n, rep.err
}

func (r *recorder) giveBack(_ context.Context, id string) error {
	return r.ask(id, true).err
}

// close stops the recorder and releases its connection. Call it once every
// worker has returned; later calls do nothing.
func (r *recorder) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *recorder) loop() {
	defer close(r.done)
	defer r.release()
	for {
		var batch []*recordReq
		select {
		case req := <-r.reqs:
			batch = append(batch, req)
		case <-r.stop:
			return
		}
	more:
		for {
			select {
			case req := <-r.reqs:
				batch = append(batch, req)
			default:
				break more
			}
		}
		r.run(batch)
	}
}

// run sends one batch: the counts in one statement, the give-backs in
// another, and answers every request.
func (r *recorder) run(batch []*recordReq) {
	var counts, backs []string
	for _, req := range batch {
		if req.giveBack {
			backs = append(backs, req.id)
		} else {
			counts = append(counts, req.id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	var got map[string]int
	err := r.acquire(ctx)
	if err == nil && len(counts) > 0 {
		got, err = r.q.countMany(ctx, r.conn, counts)
	}
	if err == nil && len(backs) > 0 {
		_, err = r.conn.Exec(ctx, r.q.sql.giveBack, backs)
	}
	if err != nil {
		r.logf("fanout: recording the attempts of %d job(s) failed: %v", len(batch), err)
		r.release() // a fresh connection for the next batch
	}
	for _, req := range batch {
		req.reply <- recordReply{n: got[req.id], err: err}
	}
}

func (r *recorder) acquire(ctx context.Context) error {
	if r.conn != nil {
		return nil
	}
	c, err := r.q.db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("take the connection that records attempts: %w", err)
	}
	r.conn = c
	return nil
}

func (r *recorder) release() {
	if r.conn != nil {
		r.conn.Release()
		r.conn = nil
	}
}
