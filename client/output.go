package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
)

// RecordOutput stores output, as json.Marshal encodes it (at most
// skiplock.MaxOutputBytes), as the output of the job whose handler ctx
// is: JobGet, `skiplock jobs show` and the dashboard's job page show it.
// It is written at once, under the job's lease (one statement), and stays
// with the job once it has finished, until retention deletes it (with
// Config.DeleteCompleted the job's row, output included, goes at its
// completion). Recorded again, the later output replaces the earlier; a
// failed attempt's output stays until a later attempt records its own.
//
// Bucketed queues without HeldClaims only: a fanout job leaves no row once
// it succeeds (its handler writes its results through TxFromContext, in
// the transaction that removes the job), and a held claim's transaction
// holds the job's row until its jobs have run. There, and outside a
// handler, it returns a usage error; skiplock.ErrLeaseLost when the job's
// lease is no longer this worker's.
func RecordOutput(ctx context.Context, output any) error {
	return record(ctx, "output", output, (*bucketed.Queue).RecordOutput)
}

// ReportProgress stores progress, as json.Marshal encodes it (at most
// skiplock.MaxOutputBytes), as the progress of the job whose handler ctx
// is, replacing what it reported before: the dashboard's job page and
// `skiplock jobs show` show the latest. Each call is one statement: report
// as often as a reader needs (every second or so), not at every step of a
// loop. Where it works and what it returns are RecordOutput's.
func ReportProgress(ctx context.Context, progress any) error {
	return record(ctx, "progress", progress, (*bucketed.Queue).ReportProgress)
}

// recordKey carries a handler's jobRecorder in its context.
type recordKey struct{}

// jobRecorder is what RecordOutput and ReportProgress need of the job a
// handler works: its queue and lease, or why it cannot record.
type jobRecorder struct {
	q    *bucketed.Queue
	job  *skiplock.Job
	none string // why the job cannot record, when it cannot
}

// withRecorder returns the context a bucketed queue's handler runs with.
func withRecorder(ctx context.Context, q *bucketed.Queue, job *skiplock.Job, held bool) context.Context {
	r := &jobRecorder{q: q, job: job}
	if held {
		r.none = "its queue has HeldClaims, whose claim's transaction holds the job's row until the job has run"
	}
	return context.WithValue(ctx, recordKey{}, r)
}

// withNoRecorder returns the context a fanout queue's handler runs with.
func withNoRecorder(ctx context.Context) context.Context {
	return context.WithValue(ctx, recordKey{}, &jobRecorder{none: "a fanout job leaves no row once it succeeds: write its results through TxFromContext, in the transaction that removes it"})
}

// record writes v, JSON-encoded, as the handler's job's what through
// write (bucketed.Queue.RecordOutput or ReportProgress).
func record(ctx context.Context, what string, v any, write func(q *bucketed.Queue, ctx context.Context, job *skiplock.Job, v json.RawMessage) error) error {
	r, ok := ctx.Value(recordKey{}).(*jobRecorder)
	switch {
	case !ok:
		return usage.Errorf("client: a job's %s can be recorded only from its handler, with the context the handler was given", what)
	case r.none != "":
		return usage.Errorf("client: this job cannot record its %s: %s", what, r.none)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return usage.Errorf("client: job %s: its %s does not encode as JSON: %v", r.job.ID, what, err)
	}
	if err := write(r.q, ctx, r.job, b); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}
