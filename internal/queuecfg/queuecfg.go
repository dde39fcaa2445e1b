// Package queuecfg fills and checks the settings both layouts' Configs
// share (schema, payload limit, enqueue batch, retry options), so the two
// layouts validate them the same way from one place while each keeps its
// own exported Config fields.
package queuecfg

import (
	"log/slog"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/retry"
	"github.com/skiplock/skiplock/schema"
)

// DefaultCopyMin is the fewest jobs a batch sends by COPY where the
// engine has it (Dialect.BulkCopy); smaller batches take the INSERT, whose
// one statement costs less than COPY's extra round trips.
const DefaultCopyMin = 64

// Shared points at a layout Config's shared fields.
type Shared struct {
	Schema          *string
	MaxPayloadBytes *int
	EnqueueBatch    *int
	Retry           **retry.Options
	Logger          **slog.Logger
}

// Fill validates the shared fields and fills their defaults: the default
// schema, defaultBatch jobs per INSERT, a copy of the retry options at
// the engine's queue isolation when none is set, and slog.Default() for
// a nil logger. Bad values are usage
// errors that name the field and the fix.
func (s Shared) Fill(d *skiplock.Dialect, defaultBatch int) error {
	if *s.Schema == "" {
		*s.Schema = schema.DefaultSchema
	}
	if err := sqlident.Validate("schema", *s.Schema); err != nil {
		return err
	}
	if *s.MaxPayloadBytes < 0 {
		return usage.Errorf("max payload bytes %d is negative: use 0 for the default (%d)", *s.MaxPayloadBytes, skiplock.DefaultMaxPayloadBytes)
	}
	if *s.EnqueueBatch < 0 {
		return usage.Errorf("enqueue batch %d is negative: use 0 for the default (%d)", *s.EnqueueBatch, defaultBatch)
	}
	if *s.EnqueueBatch == 0 {
		*s.EnqueueBatch = defaultBatch
	}
	r := retry.Options{}
	if *s.Retry != nil {
		r = **s.Retry
	}
	if r.Isolation == skiplock.IsoDefault {
		r.Isolation = d.DefaultIsolation
	}
	*s.Retry = &r
	*s.Logger = logs.OrDefault(*s.Logger)
	return nil
}

// CheckRelease refuses, before anything runs, an engine release whose
// claims would misbehave at the isolation level r sets
// (skiplock.Dialect.ReadCommittedSkipLockedSince).
func CheckRelease(db *skiplock.DB, r *retry.Options) error {
	d := db.Dialect()
	if r.Isolation == skiplock.IsoReadCommitted && d.ReadCommittedSkipLockedSince != "" {
		return db.RequireRelease(d.ReadCommittedSkipLockedSince, "claims with FOR UPDATE SKIP LOCKED at READ COMMITTED (cockroachdb/cockroach#121917, fixed by #127718)")
	}
	return nil
}
