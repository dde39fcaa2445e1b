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

// AfterCommitTried is AfterCommit for a signal that is cheap when nothing
// committed and costly when missed (a wake-up of workers): f also runs
// after a Commit that returned an error, since an ambiguous one may have
// committed. Only a Rollback drops it.
var AfterCommitTried = func(tx any, f func()) bool { return false }

// lastKey marks a context whose statement is its transaction's last.
type lastKey struct{}

// Last returns ctx marked so that the statement sent under it is its
// transaction's last: a driver that pipelines (the jackc/pgx driver with
// OpenConfig.SeparateBegin unset) sends the transaction's COMMIT in the same
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
// OpenConfig.SeparateBegin unset) honours it; others answer as usual, which is
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

// Chain is the next transaction to begin on a connection whose current
// transaction ends with a statement sent under Then: a driver that
// pipelines sends, in the same network write, that statement, its COMMIT,
// the next transaction's BEGIN (with the same settings) and its first
// statement, SQL with Args. A worker's job thus ends and its next claim
// starts in one round trip. Once the COMMIT has succeeded, the driver
// keeps the new transaction (begun, SQL sent, holding the connection) in
// Next; a Begin under Resume with the same TxOptions returns it, through
// every layer a Begin goes through, and its first Query must be SQL,
// whose answer it then reads (anything else reads and drops that answer
// first). A Chain whose Next is not taken must be dropped (Drop). When
// the COMMIT failed, or the driver does not pipeline, Next stays nil and
// nothing after the COMMIT ran.
type Chain struct {
	SQL  string
	Args []any
	Next any
}

// Drop rolls back the chained transaction if it was not taken, and
// returns its connection.
func (c *Chain) Drop(ctx context.Context) {
	if r, ok := c.Next.(interface{ Rollback(context.Context) error }); ok {
		r.Rollback(ctx) //nolint:errcheck // a failed rollback closes the connection
	}
	c.Next = nil
}

// chainKey carries a Chain to send (Then); resumeKey one to take (Resume).
type (
	chainKey  struct{}
	resumeKey struct{}
)

// Then returns ctx marked as Last is, and carrying c: the statement sent
// under it is its transaction's last, and c's statement begins the next
// transaction in the same network write (see Chain).
func Then(ctx context.Context, c *Chain) context.Context {
	return context.WithValue(Last(ctx), chainKey{}, c)
}

// ChainOf returns the Chain ctx carries to send (Then), or nil.
func ChainOf(ctx context.Context) *Chain {
	c, _ := ctx.Value(chainKey{}).(*Chain)
	return c
}

// Resume returns ctx carrying c, so that a Begin under it returns c's
// chained transaction (if it has one) instead of beginning another.
func Resume(ctx context.Context, c *Chain) context.Context {
	return context.WithValue(ctx, resumeKey{}, c)
}

// ResumeOf returns the Chain ctx carries to take (Resume), or nil.
func ResumeOf(ctx context.Context) *Chain {
	c, _ := ctx.Value(resumeKey{}).(*Chain)
	return c
}
