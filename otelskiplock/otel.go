// Package otelskiplock traces a skiplock client with OpenTelemetry: a span
// for every insert and every attempt, and the trace context of the
// inserting request carried in the job's metadata, so that the attempt's
// span continues the trace that enqueued the job, in whichever process
// works it. It is its own package so that programs that do not use
// OpenTelemetry do not import it.
//
//	c, err := client.New(ctx, db, &client.Config{
//		Middleware: []client.Middleware{otelskiplock.Middleware(nil)},
//		...
//	})
package otelskiplock

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/client"
	"github.com/skiplock/skiplock/internal/usage"
)

// MetadataKey is the key of the job metadata object that carries the
// trace context (a map of the propagator's fields, such as traceparent).
const MetadataKey = "otel"

// instrumentation names the tracer.
const instrumentation = "github.com/skiplock/skiplock/otelskiplock"

// Config tunes the middleware; nil or the zero value uses the global
// tracer provider and propagator (otel.GetTracerProvider,
// otel.GetTextMapPropagator).
type Config struct {
	// TracerProvider makes the tracer; nil means the global one.
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in job metadata; nil
	// means the global one.
	Propagator propagation.TextMapPropagator
}

// Middleware returns client middleware that traces inserts (span
// "skiplock.insert", a producer span) and attempts (span
// "skiplock.work <kind>", a consumer span that is a child of the
// inserting span's context). A failed attempt's span records the error.
func Middleware(cfg *Config) client.Middleware {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = otel.GetTextMapPropagator()
	}
	tracer := c.TracerProvider.Tracer(instrumentation)
	return client.Middleware{
		Insert: func(ctx context.Context, jobs []*skiplock.NewJob, next func(context.Context) error) error {
			attrs := []attribute.KeyValue{attribute.Int("skiplock.jobs", len(jobs))}
			if len(jobs) > 0 {
				attrs = append(attrs, attribute.String("skiplock.kind", jobs[0].Kind), attribute.String("skiplock.queue", jobs[0].Queue))
			}
			ctx, span := tracer.Start(ctx, "skiplock.insert", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			carrier := propagation.MapCarrier{}
			c.Propagator.Inject(ctx, carrier)
			for _, j := range jobs {
				m, err := withCarrier(j.Metadata, carrier)
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
					return err
				}
				j.Metadata = m
			}
			err := next(ctx)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		},
		Work: func(ctx context.Context, job *skiplock.Job, next func(context.Context) error) error {
			ctx = c.Propagator.Extract(ctx, carrierOf(job.Metadata))
			ctx, span := tracer.Start(ctx, "skiplock.work "+job.Kind, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("skiplock.kind", job.Kind), attribute.String("skiplock.queue", job.Queue),
				attribute.String("skiplock.job_id", job.ID), attribute.Int("skiplock.attempt", job.Attempts),
			))
			defer span.End()
			err := next(ctx)
			if d, ok := skiplock.AsSnooze(err); ok {
				span.SetAttributes(attribute.String("skiplock.snoozed_for", d.String()))
				return err
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		},
	}
}

// withCarrier returns the metadata object m with the trace context set
// under MetadataKey.
func withCarrier(m json.RawMessage, carrier propagation.MapCarrier) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if len(m) > 0 {
		if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
			return nil, usage.Errorf("otelskiplock: the job's metadata is not a JSON object: %s", m)
		}
	}
	if len(carrier) == 0 {
		return m, nil // no span context to carry
	}
	raw, err := json.Marshal(map[string]string(carrier))
	if err != nil {
		return nil, fmt.Errorf("otelskiplock: encode the trace context: %w", err)
	}
	obj[MetadataKey] = raw
	return json.Marshal(obj)
}

// carrierOf reads the trace context a job's metadata carries; an empty
// carrier when it has none.
func carrierOf(m json.RawMessage) propagation.MapCarrier {
	var obj map[string]json.RawMessage
	if json.Unmarshal(m, &obj) != nil {
		return propagation.MapCarrier{}
	}
	carrier := propagation.MapCarrier{}
	json.Unmarshal(obj[MetadataKey], (*map[string]string)(&carrier)) //nolint:errcheck // a malformed carrier is no carrier
	return carrier
}
