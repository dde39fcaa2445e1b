-- The per-minute rollups (docs/design.md, "Rollups"): what each client
-- flushes, and what the maintenance leader folds. Templates:
--   stat     skiplock_stat, the clients' partial rows, schema-qualified
--   rollup   skiplock_rollup, one row per queue and minute
--   clients  skiplock_client, the running clients' presence rows
-- Every identifier is quoted; every value is a $n parameter.

-- name: rollup_partials
-- A flush's partial rows, one per array element, for client $1: $2 ids
-- (random, made by the client: a flush sent again after an unknown
-- outcome inserts nothing twice), $3 queues, $4 minutes, $5 completed, $6
-- failed, $7 and $8 the wait and run histograms as JSON text. The "s" of
-- rollup_flush and rollup_last, rendered into both (rollupVars), not sent
-- alone.
INSERT INTO /* TEMPLATE: stat */ ("id", "queue", "minute", "client_id", "completed", "failed", "wait_hist", "run_hist")
SELECT u."id", u."q", u."m", $1, u."c", u."f", u."w"::JSONB, u."r"::JSONB
FROM unnest($2::TEXT[], $3::TEXT[], $4::TIMESTAMPTZ[], $5::INT8[], $6::INT8[], $7::TEXT[], $8::TEXT[])
  AS u ("id", "q", "m", "c", "f", "w", "r")
ON CONFLICT ("id") DO NOTHING
RETURNING 1

-- name: rollup_flush
-- One flush of a client, one statement: its presence row ($1 id, $9 host,
-- $10 pid, $11 its queues as a JSON array, $12 its start) with last_seen
-- now, and its partial rows ($2 to $8: rollup_partials). Both CTEs are
-- read by the final SELECT so that every engine runs both; it returns the
-- presence rows written (1) and the partial rows inserted.
WITH "p" AS (
  INSERT INTO /* TEMPLATE: clients */ ("id", "host", "pid", "queues", "started_at", "last_seen")
  VALUES ($1, $9, $10, $11::JSONB, $12, now())
  ON CONFLICT ("id") DO UPDATE SET "last_seen" = excluded."last_seen"
  RETURNING 1
), "s" AS (/* TEMPLATE: rollup_partials */)
SELECT (SELECT count(*) FROM "p"), (SELECT count(*) FROM "s");

-- name: rollup_last
-- A stopping client's last flush, one statement: its presence row goes
-- ($1 its id), and its partial rows are inserted ($2 to $8:
-- rollup_partials). It returns the presence rows deleted and the partial
-- rows inserted.
WITH "p" AS (
  DELETE FROM /* TEMPLATE: clients */ WHERE "id" = $1
  RETURNING 1
), "s" AS (/* TEMPLATE: rollup_partials */)
SELECT (SELECT count(*) FROM "p"), (SELECT count(*) FROM "s");

-- name: rollup_take
-- The leader takes (deletes and reads) up to $2 partial rows of minutes
-- that started at least $1 seconds ago (the minute plus a grace for late
-- flushes). What it returns is exactly what it deleted, so a partial
-- that commits meanwhile stays for the next round. skiplock_stat holds
-- only what was flushed since the last round, so it is read whole.
DELETE FROM /* TEMPLATE: stat */
WHERE "id" IN (
  SELECT "id" FROM /* TEMPLATE: stat */ WHERE "minute" <= now() - $1::FLOAT8 * INTERVAL '1 second' LIMIT $2
)
RETURNING "queue", "minute", "completed", "failed", "wait_hist"::TEXT, "run_hist"::TEXT;

-- name: rollup_read
-- The rollup rows of the (queue, minute) pairs a round folds into: $1
-- queues, $2 minutes, element by element. Only the fenced leader writes
-- them, so they need no lock.
SELECT r."queue", r."minute", r."completed", r."failed", r."wait_hist"::TEXT, r."run_hist"::TEXT
FROM /* TEMPLATE: rollup */ AS r
  JOIN unnest($1::TEXT[], $2::TIMESTAMPTZ[]) AS k ("q", "m") ON r."queue" = k."q" AND r."minute" = k."m";

-- name: rollup_write
-- Writes the folded rows whole (counts, merged histograms, percentiles
-- in microseconds), one per array element: $1 queues, $2 minutes, $3
-- completed, $4 failed, $5 and $6 histograms as JSON text, $7..$12 the
-- wait p50, p95, p99 and run p50, p95, p99.
INSERT INTO /* TEMPLATE: rollup */ ("queue", "minute", "completed", "failed", "wait_hist", "run_hist",
  "wait_p50_us", "wait_p95_us", "wait_p99_us", "run_p50_us", "run_p95_us", "run_p99_us", "updated_at")
SELECT u."q", u."m", u."c", u."f", u."w"::JSONB, u."r"::JSONB, u."w50", u."w95", u."w99", u."r50", u."r95", u."r99", now()
FROM unnest($1::TEXT[], $2::TIMESTAMPTZ[], $3::INT8[], $4::INT8[], $5::TEXT[], $6::TEXT[],
  $7::INT8[], $8::INT8[], $9::INT8[], $10::INT8[], $11::INT8[], $12::INT8[])
  AS u ("q", "m", "c", "f", "w", "r", "w50", "w95", "w99", "r50", "r95", "r99")
ON CONFLICT ("queue", "minute") DO UPDATE SET "completed" = excluded."completed", "failed" = excluded."failed",
  "wait_hist" = excluded."wait_hist", "run_hist" = excluded."run_hist",
  "wait_p50_us" = excluded."wait_p50_us", "wait_p95_us" = excluded."wait_p95_us", "wait_p99_us" = excluded."wait_p99_us",
  "run_p50_us" = excluded."run_p50_us", "run_p95_us" = excluded."run_p95_us", "run_p99_us" = excluded."run_p99_us",
  "updated_at" = excluded."updated_at";

-- name: rollup_prune
-- Deletes up to $2 rollup rows of minutes older than $1 seconds.
DELETE FROM /* TEMPLATE: rollup */
WHERE ("queue", "minute") IN (
  SELECT "queue", "minute" FROM /* TEMPLATE: rollup */ WHERE "minute" < now() - $1::FLOAT8 * INTERVAL '1 second' LIMIT $2
);

-- name: rollup_prune_clients
-- Deletes the presence rows of clients not seen for $1 seconds (they died
-- without stopping).
DELETE FROM /* TEMPLATE: clients */ WHERE "last_seen" < now() - $1::FLOAT8 * INTERVAL '1 second';
