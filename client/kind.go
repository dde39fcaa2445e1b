package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

// Args is a job's arguments: a Go type, JSON-encoded into the job's
// payload, whose Kind names the worker that runs it. Kind must work on the
// zero value (a value receiver on a struct type): the client reads it
// from the zero value when a worker is registered.
type Args interface {
	Kind() string
}

// ArgsWithInsertOpts is Args that sets its own insert defaults (queue,
// priority, max attempts...), which InsertOpts given at insert override.
type ArgsWithInsertOpts interface {
	Args
	InsertOpts() InsertOpts
}

// Job is a job as a typed worker sees it: the job's row and its decoded
// arguments.
type Job[T Args] struct {
	*skiplock.Job
	// Args are the job's arguments, decoded from its payload.
	Args T
}

// Worker works jobs of one kind.
type Worker[T Args] interface {
	// Work runs one job. nil completes it; an error fails the attempt
	// (retried with backoff until its attempts are used up);
	// skiplock.Snooze(d) runs it again after d without counting the
	// attempt; skiplock.RetryAfter(err, d) fails it with its own wait.
	// ctx ends at the job's timeout, on a hard stop, and (bucketed) when
	// the job's lease is lost. On a fanout queue, TxFromContext(ctx) is
	// the job's transaction: write through it for exactly-once effects.
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc is a function as a Worker.
type WorkFunc[T Args] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// KindOptions are a kind's defaults, set where its worker is registered.
// Insert options and ArgsWithInsertOpts override the insert ones.
type KindOptions struct {
	// Queue is where jobs of the kind go when the insert names none; ""
	// means skiplock.DefaultQueue.
	Queue string
	// Priority is the kind's default priority (lower runs first).
	Priority int
	// MaxAttempts is the kind's default attempts; 0 means
	// skiplock.DefaultMaxAttempts.
	MaxAttempts int
	// Timeout bounds each attempt: the handler's context ends then and the
	// attempt fails with an error that says so. 0 means the client's
	// Config.JobTimeout; negative, none.
	Timeout time.Duration
	// Backoff, when set, is the wait before the next attempt after the
	// attempt-th failed (a retry policy); nil means the layout's
	// exponential backoff with jitter.
	Backoff func(attempt int) time.Duration
}

// Workers is the set of kinds a client can work, each with its worker.
// Build it with NewWorkers and AddWorker before New.
type Workers struct {
	kinds map[string]*kind
}

// kind is one registered kind: its worker, untyped.
type kind struct {
	name string
	opts KindOptions
	work func(ctx context.Context, job *skiplock.Job) error
}

// NewWorkers returns an empty set of workers.
func NewWorkers() *Workers { return &Workers{kinds: map[string]*kind{}} }

// AddWorker registers w for the kind of T. A kind may be registered once.
// opts may be nil.
func AddWorker[T Args](ws *Workers, w Worker[T], opts *KindOptions) error {
	if ws == nil || w == nil {
		return usage.Errorf("client.AddWorker: workers and worker are required")
	}
	name, err := kindOf[T]()
	if err != nil {
		return err
	}
	return ws.add("client.AddWorker", &kind{name: name, work: func(ctx context.Context, job *skiplock.Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return fmt.Errorf("decode the arguments of kind %q: %w (was the job inserted by an older version of %T?)", name, err, args)
		}
		return w.Work(ctx, &Job[T]{Job: job, Args: args})
	}}, opts)
}

// AddRawWorker registers work for jobs of kind whose arguments are not a
// Go type: it gets the job's row and decodes the payload itself. kind ""
// takes the jobs enqueued without a kind (skiplock enqueue, the layouts'
// Enqueue). opts may be nil.
func AddRawWorker(ws *Workers, name string, work func(ctx context.Context, job *skiplock.Job) error, opts *KindOptions) error {
	if ws == nil || work == nil {
		return usage.Errorf("client.AddRawWorker: workers and work are required")
	}
	return ws.add("client.AddRawWorker", &kind{name: name, work: work}, opts)
}

// add registers k with opts, checking the kind and its defaults.
func (ws *Workers) add(caller string, k *kind, opts *KindOptions) error {
	if _, dup := ws.kinds[k.name]; dup {
		return usage.Errorf("%s: kind %q is registered twice: register each kind once", caller, k.name)
	}
	if opts != nil {
		k.opts = *opts
	}
	if err := (&skiplock.NewJob{Queue: k.opts.Queue, Priority: k.opts.Priority, MaxAttempts: k.opts.MaxAttempts, Kind: k.name}).Normalize(0); err != nil {
		return fmt.Errorf("%s: kind %q: %w", caller, k.name, err)
	}
	ws.kinds[k.name] = k
	return nil
}

// kindOf reads T's kind from its zero value.
func kindOf[T Args]() (name string, err error) {
	var zero T
	defer func() {
		if r := recover(); r != nil {
			err = usage.Errorf("client: %T's Kind method panics on the zero value (%v): give Kind a value receiver on a struct type", zero, r)
		}
	}()
	name = zero.Kind()
	if name == "" {
		return "", usage.Errorf("client: %T's Kind() is empty: return a name such as \"send_email\"", zero)
	}
	return name, nil
}

// names lists the registered kinds, sorted.
func (ws *Workers) names() []string {
	if ws == nil {
		return nil
	}
	out := make([]string, 0, len(ws.kinds))
	for n := range ws.kinds {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (ws *Workers) lookup(name string) *kind {
	if ws == nil {
		return nil
	}
	return ws.kinds[name]
}

// UnknownKindError is the failure of a job whose kind has no worker in the
// client that claimed it. The attempt fails and is retried with backoff
// (a newer process may know the kind), so the job is dead only when its
// attempts run out.
type UnknownKindError struct {
	// Kind is the job's kind.
	Kind string
	// Known are the kinds this client has workers for.
	Known []string
}

// Error names the kind and the fix.
func (e *UnknownKindError) Error() string {
	known := "none"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("no worker for kind %q in this client (it has: %s): register one with client.AddWorker, or work this queue with a client that has it", e.Kind, known)
}
