package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// WorkflowJob is one job of InsertWorkflow.
type WorkflowJob struct {
	// ID names the job within its workflow: DependsOn refers to it
	// (letters, digits, '_', '-', '.' and ':').
	ID string
	// Args are the job's arguments; their Kind is the job's kind.
	Args Args
	// Opts override the defaults; nil means none. A workflow job cannot
	// be unique.
	Opts *InsertOpts
	// DependsOn names the jobs of the workflow that must succeed first.
	DependsOn []string
	// RunAnyway runs the job once its dependencies have finished whatever
	// their outcome, instead of cancelling it when one fails for good or
	// is cancelled.
	RunAnyway bool
}

// WorkflowResult reports an InsertWorkflow: the workflow's id and each
// job's id by its id in the workflow.
type WorkflowResult struct {
	ID   string
	Jobs map[string]string
}

// InsertWorkflow adds jobs with dependencies between them, in one
// transaction: a job becomes claimable only once every job it depends on
// has succeeded (released in the transaction that completes the last of
// them). When a dependency fails for good or is cancelled, the jobs that
// depend on it are cancelled, down the workflow, unless they run anyway.
// A retry of the failed job (JobRetry, `skiplock jobs retry`) queues them
// again. A handler reads its dependencies' outputs with
// DependencyOutputs.
//
// Bucketed queues only: a fanout job leaves no row to release from once it
// succeeds. Unknown dependencies, cycles, duplicate ids, unique jobs and
// bad jobs are usage errors that name the job, and nothing is inserted.
// See docs/workflows.md.
func (c *Client) InsertWorkflow(ctx context.Context, name string, jobs []WorkflowJob) (*WorkflowResult, error) {
	var out *WorkflowResult
	err := retry.Run(ctx, c.db, c.retryOptions(), func(ctx context.Context, tx skiplock.Tx) error {
		var err error
		out, err = c.insertWorkflow(ctx, tx, name, jobs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertWorkflowTx is InsertWorkflow in the caller's transaction: the
// workflow appears when tx commits (this client's workers of its first
// jobs' queues are woken then, as InsertTx says). It does not retry.
func (c *Client) InsertWorkflowTx(ctx context.Context, tx skiplock.Tx, name string, jobs []WorkflowJob) (*WorkflowResult, error) {
	if tx == nil {
		return nil, usage.Errorf("client.InsertWorkflowTx: tx is nil: pass the transaction the workflow belongs to")
	}
	return c.insertWorkflow(ctx, tx, name, jobs)
}

// insertWorkflow is InsertWorkflowTx. Once tx commits, this client's
// workers of the queues of the jobs that wait for nothing are woken
// (wakeOnCommit).
func (c *Client) insertWorkflow(ctx context.Context, tx skiplock.Tx, name string, jobs []WorkflowJob) (*WorkflowResult, error) {
	wf := skiplock.Workflow{Name: name, Jobs: make([]skiplock.WorkflowJob, len(jobs))}
	var roots []*InsertResult
	seen := map[string]bool{}
	ptrs := make([]*skiplock.NewJob, len(jobs))
	for i, j := range jobs {
		nj, err := c.newJob(InsertParams{Args: j.Args, Opts: j.Opts})
		if err != nil {
			return nil, fmt.Errorf("client: workflow job %q: %w", j.ID, err)
		}
		if l := c.layoutOf(nj.Queue); l != schema.LayoutBucketed {
			return nil, usage.Errorf("client: workflow job %q goes to %s queue %q: workflows are bucketed only (a fanout job leaves no row to release its dependents from)", j.ID, l, nj.Queue)
		}
		if len(j.DependsOn) == 0 && !seen[nj.Queue] {
			seen[nj.Queue] = true
			roots = append(roots, &InsertResult{Queue: nj.Queue, Layout: schema.LayoutBucketed})
		}
		wf.Jobs[i] = skiplock.WorkflowJob{ID: j.ID, Job: *nj, DependsOn: j.DependsOn, RunAnyway: j.RunAnyway}
		ptrs[i] = &wf.Jobs[i].Job
	}
	var out *WorkflowResult
	write := func(ctx context.Context) error {
		res, err := c.bq.InsertWorkflow(ctx, tx, wf)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		out = &WorkflowResult{ID: res.ID, Jobs: res.Jobs}
		return nil
	}
	// The insert middleware sees the workflow's jobs as it sees any
	// insert's (a tracing middleware stamps their metadata).
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		if mw := c.cfg.Middleware[i].Insert; mw != nil {
			next := write
			write = func(ctx context.Context) error { return mw(ctx, ptrs, next) }
		}
	}
	if err := write(ctx); err != nil {
		return nil, err
	}
	c.wakeOnCommit(tx, roots)
	return out, nil
}

// DependencyOutputs returns, from a workflow job's handler (ctx is the
// handler's), the outputs its dependencies recorded with RecordOutput, by
// their ids in the workflow; a dependency that recorded none maps to JSON
// null. Bucketed queues only; elsewhere, and outside a handler, a usage
// error.
func DependencyOutputs(ctx context.Context) (map[string]json.RawMessage, error) {
	r, ok := ctx.Value(recordKey{}).(*jobRecorder)
	switch {
	case !ok:
		return nil, usage.Errorf("client: a job's dependency outputs can be read only from its handler, with the context the handler was given")
	case r.q == nil:
		return nil, usage.Errorf("client: this job has no dependencies to read: %s", r.none)
	}
	out, err := r.q.DependencyOutputs(ctx, r.job)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return out, nil
}

// WorkflowRow is a workflow as the client's operations see it: its jobs
// counted by state and, from WorkflowGet, each job with what it waits on.
type WorkflowRow = admin.Workflow

// WorkflowGet returns the workflow with this id and its jobs. An unknown
// id returns an error that wraps skiplock.ErrNoJob.
func (c *Client) WorkflowGet(ctx context.Context, id string) (*WorkflowRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	return a.WorkflowShow(ctx, id)
}

// WorkflowList returns up to limit workflows (1 to admin.MaxLimit),
// newest first, those with ids below before ("" for the first page).
func (c *Client) WorkflowList(ctx context.Context, limit int, before string) ([]WorkflowRow, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	return a.Workflows(ctx, limit, before)
}

// WorkflowCancel cancels every queued, waiting or running job of the
// workflow and returns how many.
func (c *Client) WorkflowCancel(ctx context.Context, id string) (int, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return 0, err
	}
	return a.WorkflowCancel(ctx, id)
}

// WorkflowRetry retries the workflow's failed jobs: each runs again, and
// the jobs its failure cancelled wait for it again. It returns how many
// jobs it retried.
func (c *Client) WorkflowRetry(ctx context.Context, id string) (int, error) {
	a, err := c.admin(ctx)
	if err != nil {
		return 0, err
	}
	return a.WorkflowRetry(ctx, id)
}
