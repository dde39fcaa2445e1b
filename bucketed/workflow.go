package bucketed

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/copyio"
	"github.com/skiplock/skiplock/internal/copyrows"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// InsertedWorkflow reports an InsertWorkflow: the workflow's id and each
// job's id by its id in the workflow (skiplock.WorkflowJob.ID).
type InsertedWorkflow struct {
	ID   string
	Jobs map[string]string
}

// InsertWorkflow inserts wf in tx (the caller's transaction; it commits or
// rolls back the whole workflow): a job_workflow row and every job, those
// with dependencies waiting (never due) until the last of them succeeds.
// A job whose queue is unset goes to the Queue's. Bad input (wf.Check's
// shape errors, a job Normalize refuses, a unique key or a batch, which a
// workflow job cannot have) is a usage error, and nothing is written.
func (q *Queue) InsertWorkflow(ctx context.Context, tx skiplock.Tx, wf skiplock.Workflow) (*InsertedWorkflow, error) {
	if tx == nil {
		return nil, usage.Errorf("bucketed.InsertWorkflow: tx is nil: pass the transaction the workflow belongs to")
	}
	if err := wf.Check(); err != nil {
		return nil, err
	}
	jobs := make([]skiplock.NewJob, len(wf.Jobs))
	for i, j := range wf.Jobs {
		if j.Job.UniqueKey != "" || j.Job.UniqueStates != nil {
			return nil, usage.Errorf("workflow job %q has a unique key: a workflow's jobs cannot be unique (a duplicate skipped would leave its dependents waiting)", j.ID)
		}
		if j.Job.BatchID != "" {
			return nil, usage.Errorf("workflow job %q is in a batch: a workflow's jobs cannot be", j.ID)
		}
		jobs[i] = j.Job
	}
	args, err := q.insertArgs(ctx, jobs, 0)
	if err != nil {
		return nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, q.sql.workflowNew, wf.Name, int32(len(wf.Jobs))).Scan(&id); err != nil {
		return nil, fmt.Errorf("bucketed: make a workflow: %w", err)
	}
	dependents := wf.Dependents()
	if c := q.copier(tx, args); c != nil {
		return q.copyWorkflow(ctx, tx, c, args, id, wf, dependents)
	}
	for i, j := range wf.Jobs {
		node := j.ID
		args.Workflows[i], args.Nodes[i] = &id, &node
		args.DependsOn[i], args.Dependents[i] = textArray(j.DependsOn), textArray(dependents[j.ID])
		if j.RunAnyway {
			yes := true
			args.RunAnyways[i] = &yes
		}
	}
	rows, err := tx.Query(ctx, q.sql.insertWorkflow, args.workflowArgs()...)
	if err != nil {
		return nil, fmt.Errorf("bucketed: insert workflow %q (%d jobs): %w", wf.Name, len(wf.Jobs), err)
	}
	defer rows.Close()
	out := &InsertedWorkflow{ID: FormatID(id), Jobs: make(map[string]string, len(wf.Jobs))}
	for rows.Next() {
		var node string
		var jid int64
		if err := rows.Scan(&node, &jid); err != nil {
			return nil, err
		}
		out.Jobs[node] = FormatID(jid)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bucketed: insert workflow %q (%d jobs): %w", wf.Name, len(wf.Jobs), err)
	}
	if len(out.Jobs) != len(wf.Jobs) {
		return nil, fmt.Errorf("bucketed: workflow %d: %d of its %d jobs were inserted", id, len(out.Jobs), len(wf.Jobs))
	}
	return out, nil
}

// copyWorkflow writes a workflow's jobs by COPY (a large workflow, where
// the engine has COPY: Config.CopyMin), with their ids reserved first, so
// that no read maps them to their names, then their job_workflow_node
// rows by a second COPY. A job that waits is given its waiting run_at
// here (the INSERT's CASE does it there).
func (q *Queue) copyWorkflow(ctx context.Context, tx skiplock.Tx, c copyio.Copier, args insertParams, id int64, wf skiplock.Workflow, dependents map[string][]string) (*InsertedWorkflow, error) {
	waiting := skiplock.MaxRunAt
	for i, j := range wf.Jobs {
		if len(j.DependsOn) > 0 {
			args.RunAts[i] = &waiting
		}
	}
	orNull := func(names []string) any {
		if len(names) == 0 {
			return nil
		}
		return names
	}
	cols := []copyrows.Column{
		{Name: "workflow_id", Value: func(int) any { return id }},
		{Name: "workflow_node", Value: func(i int) any { return wf.Jobs[i].ID }},
		{Name: "depends_on", Value: func(i int) any { return orNull(wf.Jobs[i].DependsOn) }},
		{Name: "dependents", Value: func(i int) any { return orNull(dependents[wf.Jobs[i].ID]) }},
		{Name: "deps_left", Value: func(i int) any {
			if n := len(wf.Jobs[i].DependsOn); n > 0 {
				return int32(n)
			}
			return nil
		}},
		{Name: "run_anyway", Value: func(i int) any {
			if wf.Jobs[i].RunAnyway {
				return true
			}
			return nil
		}},
	}
	ids, err := q.copyJobs(ctx, tx, c, args, true, cols...)
	if err != nil {
		return nil, fmt.Errorf("bucketed: insert workflow %q (%d jobs): %w", wf.Name, len(wf.Jobs), err)
	}
	names, src := copyrows.New(copyrows.Indexes(len(ids)), []copyrows.Column{
		{Name: "workflow_id", Value: func(int) any { return id }},
		{Name: "node", Value: func(i int) any { return wf.Jobs[i].ID }},
		{Name: "job_id", Value: func(i int) any { return ids[i] }},
	})
	n, err := c.CopyFrom(ctx, []string{q.cfg.Schema, schema.JobWorkflowNodeTable}, names, src)
	if err == nil && n != int64(len(ids)) {
		err = fmt.Errorf("COPY wrote %d of %d rows", n, len(ids))
	}
	if err != nil {
		return nil, fmt.Errorf("bucketed: insert workflow %q (%d jobs): write its jobs' names: %w", wf.Name, len(wf.Jobs), err)
	}
	out := &InsertedWorkflow{ID: FormatID(id), Jobs: make(map[string]string, len(wf.Jobs))}
	for i, j := range wf.Jobs {
		out.Jobs[j.ID] = FormatID(ids[i])
	}
	return out, nil
}

// arrayElement escapes a quoted element of an array literal.
var arrayElement = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// textArray is names as a TEXT[] literal, each element quoted (nil for
// none, which the insert stores as null).
func textArray(names []string) *string {
	if len(names) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(arrayElement.Replace(n))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	s := b.String()
	return &s
}

// settle releases or cancels, in tx, the jobs that wait on the finished
// jobs (ok succeeded, bad ended badly: depgate.Gate.Settle), notifying
// their queues (Config.ReleaseNotify) in tx. Once tx commits (or its
// commit fails: an ambiguous one may have committed, and a wake for
// nothing costs a claim), this process's Workers of the released jobs'
// queues are woken (wakers), and a
// released job that sorts before a watermark makes this
// process's next claim of its queue probe the heads: a release written
// while other claims moved the watermarks (its run time is its
// statement's, its commit later) would otherwise wait for the next probe.
func (q *Queue) settle(ctx context.Context, tx skiplock.Querier, ok, bad []int64) error {
	if len(ok)+len(bad) == 0 {
		return nil
	}
	released, err := q.gate.Settle(ctx, tx, ok, bad)
	if err != nil || len(released) == 0 {
		return err
	}
	if q.cfg.ReleaseNotify != "" {
		queues := make([]string, len(released))
		for i, r := range released {
			queues[i] = r.Queue
		}
		if _, err := tx.Exec(ctx, q.sql.notify, q.cfg.ReleaseNotify, distinct(queues)); err != nil {
			return fmt.Errorf("bucketed: notify the release of %d job(s): %w", len(released), err)
		}
	}
	probe := func() {
		now := time.Now()
		var due []string
		for _, r := range released {
			q.hints.enqueued(r.Queue, r.Priority, r.RunAt) // a probe only if it sorts before a watermark
			if !r.RunAt.After(now) {
				due = append(due, r.Queue)
			}
		}
		q.wakers.wake(distinct(due)) // this process's workers of those queues claim now
	}
	if !txhook.AfterCommitTried(tx, probe) {
		probe() // a transaction skiplock did not begin: at once, and again at its next probe
	}
	return nil
}

// DependencyOutputs returns the outputs that job's dependencies recorded
// (RecordOutput), by their ids in its workflow: what a workflow job's
// handler reads of the jobs it waited for. A dependency that recorded
// nothing maps to null; one that retention deleted is missing.
func (q *Queue) DependencyOutputs(ctx context.Context, job *skiplock.Job) (map[string]json.RawMessage, error) {
	id, err := JobID(job)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, q.sql.dependencyOutputs, id)
	if err != nil {
		return nil, fmt.Errorf("bucketed: read job %d's dependency outputs: %w", id, err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var node string
		var output *string
		if err := rows.Scan(&node, &output); err != nil {
			return nil, err
		}
		out[node] = json.RawMessage("null")
		if output != nil {
			out[node] = json.RawMessage(*output)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bucketed: read job %d's dependency outputs: %w", id, err)
	}
	return out, nil
}

// endsWithDependents are the ids (parallel to jobs) of the failed jobs
// that have dependents and that their failure ends: cancelled by their
// handler (cancels, parallel too), or with no attempt left.
func endsWithDependents(jobs []*skiplock.Job, ids []int64, cancels []bool) []int64 {
	var ends []int64
	for i, j := range jobs {
		if j.Dependents > 0 && (cancels[i] || j.Attempts >= j.MaxAttempts) {
			ends = append(ends, ids[i])
		}
	}
	return ends
}

// withDependents are the ids of the jobs of jobs that have dependents.
func withDependents(jobs []*skiplock.Job) []int64 {
	var ids []int64
	for _, j := range jobs {
		if j.Dependents > 0 {
			if id, err := JobID(j); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// intersect returns the ids of a that are in b.
func intersect(a, b []int64) []int64 {
	in := make(map[int64]bool, len(b))
	for _, id := range b {
		in[id] = true
	}
	var out []int64
	for _, id := range a {
		if in[id] {
			out = append(out, id)
		}
	}
	return out
}

// without returns the ids of a that are not in b.
func without(a, b []int64) []int64 {
	out := slices.Clone(a)
	return slices.DeleteFunc(out, func(id int64) bool { return slices.Contains(b, id) })
}
