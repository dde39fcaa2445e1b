package retry

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
)

// Defaults for the zero Options.
const (
	DefaultMaxAttempts = 10
	DefaultBaseDelay   = 5 * time.Millisecond
	DefaultMaxDelay    = time.Second
)

// rollbackTimeout bounds the ROLLBACK after a failed attempt. It runs even
// when ctx is done, so that the connection goes back to its pool clean.
const rollbackTimeout = 10 * time.Second

// Options tune Run. The zero value (or nil) is usable.
type Options struct {
	// Isolation for each attempt; IsoDefault leaves the server's. Layouts
	// pass their engine's Dialect.DefaultIsolation (see the package doc
	// for the level each engine and layout needs).
	Isolation skiplock.IsoLevel
	// MaxAttempts bounds the tries, the first included; 0 means
	// DefaultMaxAttempts, 1 means no retry.
	MaxAttempts int
	// BaseDelay is the backoff ceiling before the second attempt; it
	// doubles for each further attempt, up to MaxDelay, and the actual
	// wait is drawn uniformly from [0, ceiling] (full jitter). 0 means
	// DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps the ceiling; 0 means DefaultMaxDelay (or BaseDelay,
	// if that is larger).
	MaxDelay time.Duration
	// Counters, when set, count what Run did; share one between calls to
	// total them.
	Counters *Counters
	// GenericPlans begins each attempt with skiplock.TxOptions.GenericPlans
	// (only where the engine has Dialect.PlanCacheMode).
	GenericPlans bool
}

// withDefaults validates o and fills its zero fields.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	switch out.Isolation {
	case skiplock.IsoDefault, skiplock.IsoReadCommitted, skiplock.IsoRepeatableRead, skiplock.IsoSerializable:
	default:
		return out, usage.Errorf("retry: isolation level %q is not one of %q, %q, %q or \"\" (the server's default)",
			out.Isolation, skiplock.IsoReadCommitted, skiplock.IsoRepeatableRead, skiplock.IsoSerializable)
	}
	if out.MaxAttempts < 0 || out.BaseDelay < 0 || out.MaxDelay < 0 {
		return out, usage.Errorf("retry: negative option (MaxAttempts %d, BaseDelay %v, MaxDelay %v): use 0 for the default or a positive value",
			out.MaxAttempts, out.BaseDelay, out.MaxDelay)
	}
	if out.BaseDelay > 0 && out.MaxDelay > 0 && out.BaseDelay > out.MaxDelay {
		return out, usage.Errorf("retry: BaseDelay %v is larger than MaxDelay %v: the first backoff cannot exceed the cap", out.BaseDelay, out.MaxDelay)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.BaseDelay == 0 {
		out.BaseDelay = DefaultBaseDelay
	}
	if out.MaxDelay == 0 {
		out.MaxDelay = max(DefaultMaxDelay, out.BaseDelay)
	}
	return out, nil
}

// Counters count what Run did, for reports (bench reads them). The zero
// value is ready; it is safe for concurrent use.
type Counters struct {
	attempts  atomic.Int64
	retries   atomic.Int64
	ambiguous atomic.Int64
	gaveUp    atomic.Int64
	mu        sync.Mutex
	byState   map[string]int64
}

// Attempts is how many transactions Run began (or tried to begin).
func (c *Counters) Attempts() int64 { return c.attempts.Load() }

// Retries is how many attempts were runs again after a retryable error.
func (c *Counters) Retries() int64 { return c.retries.Load() }

// Ambiguous is how many calls ended in an ambiguous commit.
func (c *Counters) Ambiguous() int64 { return c.ambiguous.Load() }

// GaveUp is how many calls used all their attempts and still failed with a
// retryable error.
func (c *Counters) GaveUp() int64 { return c.gaveUp.Load() }

// RetriesBySQLState maps the SQLSTATE that caused each retry ("conn" for a
// connection failure that had none) to its count. It returns a copy.
func (c *Counters) RetriesBySQLState() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.byState))
	for k, v := range c.byState {
		out[k] = v
	}
	return out
}

func (c *Counters) attempted() {
	if c != nil {
		c.attempts.Add(1)
	}
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

func (c *Counters) ended(class Class, exhausted bool) {
	switch {
	case c == nil:
	case class == Ambiguous:
		c.ambiguous.Add(1)
	case exhausted:
		c.gaveUp.Add(1)
	}
}

// Run runs fn in a transaction begun on b, commits, and on a retryable
// error ([Classify]) rolls back, waits (exponential backoff with full
// jitter) and runs the whole transaction again, up to MaxAttempts and while
// ctx lives.
//
// fn must be safe to run more than once, must return (or wrap with %w) the
// error of any statement that failed, and must not commit or roll back tx
// itself. A permanent error is returned as it is; an ambiguous commit as
// [*AmbiguousCommitError], never retried; running out of attempts or
// context returns an error that wraps the last cause (and the context's
// error) with %w. Bad options return a usage error (nothing changed) before
// anything is sent.
func Run(ctx context.Context, b skiplock.Beginner, opts *Options, fn func(ctx context.Context, tx skiplock.Tx) error) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if b == nil || fn == nil {
		return usage.Errorf("retry: Run needs a Beginner (a *skiplock.DB, a Conn) and a function")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("retry: not started: %w", err)
	}
	for attempt := 1; ; attempt++ {
		o.Counters.attempted()
		err := runOnce(ctx, b, skiplock.TxOptions{Isolation: o.Isolation, GenericPlans: o.GenericPlans}, fn)
		if err == nil {
			return nil
		}
		if class := Classify(err); class != Retryable {
			o.Counters.ended(class, false)
			return err
		}
		if attempt >= o.MaxAttempts {
			o.Counters.ended(Retryable, true)
			return fmt.Errorf("retry: gave up after %d attempts, each failed with a retryable error (reduce contention or raise Options.MaxAttempts): %w", attempt, err)
		}
		if serr := Sleep(ctx, backoff(o.BaseDelay, o.MaxDelay, attempt)); serr != nil {
			return fmt.Errorf("retry: stopped after %d attempts because the context ended (%w); last error: %w", attempt, serr, err)
		}
		o.Counters.retried(err)
	}
}

// runOnce is one attempt: begin, fn, commit. A failed fn is rolled back
// (also when it panics, so the connection is not lost to the pool).
func runOnce(ctx context.Context, b skiplock.Beginner, opts skiplock.TxOptions, fn func(context.Context, skiplock.Tx) error) error {
	tx, err := b.Begin(ctx, opts)
	if err != nil {
		return err
	}
	ctx, commitSent := txhook.Tracked(ctx)
	committing := false
	defer func() {
		if committing {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		tx.Rollback(rctx) //nolint:errcheck // fn's error (or panic) is the one to report; a failed rollback closes the connection
	}()
	if err := fn(ctx, tx); err != nil {
		if commitSent() && !serverRolledBack(err) {
			// The COMMIT went with fn's last statement, and what failed
			// is not the server refusing a statement (which skips the
			// COMMIT): the connection failed, or fn after the statement.
			// Whether it committed is not known.
			return &AmbiguousCommitError{Err: err}
		}
		return err
	}
	if err := ctx.Err(); err != nil && !commitSent() {
		// Checked here because after COMMIT is sent a cancel makes the
		// outcome unknown; before, the rollback is certain. A COMMIT that
		// went with the last statement (txhook.Last) is past that point:
		// Commit reads its outcome.
		return fmt.Errorf("retry: context ended before COMMIT, rolled back: %w", err)
	}
	committing = true
	if err := tx.Commit(ctx); err != nil {
		return commitError(err)
	}
	return nil
}

// backoff is full jitter: a uniform draw from [0, ceiling], where the
// ceiling is base doubled attempt-1 times, capped at maxDelay.
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	ceiling := base
	for i := 1; i < attempt && ceiling < maxDelay; i++ {
		if ceiling > maxDelay/2 {
			ceiling = maxDelay
			break
		}
		ceiling *= 2
	}
	n := int64(min(ceiling, maxDelay))
	if n < math.MaxInt64 {
		n++ // make the ceiling itself a possible draw
	}
	return time.Duration(rand.Int64N(n))
}

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's error if it ended. A d of zero or less returns nil at once. The
// backoff loops across skiplock wait with it.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
