// Package txhook lets skiplock's own packages run code once a
// transaction begun by skiplock.DB.Begin has committed, without a public
// API: the root package sets AfterCommit (this package cannot import it).
// It also carries the mark (Last) by which a transaction's last statement
// takes its COMMIT along in one round trip.
package txhook

import (
	"context"
	"sync/atomic"
)

// AfterCommit registers f to run after tx commits and reports true, when
// tx is a transaction whose commit skiplock sees (one DB.Begin returned,
// retry.Run's included). f runs once, after a Commit that returned nil; a
// rollback, a failed commit or an ambiguous one drops it. For any other
// transaction (a caller's own through skiplock.WrapTx, whose outcome
// skiplock never learns) it keeps nothing and reports false.
var AfterCommit = func(tx any, f func()) bool { return false }

// lastKey marks a context whose statement is its transaction's last.
type lastKey struct{}

// Last returns ctx marked so that the statement sent under it is its
// transaction's last: a driver that pipelines (the jackc/pgx driver with
// OpenConfig.PipelineBegin) sends the transaction's COMMIT in the same
// network write, after it, so a transaction of n statements costs n
// round trips (one, for a single statement with its BEGIN). Nothing else
// changes: the caller still calls Commit, which returns the COMMIT's
// outcome (or Rollback, after a failed statement, which the server did
// not commit). The caller must send nothing more in the transaction and
// must commit whenever the statement succeeded: its COMMIT has gone out.
// Other drivers ignore the mark.
func Last(ctx context.Context) context.Context {
	return context.WithValue(ctx, lastKey{}, true)
}

// IsLast reports whether ctx was marked by Last.
func IsLast(ctx context.Context) bool {
	v, _ := ctx.Value(lastKey{}).(bool)
	return v
}

// NotLast returns ctx without Last's mark (for a statement sent under a
// marked context that is not the transaction's last).
func NotLast(ctx context.Context) context.Context {
	if !IsLast(ctx) {
		return ctx
	}
	return context.WithValue(ctx, lastKey{}, false)
}

// sentKey carries a transaction attempt's record of a COMMIT sent early.
type sentKey struct{}

// Tracked returns ctx carrying a record that a driver fills when it sends
// the transaction's COMMIT with a statement sent under ctx (Last), and a
// func that reports whether it did: after that, the transaction's outcome
// is the COMMIT's, even if ctx has ended since.
func Tracked(ctx context.Context) (context.Context, func() bool) {
	var sent atomic.Bool
	return context.WithValue(ctx, sentKey{}, &sent), sent.Load
}

// CommitSent records, in the context Tracked returned (if ctx derives from
// one), that the transaction's COMMIT has gone out.
func CommitSent(ctx context.Context) {
	if sent, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok {
		sent.Store(true)
	}
}

// aheadKey marks a context whose query need not wait for its answer.
type aheadKey struct{}

// Ahead returns ctx marked so that a Query sent under it on an acquired
// connection returns once the statement has been written to the server,
// before its answer: the rows read the answer (and report its error)
// when first read. A driver that pipelines (the jackc/pgx driver with
// OpenConfig.PipelineBegin) honours it; others answer as usual, which is
// the same but for the wait. The connection is busy until the rows are
// closed.
func Ahead(ctx context.Context) context.Context {
	return context.WithValue(ctx, aheadKey{}, true)
}

// IsAhead reports whether ctx was marked by Ahead.
func IsAhead(ctx context.Context) bool {
	v, _ := ctx.Value(aheadKey{}).(bool)
	return v
}
