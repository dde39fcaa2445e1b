package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

// Workflow is a workflow of bucketed jobs (client.Client.InsertWorkflow)
// as operators see it.
type Workflow struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Size      int       `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	// Counts are its jobs by state (States, and waiting: queued behind
	// dependencies); a job retention deleted is not counted.
	Counts map[string]int64 `json:"counts"`
	// Jobs are its jobs, in id order (WorkflowShow only).
	Jobs []WorkflowJob `json:"jobs,omitempty"`
}

// WorkflowJob is one job of a Workflow: what waits on what.
type WorkflowJob struct {
	ID string `json:"id"`
	// Name is the job's id in its workflow.
	Name  string `json:"name"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// State is one of States, or waiting: queued behind dependencies.
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	FinishedAt  *time.Time `json:"finished_at"`
	LastError   *string    `json:"last_error"`
	// DependsOn are the job ids it depends on; DependsOnNames the same
	// by their names in the workflow (one whose job retention deleted has
	// a name and no id).
	DependsOn      []string `json:"depends_on"`
	DependsOnNames []string `json:"depends_on_names"`
	// RunAnyway: it runs when a dependency fails for good or is
	// cancelled, instead of being cancelled.
	RunAnyway bool `json:"run_anyway,omitempty"`
	// CanceledBy names the dependency whose failure cancelled it.
	CanceledBy string          `json:"canceled_by,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
}

// Workflows returns up to limit workflows (1 to MaxLimit), newest first,
// those with ids below before ("" for the first page), each with its jobs
// counted by state.
func (a *Admin) Workflows(ctx context.Context, limit int, before string) ([]Workflow, error) {
	if err := a.needWorkflows(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxLimit {
		return nil, usage.Errorf("limit %d: use 1 to %d", limit, MaxLimit)
	}
	start := int64(math.MaxInt64)
	if before != "" {
		id, err := strconv.ParseInt(before, 10, 64)
		if err != nil {
			return nil, usage.Errorf("workflow id %q is not a workflow id (a decimal integer)", before)
		}
		start = id
	}
	return a.workflows(ctx, a.sql["workflows_list"], limit, start)
}

// WorkflowShow returns one workflow with its jobs. An unknown id returns
// an error wrapping skiplock.ErrNoJob.
func (a *Admin) WorkflowShow(ctx context.Context, id string) (*Workflow, error) {
	wid, w, err := a.workflowRow(ctx, "show", id)
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, a.sql["workflow_jobs"], wid)
	if err != nil {
		return nil, fmt.Errorf("admin: workflow %s's jobs: %w", id, err)
	}
	defer rows.Close()
	byName := map[string]string{}
	for rows.Next() {
		var j WorkflowJob
		var attempts, maxA int64
		var canceledBy, output *string
		if err := rows.Scan(&j.ID, &j.Name, &j.Queue, &j.Kind, &j.State, &attempts, &maxA, &j.FinishedAt, &j.LastError,
			&j.DependsOnNames, &j.RunAnyway, &canceledBy, &output); err != nil {
			return nil, err
		}
		j.Attempts, j.MaxAttempts = int(attempts), int(maxA)
		if canceledBy != nil {
			j.CanceledBy = *canceledBy
		}
		if output != nil {
			j.Output = json.RawMessage(*output)
		}
		byName[j.Name] = j.ID
		w.Counts[j.State]++
		w.Jobs = append(w.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: workflow %s's jobs: %w", id, err)
	}
	for i := range w.Jobs {
		w.Jobs[i].DependsOn = []string{}
		for _, n := range w.Jobs[i].DependsOnNames {
			if jid, ok := byName[n]; ok {
				w.Jobs[i].DependsOn = append(w.Jobs[i].DependsOn, jid)
			}
		}
	}
	return w, nil
}

// WorkflowCancel cancels every queued, waiting or running job of the
// workflow (a running one's handler sees its context cancelled at its
// next heartbeat) and returns how many.
func (a *Admin) WorkflowCancel(ctx context.Context, id string) (int, error) {
	wid, _, err := a.workflowRow(ctx, "cancel", id) // its row, not its jobs
	if err != nil {
		return 0, err
	}
	ids, err := queryrows.Int64s(ctx, a.db, a.sql["workflow_cancel"], wid)
	if err != nil {
		return 0, fmt.Errorf("admin: cancel workflow %s: %w", id, err)
	}
	return len(ids), nil
}

// WorkflowRetry retries the workflow's failed jobs (Do's Retry): each
// runs again, and the jobs its failure cancelled wait for it again. It
// returns how many jobs it retried.
func (a *Admin) WorkflowRetry(ctx context.Context, id string) (int, error) {
	wid, _, err := a.workflowRow(ctx, "retry", id)
	if err != nil {
		return 0, err
	}
	ids, err := queryrows.Int64s(ctx, a.db, a.sql["workflow_failed"], wid)
	if err != nil {
		return 0, fmt.Errorf("admin: retry workflow %s: %w", id, err)
	}
	n := 0
	for _, i := range ids {
		jid := strconv.FormatInt(i, 10)
		if err := a.Do(ctx, Retry, jid); err != nil {
			return n, fmt.Errorf("admin: retry workflow %s: job %s: %w", id, jid, err)
		}
		n++
	}
	return n, nil
}

// workflows reads workflow rows (workflows_list, workflow_row).
func (a *Admin) workflows(ctx context.Context, sql string, args ...any) ([]Workflow, error) {
	rows, err := a.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("admin: workflows: %w", err)
	}
	defer rows.Close()
	var out []Workflow
	for rows.Next() {
		var w Workflow
		var size int64
		var counts string
		if err := rows.Scan(&w.ID, &w.Name, &size, &w.CreatedAt, &counts); err != nil {
			return nil, err
		}
		w.Size = int(size)
		if err := json.Unmarshal([]byte(counts), &w.Counts); err != nil {
			return nil, fmt.Errorf("admin: workflow %s's counts: %w", w.ID, err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// workflowRow reads the workflow with this id (its row, without its
// jobs), for action; an unknown id is noWorkflow's error.
func (a *Admin) workflowRow(ctx context.Context, action, id string) (int64, *Workflow, error) {
	wid, err := a.workflowID(action, id)
	if err != nil {
		return 0, nil, err
	}
	ws, err := a.workflows(ctx, a.sql["workflow_row"], wid)
	if err != nil {
		return 0, nil, err
	}
	if len(ws) == 0 {
		return 0, nil, noWorkflow(action, id)
	}
	return wid, &ws[0], nil
}

// workflowID parses a workflow id for action, refusing it where the
// schema has no workflows.
func (a *Admin) workflowID(action, id string) (int64, error) {
	if err := a.needWorkflows(); err != nil {
		return 0, err
	}
	wid, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return 0, noWorkflow(action, id)
	}
	return wid, nil
}

// needWorkflows refuses where the schema has no bucketed layout.
func (a *Admin) needWorkflows() error {
	if !a.has[schema.LayoutBucketed] {
		return usage.Errorf("schema %q has no bucketed layout, so no workflows: run %s", a.schema, migrateCmd(a.schema))
	}
	return nil
}

// noWorkflow is the error for an unknown workflow id: it wraps
// skiplock.ErrNoJob, as an unknown job id's does.
func noWorkflow(action, id string) error {
	return &noWorkflowError{action: action, id: id}
}

type noWorkflowError struct{ action, id string }

func (e *noWorkflowError) Error() string {
	return fmt.Sprintf("cannot %s workflow %s: no workflow has that id (it never existed, or retention deleted it with its jobs)", e.action, e.id)
}

func (e *noWorkflowError) Unwrap() error { return usage.ErrNoJob }
