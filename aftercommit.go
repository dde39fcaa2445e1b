package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/copyio"
	"github.com/skiplock/skiplock/internal/txhook"
	"github.com/skiplock/skiplock/internal/usage"
)

func init() {
	txhook.AfterCommit = hookInto(func(t *hookedTx) *[]func() { return &t.after })
	txhook.AfterCommitTried = hookInto(func(t *hookedTx) *[]func() { return &t.tried })
}

// hookInto is a txhook registration that adds f to the list of tx that
// list picks, when tx is a *hookedTx.
func hookInto(list func(*hookedTx) *[]func()) func(tx any, f func()) bool {
	return func(tx any, f func()) bool {
		t, ok := tx.(*hookedTx)
		if ok {
			l := list(t)
			*l = append(*l, f)
		}
		return ok
	}
}

// Begin begins a transaction on the DB's pool. Besides the pool's own
// Tx, it can run skiplock's bookkeeping once the commit succeeded (the
// client counts the jobs it inserted then, so that an insert rolled back
// is never counted).
func (db *DB) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	tx, err := db.Pool.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &hookedTx{Tx: tx}, nil
}

// hookedTx is a transaction of DB.Begin with the funcs registered through
// internal/txhook. A Tx serves one goroutine at a time, as the drivers'
// do, so after needs no lock.
type hookedTx struct {
	Tx
	after []func() // txhook.AfterCommit's
	tried []func() // txhook.AfterCommitTried's
}

// Commit commits, then runs the registered funcs: AfterCommit's only if
// the commit succeeded (on an error, even an ambiguous one, they are
// dropped: counting what may have been rolled back is the mistake they
// exist to avoid), AfterCommitTried's whatever it returned (a wake-up
// missed after an ambiguous commit that did commit leaves jobs waiting).
func (t *hookedTx) Commit(ctx context.Context) error {
	after, tried := t.after, t.tried
	t.after, t.tried = nil, nil
	err := t.Tx.Commit(ctx)
	if err == nil {
		for _, f := range after {
			f()
		}
	}
	for _, f := range tried {
		f()
	}
	return err
}

// Rollback rolls back and drops the registered funcs.
func (t *hookedTx) Rollback(ctx context.Context) error {
	t.after, t.tried = nil, nil
	return t.Tx.Rollback(ctx)
}

// CopyFrom copies through the wrapped Tx, which the layouts' COPY path
// needs to see through this wrapper.
func (t *hookedTx) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	c, ok := t.Tx.(copyio.Copier)
	if !ok {
		return 0, usage.Errorf("this transaction cannot COPY: use the INSERT path")
	}
	return c.CopyFrom(ctx, table, columns, src)
}
