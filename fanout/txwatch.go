package fanout

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
)

// ErrTransactionLost is the cause (context.Cause) of a handler's context
// that ended because the job's transaction ended under it: its
// connection closed (the server ended the session, as
// idle_in_transaction_session_timeout or pg_terminate_backend do, or it
// restarted, or a pooler or the network cut the connection). The server
// has rolled the transaction back and unlocked the job, which another
// worker may be running already: a handler that sees it should stop at
// once, since nothing it does in the transaction can commit. The attempt
// counts, and the job runs again.
var ErrTransactionLost = errors.New("fanout: the job's transaction ended under its handler (its connection closed)")

// txCheckEvery is how often a running handler's transaction is checked
// (skiplock.ConnChecker): how long a handler may run on after the
// server ended its transaction, while another worker may run its job.
// A check reads what the server sent, for at most a millisecond, and
// sends nothing; a handler that returns sooner is never checked.
const txCheckEvery = 200 * time.Millisecond

// txWatch watches the transaction of one running handler: every
// txCheckEvery it checks the connection, when the handler is not using
// it, and cancels the handler's context with ErrTransactionLost once it
// is closed.
type txWatch struct {
	tx     skiplock.Tx
	cancel context.CancelCauseFunc
	// use orders the handler's statements with the checks: each of the
	// handler's calls (and its rows, until closed) holds it shared, and a
	// check takes it only when free (TryLock), so no handler statement
	// ever waits on a check longer than one check, and none ever fails
	// with pgx's "conn busy" because of one.
	use sync.RWMutex
	// mu guards timer's rearming, lost and done against stop.
	mu    sync.Mutex
	timer *time.Timer
	lost  error
	done  bool
}

// watchTx starts watching tx for a handler that runs under the returned
// context; stop ends the watch once the handler has returned.
func watchTx(ctx context.Context, tx skiplock.Tx) (context.Context, *txWatch) {
	hctx, cancel := context.WithCancelCause(ctx)
	w := &txWatch{tx: tx, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(txCheckEvery, w.check)
	w.mu.Unlock()
	return hctx, w
}

// check checks the connection if the handler is not using it, and rearms
// the timer unless it found the transaction lost.
func (w *txWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if w.use.TryLock() {
		err := skiplock.CheckConn(w.tx)
		w.use.Unlock()
		if err != nil {
			w.lost = &txLostError{cause: err}
			w.cancel(w.lost)
			return
		}
	}
	w.timer.Reset(txCheckEvery)
}

// stop ends the watch, after a check in progress, and returns a
// *txLostError if it found the transaction lost.
func (w *txWatch) stop() error {
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	lost := w.lost
	w.mu.Unlock()
	w.cancel(nil)
	return lost
}

// txLostError is what handle returns for a job whose transaction ended
// under its handler. It classifies as a lost connection does (retry.Run
// runs the transaction again: a new claim), and process keeps the
// attempt counted: the handler ran, and once the server unlocked the job
// another claim may have counted the next attempt. It does not unwrap to
// the connection's error, whose SQLSTATE (25P03 for an
// idle_in_transaction_session_timeout, for one) would classify it as
// permanent.
type txLostError struct{ cause error }

func (e *txLostError) Error() string {
	return ErrTransactionLost.Error() + ": " + e.cause.Error() + "; the handler's context was cancelled, its attempt counts, and the job runs again"
}

// Is makes errors.Is(err, ErrTransactionLost) hold, for handlers that read
// context.Cause.
func (e *txLostError) Is(target error) bool { return target == ErrTransactionLost }

// SafeToRetry: the server rolled the transaction back; nothing committed.
func (e *txLostError) SafeToRetry() bool { return true }

// watchedTx is the transaction a watched handler sees: handlerTx's, with
// each call (and its rows, until closed) holding the watch's use lock
// shared.
type watchedTx struct {
	handlerTx
	w *txWatch
}

func (t watchedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	t.w.use.RLock()
	defer t.w.use.RUnlock()
	return t.handlerTx.Exec(ctx, sql, args...)
}

func (t watchedTx) Query(ctx context.Context, sql string, args ...any) (skiplock.Rows, error) {
	t.w.use.RLock()
	rows, err := t.handlerTx.Query(ctx, sql, args...)
	if err != nil {
		t.w.use.RUnlock()
		return nil, err
	}
	return &watchedRows{Rows: rows, w: t.w}, nil
}

func (t watchedTx) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	return watchedRow{tx: t, ctx: ctx, sql: sql, args: args}
}

// watchedRows holds the use lock until the rows are closed, or read to
// their end (which closes them).
type watchedRows struct {
	skiplock.Rows
	w        *txWatch
	released bool
}

func (r *watchedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *watchedRows) Close() {
	r.Rows.Close()
	r.release()
}

func (r *watchedRows) release() {
	if !r.released {
		r.released = true
		r.w.use.RUnlock()
	}
}

// watchedRow runs its query at Scan, as pgx's QueryRow reads its row
// there, under the use lock.
type watchedRow struct {
	tx   watchedTx
	ctx  context.Context
	sql  string
	args []any
}

func (r watchedRow) Scan(dest ...any) error {
	r.tx.w.use.RLock()
	defer r.tx.w.use.RUnlock()
	return r.tx.handlerTx.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
}
