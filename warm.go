package skiplock

import (
	"context"
	"sync"
	"sync/atomic"
)

// Warmup is a statement that each new connection of a DB's pool runs once
// before its first use (DB.Warm), with arguments that make it read and
// write nothing (a LIMIT of 0, empty arrays).
type Warmup struct {
	SQL  string
	Args []any
}

// warmups are the Warmups of one pool, which its connect hook runs on
// each connection it opens: in one transaction, rolled back, sent in one
// batch (the statements' preparation and their run: two round trips). A
// new server session loads the catalog entries of every table, index and
// type a statement touches, and a prepared statement is planned at its
// first run; without the warm-up a connection's first claim pays both,
// and a round trip to prepare, on the way to a handler.
type warmups struct {
	// begin opens the transaction: BEGIN, and the generic plans where
	// the engine has the setting, so that the plan cached is the one the
	// claims' transactions use (TxOptions.GenericPlans).
	begin []string
	mu    sync.Mutex
	seen  map[string]bool
	list  atomic.Pointer[[]Warmup]
	// idle runs the warmups on the pool's idle connections, set once
	// with the pool (before the DB is handed out).
	idle func(ctx context.Context)
}

// newWarmups returns the warmups of a pool on an engine with dialect d.
func newWarmups(d *Dialect) *warmups {
	return &warmups{begin: beginStatements(TxOptions{GenericPlans: d.PlanCacheMode}), seen: map[string]bool{}}
}

// add adds ws, once per statement, and reports whether any was new.
func (w *warmups) add(ws []Warmup) (added bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var list []Warmup
	if cur := w.list.Load(); cur != nil {
		list = append(list, *cur...)
	}
	for _, s := range ws {
		if !w.seen[s.SQL] {
			w.seen[s.SQL] = true
			list = append(list, s)
			added = true
		}
	}
	w.list.Store(&list)
	return added
}

// load returns the warmups to run on a new connection (nil: none, or a
// pool without a connect hook).
func (w *warmups) load() []Warmup {
	if w == nil {
		return nil
	}
	if l := w.list.Load(); l != nil {
		return *l
	}
	return nil
}

// Warm has ws run once on each connection of db's pool before a claim
// meets it there: now on the connections idle in the pool (it returns
// once they are done, or when ctx ends), and on each connection the pool
// opens from now on before its first use. Each runs them in a transaction
// that is rolled back. The queues register their claims, so that no
// claim is the one that loads the server's catalog caches and plans the
// statement on a connection (which costs a round trip to prepare it as
// well): the pool hands out its idle connections in turn, so a claim
// comes to every one of them in time. A warm-up that fails (a schema not
// migrated yet) leaves the connection as it was, and the statement's
// first use reports the error. It does nothing on a pool reached through
// a transaction pooler (no prepared statements there) or made by the
// caller (NewDB). Connections in use now are not warmed.
func (db *DB) Warm(ctx context.Context, ws ...Warmup) {
	if db.warm != nil && db.warm.add(ws) && db.warm.idle != nil {
		db.warm.idle(ctx)
	}
}
