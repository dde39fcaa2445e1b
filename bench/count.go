package bench

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/copyio"
	"github.com/skiplock/skiplock/internal/txhook"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/usage"
)

// Statement counting: the workers' pool is wrapped in a decorator at the
// skiplock.Pool seam, so every statement a layout sends through it is
// counted whichever driver is underneath: Exec, Query and QueryRow count
// one each, and a transaction's BEGIN and its COMMIT or ROLLBACK one each
// (a pipelined BEGIN rides in one network write with the first statement,
// and a COMMIT sent with the last statement (txhook.Last) in its, but each
// is still a statement sent). The bench's own bookkeeping on that
// pool (polling for jobs left, flushing statistics) runs under an
// uncounted context.

// stmtCounter counts statements sent through a countingPool: all of
// them, the BEGINs among them (for the round trips: a pipelined BEGIN
// takes none of its own), and the claims among them (statements that lock
// with SKIP LOCKED: every layout's claim does, and nothing else does).
// It also sums the time the statements were out (sent and not yet
// answered, rows read to the end): over a run's seconds, how many were in
// flight on average.
// Statements sent ahead (txhook.Ahead: a fanout attempt's count, which
// travels beside the job's handler) are counted apart too, and so are
// the first statements of transactions chained after a COMMIT
// (txhook.Then: a fanout worker's next claim, sent with its last job's
// removal), which take no round trip of their own. Notifications sent in
// their own statement (a client's trailing notification after debounced
// inserts, whose number follows the clock, not the jobs) are counted
// apart as well.
type stmtCounter struct{ n, begins, lastCommits, claims, busy, ahead, chained, notifies atomic.Int64 }

// counts is a reading of a stmtCounter; busy is in nanoseconds.
type counts struct{ statements, begins, lastCommits, claims, busy, ahead, chained, notifies int64 }

// since is what was counted between from and c.
func (c counts) since(from counts) counts {
	return counts{c.statements - from.statements, c.begins - from.begins, c.lastCommits - from.lastCommits, c.claims - from.claims, c.busy - from.busy, c.ahead - from.ahead, c.chained - from.chained, c.notifies - from.notifies}
}

// target is the counter of a statement sent under ctx: s, the context's
// own (counterKey), or nil for the bench's own statements (uncounted).
func (s *stmtCounter) target(ctx context.Context) *stmtCounter {
	if ctx.Value(uncountedKey{}) != nil {
		return nil
	}
	if own, ok := ctx.Value(counterKey{}).(*stmtCounter); ok {
		return own
	}
	return s
}

// timer returns the counter that times a statement sent under ctx (nil:
// none, the bench's own) and when it went out.
func (s *stmtCounter) timer(ctx context.Context) (*stmtCounter, time.Time) {
	t := s.target(ctx)
	if t == nil {
		return nil, time.Time{}
	}
	return t, time.Now()
}

// out adds a statement's time out, from sent; nil counts nothing.
func (s *stmtCounter) out(sent time.Time) {
	if s != nil {
		s.busy.Add(int64(time.Since(sent)))
	}
}

// roundTrips is how many client round trips the statements took: one
// each, but with pipelining a BEGIN rides in its transaction's first
// statement's round trip, a COMMIT asked to go with the last statement
// (txhook.Last) in that one's, and a chained transaction's first
// statement in the round trip of the COMMIT before it.
func (c counts) roundTrips(pipelined bool) int64 {
	if pipelined {
		return c.statements - c.begins - c.lastCommits - c.chained
	}
	return c.statements
}

// uncountedKey marks a context whose statements are the bench's own.
type uncountedKey struct{}

// uncounted returns ctx with its statements left out of the count.
func uncounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncountedKey{}, true)
}

// counterKey carries, in a context, a counter of its own for the
// statements sent under it (the pickup scenario counts the maintenance
// service's apart from the client's).
type counterKey struct{}

func (s *stmtCounter) add(ctx context.Context) {
	if t := s.target(ctx); t != nil {
		t.n.Add(1)
	}
}

// load returns what was counted so far (zero for a nil counter).
func (s *stmtCounter) load() counts {
	if s == nil {
		return counts{}
	}
	return counts{s.n.Load(), s.begins.Load(), s.lastCommits.Load(), s.claims.Load(), s.busy.Load(), s.ahead.Load(), s.chained.Load(), s.notifies.Load()}
}

// isNotification reports whether sql only sends a notification.
func isNotification(sql string) bool { return strings.HasPrefix(sql, "SELECT pg_notify(") }

// query counts a statement that returns rows, noting a claim.
func (s *stmtCounter) query(ctx context.Context, sql string) {
	t := s.target(ctx)
	if t == nil {
		return
	}
	t.n.Add(1)
	if strings.Contains(sql, "SKIP LOCKED") {
		t.claims.Add(1)
	}
}

// countStatements makes db count its statements in a new counter.
func countStatements(db *skiplock.DB) *stmtCounter {
	s := &stmtCounter{}
	db.Pool = newCountingPool(db.Pool, s)
	return s
}

// counted counts the statements sent through q.
type counted struct {
	q skiplock.Querier
	s *stmtCounter
}

func (c counted) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	c.s.add(ctx)
	t, sent := c.s.timer(ctx)
	if t != nil && isNotification(sql) {
		t.notifies.Add(1)
	}
	defer t.out(sent)
	return c.q.Exec(ctx, sql, args...)
}

func (c counted) Query(ctx context.Context, sql string, args ...any) (skiplock.Rows, error) {
	c.s.query(ctx, sql)
	t, sent := c.s.timer(ctx)
	if t != nil && txhook.IsAhead(ctx) {
		t.ahead.Add(1)
	}
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		t.out(sent)
		return nil, err
	}
	return &timedRows{Rows: rows, t: t, sent: sent}, nil
}

func (c counted) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	c.s.query(ctx, sql)
	t, sent := c.s.timer(ctx)
	return timedRow{row: c.q.QueryRow(ctx, sql, args...), t: t, sent: sent}
}

// timedRows are a Query's rows, out until closed (Next's last call closes
// them).
type timedRows struct {
	skiplock.Rows
	t      *stmtCounter
	sent   time.Time
	closed bool
}

func (r *timedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *timedRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.t.out(r.sent)
	}
}

// timedRow is a QueryRow's row, out until scanned.
type timedRow struct {
	row  skiplock.Row
	t    *stmtCounter
	sent time.Time
}

func (r timedRow) Scan(dest ...any) error {
	defer r.t.out(r.sent)
	return r.row.Scan(dest...)
}

// countingPool counts what is sent through a pool and its connections and
// transactions.
type countingPool struct {
	counted
	pool skiplock.Pool
}

func newCountingPool(p skiplock.Pool, s *stmtCounter) *countingPool {
	return &countingPool{counted: counted{q: p, s: s}, pool: p}
}

func (p *countingPool) Begin(ctx context.Context, opts skiplock.TxOptions) (skiplock.Tx, error) {
	return countBegin(ctx, p.pool, p.s, opts)
}

func (p *countingPool) Acquire(ctx context.Context) (skiplock.Conn, error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{counted: counted{q: c, s: p.s}, conn: c}, nil
}

func (p *countingPool) Stats() skiplock.PoolStats { return p.pool.Stats() }
func (p *countingPool) Close()                    { p.pool.Close() }

// countingConn counts what is sent through an acquired connection.
type countingConn struct {
	counted
	conn skiplock.Conn
}

func (c *countingConn) Begin(ctx context.Context, opts skiplock.TxOptions) (skiplock.Tx, error) {
	return countBegin(ctx, c.conn, c.s, opts)
}

func (c *countingConn) Release()    { c.conn.Release() }
func (c *countingConn) PID() uint32 { return c.conn.PID() }

// WaitForNotification is not a statement: it waits for the server.
func (c *countingConn) WaitForNotification(ctx context.Context) (skiplock.Notification, error) {
	return c.conn.WaitForNotification(ctx)
}

func countBegin(ctx context.Context, b skiplock.Beginner, s *stmtCounter, opts skiplock.TxOptions) (skiplock.Tx, error) {
	if t := s.target(ctx); t != nil {
		t.begins.Add(1)
	}
	s.add(ctx)
	t, sent := s.timer(ctx)
	tx, err := b.Begin(ctx, opts)
	t.out(sent)
	if err != nil {
		return nil, err
	}
	return &countingTx{counted: counted{q: tx, s: s}, tx: tx}, nil
}

// countingTx counts a transaction's statements and its one COMMIT or
// ROLLBACK (a Rollback after the end sends nothing and is not counted),
// noting a COMMIT that went with the last statement (txhook.Last). Like
// the driver's transactions, it is not safe for concurrent use.
type countingTx struct {
	counted
	tx       skiplock.Tx
	ended    bool
	lastSent bool // a statement went under txhook.Last
}

func (t *countingTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	last := txhook.IsLast(ctx)
	t.lastSent = t.lastSent || last
	n, err := t.counted.Exec(ctx, sql, args...)
	if c := txhook.ChainOf(ctx); last && c != nil && c.Next != nil {
		if s := t.s.target(ctx); s != nil {
			s.chained.Add(1) // the next claim rode in this round trip
		}
	}
	return n, err
}

func (t *countingTx) Query(ctx context.Context, sql string, args ...any) (skiplock.Rows, error) {
	t.lastSent = t.lastSent || txhook.IsLast(ctx)
	return t.counted.Query(ctx, sql, args...)
}

func (t *countingTx) QueryRow(ctx context.Context, sql string, args ...any) skiplock.Row {
	t.lastSent = t.lastSent || txhook.IsLast(ctx)
	return t.counted.QueryRow(ctx, sql, args...)
}

// CheckConn checks the counted transaction's connection (fanout's
// watch of a running handler's transaction); it sends no statement.
func (t *countingTx) CheckConn() error { return skiplock.CheckConn(t.tx) }

func (t *countingTx) Commit(ctx context.Context) error {
	if !t.ended {
		t.ended = true
		t.s.add(ctx)
		if c := t.s.target(ctx); c != nil && t.lastSent {
			c.lastCommits.Add(1)
		}
	}
	timer, sent := t.s.timer(ctx)
	defer timer.out(sent)
	return t.tx.Commit(ctx)
}

func (t *countingTx) Rollback(ctx context.Context) error {
	if !t.ended {
		t.ended = true
		t.s.add(ctx)
	}
	timer, sent := t.s.timer(ctx)
	defer timer.out(sent)
	return t.tx.Rollback(ctx)
}

// CopyFrom counts a COPY as the two round trips pgx makes of it (the
// columns' description, then the COPY itself).
func (c counted) CopyFrom(ctx context.Context, table []string, columns []string, src copyio.Source) (int64, error) {
	cp, ok := c.q.(copyio.Copier)
	if !ok {
		return 0, usage.Errorf("this connection cannot COPY")
	}
	c.s.add(ctx)
	c.s.add(ctx)
	t, sent := c.s.timer(ctx)
	defer t.out(sent)
	return cp.CopyFrom(ctx, table, columns, src)
}
