package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// InsertParams is one job of InsertMany.
type InsertParams struct {
	// Args are the job's arguments; their Kind is the job's kind.
	Args Args
	// Opts override the defaults; nil means none.
	Opts *InsertOpts
}

// InsertResult says what an insert did.
type InsertResult struct {
	// ID is the job's id: "" for a duplicate, and for every job of an
	// InsertMany whose jobs for the same queue included a duplicate
	// (which of them was skipped is known only by its unique key).
	ID string
	// Queue and Layout are where the job went.
	Queue  string
	Layout schema.Layout
	// Duplicate is true when a live job of the queue held the unique key,
	// so nothing was added.
	Duplicate bool
}

// Insert adds one job in its own statement and wakes the queue's
// workers: this client's at once, other processes' through a
// notification where the engine has them.
func (c *Client) Insert(ctx context.Context, args Args, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.insert(ctx, c.db, []InsertParams{{Args: args, Opts: opts}}, true)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertTx adds one job in the caller's transaction: it appears when tx
// commits (and other processes are notified then; this client's workers
// are woken then when tx is a transaction of skiplock.DB.Begin), and not
// at all if tx rolls back. It does not retry: that is tx's owner's business. The
// metrics count the job when a tx of skiplock.DB.Begin commits; skiplock
// never sees a skiplock.WrapTx transaction's outcome, so its jobs are
// counted apart (package metrics).
func (c *Client) InsertTx(ctx context.Context, tx skiplock.Tx, args Args, opts *InsertOpts) (*InsertResult, error) {
	if tx == nil {
		return nil, usage.Errorf("client.InsertTx: tx is nil: pass the transaction the job belongs to")
	}
	res, err := c.insert(ctx, tx, []InsertParams{{Args: args, Opts: opts}}, false)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertMany adds jobs, one statement per queue, in one transaction:
// either all are added or none.
func (c *Client) InsertMany(ctx context.Context, params []InsertParams) ([]*InsertResult, error) {
	var out []*InsertResult
	err := retry.Run(ctx, c.db, c.retryOptions(), func(ctx context.Context, tx skiplock.Tx) error {
		var err error
		out, err = c.insert(ctx, tx, params, false) // wakes this client's workers once tx commits
		return err
	})
	return out, err
}

// InsertManyTx adds jobs in the caller's transaction, waking this
// client's workers as InsertTx does.
func (c *Client) InsertManyTx(ctx context.Context, tx skiplock.Tx, params []InsertParams) ([]*InsertResult, error) {
	if tx == nil {
		return nil, usage.Errorf("client.InsertManyTx: tx is nil: pass the transaction the jobs belong to")
	}
	return c.insert(ctx, tx, params, false)
}

// insert resolves options, runs the insert middleware, and writes the
// jobs grouped by queue through db. wake: wake this client's workers
// after (db commits on its own).
func (c *Client) insert(ctx context.Context, db skiplock.Querier, params []InsertParams, wake bool) ([]*InsertResult, error) {
	jobs, err := c.newJobs(params, "")
	if err != nil {
		return nil, err
	}
	return c.writeJobs(ctx, db, jobs, wake)
}

// newJobs turns params into jobs, each in batch when it is not "".
func (c *Client) newJobs(params []InsertParams, batch string) ([]*skiplock.NewJob, error) {
	if len(params) == 0 {
		return nil, usage.Errorf("client: no jobs to insert")
	}
	jobs := make([]*skiplock.NewJob, len(params))
	for i, p := range params {
		j, err := c.newJob(p)
		if err == nil && batch != "" {
			err = c.inBatch(j, batch)
		}
		if err != nil {
			if len(params) > 1 {
				return nil, fmt.Errorf("client: job %d: %w", i, err)
			}
			return nil, fmt.Errorf("client: %w", err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// writeJobs runs the insert middleware and writes jobs through db; wake:
// wake this client's workers after (db commits on its own).
func (c *Client) writeJobs(ctx context.Context, db skiplock.Querier, jobs []*skiplock.NewJob, wake bool) ([]*InsertResult, error) {
	var out []*InsertResult
	write := func(ctx context.Context) error {
		var err error
		out, err = c.write(ctx, db, jobs)
		return err
	}
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		if mw := c.cfg.Middleware[i].Insert; mw != nil {
			next := write
			write = func(ctx context.Context) error { return mw(ctx, jobs, next) }
		}
	}
	if err := write(ctx); err != nil {
		return nil, err
	}
	if wake {
		c.wakeLocal(out)
	} else {
		c.wakeOnCommit(db, out)
	}
	return out, nil
}

// newJob turns one InsertParams into a job: the insert's options over the
// args' own over the kind's.
func (c *Client) newJob(p InsertParams) (*skiplock.NewJob, error) {
	if p.Args == nil {
		return nil, usage.Errorf("Args is nil: pass a value of your args type")
	}
	kind := p.Args.Kind()
	payload, err := json.Marshal(p.Args)
	if err != nil {
		return nil, usage.Errorf("encode the args of kind %q as JSON: %v", kind, err)
	}
	j := &skiplock.NewJob{Kind: kind, Payload: payload}
	if k := c.cfg.Workers.lookup(kind); k != nil {
		j.Queue, j.Priority, j.MaxAttempts = k.opts.Queue, k.opts.Priority, k.opts.MaxAttempts
	}
	var unique *UniqueOpts
	if a, ok := p.Args.(ArgsWithInsertOpts); ok {
		o := a.InsertOpts()
		apply(j, o)
		unique = o.Unique
	}
	if p.Opts != nil {
		apply(j, *p.Opts)
		if p.Opts.Unique != nil {
			unique = p.Opts.Unique
		}
	}
	if unique != nil {
		if j.UniqueKey != "" {
			return nil, usage.Errorf("job of kind %q: both UniqueKey and Unique are set: give one (Unique makes the key)", kind)
		}
		if j.UniqueKey, err = uniqueKey(unique, kind, payload, j.RunAt); err != nil {
			return nil, fmt.Errorf("job of kind %q: %w", kind, err)
		}
		j.UniqueStates = unique.ByState
	}
	if j.Queue == "" {
		j.Queue = skiplock.DefaultQueue
	}
	if err := j.Normalize(0); err != nil {
		return nil, err
	}
	return j, nil
}

// apply sets the non-zero options of o on j.
func apply(j *skiplock.NewJob, o InsertOpts) {
	if o.Queue != "" {
		j.Queue = o.Queue
	}
	if o.Priority != 0 {
		j.Priority = o.Priority
	}
	if !o.RunAt.IsZero() {
		j.RunAt = o.RunAt
	}
	if o.MaxAttempts != 0 {
		j.MaxAttempts = o.MaxAttempts
	}
	if o.UniqueKey != "" {
		j.UniqueKey = o.UniqueKey
	}
	if o.PartitionKey != "" {
		j.PartitionKey = o.PartitionKey
	}
	if len(o.Metadata) > 0 {
		j.Metadata = o.Metadata
	}
}

// write inserts the jobs, one statement per queue, notifying where the
// client uses notifications (debounced per queue).
func (c *Client) write(ctx context.Context, db skiplock.Querier, jobs []*skiplock.NewJob) ([]*InsertResult, error) {
	out := make([]*InsertResult, len(jobs))
	byQueue := map[string][]int{}
	var order []string
	for i, j := range jobs {
		if _, ok := byQueue[j.Queue]; !ok {
			order = append(order, j.Queue)
		}
		byQueue[j.Queue] = append(byQueue[j.Queue], i)
	}
	for _, q := range order {
		idx := byQueue[q]
		batch := make([]skiplock.NewJob, len(idx))
		for k, i := range idx {
			batch[k] = *jobs[i]
		}
		layout := c.layoutOf(q)
		channel, debounced := c.notifyChannel(q)
		e, err := c.engineOf(q)
		var ids []string
		if err == nil {
			ids, err = e.EnqueueNotify(ctx, db, channel, batch...)
		}
		if err != nil {
			return nil, fmt.Errorf("client: insert into queue %q: %w", q, err)
		}
		if debounced {
			c.trail(q)
		}
		c.countInserted(db, q, layout, batch, len(ids))
		// A job whose unique key a live job holds returns no id; ids
		// keep the jobs' order otherwise.
		dupes := len(idx) - len(ids)
		for k, i := range idx {
			r := &InsertResult{Queue: q, Layout: layout}
			switch {
			case dupes == 0:
				r.ID = ids[k]
			case len(idx) == 1:
				r.Duplicate = true
			default:
				// Several jobs, some skipped: the ids no longer line up
				// with the jobs, and which were skipped is known only by
				// key, so none is reported rather than a wrong one.
			}
			out[i] = r
		}
	}
	return out, nil
}

// layoutOf is the layout of queue: its declaration, else bucketed.
func (c *Client) layoutOf(queue string) schema.Layout {
	if q, ok := c.cfg.Queues[queue]; ok {
		return q.Layout
	}
	return schema.LayoutBucketed
}

// notifyChannel is the channel an insert into queue notifies now, or ""
// (no notifications, or one sent within notifyDebounce: debounced, and
// the caller sends a trailing notification once the insert's statement
// is done, see trail).
func (c *Client) notifyChannel(queue string) (channel string, debounced bool) {
	if !c.notify {
		return "", false
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	now := time.Now()
	if last, ok := c.notifiedAt[queue]; ok && now.Sub(last) < notifyDebounce {
		return "", true
	}
	c.notifiedAt[queue] = now
	return c.channel, false
}

// trail makes sure a notification of queue follows a debounced insert
// whose statement is done: at the end of the debounce window, and a
// little after now, so that the insert has committed by then (the
// decision to debounce was taken before the statement, which may have
// waited for a connection or a read of the queue's limits). A trailing
// notification already due after that covers it. The listeners'
// producers then need no fast polls after a drained claim
// (bucketed.WorkerConfig.WaitWhenDrained). An insert in a caller's
// transaction that commits after the trailing notification is found by
// the next poll (FetchPollInterval), as a lost notification is.
func (c *Client) trail(queue string) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	at := time.Now().Add(notifyDebounce / 2)
	if end := c.notifiedAt[queue].Add(notifyDebounce + notifyDebounce/2); end.After(at) {
		at = end
	}
	if pending, ok := c.trailing[queue]; ok && !pending.Before(at) {
		return
	}
	c.trailing[queue] = at
	time.AfterFunc(time.Until(at), func() { c.sendTrailing(queue, at) })
}

// sendTrailing sends the trailing notification of queue that trail
// scheduled at at.
func (c *Client) sendTrailing(queue string, at time.Time) {
	c.notifyMu.Lock()
	if c.trailing[queue].Equal(at) {
		delete(c.trailing, queue) // else a later one is pending: it stays
	}
	c.notifiedAt[queue] = time.Now()
	c.notifyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.db.Exec(ctx, "SELECT pg_notify($1, $2)", c.channel, queue)
	if err != nil && !errors.Is(err, skiplock.ErrPoolClosed) {
		// A pool closed while the statement was connecting fails it with
		// the cancelled connect's error instead: ask the pool again.
		if _, again := c.db.Exec(ctx, "SELECT 1"); errors.Is(again, skiplock.ErrPoolClosed) {
			err = again
		}
	}
	if errors.Is(err, skiplock.ErrPoolClosed) {
		// The caller closed the pool after its last insert (an insert-only
		// client is never stopped): nothing to say, and no way to say it.
		return
	}
	if err != nil {
		c.cfg.Logger.Warn("notifying the queue's listeners failed: their next poll finds its jobs", "queue", queue, logs.Err(err))
	}
}

// wakeOnCommit wakes this client's workers of the queues jobs went to
// once tx commits, when tx is a transaction of skiplock.DB.Begin (the
// client's own retried ones, and a caller's passed to InsertTx): also
// after a failed commit, since an ambiguous one may have committed, and a
// wake for nothing costs a claim. skiplock never sees the commit of a
// skiplock.WrapTx transaction: its jobs are found by the notification, or
// by the next poll.
func (c *Client) wakeOnCommit(tx skiplock.Querier, res []*InsertResult) {
	txhook.AfterCommitTried(tx, func() { c.wakeLocal(res) })
}

// wakeLocal wakes this client's workers of the queues jobs went to.
func (c *Client) wakeLocal(res []*InsertResult) {
	for _, r := range res {
		if q := c.queues[r.Queue]; q != nil {
			q.wakeUp()
		}
	}
}

// retryOptions are Config.Retry with the engine's queue isolation stated.
func (c *Client) retryOptions() *retry.Options {
	var o retry.Options
	if c.cfg.Retry != nil {
		o = *c.cfg.Retry
	}
	if o.Isolation == skiplock.IsoDefault {
		o.Isolation = c.db.Dialect().DefaultIsolation
	}
	return &o
}
