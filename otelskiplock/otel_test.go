package otelskiplock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/testdb"
	"github.com/skiplock/skiplock/otelskiplock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type pingArgs struct {
	Fail bool `json:"fail"`
}

func (pingArgs) Kind() string { return "ping" }

// TestWorkSpanContinuesTheInsertingTrace: a job inserted inside a request's
// span is worked by another client (as another process would); the
// attempt's span belongs to the request's trace, as a child of the insert
// span, and a failed attempt's span records the error.
func TestWorkSpanContinuesTheInsertingTrace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.Open(t, &skiplock.OpenConfig{MaxConns: 30})
	db, s := testdb.MigratedOn(t, db, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mw := otelskiplock.Middleware(&otelskiplock.Config{TracerProvider: tp, Propagator: propagation.TraceContext{}})

	done := make(chan bool, 2)
	ws := client.NewWorkers()
	if err := client.AddWorker(ws, client.WorkFunc[pingArgs](func(ctx context.Context, j *client.Job[pingArgs]) error {
		defer func() { done <- j.Args.Fail }()
		if j.Args.Fail {
			return errors.New("ping failed")
		}
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	worker, err := client.New(ctx, db, &client.Config{Schema: s, Workers: ws, Middleware: []client.Middleware{mw},
		Queues: map[string]client.QueueConfig{"default": {MaxWorkers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := client.New(ctx, db, &client.Config{Schema: s, Middleware: []client.Middleware{mw}})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer worker.Stop(ctx) //nolint:errcheck // nothing to check

	reqCtx, req := tp.Tracer("test").Start(ctx, "request")
	for _, fail := range []bool{false, true} {
		if _, err := inserter.Insert(reqCtx, pingArgs{Fail: fail}, &client.InsertOpts{MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	req.End()
	<-done
	<-done
	// The work spans end as the handlers return, after done.
	testdb.WaitFor(t, "the two work spans to end", 30*time.Second, func() bool {
		n := 0
		for _, sp := range rec.Ended() {
			if sp.Name() == "skiplock.work ping" {
				n++
			}
		}
		return n >= 2
	})
	var inserts, works []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "skiplock.insert":
			inserts = append(inserts, sp)
		case "skiplock.work ping":
			works = append(works, sp)
		}
	}
	if len(inserts) != 2 || len(works) != 2 {
		t.Fatalf("%d insert spans and %d work spans, want 2 and 2", len(inserts), len(works))
	}
	parents := map[string]bool{}
	for _, in := range inserts {
		if in.SpanContext().TraceID() != req.SpanContext().TraceID() {
			t.Fatalf("insert span outside the request's trace")
		}
		parents[in.SpanContext().SpanID().String()] = true
	}
	failed := 0
	for _, w := range works {
		if w.SpanContext().TraceID() != req.SpanContext().TraceID() || !parents[w.Parent().SpanID().String()] {
			t.Fatalf("work span %v is not a child of an insert span of the request's trace", w.SpanContext())
		}
		if w.Status().Code == codes.Error {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d work spans with an error status, want 1", failed)
	}
}
