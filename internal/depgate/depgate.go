// Package depgate is the bucketed layout's gate of workflow dependencies:
// the statements that release or cancel the jobs waiting on finished
// ones, and that queue again the jobs a retried failure had cancelled.
// The completions (bucketed) and the rescuer (maintenance) end jobs, and
// both settle their dependents here, in the transaction that ends them.
package depgate

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/queryrows"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/schema"
)

//go:embed depgate.sql
var sqlSource string

// sqlFile is depgate.sql, parsed once.
var sqlFile = sqltext.MustParse("internal/depgate/depgate.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: vars})
}

// WaitingRunAt is the run_at of a job that waits for its dependencies as
// SQL: skiplock.MaxRunAt, so that no claim finds it due.
var WaitingRunAt = "'" + skiplock.MaxRunAt.Format("2006-01-02 15:04:05") + "+00'::TIMESTAMPTZ"

// NotFinished is true in SQL of a dependency, aliased d, that has not
// finished: a job waits for those (a dependency that ended badly cancels
// the jobs that do not run anyway before they count).
const NotFinished = `d."status" NOT IN ('Success', 'Failed', 'Canceled')`

func vars(_ *skiplock.Dialect, schemaName string) map[string]string {
	return map[string]string{
		"jobs":            sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobsTable),
		"workflow_nodes":  sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobWorkflowNodeTable),
		"status_type":     sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.StatusType),
		"waiting_run_at":  WaitingRunAt,
		"not_finished":    NotFinished,
		"cancelled_error": `'cancelled: its dependency ' || x.cause || ' failed or was cancelled'`,
	}
}

// Gate is the gate's statements rendered for one schema.
type Gate struct {
	settle, fence, cancelled, requeue string
}

// New renders the gate's statements for schemaName.
func New(schemaName string) *Gate {
	g := &Gate{}
	if err := sqlFile.Fill(vars(nil, schemaName), map[string]*string{"settle": &g.settle, "fence": &g.fence,
		"cancelled_dependents": &g.cancelled, "requeue_dependents": &g.requeue}); err != nil {
		panic(err) // embedded and the same for every schema: the tests render it
	}
	return g
}

// Released is a job that Settle made due.
type Released struct {
	Queue    string
	Priority int
	RunAt    time.Time
}

// Settle releases or cancels, in tx, the jobs that wait on the finished
// jobs: ok succeeded, bad ended badly (Failed, or Canceled). Level by level
// down the workflows (depgate.sql, settle). It returns the jobs it
// released.
func (g *Gate) Settle(ctx context.Context, tx skiplock.Querier, ok, bad []int64) ([]Released, error) {
	ids := append(slices.Clone(ok), bad...)
	flags := make([]bool, len(ids))
	for i := len(ok); i < len(ids); i++ {
		flags[i] = true
	}
	var released []Released
	for len(ids) > 0 {
		next, rel, err := g.level(ctx, tx, ids, flags)
		if err != nil {
			return released, fmt.Errorf("settle the dependents of %d job(s): %w", len(ids), err)
		}
		released = append(released, rel...)
		ids, flags = next, make([]bool, len(next))
		for i := range flags {
			flags[i] = true
		}
	}
	return released, nil
}

// level is one settle statement: the dependents it cancelled, and those
// it released.
func (g *Gate) level(ctx context.Context, tx skiplock.Querier, ids []int64, bad []bool) ([]int64, []Released, error) {
	rows, err := tx.Query(ctx, g.settle, ids, bad)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cancelled []int64
	var released []Released
	for rows.Next() {
		var id int64
		var status, queue string
		var prio int16
		var runAt time.Time
		if err := rows.Scan(&id, &status, &queue, &prio, &runAt); err != nil {
			return nil, nil, err
		}
		switch {
		case skiplock.Status(status) == skiplock.StatusCanceled:
			cancelled = append(cancelled, id)
		case !runAt.Equal(skiplock.MaxRunAt):
			released = append(released, Released{Queue: queue, Priority: int(prio), RunAt: runAt})
		}
	}
	return cancelled, released, rows.Err()
}

// BeforeRetry prepares, in tx, the retry of the finished job id (Failed
// or Canceled), before the retry counts what it waits for: it writes the
// job's dependencies that have not succeeded (depgate.sql, fence), and
// refuses the retry of a job that a dependency's bad end cancelled, which
// would wait for ever: that dependency's retry queues it again.
func (g *Gate) BeforeRetry(ctx context.Context, tx skiplock.Querier, id int64) error {
	rows, err := tx.Query(ctx, g.fence, []int64{id})
	if err != nil {
		return fmt.Errorf("write the dependencies of job %d: %w", id, err)
	}
	defer rows.Close()
	var blocker, state string
	for rows.Next() {
		var node, status string
		var anyway bool
		if err := rows.Scan(&node, &status, &anyway); err != nil {
			return err
		}
		if !anyway && (skiplock.Status(status) == skiplock.StatusFailed || skiplock.Status(status) == skiplock.StatusCanceled) && (blocker == "" || node < blocker) {
			blocker, state = node, status
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if blocker != "" {
		return usage.Errorf("cannot retry job %d: its dependency %q in its workflow is %s, and the job does not run anyway; retry that one, which queues this job again", id, blocker, state)
	}
	return nil
}

// Requeue queues again, in tx, the jobs that the failure of the jobs ids
// had cancelled (Settle), level by level, once ids are queued again (an
// operator's retry): each waits again for its dependencies that have not
// finished, or stays Canceled, naming another dependency that ended badly.
func (g *Gate) Requeue(ctx context.Context, tx skiplock.Querier, ids []int64) error {
	for len(ids) > 0 {
		next, err := g.requeueLevel(ctx, tx, ids)
		if err != nil {
			return fmt.Errorf("queue again the dependents of %d job(s): %w", len(ids), err)
		}
		ids = next
	}
	return nil
}

// requeueLevel queues again the dependents that the failure of ids
// cancelled, fenced first (BeforeRetry says why), and returns those it
// queued.
func (g *Gate) requeueLevel(ctx context.Context, tx skiplock.Querier, ids []int64) ([]int64, error) {
	deps, err := queryrows.Int64s(ctx, tx, g.cancelled, ids)
	if err != nil || len(deps) == 0 {
		return nil, err
	}
	if _, err := tx.Exec(ctx, g.fence, deps); err != nil {
		return nil, err
	}
	return queryrows.Int64s(ctx, tx, g.requeue, deps)
}
