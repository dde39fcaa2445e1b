// Package logs holds what every package's log/slog calls share: the
// default logger and the attribute of a failure.
package logs

import (
	"context"
	"log/slog"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/errtext"
)

// OrDefault is l, or slog.Default() when l is nil: a config's nil Logger
// logs where the program's other logs go.
func OrDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// Discard is a logger that drops every record.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Err is the "err" attribute of a failure: the error's text, followed by
// Hint's explanation when its SQLSTATE names a likely cause and fix.
func Err(err error) slog.Attr {
	if err == nil {
		return slog.String("err", "")
	}
	return slog.String("err", err.Error()+Hint(err))
}

// Hint is a short explanation of err for a log line, naming the likely
// cause and the fix where its SQLSTATE says more than its text: "" for
// other errors. A read-only transaction (25006) is a standby's, or a
// server or role set to default_transaction_read_only; a prepared
// statement of pgx's cache that is missing or already there (26000,
// 42P05) means a transaction pooler Open did not detect.
func Hint(err error) string {
	if code := skiplock.SQLState(err); (code == "26000" || code == "42P05") && strings.Contains(err.Error(), "stmtcache_") {
		return " (a connection pooler in transaction mode hands this connection server sessions that hold other clients' prepared statements: add default_query_exec_mode=exec to the DSN)"
	}
	if skiplock.SQLState(err) == "25006" {
		return " (the server takes no writes: a read-only standby, or default_transaction_read_only is on; point the DSN at the primary, or list every host with target_session_attrs=read-write)"
	}
	return ""
}

// Job is a job's attributes in a record: its id, kind, and attempt of
// max_attempts. Its queue comes from the worker's logger, which carries
// it (with the layout) for every record of the worker.
func Job(j *skiplock.Job) []any {
	return []any{"job", j.ID, "kind", j.Kind, "attempt", j.Attempts, "max_attempts", j.MaxAttempts}
}

// Failure logs a handler's failed attempt of j: "job failed" or "job
// panicked", with the job's attributes, the error's first line, what
// happens next (then: when it runs again, or that it is dead) and, for a
// panic, its first stack frames. It is a warning while the job runs
// again and an error once it is dead or when the handler panicked.
func Failure(l *slog.Logger, j *skiplock.Job, err error, dead bool, then string) {
	msg, level := "job failed", slog.LevelWarn
	if dead {
		level = slog.LevelError
	}
	args := append(Job(j), "err", errtext.FirstLine(err), "then", then)
	if skiplock.IsPanic(err) {
		msg, level = "job panicked", slog.LevelError
		args = append(args, "stack", errtext.PanicFrames(err, 3))
	}
	l.Log(context.Background(), level, msg, args...)
}

// To is a logger that writes each record as one line of text through
// logf (a test's t.Logf): records at every level from debug up.
func To(logf func(format string, args ...any)) *slog.Logger {
	return slog.New(slog.NewTextHandler(logfWriter(logf), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logfWriter is To's io.Writer: the text handler writes one record per
// Write.
type logfWriter func(format string, args ...any)

func (w logfWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
