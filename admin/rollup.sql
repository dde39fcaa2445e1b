-- What the dashboard charts and lists about activity (package admin):
-- the per-minute rollups the maintenance leader writes, and the running
-- clients' presence rows (client/rollup.sql writes both). Templates:
--   rollup   skiplock_rollup, schema-qualified
--   clients  skiplock_client
-- Every identifier is quoted; every value is a $n parameter.

-- name: rollups
-- The rollups since $2 (inclusive) of queue $1, or of every queue when $1
-- is ''. One queue reads a range of the (queue, minute) key; every queue
-- scans the table, which holds one row per queue and active minute for 7
-- days (about 10,000 rows per busy queue).
SELECT "queue", "minute", "completed", "failed",
  "wait_p50_us", "wait_p95_us", "wait_p99_us", "run_p50_us", "run_p95_us", "run_p99_us"
FROM /* TEMPLATE: rollup */
WHERE ($1::TEXT = '' OR "queue" = $1::TEXT) AND "minute" >= $2::TIMESTAMPTZ
ORDER BY "minute", "queue";

-- name: rollups_pending
-- The clients' partial rows of queue $1 (every queue when $1 is '') since
-- $2 that no leader folded yet: a minute is folded about 80 s after it
-- starts, and only while a leader runs, so what a short-lived process
-- did would be missing without them. skiplock_stat holds only what was
-- flushed since the leader's last round.
SELECT "queue", "minute", "completed", "failed", "wait_hist"::TEXT, "run_hist"::TEXT
FROM /* TEMPLATE: stat */
WHERE ($1::TEXT = '' OR "queue" = $1::TEXT) AND "minute" >= $2::TIMESTAMPTZ;

-- name: rollup_hists
-- The histograms of the rollup rows that pending partials add to: $1
-- queues, $2 minutes, element by element.
SELECT r."queue", r."minute", r."wait_hist"::TEXT, r."run_hist"::TEXT
FROM /* TEMPLATE: rollup */ AS r
  JOIN unnest($1::TEXT[], $2::TIMESTAMPTZ[]) AS k ("q", "m") ON r."queue" = k."q" AND r."minute" = k."m";

-- name: clients
-- The clients seen in the last $1 seconds, newest first.
SELECT "id", "host", "pid", "queues"::TEXT, "started_at", "last_seen"
FROM /* TEMPLATE: clients */
WHERE "last_seen" >= now() - $1::FLOAT8 * INTERVAL '1 second'
ORDER BY "started_at" DESC, "id";
