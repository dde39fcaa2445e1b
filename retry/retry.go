// Package retry runs transactions again when the engine answers with a
// serialization failure, which on distributed SQL (YugabyteDB, CockroachDB)
// is a normal answer, not a bug. Errors are classified as retryable,
// ambiguous or permanent ([Classify]); [Run] begins, calls the function,
// commits, and on a retryable error rolls back and runs it again with
// exponential backoff and full jitter. A failure during COMMIT is ambiguous
// (the transaction may have committed) and is returned as
// [*AmbiguousCommitError], never retried blindly.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
)

// Class is how an error should be handled.
type Class int

// The classes of error.
const (
	// Permanent errors fail the same way when tried again.
	Permanent Class = iota
	// Retryable errors left nothing applied; running the whole
	// transaction again is safe.
	Retryable
	// Ambiguous errors leave it unknown whether the transaction
	// committed.
	Ambiguous
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Ambiguous:
		return "ambiguous"
	}
	return "permanent"
}

// Classify says how to handle err from any statement but COMMIT. It finds
// the SQLSTATE through errors.As on a SQLState() string method, so it works
// for both pgx drivers' errors and through any wrapping.
func Classify(err error) Class {
	if err == nil {
		return Permanent
	}
	var amb *AmbiguousCommitError
	if errors.As(err, &amb) {
		return Ambiguous
	}
	switch code := skiplock.SQLState(err); {
	case code == "40001", code == "40P01", code == "CR000":
		return Retryable
	case code != "":
		// Some CockroachDB and YugabyteDB releases report restarts with
		// other codes but a telling message.
		if msg := strings.ToLower(err.Error()); strings.Contains(msg, "restart transaction") ||
			strings.Contains(msg, "restart read required") {
			return Retryable
		}
		return Permanent
	}
	if safeToRetry(err) {
		return Retryable
	}
	return Permanent
}

// safeToRetry reports a connection failure where nothing reached the
// server (either driver's pgconn.SafeToRetry).
func safeToRetry(err error) bool {
	var s interface{ SafeToRetry() bool }
	if errors.As(err, &s) {
		return s.SafeToRetry()
	}
	return pgconn.SafeToRetry(err) || ybpgconn.SafeToRetry(err)
}

// AmbiguousCommitError says COMMIT failed in a way that leaves it unknown
// whether the transaction committed. The caller must resolve it from the
// data (the layouts do, by their lease and fencing rules).
type AmbiguousCommitError struct {
	// Err is the commit's error.
	Err error
}

func (e *AmbiguousCommitError) Error() string {
	return "commit outcome unknown (the transaction may or may not have committed): " + e.Err.Error()
}

// Unwrap returns the commit's error.
func (e *AmbiguousCommitError) Unwrap() error { return e.Err }

// Options tune Run. The zero value (or nil) is usable.
type Options struct {
	// Isolation for each attempt; IsoDefault leaves the server's.
	Isolation skiplock.IsoLevel
	// MaxAttempts bounds the tries, the first included; 0 means 10.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt (doubling after,
	// with full jitter); 0 means 5ms.
	BaseDelay time.Duration
	// MaxDelay caps one backoff; 0 means 1s.
	MaxDelay time.Duration
	// Counters, when set, count attempts and retries.
	Counters *Counters
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.MaxAttempts <= 0 {
		out.MaxAttempts = 10
	}
	if out.BaseDelay <= 0 {
		out.BaseDelay = 5 * time.Millisecond
	}
	if out.MaxDelay <= 0 {
		out.MaxDelay = time.Second
	}
	return out
}

// Counters count what Run did, for reports. Safe for concurrent use.
type Counters struct {
	attempts atomic.Int64
	retries  atomic.Int64
	mu       sync.Mutex
	byState  map[string]int64
}

// Attempts is how many transactions Run began.
func (c *Counters) Attempts() int64 { return c.attempts.Load() }

// Retries is how many of them were runs again after a retryable error.
func (c *Counters) Retries() int64 { return c.retries.Load() }

// RetriesBySQLState maps SQLSTATE (or "conn" for connection failures) to
// retry counts.
func (c *Counters) RetriesBySQLState() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.byState))
	for k, v := range c.byState {
		out[k] = v
	}
	return out
}

func (c *Counters) retried(err error) {
	if c == nil {
		return
	}
	c.retries.Add(1)
	code := skiplock.SQLState(err)
	if code == "" {
		code = "conn"
	}
	c.mu.Lock()
	if c.byState == nil {
		c.byState = map[string]int64{}
	}
	c.byState[code]++
	c.mu.Unlock()
}

// Run runs fn in a transaction begun on b, commits, and runs the whole
// transaction again on a retryable error, up to MaxAttempts and while ctx
// lives. fn must be safe to run more than once: it sees only its own
// transaction's effects. The final error wraps the cause with %w.
func Run(ctx context.Context, b skiplock.Beginner, opts *Options, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	o := opts.withDefaults()
	var last error
	for attempt := 1; ; attempt++ {
		if o.Counters != nil {
			o.Counters.attempts.Add(1)
		}
		err := runOnce(ctx, b, o.Isolation, fn)
		if err == nil {
			return nil
		}
		last = err
		if Classify(err) != Retryable {
			return err
		}
		if attempt >= o.MaxAttempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, last)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stopped retrying (%v): %w", ctx.Err(), last)
		}
		o.Counters.retried(err)
		if err := sleep(ctx, backoff(o.BaseDelay, o.MaxDelay, attempt)); err != nil {
			return fmt.Errorf("stopped retrying (%v): %w", err, last)
		}
	}
}

func runOnce(ctx context.Context, b skiplock.Beginner, iso skiplock.IsoLevel, fn func(context.Context, skiplock.Tx) error) error {
	tx, err := b.Begin(ctx, skiplock.TxOptions{Isolation: iso})
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the statement's error is the one to report
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return commitError(err)
	}
	return nil
}

// commitError classifies a COMMIT failure: a serialization failure the
// server reported at COMMIT left nothing applied; a deadlock likewise; a
// lost connection or anything else leaves the outcome unknown.
func commitError(err error) error {
	switch skiplock.SQLState(err) {
	case "40001", "40P01", "CR000":
		return err
	}
	if safeToRetry(err) {
		return err
	}
	return &AmbiguousCommitError{Err: err}
}

// backoff is full jitter: a uniform draw from [0, min(max, base*2^(n-1))].
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	d := base << min(attempt-1, 30)
	if d <= 0 || d > maxDelay {
		d = maxDelay
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
