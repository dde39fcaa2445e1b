package bench

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
)

// Writes is what a run cost the server in writes, per job worked: the
// row updates of the layout's tables (how many of them HOT: no index
// entry written) and the WAL the whole server wrote meanwhile. A job of
// the bucketed layout is updated twice (Queued to Running, Running to
// Success), or once and then deleted (--delete-completed); the status is
// in partial indexes' predicates, so no update can be HOT. Null where the
// engine has no pg_stat_user_tables or WAL positions (YugabyteDB,
// CockroachDB).
type Writes struct {
	UpdatesPerJob    float64 `json:"updates_per_job"`
	HOTUpdatesPerJob float64 `json:"hot_updates_per_job"`
	DeletesPerJob    float64 `json:"deletes_per_job"`
	WALBytesPerJob   float64 `json:"wal_bytes_per_job"`
}

// writesMark is the server's write counters at one moment.
type writesMark struct {
	upd, hot, del int64
	lsn           string
}

// markWrites reads the counters of the schema's tables; ok is false where
// the engine has none.
func markWrites(ctx context.Context, admin *skiplock.DB, c *Config, tables []string) (m writesMark, ok bool) {
	err := admin.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0)::INT8, coalesce(sum(n_tup_hot_upd), 0)::INT8, coalesce(sum(n_tup_del), 0)::INT8,
		pg_current_wal_lsn()::TEXT
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY($2)`, c.Schema, tables).Scan(&m.upd, &m.hot, &m.del, &m.lsn)
	return m, err == nil
}

// writesSince is the writes per job since m. The workers' connections
// must be closed first: a backend reports its table statistics when it
// exits, or idle up to 10 s later.
func writesSince(ctx context.Context, admin *skiplock.DB, c *Config, tables []string, m writesMark, jobs int64) *Writes {
	if jobs <= 0 {
		return nil
	}
	// Backends report as they exit, just after the pool closed them.
	time.Sleep(300 * time.Millisecond)
	now, ok := markWrites(ctx, admin, c, tables)
	if !ok {
		return nil
	}
	var wal int64
	if err := admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::TEXT::pg_lsn, $2::TEXT::pg_lsn)::INT8", now.lsn, m.lsn).Scan(&wal); err != nil {
		return nil
	}
	n := float64(jobs)
	return &Writes{UpdatesPerJob: float64(now.upd-m.upd) / n, HOTUpdatesPerJob: float64(now.hot-m.hot) / n,
		DeletesPerJob: float64(now.del-m.del) / n, WALBytesPerJob: float64(wal) / n}
}
