package retry

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	jackcpgx "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	ybpgx "github.com/yugabyte/pgx/v5"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	cases := []struct{ base, max time.Duration }{
		{time.Millisecond, time.Second},
		{5 * time.Millisecond, 5 * time.Millisecond},
		{time.Hour, 100 * time.Hour},
		{1, 1<<63 - 1}, // doubling must never overflow
	}
	for _, c := range cases {
		for attempt := 1; attempt <= 80; attempt++ {
			ceiling := c.base
			for i := 1; i < attempt && ceiling < c.max; i++ {
				ceiling = min(ceiling*2, c.max)
				if ceiling <= 0 {
					ceiling = c.max
				}
			}
			sawUpperHalf := false
			for range 200 {
				d := backoff(c.base, c.max, attempt)
				if d < 0 || d > ceiling {
					t.Fatalf("backoff(%v, %v, %d) = %v, outside [0, %v]", c.base, c.max, attempt, d, ceiling)
				}
				sawUpperHalf = sawUpperHalf || d >= ceiling/2
			}
			if !sawUpperHalf {
				t.Fatalf("backoff(%v, %v, %d): 200 draws all below half the ceiling %v: not full jitter", c.base, c.max, attempt, ceiling)
			}
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	bad := []Options{
		{Isolation: "snapshot"},
		{MaxAttempts: -1},
		{BaseDelay: -time.Millisecond},
		{MaxDelay: -time.Millisecond},
		{BaseDelay: time.Second, MaxDelay: time.Millisecond},
	}
	for _, o := range bad {
		if _, err := o.withDefaults(); !usage.Is(err) {
			t.Errorf("%+v: got %v, want a usage error", o, err)
		}
	}
	o, err := (*Options)(nil).withDefaults()
	if err != nil || o.MaxAttempts != DefaultMaxAttempts || o.BaseDelay != DefaultBaseDelay || o.MaxDelay != DefaultMaxDelay {
		t.Errorf("nil options: %+v, %v", o, err)
	}
	if o, _ := (&Options{BaseDelay: 3 * time.Second}).withDefaults(); o.MaxDelay != 3*time.Second {
		t.Errorf("a BaseDelay above the default cap must raise the cap, got MaxDelay %v", o.MaxDelay)
	}
}

// TestCommitErrorOutcomes pins which COMMIT failures are known rollbacks
// and which may have committed. The real-server proofs are in run_test.go.
func TestCommitErrorOutcomes(t *testing.T) {
	t.Parallel()
	// COMMIT's errors reach commitError through the driver adapters,
	// which map them as these fixtures show (proven in the root package's
	// TestDriverErrorsAreMapped): a server error to a *skiplock.PgError
	// around the driver's, a driver sentinel to one that also matches
	// skiplock's.
	pe := func(sev, code string) error {
		return &skiplock.PgError{Severity: sev, Code: code, Message: "m",
			Err: &pgconn.PgError{Severity: sev, SeverityUnlocalized: sev, Code: code, Message: "m"}}
	}
	ye := func(sev, code string) error {
		return &skiplock.PgError{Severity: sev, Code: code, Message: "m",
			Err: &ybpgconn.PgError{Severity: sev, Code: code, Message: "m"}}
	}
	mapped := func(mine, driver error) error { return fmt.Errorf("%w (%w)", mine, driver) }
	cases := []struct {
		name      string
		err       error
		ambiguous bool
		class     Class // Classify of the result, when not ambiguous
	}{
		{"serialization failure at commit", pe("ERROR", "40001"), false, Retryable},
		{"yugabyte conflict at commit", ye("ERROR", "40001"), false, Retryable},
		{"deferred unique violation", pe("ERROR", "23505"), false, Permanent},
		{"deferred trigger raised", ye("ERROR", "P0001"), false, Permanent},
		{"backend terminated", pe("FATAL", "57P01"), true, 0},
		{"fatal with a retryable code", pe("FATAL", "40001"), true, 0},
		{"panic", pe("PANIC", "XX000"), true, 0},
		{"connection failure code", ye("ERROR", "08006"), true, 0},
		{"internal error", ye("ERROR", "XX000"), true, 0},
		{"cockroach ambiguous result", pe("ERROR", "40003"), true, 0},
		{"unknown error type with a code", fmt.Errorf("x: %w", sqlState{"40001"}), true, 0},
		{"broken pipe", io.ErrUnexpectedEOF, true, 0},
		{"driver says nothing sent (not trusted at COMMIT)", safe{}, true, 0},
		{"jackc commit answered rollback", mapped(skiplock.ErrTxCommitRollback, jackcpgx.ErrTxCommitRollback), false, Permanent},
		{"yugabyte commit answered rollback", mapped(skiplock.ErrTxCommitRollback, ybpgx.ErrTxCommitRollback), false, Permanent},
		{"fn closed the transaction", mapped(skiplock.ErrTxClosed, jackcpgx.ErrTxClosed), true, 0},
		{"fn closed the yugabyte transaction", mapped(skiplock.ErrTxClosed, ybpgx.ErrTxClosed), true, 0},
		{"unmapped driver error with a code (no severity to read)", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001", Message: "m"}, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := commitError(c.err)
			var amb *AmbiguousCommitError
			if errors.As(got, &amb) != c.ambiguous {
				t.Fatalf("commitError(%v) = %v: ambiguous %v, want %v", c.err, got, !c.ambiguous, c.ambiguous)
			}
			if !errors.Is(got, c.err) {
				t.Errorf("commitError(%v) = %v does not wrap the cause", c.err, got)
			}
			if !c.ambiguous && Classify(got) != c.class {
				t.Errorf("Classify(commitError(%v)) = %v, want %v", c.err, Classify(got), c.class)
			}
		})
	}
}

type sqlState struct{ code string }

func (s sqlState) Error() string    { return "error with SQLSTATE " + s.code }
func (s sqlState) SQLState() string { return s.code }

type safe struct{}

func (safe) Error() string     { return "conn closed" }
func (safe) SafeToRetry() bool { return true }
