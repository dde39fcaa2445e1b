package client

import (
	"context"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/fanout"
	"github.com/skiplock/skiplock/internal/usage"
)

// engine is one layout's queue as the client inserts into it. Both
// layouts' queues implement it; the client holds one per queue (New picks
// it, and addRunner builds its worker), so nothing else chooses a layout.
type engine interface {
	EnqueueNotify(ctx context.Context, db skiplock.Querier, channel string, jobs ...skiplock.NewJob) ([]string, error)
}

// queueWorker is one worked queue's workers, in either layout.
type queueWorker interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

var (
	_ engine      = (*bucketed.Queue)(nil)
	_ engine      = (*fanout.Queue)(nil)
	_ queueWorker = (*bucketed.Worker)(nil)
	_ queueWorker = (*fanout.Worker)(nil)
)

// engineOf is the engine of queue: its declared layout's, else bucketed,
// which takes any queue.
func (c *Client) engineOf(queue string) (engine, error) {
	if fq, ok := c.fq[queue]; ok {
		return fq, nil
	}
	if c.bq == nil {
		return nil, usage.Errorf("the schema %q has no bucketed layout: run `skiplock migrate --schema %s --layout bucketed`", c.cfg.Schema, c.cfg.Schema)
	}
	return c.bq, nil
}
