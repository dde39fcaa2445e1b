package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// String names the class.
func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Ambiguous:
		return "ambiguous"
	}
	return "permanent"
}

// retryableCodes are the SQLSTATEs that mean "the transaction was rolled
// back; run it again": serialization_failure, deadlock_detected,
// CockroachDB's legacy CR000, and admin_shutdown (57P01: the backend was
// terminated, or the node is draining and closed the session). Run sees
// 57P01 here only from a statement before COMMIT, after which nothing can
// have committed; a COMMIT that fails with it is ambiguous, and comes here
// already wrapped in an [*AmbiguousCommitError] (see commitError).
var retryableCodes = map[string]bool{"40001": true, "40P01": true, "CR000": true, adminShutdown: true}

// adminShutdown is SQLSTATE 57P01, "terminating connection due to
// administrator command" on PostgreSQL and YugabyteDB, and the code with
// which a draining CockroachDB node closes its sessions
// (docs/design.md, "Retries, isolation and ambiguous commits").
const adminShutdown = "57P01"

// ambiguousCode is CockroachDB's statement_completion_unknown ("result is
// ambiguous"): the commit may or may not have happened.
const ambiguousCode = "40003"

// restartMessages are the texts with which CockroachDB and YugabyteDB
// report a conflict restart. Some releases send them with a code other
// than 40001 (docs/design.md, "Retries, isolation and ambiguous commits"), so they count for codes of class 40
// (transaction rollback) and XX000 (internal error) only: a message can
// never turn a constraint or syntax error into a retry.
var restartMessages = []string{
	"restart transaction",   // CockroachDB: "restart transaction: TransactionRetryWithProtoRefreshError ..."
	"restart read required", // YugabyteDB read restart
	"transaction aborted",   // YugabyteDB: "Transaction aborted: kAborted"
	"conflicts with ",       // YugabyteDB: "Conflicts with higher priority / committed transaction"
	// YugabyteDB's wait queues, before the abort had its own code: "Internal
	// error: Transaction <uuid> was aborted while waiting for locks" (XX000;
	// src/yb/docdb/wait_queue.cc; yugabyte/yugabyte-db#14035, #14114).
	"was aborted while waiting for locks",
	// YugabyteDB, a DDL that bumped the catalog version while the statement
	// ran: "[Query error: ]Catalog Version Mismatch: A DDL occurred while
	// processing this query. Try Again." (XX000 in older releases, 40001
	// now; troubleshoot/ysql-issues.md, yugabyte/yugabyte-db#1457, #3350).
	"catalog version mismatch",
}

// Classify says how to handle err, an error from a statement inside a
// transaction or from [Run]:
//
//   - Retryable: SQLSTATE 40001 (serialization failure, on every engine),
//     40P01 (deadlock), CockroachDB's CR000, 57P01 (admin_shutdown: a
//     terminated backend or a draining node, from a statement before
//     COMMIT; Run makes a COMMIT's failure ambiguous before it gets here),
//     a class-40 or XX000 error whose message is a CockroachDB or
//     YugabyteDB restart ("restart transaction", "Restart read required",
//     "Transaction aborted", "Conflicts with ...", "... was aborted while
//     waiting for locks", "Catalog Version Mismatch"), and a connection
//     failure where nothing reached the server (either
//     driver's SafeToRetry; inside a transaction that is safe even when the
//     driver is wrong about it, since nothing commits before COMMIT).
//   - Ambiguous: an [*AmbiguousCommitError] anywhere in the chain, or
//     CockroachDB's 40003 "result is ambiguous".
//   - Permanent: everything else, including 25P02, 25006, 2D000, 3B001,
//     every 42xxx and 23xxx, a lost connection after data was sent, and a
//     cancelled or expired context (retrying cannot outlive it).
//
// It imports neither driver. It finds the SQLSTATE through errors.As on a
// SQLState() string method, so it works for the *skiplock.PgError the
// driver adapters map both drivers' server errors to, for a driver's own
// error that did not pass through them, and through any wrapping
// (fmt.Errorf with %w, errors.Join). Connection failures are recognized
// by the drivers' SafeToRetry() bool method, which both pgconn packages
// implement.
func Classify(err error) Class {
	if err == nil {
		return Permanent
	}
	var amb *AmbiguousCommitError
	if errors.As(err, &amb) {
		return Ambiguous
	}
	code := skiplock.SQLState(err)
	if code == ambiguousCode {
		return Ambiguous
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Permanent
	}
	switch {
	case retryableCodes[code]:
		return Retryable
	case code != "":
		if (strings.HasPrefix(code, "40") || code == "XX000") && restartMessage(err) {
			return Retryable
		}
		return Permanent
	case safeToRetry(err):
		return Retryable
	}
	return Permanent
}

// restartMessage reports whether the server's own message (not a
// wrapper's text, nor the code) reads as an engine restart.
func restartMessage(err error) bool {
	msg := strings.ToLower(serverMessage(err))
	for _, m := range restartMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// serverMessage is the server's primary message (*skiplock.PgError), or
// the text of whatever other error carries the SQLSTATE. A driver's own
// error that did not pass through the adapters reads "SEVERITY: message
// (SQLSTATE code)"; the code's suffix is cut, so that it cannot complete
// a message pattern.
func serverMessage(err error) string {
	var pe *skiplock.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	var s interface {
		error
		SQLState() string
	}
	if errors.As(err, &s) {
		return strings.TrimSuffix(s.Error(), " (SQLSTATE "+s.SQLState()+")")
	}
	return ""
}

// safeToRetry reports a failure where nothing reached the server (either
// driver's pgconn.SafeToRetry, which both implement with a SafeToRetry()
// bool method).
func safeToRetry(err error) bool {
	var s interface{ SafeToRetry() bool }
	return errors.As(err, &s) && s.SafeToRetry()
}

// AmbiguousCommitError says COMMIT failed in a way that leaves it unknown
// whether the transaction committed: the connection broke or the session
// was terminated while COMMIT was in flight, or the engine said so (40003).
// Run never retries it. The caller must resolve it from the data (the
// layouts do, by their lease and fencing rules).
type AmbiguousCommitError struct {
	// Err is the commit's error.
	Err error
}

// Error says what happened and what to do.
func (e *AmbiguousCommitError) Error() string {
	return "commit outcome unknown (the transaction may or may not have committed; check the data before doing the work again): " + e.Err.Error()
}

// Unwrap returns the commit's error.
func (e *AmbiguousCommitError) Unwrap() error { return e.Err }

// Refused returns refusal when it is set and err is nil or an
// *AmbiguousCommitError, else err: a transaction that refused its work
// (it found the row in a state its statement does not apply to, and
// changed nothing) has the same outcome whether or not its COMMIT
// landed, so an ambiguous commit must not hide the refusal from a caller
// that would resolve it by reading the row (which would then find it as
// though the work had been done).
func Refused(err, refusal error) error {
	var amb *AmbiguousCommitError
	if refusal != nil && (err == nil || errors.As(err, &amb)) {
		return refusal
	}
	return err
}

// commitError classifies a COMMIT failure. The transaction is known not to
// have committed only when the server answered COMMIT with an ordinary
// ERROR (that answer is a rollback: a serialization failure found at
// commit, a deferred constraint) or with ROLLBACK. Everything else may have
// committed: a broken connection, a FATAL or PANIC (the backend was
// terminated while committing), classes 08, 57, 58 and XX, 40003.
//
// The drivers' SafeToRetry is not trusted here: pgx v5.12.0 reports a
// connection lost while it waits for COMMIT's answer as "conn closed",
// whose SafeToRetry is true although COMMIT was sent (and may have
// committed: TestCommitCutButCommitted shows one that did). The same error
// comes back when the connection closed before COMMIT was written, so the
// two cannot be told apart, and both are ambiguous.
func commitError(err error) error {
	switch {
	case errors.Is(err, skiplock.ErrTxCommitRollback):
		return fmt.Errorf("retry: COMMIT answered ROLLBACK because a statement in the transaction failed and fn did not return its error (return it, wrapped with %%w): %w", err)
	case errors.Is(err, skiplock.ErrTxClosed):
		// fn committed or rolled back itself: which one is not known here.
		return &AmbiguousCommitError{Err: fmt.Errorf("the transaction was already closed before Run's COMMIT (fn must not commit or roll back the transaction it is given): %w", err)}
	case serverRolledBack(err):
		return err
	}
	return &AmbiguousCommitError{Err: err}
}

// serverRolledBack reports whether the server answered with an ordinary
// ERROR, after which the transaction is rolled back, as opposed to a FATAL
// that ends the session at an unknown point of the commit.
func serverRolledBack(err error) bool {
	code := skiplock.SQLState(err)
	if len(code) != 5 || code == ambiguousCode {
		return false
	}
	switch code[:2] {
	case "08", "57", "58", "XX":
		return false
	}
	return severity(err) == "ERROR"
}

// severity is the server's unlocalized severity (*skiplock.PgError), or ""
// for any other error: a Tx's COMMIT errors come through the driver
// adapters, which map every server error to a *skiplock.PgError.
func severity(err error) string {
	var pe *skiplock.PgError
	if errors.As(err, &pe) {
		return pe.Severity
	}
	return ""
}
