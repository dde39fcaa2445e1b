// PLACEHOLDER: replaced by admin/rollup.go at merge.

package admin

import (
	"context"
	"time"
)

// Rollup is one queue's minute: jobs completed and failed, and wait and
// run time percentiles.
type Rollup struct {
	Queue                     string
	Minute                    time.Time // start of the minute, UTC
	Completed                 int64
	Failed                    int64
	WaitP50, WaitP95, WaitP99 time.Duration
	RunP50, RunP95, RunP99    time.Duration
}

// Rollups returns the rollups since a time; queue "" = all; ordered by
// minute then queue.
func (a *Admin) Rollups(ctx context.Context, queue string, since time.Time) ([]Rollup, error) {
	return nil, nil
}

// Client is one running client of the schema.
type Client struct {
	ID                  string
	Host                string
	PID                 int
	Queues              []string
	StartedAt, LastSeen time.Time
	Leader              bool
}

// Clients lists the schema's clients.
func (a *Admin) Clients(ctx context.Context) ([]Client, error) {
	return nil, nil
}
