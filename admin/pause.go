package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
)

// MaxNamedQueues is how many known queues CheckQueueKnown's error names
// before it says how many more there are: enough to spot a typo, short
// enough for a terminal.
const MaxNamedQueues = 20

// KnownQueues lists, sorted and once each, the queues the schema knows:
// those Queues lists (with jobs in either layout, declared by a running
// client, or ever paused or resumed). Queues reads capped samples, so a
// queue whose only jobs lie beyond them may be missing (Queues' doc).
func (a *Admin) KnownQueues(ctx context.Context) ([]string, error) {
	qs, err := a.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.Name)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// CheckQueueKnown returns nil when the schema knows queue (KnownQueues),
// and otherwise a usage error that names the known queues and ends with
// orElse, what the caller does to act on a new queue anyway (its own way
// of asking to create it). Pausing a name nobody uses would otherwise
// record a paused queue no job goes to, and report success.
func (a *Admin) CheckQueueKnown(ctx context.Context, queue, orElse string) error {
	if err := skiplock.ValidateQueueName(queue); err != nil {
		return err
	}
	// The pause table alone is one small read: a queue ever paused or
	// resumed needs no count of the jobs.
	states, err := a.queueStates(ctx)
	if err != nil {
		return err
	}
	if _, ok := states[queue]; ok {
		return nil
	}
	known, err := a.KnownQueues(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(known, queue) {
		return nil
	}
	return usage.Errorf("queue %q is unknown to schema %q (no jobs, no running client working it, never paused): %s; check the name, or %s",
		queue, a.schema, namedQueues(known), orElse)
}

// namedQueues names the known queues, at most MaxNamedQueues of them.
func namedQueues(known []string) string {
	switch {
	case len(known) == 0:
		return "the schema has no queues yet"
	case len(known) <= MaxNamedQueues:
		return "known queues: " + strings.Join(known, ", ")
	}
	return fmt.Sprintf("known queues: %s and %d more (skiplock queues list)",
		strings.Join(known[:MaxNamedQueues], ", "), len(known)-MaxNamedQueues)
}

// QueueLimits reads a queue's concurrency limits and how many of its
// slots are held (bucketed.LimitsState). Limits apply to the bucketed
// layout; a schema without it has none to read.
func (a *Admin) QueueLimits(ctx context.Context, queue string) (bucketed.LimitsState, error) {
	if a.bq == nil {
		return bucketed.LimitsState{}, errLimitsNeedBucketed(a.schema)
	}
	return a.bq.LimitsOf(ctx, queue)
}

// SetQueueLimits sets a queue's concurrency limits, live (see
// bucketed.Queue.SetLimits); zero clears a limit.
func (a *Admin) SetQueueLimits(ctx context.Context, queue string, l bucketed.Limits) error {
	if a.bq == nil {
		return errLimitsNeedBucketed(a.schema)
	}
	return a.bq.SetLimits(ctx, queue, l)
}

// errLimitsNeedBucketed says that a schema without the bucketed layout
// cannot take limits: they are set through its tables (job_slot), for
// both layouts' queues.
func errLimitsNeedBucketed(schemaName string) error {
	return usage.Errorf("schema %q has no bucketed layout: queue limits are set through its tables, for fanout queues too; run `skiplock migrate --schema %s --layout bucketed` to add it", schemaName, schemaName)
}
