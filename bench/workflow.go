package bench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/retry"
)

// insertWorkflow inserts n jobs as one workflow in one transaction
// (Config.WorkflowRoots): the roots first, then each other job depending
// on the roots in turn.
func insertWorkflow(ctx context.Context, c *Config, db *skiplock.DB, n int) error {
	q, err := bucketed.New(ctx, db, &bucketed.Config{Schema: c.Schema})
	if err != nil {
		return err
	}
	roots := min(c.WorkflowRoots, n)
	wf := skiplock.Workflow{Name: "bench", Jobs: make([]skiplock.WorkflowJob, n)}
	for i := range wf.Jobs {
		j := skiplock.WorkflowJob{ID: strconv.Itoa(i), Job: skiplock.NewJob{Queue: DefaultQueue, Payload: []byte(`{}`)}}
		if i >= roots {
			j.DependsOn = []string{strconv.Itoa(i % roots)}
		}
		wf.Jobs[i] = j
	}
	err = retry.Run(ctx, db, retryOptions(db, nil), func(ctx context.Context, tx skiplock.Tx) error {
		_, err := q.InsertWorkflow(ctx, tx, wf)
		return err
	})
	if err != nil {
		return fmt.Errorf("insert a workflow of %d jobs: %w", n, err)
	}
	return nil
}
