package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	ybpgconn "github.com/yugabyte/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/retry"
)

// pgError builds a server error as the given driver reports it.
func pgError(yb bool, code, msg string) error {
	if yb {
		return &ybpgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg}
	}
	return &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg}
}

// wrapper is a plain error type with Unwrap, as a caller's own might be.
type wrapper struct{ err error }

func (w wrapper) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapper) Unwrap() error { return w.err }

// wrap wraps err depth times, cycling through the ways Go code wraps.
func wrap(err error, depth int) error {
	for i := range depth {
		switch i % 3 {
		case 0:
			err = fmt.Errorf("layer %d: %w", i, err)
		case 1:
			err = wrapper{err}
		case 2:
			err = errors.Join(io.ErrUnexpectedEOF, err)
		}
	}
	return err
}

// safeErr is a connection failure with pgconn's SafeToRetry contract.
type safeErr struct{ safe bool }

func (e safeErr) Error() string     { return fmt.Sprintf("conn failure (safe %v)", e.safe) }
func (e safeErr) SafeToRetry() bool { return e.safe }

// spec is Classify's contract for a server error, written from the issue
// (and docs/design.md, "Retries, isolation and ambiguous commits"), not from the code.
func spec(code, msg string) retry.Class {
	switch code {
	case "40001", "40P01", "CR000", "57P01":
		return retry.Retryable
	case "40003":
		return retry.Ambiguous
	}
	if strings.HasPrefix(code, "40") || code == "XX000" {
		m := strings.ToLower(msg)
		for _, p := range []string{"restart transaction", "restart read required", "transaction aborted", "conflicts with ",
			"was aborted while waiting for locks", "catalog version mismatch"} {
			if strings.Contains(m, p) {
				return retry.Retryable
			}
		}
	}
	return retry.Permanent
}

func TestClassifyTable(t *testing.T) {
	t.Parallel()
	amb := &retry.AmbiguousCommitError{Err: pgError(false, "57P01", "terminating connection due to administrator command")}
	cases := []struct {
		name string
		err  error
		want retry.Class
	}{
		{"nil", nil, retry.Permanent},
		{"serialization failure", pgError(false, "40001", "could not serialize access due to read/write dependencies among transactions"), retry.Retryable},
		{"deadlock", pgError(false, "40P01", "deadlock detected"), retry.Retryable},
		{"cockroach legacy", pgError(false, "CR000", "restart transaction"), retry.Retryable},
		{"cockroach restart", pgError(false, "40001", "restart transaction: TransactionRetryWithProtoRefreshError: ReadWithinUncertaintyIntervalError"), retry.Retryable},
		{"cockroach ambiguous", pgError(false, "40003", "result is ambiguous (error=rpc error)"), retry.Ambiguous},
		{"yugabyte read restart", pgError(true, "40001", "Restart read required at: { read: { physical: 1 } }"), retry.Retryable},
		{"yugabyte read restart as XX000", pgError(true, "XX000", "Query error: Restart read required at: { read: { physical: 1 } }"), retry.Retryable},
		{"yugabyte aborted as XX000", pgError(true, "XX000", "Transaction aborted: kAborted"), retry.Retryable},
		{"yugabyte conflict", pgError(true, "40001", "Conflicts with higher priority transaction: 7c4b"), retry.Retryable},
		{"yugabyte conflict as 40000", pgError(true, "40000", "Conflicts with committed transaction: 1f2e"), retry.Retryable},
		{"internal error", pgError(true, "XX000", "Timed out waiting for tablet"), retry.Permanent},
		// YugabyteDB's older texts, as src/yb/docdb/wait_queue.cc and the
		// tserver word them and the issues quote them (#14035, #1457, #10375).
		{"yugabyte aborted while waiting for locks", pgError(true, "XX000", "Internal error: Transaction 00da00cd-87fa-431b-9521-253582fb23fe was aborted while waiting for locks"), retry.Retryable},
		{"yugabyte catalog version mismatch", pgError(true, "XX000", "Query error: Catalog Version Mismatch: A DDL occurred while processing this query. Try Again."), retry.Retryable},
		{"yugabyte catalog version mismatch, lower case", pgError(true, "XX000", "Internal error: Catalog Version Mismatch: A DDL occurred while processing this query. Try again."), retry.Retryable},
		{"catalog version mismatch under a constraint code", pgError(true, "23505", "Catalog Version Mismatch: A DDL occurred while processing this query. Try again."), retry.Permanent},
		{"lock wait aborted under a syntax code", pgError(true, "42601", "was aborted while waiting for locks"), retry.Permanent},
		// 57P01 from a statement before COMMIT (Run turns a COMMIT's into an
		// ambiguous commit first): PostgreSQL's and YSQL's terminated
		// backend, a draining CockroachDB node.
		{"backend terminated before commit", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}, retry.Retryable},
		{"backend terminated before commit, mapped", &skiplock.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command",
			Err: &ybpgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}}, retry.Retryable},
		{"draining node", pgError(false, "57P01", "server is shutting down"), retry.Retryable},
		{"other shutdown codes stay permanent", pgError(false, "57P02", "terminating connection due to crash of another server process"), retry.Permanent},
		{"query canceled", pgError(false, "57014", "canceling statement due to user request"), retry.Permanent},
		{"in failed transaction", pgError(false, "25P02", "current transaction is aborted, commands ignored until end of transaction block"), retry.Permanent},
		{"read only", pgError(true, "25006", "cannot execute UPDATE in a read-only transaction"), retry.Permanent},
		{"invalid termination", pgError(true, "2D000", "invalid transaction termination"), retry.Permanent},
		{"no savepoint", pgError(true, "3B001", "savepoint \"x\" does not exist"), retry.Permanent},
		{"syntax", pgError(false, "42601", "syntax error at or near \"restart\""), retry.Permanent},
		{"undefined table", pgError(true, "42P01", "relation \"jobs\" does not exist"), retry.Permanent},
		{"unique", pgError(false, "23505", "duplicate key value violates unique constraint \"jobs_pkey\""), retry.Permanent},
		{"message cannot override a constraint code", pgError(true, "23505", "Transaction aborted: conflicts with restart transaction"), retry.Permanent},
		{"nothing sent", safeErr{true}, retry.Retryable},
		{"data sent", safeErr{false}, retry.Permanent},
		{"plain EOF", io.EOF, retry.Permanent},
		{"ctx cancelled", context.Canceled, retry.Permanent},
		{"ctx with a retryable cause", errors.Join(context.DeadlineExceeded, pgError(false, "40001", "x")), retry.Permanent},
		{"ctx before a safe conn error", fmt.Errorf("%w: %w", context.Canceled, safeErr{true}), retry.Permanent},
		{"ambiguous commit", amb, retry.Ambiguous},
		{"ambiguous commit wrapped", wrap(amb, 5), retry.Ambiguous},
		{"ambiguous commit even with ctx", errors.Join(context.Canceled, amb), retry.Ambiguous},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := retry.Classify(c.err); got != c.want {
				t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// seedCodes covers every class the contract names, for the fuzz seeds.
var seedCodes = []string{"40001", "40P01", "CR000", "40003", "40000", "40002", "XX000", "XX001",
	"25P02", "25006", "2D000", "3B001", "42601", "42P01", "42883", "23505", "23503", "22012",
	"57P01", "57014", "08006", "53300", "0A000", "", "4", "40", "X", "cr000", "4000١"}

var seedMessages = []string{"", "deadlock detected", "restart transaction: TransactionRetryWithProtoRefreshError",
	"Internal error: Transaction 1f2e was aborted while waiting for locks",
	"Query error: Catalog Version Mismatch: A DDL occurred while processing this query. Try Again.",
	"terminating connection due to administrator command",
	"Query error: Restart read required at: {}", "Transaction aborted: kAborted", "Conflicts with higher priority transaction",
	"CONFLICTS WITH COMMITTED TRANSACTION", "duplicate key value", "(SQLSTATE 40001)", "conflicts with"}

// FuzzClassify checks Classify against its contract for both drivers'
// error types, at any wrapping depth: the class depends only on the code
// and the server's message, never on the driver or the wrapping; an
// ambiguous commit stays ambiguous; a context error stops retries.
func FuzzClassify(f *testing.F) {
	for i, code := range seedCodes {
		for j, msg := range seedMessages {
			f.Add(code, msg, uint8((i+j)%9), (i+j)%2 == 0)
		}
	}
	f.Fuzz(func(t *testing.T, code, msg string, depth uint8, yb bool) {
		d := int(depth % 12)
		want := spec(code, msg)
		base := pgError(yb, code, msg)
		if got := retry.Classify(base); got != want {
			t.Fatalf("Classify(code %q, msg %q, yb %v) = %v, want %v", code, msg, yb, got, want)
		}
		if got := retry.Classify(pgError(!yb, code, msg)); got != want {
			t.Fatalf("other driver: Classify(code %q, msg %q) = %v, want %v", code, msg, got, want)
		}
		// As the driver adapters hand it on.
		mapped := &skiplock.PgError{Severity: "ERROR", Code: code, Message: msg, Err: base}
		if got := retry.Classify(wrap(mapped, d)); got != want {
			t.Fatalf("mapped, at depth %d: Classify(code %q, msg %q, yb %v) = %v, want %v", d, code, msg, yb, got, want)
		}
		if got := retry.Classify(wrap(base, d)); got != want {
			t.Fatalf("at depth %d: Classify(code %q, msg %q, yb %v) = %v, want %v", d, code, msg, yb, got, want)
		}
		amb := wrap(&retry.AmbiguousCommitError{Err: wrap(base, d/2)}, d-d/2)
		if got := retry.Classify(amb); got != retry.Ambiguous {
			t.Fatalf("ambiguous commit of code %q at depth %d classified %v", code, d, got)
		}
		ctxWant := retry.Permanent
		if want == retry.Ambiguous {
			ctxWant = retry.Ambiguous
		}
		if got := retry.Classify(wrap(fmt.Errorf("stopped (%w): %w", context.Canceled, base), d)); got != ctxWant {
			t.Fatalf("code %q under a cancelled context classified %v, want %v", code, got, ctxWant)
		}
		// A wrapper's text never counts as the server's message.
		if got := retry.Classify(fmt.Errorf("restart transaction: %w", pgError(yb, code, ""))); got != spec(code, "") {
			t.Fatalf("wrapper text changed the class of code %q to %v", code, got)
		}
	})
}

func TestClassifySafeToRetryAtDepth(t *testing.T) {
	t.Parallel()
	for d := range 10 {
		for _, safe := range []bool{true, false} {
			want := retry.Permanent
			if safe {
				want = retry.Retryable
			}
			err := wrap(safeErr{safe}, d)
			if got := retry.Classify(err); got != want {
				t.Errorf("depth %d safe %v: Classify = %v, want %v", d, safe, got, want)
			}
			if pgconn.SafeToRetry(err) != safe || ybpgconn.SafeToRetry(err) != safe {
				t.Errorf("depth %d: the drivers' SafeToRetry disagree with the fixture", d)
			}
		}
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	for c, want := range map[retry.Class]string{retry.Permanent: "permanent", retry.Retryable: "retryable", retry.Ambiguous: "ambiguous"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", c, c.String(), want)
		}
	}
}
