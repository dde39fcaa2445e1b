package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/schema"
)

// JobRow is a job as the client's operations see it, in either layout:
// its state in lower case (one of admin.States), its payload and metadata,
// and (from JobGet) the history of its failed attempts.
type JobRow = admin.Job

// JobListParams selects jobs for JobList: by queue, kind ("-" for jobs
// without one), state and layout ("" matches any), a page size (0 means
// 50, at most admin.MaxLimit) and the id of the previous page's last job.
type JobListParams = admin.Filter

// QueueRow is one queue's state: jobs per state (counts stop at
// admin.CountCap), how long its oldest runnable job has waited, and
// whether it is paused.
type QueueRow = admin.Queue

// PeriodicJobRow is one periodic job as the maintenance leader records
// it: its schedule, the last tick enqueued and the next one due.
type PeriodicJobRow = admin.Periodic

// operations is the client's seam to the schema's jobs and queues (the
// admin package, which reads both layouts): made on first use, since a
// client may be made before its schema is migrated.
type operations struct {
	mu sync.Mutex
	a  *admin.Admin
}

// admin returns the schema's Admin, making it on first use; a failure is
// not kept, so a later call tries again.
func (c *Client) admin(ctx context.Context) (*admin.Admin, error) {
	c.ops.mu.Lock()
	defer c.ops.mu.Unlock()
	if c.ops.a != nil {
		return c.ops.a, nil
	}
	a, err := admin.New(ctx, c.db, c.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("client: schema %q: %w", c.cfg.Schema, err)
	}
	c.ops.a = a
	return a, nil
}

// JobGet returns the job with this id (either layout) with its payload,
// metadata and error history. An unknown id returns an error that wraps
// skiplock.ErrNoJob.
func (c *Client) JobGet(ctx context.Context, id string) (*JobRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	return a.Show(ctx, id)
}

// JobList returns a page of jobs that match params (nil lists every job,
// 50 at a time); pass the last job's id as params.After for the next
// page. Each page reads about a page of index entries, never a whole
// table.
func (c *Client) JobList(ctx context.Context, params *JobListParams) ([]JobRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	var f JobListParams
	if params != nil {
		f = *params
	}
	return a.List(ctx, f)
}

// JobCancel cancels the job with this id so that it does not run (again).
// Bucketed: a queued or running job becomes canceled; a running one's
// handler sees its context cancelled at the next heartbeat and its result
// is refused. Fanout: a pending job moves to the dead jobs (a running one
// cannot be cancelled: it commits or rolls back with its handler). A job
// in a state the action does not apply to returns a *skiplock.StateError
// naming the states it applies to; an unknown id an error that wraps
// skiplock.ErrNoJob. Subscribers hear EventJobCancelled.
func (c *Client) JobCancel(ctx context.Context, id string) error {
	row, err := c.act(ctx, admin.Cancel, id)
	if err == nil && row != nil {
		c.meter.Cancelled(metricsink.Labels{Queue: row.Queue, Kind: row.Kind, Layout: string(row.Layout)}, 1)
		c.events.publish(&Event{Kind: EventJobCancelled, Queue: row.Queue, Layout: row.Layout, Job: cancelledJob(row)})
	}
	return err
}

// JobRetry puts a failed or canceled (bucketed) or dead (fanout) job back
// in its queue to run now, its attempts reset. Errors are as JobCancel's.
func (c *Client) JobRetry(ctx context.Context, id string) error {
	_, err := c.act(ctx, admin.Retry, id)
	return err
}

// JobDelete deletes a finished job (bucketed: success, failed or
// canceled; fanout: dead); a live job must be cancelled first. Errors are
// as JobCancel's.
func (c *Client) JobDelete(ctx context.Context, id string) error {
	_, err := c.act(ctx, admin.Delete, id)
	return err
}

// act runs action on the job with this id and returns the job as it was
// read before the action (for the event it may make).
func (c *Client) act(ctx context.Context, action admin.Action, id string) (*JobRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	var row *JobRow
	if action == admin.Cancel && (c.events.any() || c.meter != nil) || action == admin.Retry {
		// A cancel's event and metric name the job, and a retry wakes its
		// queue's workers.
		if row, err = a.Show(ctx, id); err != nil {
			return nil, err
		}
	}
	if err := a.Do(ctx, action, id); err != nil {
		return nil, err
	}
	if action == admin.Retry && row != nil {
		c.wakeQueue(row.Queue)
	}
	return row, nil
}

// QueueList lists every queue that has jobs or was paused, by name.
func (c *Client) QueueList(ctx context.Context) ([]QueueRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	return a.Queues(ctx)
}

// QueuePauseOpts are QueuePause's and QueueResume's options (River's
// names); nil is the zero value.
type QueuePauseOpts struct {
	// Create pauses a queue the schema does not know yet (no jobs in
	// either layout, no running client working it, never paused), so
	// that its jobs wait from the first one. Without it, an unknown name is refused as a likely typo.
	// QueueResume ignores it: a queue never paused has nothing to resume.
	Create bool
}

// QueuePause stops every client's workers from claiming the queue's jobs
// at their next claim (jobs in flight finish); inserts still work. A
// queue the schema does not know is a usage error that names the known
// queues, unless opts.Create.
func (c *Client) QueuePause(ctx context.Context, queue string, opts *QueuePauseOpts) error {
	create := opts != nil && opts.Create
	return c.setPaused(ctx, queue, true, create, "set QueuePauseOpts.Create to pause it ahead of its first job")
}

// QueueResume lets workers claim the queue's jobs again, and wakes the
// ones that listen. A queue the schema does not know is a usage error
// that names the known queues.
func (c *Client) QueueResume(ctx context.Context, queue string, opts *QueuePauseOpts) error {
	if err := c.setPaused(ctx, queue, false, false, "leave it: a queue never paused has nothing to resume"); err != nil {
		return err
	}
	c.wakeQueue(queue)
	return nil
}

// setPaused records the pause, after refusing a queue the schema does not
// know unless create; orElse is what the refusal tells the caller to do.
func (c *Client) setPaused(ctx context.Context, queue string, paused, create bool, orElse string) error {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return err
	}
	a, err := c.admin(ctx)
	if err != nil {
		return err
	}
	if !create {
		if err := a.CheckQueueKnown(ctx, queue, orElse); err != nil {
			return fmt.Errorf("client: %w", err)
		}
	}
	return a.SetPaused(ctx, queue, paused)
}

// Limits are a queue's concurrency limits: the most jobs running at once
// across every process (Concurrency) and in one client (LocalConcurrency);
// zero is none. They live in the database (bucketed.Limits), and apply to
// bucketed queues.
type Limits = bucketed.Limits

// LimitsState is a queue's limits, whether it is paused, and how many of
// its concurrency slots are held (bucketed.LimitsState).
type LimitsState = bucketed.LimitsState

// QueueLimits reads a queue's concurrency limits and what they hold.
func (c *Client) QueueLimits(ctx context.Context, queue string) (LimitsState, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return LimitsState{}, err
	}
	return a.QueueLimits(ctx, queue)
}

// QueueSetLimits sets a queue's concurrency limits for every client,
// live: claims read the global limit in their own statements, and each
// client reads both again within seconds (bucketed.Queue.SetLimits).
// Zero removes a limit; lowering one stops nothing that runs.
func (c *Client) QueueSetLimits(ctx context.Context, queue string, l Limits) error {
	a, err := c.admin(ctx)
	if err != nil {
		return err
	}
	return a.SetQueueLimits(ctx, queue, l)
}

// PeriodicJobList lists the schema's periodic jobs as the maintenance
// leader records them (Config.PeriodicJobs of the clients that lead).
func (c *Client) PeriodicJobList(ctx context.Context) ([]PeriodicJobRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	return a.PeriodicJobs(ctx)
}

// wakeQueue ends the idle wait of this client's workers of queue, if it
// works it: a job there may have become runnable.
func (c *Client) wakeQueue(queue string) {
	if r, ok := c.queues[queue]; ok {
		r.wakeUp()
	}
}

// cancelledJob is the worker's view of a row JobCancel cancelled, for
// its event.
func cancelledJob(r *JobRow) *skiplock.Job {
	if r == nil {
		return nil
	}
	j := &skiplock.Job{ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload, Metadata: r.Metadata, Priority: r.Priority,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, CreatedAt: r.CreatedAt, RunAt: r.RunAt}
	if r.LastError != nil {
		j.LastError = *r.LastError
	}
	if r.Layout == schema.LayoutBucketed {
		j.Status = skiplock.StatusCanceled
	}
	return j
}

// defaultLimits writes each worked queue's QueueConfig.Limits where the
// database holds no limit for the queue.
func (c *Client) defaultLimits(ctx context.Context) error {
	for name, q := range c.cfg.Queues {
		if q.Limits.IsZero() || q.MaxWorkers < 0 {
			continue
		}
		st, err := c.QueueLimits(ctx, name)
		if err != nil {
			return fmt.Errorf("client: queue %q: read its limits: %w", name, err)
		}
		if !st.Limits.IsZero() {
			continue // set in the database: it wins
		}
		if err := c.QueueSetLimits(ctx, name, q.Limits); err != nil {
			return fmt.Errorf("client: queue %q: set its default limits: %w", name, err)
		}
	}
	return nil
}
