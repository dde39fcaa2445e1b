package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/schema"
)

// The tombstones scenario emulates, on PostgreSQL, what a distributed
// engine does to a queue: YugabyteDB keeps dead versions for its history
// retention and CockroachDB until its GC TTL, so a queue's claims walk
// over the index entries of every job already worked. Here a side
// connection holds a REPEATABLE READ snapshot open for the whole run, so
// that neither VACUUM nor a scan's own cleanup (index entries marked dead
// once no snapshot can see their rows) removes anything.
//
// The run, on one claim connection:
//
//  1. the layout's table is truncated (no dead entries in it or its
//     indexes from earlier runs);
//  2. Jobs no-op jobs are preloaded and the snapshot is taken;
//  3. the jobs are burnt down, each claim taking --batch jobs and
//     completing them, in tombstoneWindows windows of equal job counts
//     (Report.Windows);
//  4. empty claims are measured on the drained queue (Report.Drained) and
//     on a fresh table (Report.Fresh: the layout's table in a schema of
//     its own, migrated and empty, dropped at the end), in alternating
//     rounds on the same connection, so that both see the same machine.
//
// Index tuples read per claim are idx_tup_read deltas of the table's
// indexes in pg_stat_user_indexes around a window, over its claims. The
// claim connection is the only one touching the table, and its pending
// statistics are flushed before each reading (pg_stat_force_next_flush,
// PostgreSQL 15; older servers are given time to report instead). In a
// window the count includes the completions' primary-key lookups (about
// one per job); empty claims complete nothing. Engines without
// pg_stat_user_indexes report null.

// tombstoneWindows is how many windows a burn-down is reported in.
const tombstoneWindows = 10

// tombstoneEmptyClaims is how many empty claims are measured on the fresh
// table and on the drained queue.
const tombstoneEmptyClaims = 100

// TombstoneWindow is one window of the tombstones scenario's burn-down.
type TombstoneWindow struct {
	// DeadBefore is how many jobs were worked before the window began:
	// each left at least one dead row version, which the held snapshot
	// keeps.
	DeadBefore int64 `json:"dead_before"`
	// Jobs and Claims are what the window worked and how many claims it
	// took.
	Jobs   int64 `json:"jobs"`
	Claims int64 `json:"claims"`
	// ClaimMS is the claim statement's latency (its transaction for the
	// fanout layout's Process claim, the Dequeue call for bucketed).
	ClaimMS Summary `json:"claim_ms"`
	// IndexTuplesPerClaim is index tuples read over the window (the
	// table's indexes, completions included) per claim; null where the
	// engine has no pg_stat_user_indexes.
	IndexTuplesPerClaim *float64 `json:"index_tuples_per_claim"`
	// DeadTuples is the server's n_dead_tup for the table at the window's
	// start: it stays up while the snapshot is held. Null where unknown.
	DeadTuples *int64 `json:"n_dead_tup"`
}

// ClaimSample is a run of empty claims: on the drained queue, or on a
// fresh table.
type ClaimSample struct {
	Claims              int64    `json:"claims"`
	ClaimMS             Summary  `json:"claim_ms"`
	IndexTuplesPerClaim *float64 `json:"index_tuples_per_claim"`
	DeadTuples          *int64   `json:"n_dead_tup"`
}

// indexStats reads the index statistics of one table; ok is false where
// the engine has none.
type indexStats struct {
	admin       *skiplock.DB
	pool        *skiplock.DB
	schema, tbl string
	ok          bool
	forced      bool // pg_stat_force_next_flush works
}

// read flushes the claim connection's pending statistics and returns the
// table's index tuples read so far and its dead tuples.
func (s *indexStats) read(ctx context.Context) (tuples, dead int64, err error) {
	if !s.ok {
		return 0, 0, nil
	}
	if s.forced {
		// The flush happens as each connection goes idle after this
		// statement, before it answers: every connection of the pool, so
		// that the claim connection is among them whichever the pool
		// hands out first.
		if err := eachConn(ctx, s.pool, "SELECT pg_stat_force_next_flush()"); err != nil {
			return 0, 0, fmt.Errorf("flush statistics: %w", err)
		}
	} else {
		// Before PostgreSQL 15 a backend reports at most every 500ms.
		time.Sleep(700 * time.Millisecond)
	}
	err = s.admin.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = $2),
		(SELECT coalesce(max(n_dead_tup), 0)::int8 FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2)`,
		s.schema, s.tbl).Scan(&tuples, &dead)
	if err != nil {
		return 0, 0, fmt.Errorf("read index statistics: %w", err)
	}
	return tuples, dead, nil
}

// newIndexStats checks what the engine offers.
func newIndexStats(ctx context.Context, c *Config, admin, pool *skiplock.DB, tbl string) *indexStats {
	s := &indexStats{admin: admin, pool: pool, schema: c.Schema, tbl: tbl}
	var n int64
	if err := admin.QueryRow(ctx, "SELECT count(*)::int8 FROM pg_stat_user_indexes").Scan(&n); err != nil {
		c.Logger.Info("no index statistics on this engine: index_tuples_per_claim will be null", logs.Err(err))
		return s
	}
	s.ok = true
	if _, err := pool.Exec(uncounted(ctx), "SELECT pg_stat_force_next_flush()"); err == nil {
		s.forced = true
	} else {
		c.Logger.Info("pg_stat_force_next_flush failed (before PostgreSQL 15): waiting for statistics to be reported instead", logs.Err(err))
	}
	return s
}

// snapshotHolder is a side connection whose REPEATABLE READ transaction
// keeps its snapshot, and with it every dead row version since, until
// release.
type snapshotHolder struct {
	conn skiplock.Conn
	tx   skiplock.Tx
}

// holdSnapshot opens the side transaction and takes its snapshot by
// reading tbl (a quoted table name).
func holdSnapshot(ctx context.Context, db *skiplock.DB, tbl string) (*snapshotHolder, error) {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot holder: connect: %w", err)
	}
	tx, err := conn.Begin(ctx, skiplock.TxOptions{Isolation: skiplock.IsoRepeatableRead})
	if err == nil {
		// The first statement takes the transaction's snapshot.
		_, err = tx.Exec(ctx, "SELECT 1 FROM "+tbl+" LIMIT 1")
	}
	if err != nil {
		if tx != nil {
			tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // failing anyway
		}
		conn.Release()
		return nil, fmt.Errorf("snapshot holder: take a snapshot: %w", err)
	}
	return &snapshotHolder{conn: conn, tx: tx}, nil
}

// release checks that the snapshot was held to the end (a server's
// idle_in_transaction_session_timeout would have ended it) and ends it.
func (h *snapshotHolder) release(ctx context.Context) error {
	_, err := h.tx.Exec(ctx, "SELECT 1")
	h.tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a read-only transaction
	h.conn.Release()
	if err != nil {
		return fmt.Errorf("the snapshot holder's transaction ended before the run did (%w): check the server's idle_in_transaction_session_timeout", err)
	}
	return nil
}

// runTombstones runs the tombstones scenario (see above).
func runTombstones(ctx context.Context, c *Config, admin *skiplock.DB, rep *Report) error {
	mk, ok := drivers[c.Layout]
	if !ok {
		return fmt.Errorf("layout %s is not available in this build", c.Layout)
	}
	if err := empty(ctx, c, admin); err != nil {
		return err
	}
	pool, err := openPool(ctx, c)
	if err != nil {
		emptyAfter(ctx, c, admin)
		return err
	}
	defer func() { pool.Close(); emptyAfter(ctx, c, admin) }()
	drv, err := mk(pool, c, nil)
	if err != nil {
		return err
	}
	name := drv.tables()[0]
	tbl := table(c, name)
	// A fresh table: TRUNCATE gives the table and its indexes new files,
	// with no dead entry from earlier runs.
	if _, err := admin.Exec(ctx, "TRUNCATE "+tbl); err != nil {
		return fmt.Errorf("truncate %s for a fresh table: %w", tbl, err)
	}
	stats := newIndexStats(ctx, c, admin, pool, name)
	if err := preload(ctx, c, admin, c.Jobs, drv.enqueue, drv.tables()...); err != nil {
		return err
	}
	holder, err := holdSnapshot(ctx, admin, tbl)
	if err != nil {
		return err
	}
	defer func() {
		if holder != nil {
			holder.release(ctx) //nolint:errcheck // the run failed already
		}
	}()
	c.Logger.Info("tombstones: a snapshot is held open while the jobs burn down", "jobs", c.Jobs, "windows", tombstoneWindows)

	all, perJob := NewHistogram(), NewHistogram()
	stmts0 := c.stmts.load()
	start := time.Now()
	var worked int64
	for w := range int64(tombstoneWindows) {
		target := int64(c.Jobs) * (w + 1) / tombstoneWindows
		if target <= worked {
			continue
		}
		win := TombstoneWindow{DeadBefore: worked}
		t0, dead, err := stats.read(ctx)
		if err != nil {
			return err
		}
		if stats.ok {
			win.DeadTuples = &dead
		}
		h := NewHistogram()
		for worked < target {
			s := time.Now()
			jobs, claim, err := drv.burn(ctx)
			if err != nil {
				return fmt.Errorf("window %d, after %d jobs: %w", w+1, worked, err)
			}
			n := jobs
			if n == 0 {
				return fmt.Errorf("window %d: the queue is empty after %d of %d jobs: did something else work them? %w", w+1, worked, c.Jobs, ErrQueueDry)
			}
			h.Record(claim)
			// As in the throughput scenario, the run's histograms hold
			// one entry per job: its claim, and its claim to completion.
			for took := time.Since(s); n > 0; n-- {
				all.Record(claim)
				perJob.Record(took)
			}
			win.Claims++
			win.Jobs += int64(jobs)
			worked += int64(jobs)
		}
		t1, _, err := stats.read(ctx)
		if err != nil {
			return err
		}
		win.ClaimMS = h.Summary()
		if stats.ok {
			per := float64(t1-t0) / float64(win.Claims)
			win.IndexTuplesPerClaim = &per
		}
		rep.Windows = append(rep.Windows, win)
		if c.Out != nil && c.Progress > 0 {
			fmt.Fprintf(c.Out, "tombstones: window %d: %d dead before, %d claims, claim p50 %s ms p99 %s ms, %s index tuples per claim\n",
				w+1, win.DeadBefore, win.Claims, ms(win.ClaimMS.P50), ms(win.ClaimMS.P99), perClaim(win.IndexTuplesPerClaim))
		}
	}
	secs := time.Since(start).Seconds()
	rep.Jobs, rep.Seconds = worked, secs
	if secs > 0 {
		rep.JobsPerS = float64(worked) / secs
	}
	rep.setStatements(c.stmts.load().since(stmts0))
	rep.setInFlight()
	rep.DequeueMS, rep.LatencyMS = all.Summary(), perJob.Summary()
	rep.Retries = Retries{BySQLState: map[string]int64{}}
	rep.Connections = int(pool.Stats().Total)

	if err := settleStats(ctx, pool); err != nil {
		return err
	}
	fresh, dropFresh, err := freshTable(ctx, c, admin, pool, mk, name)
	if err != nil {
		return err
	}
	defer dropFresh()
	c.Logger.Info("tombstones: empty claims on the drained queue and as many on a fresh table, in alternating rounds", "claims", tombstoneEmptyClaims)
	samples, err := emptyClaims(ctx, []claimSide{{drv, stats}, fresh})
	if err != nil {
		return fmt.Errorf("empty claims on the drained queue and a fresh table: %w", err)
	}
	rep.Drained, rep.Fresh = samples[0], samples[1]
	h := holder
	holder = nil
	return h.release(ctx)
}

// claimSide is a queue that empty claims are measured on, with its
// table's index statistics.
type claimSide struct {
	drv   driver
	stats *indexStats
}

// freshTableSuffix names the schema of the fresh table the drained queue
// is compared with.
const freshTableSuffix = "_fresh"

// freshTable makes the fresh table the drained queue's claims are
// compared with: the layout's table in a schema of its own (c.Schema with
// freshTableSuffix), migrated and empty, with no dead entry, claimed on
// the same connection. drop removes that schema.
func freshTable(ctx context.Context, c *Config, admin, pool *skiplock.DB, mk newDriver, name string) (side claimSide, drop func(), err error) {
	fc := *c
	fc.Schema = c.Schema + freshTableSuffix
	if err := sqlident.Validate("fresh table's schema", fc.Schema); err != nil {
		return side, nil, err
	}
	if _, err := schema.Migrate(ctx, admin, &schema.MigrateConfig{Options: schema.Options{Schema: fc.Schema}}); err != nil {
		return side, nil, fmt.Errorf("migrate the fresh table's schema %s: %w", fc.Schema, err)
	}
	drop = func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := admin.Exec(dctx, "DROP SCHEMA "+sqlident.Quote(fc.Schema)+" CASCADE"); err != nil {
			c.Logger.Warn("leaving the fresh table's schema behind", "schema", fc.Schema, logs.Err(err))
		}
	}
	drv, err := mk(pool, &fc, nil)
	if err != nil {
		drop()
		return side, nil, err
	}
	// The planner's statistics of the drained table are those of its
	// preload (the burn-down left them alone): the fresh table gets the
	// same by the same preload and ANALYZE, then TRUNCATE gives it new,
	// empty files (it keeps the column statistics), so that the two
	// differ in their dead entries alone.
	if err := preload(ctx, &fc, admin, c.Jobs, drv.enqueue, name); err != nil {
		drop()
		return side, nil, err
	}
	if _, err := admin.Exec(ctx, "TRUNCATE "+table(&fc, name)); err != nil {
		drop()
		return side, nil, fmt.Errorf("truncate the fresh table: %w", err)
	}
	return claimSide{drv, newIndexStats(ctx, &fc, admin, pool, name)}, drop, nil
}

// emptyClaimRounds is how many rounds emptyClaims alternates its sides
// in.
const emptyClaimRounds = 10

// emptyClaims measures tombstoneEmptyClaims claims on each side's queue,
// which has no job, in alternating rounds (the side that goes first
// alternates too), so that what else the machine does weighs on every
// side alike.
func emptyClaims(ctx context.Context, sides []claimSide) ([]*ClaimSample, error) {
	hists := make([]*Histogram, len(sides))
	tuples := make([]int64, len(sides))
	deads := make([]int64, len(sides))
	for i := range sides {
		hists[i] = NewHistogram()
	}
	for r := range emptyClaimRounds {
		for k := range sides {
			i := (k + r) % len(sides)
			s := sides[i]
			t0, dead, err := s.stats.read(ctx)
			if err != nil {
				return nil, err
			}
			deads[i] = max(deads[i], dead)
			for range tombstoneEmptyClaims / emptyClaimRounds {
				n, claim, err := s.drv.burn(ctx)
				if err != nil {
					return nil, err
				}
				if n > 0 {
					return nil, errors.New("claimed a job from a queue that should be empty: is something else using the bench schema?")
				}
				hists[i].Record(claim)
			}
			t1, _, err := s.stats.read(ctx)
			if err != nil {
				return nil, err
			}
			tuples[i] += t1 - t0
		}
	}
	out := make([]*ClaimSample, len(sides))
	for i, s := range sides {
		claims := int64(tombstoneEmptyClaims / emptyClaimRounds * emptyClaimRounds)
		out[i] = &ClaimSample{Claims: claims, ClaimMS: hists[i].Summary()}
		if s.stats.ok {
			per := float64(tuples[i]) / float64(claims)
			out[i].IndexTuplesPerClaim = &per
			out[i].DeadTuples = &deads[i]
		}
	}
	return out, nil
}

// perClaim formats an optional index tuples per claim.
func perClaim(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

// settleStats waits until the backends of pool have published their
// table statistics (n_dead_tup): PostgreSQL flushes a backend's counts at
// the end of a transaction at most once a second (PGSTAT_MIN_INTERVAL in
// src/backend/utils/activity/pgstat.c), so the counts of a burn-down's
// last second would show only once the backend had idled ten seconds. It
// waits out that second, then ends a transaction on each of the pool's
// connections.
func settleStats(ctx context.Context, pool skiplock.Pool) error {
	t := time.NewTimer(1100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if err := eachConn(ctx, pool, "SELECT 1"); err != nil {
		return fmt.Errorf("settle the statistics: %w", err)
	}
	return nil
}

// eachConn runs sql, uncounted, on each of pool's open connections,
// holding them all so that each is a different backend. Call it while
// nothing else uses the pool.
func eachConn(ctx context.Context, pool skiplock.Pool, sql string) error {
	var held []skiplock.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range pool.Stats().Total {
		c, err := pool.Acquire(uncounted(ctx))
		if err != nil {
			return err
		}
		held = append(held, c)
		if _, err := c.Exec(uncounted(ctx), sql); err != nil {
			return err
		}
	}
	return nil
}
