-- What operators read about jobs, across both layouts of one schema
-- (package admin). Templates:
--   jobs        the bucketed layout's jobs table, schema-qualified
--   job_queue   fanout's pending jobs
--   job_dead    fanout's dead jobs
--   job_attempt fanout's attempt counts
-- Every identifier is quoted; every value is a $n parameter.
--
-- The listings are newest first in one order across the layouts:
-- (created_at DESC, layout ASC, id DESC). A page starts after a cursor
-- row: $5 its creation time (NULL: from the newest), $6 whether it is a
-- row of this statement's layout (then $7, its id, breaks the tie). Each
-- listing is one scan with a top-k sort under LIMIT: no index leads with
-- a time (that would be a write hotspot on the distributed engines), so a
-- page costs a pass over the table's matching rows.

-- name: list_bucketed
-- $1 queue or '', $2 kind or '' (a kind of '' is spelled '-'), $3 the
-- statuses wanted (text[], empty: all), $4 limit.
SELECT j."id"::TEXT, j."queue", j."kind", lower(j."status"::TEXT), j."priority", j."attempts", j."max_attempts",
  j."run_at", j."create_ts", j."finished_at", j."last_error"
FROM /* TEMPLATE: jobs */ AS j
WHERE ($1::TEXT = '' OR j."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  AND (cardinality($3::TEXT[]) = 0 OR j."status"::TEXT = ANY($3::TEXT[]))
  AND ($5::TIMESTAMPTZ IS NULL OR j."create_ts" < $5::TIMESTAMPTZ
    OR (j."create_ts" = $5::TIMESTAMPTZ AND $6::BOOL AND j."id" < $7::INT8))
ORDER BY j."create_ts" DESC, j."id" DESC
LIMIT $4;

-- name: list_fanout
-- list_bucketed's parameters; $3 holds 'queued' and/or 'dead' (empty:
-- both). A pending job's attempts are its count in job_attempt when that
-- is ahead of its recorded failures.
SELECT * FROM (
  SELECT q."id", q."queue", q."kind", 'queued' AS "state", 0 AS "priority",
    greatest(q."attempts", coalesce(a."attempts", 0)) AS "attempts", q."max_attempts",
    coalesce(a."retry_at", q."created_at") AS "run_at", q."created_at", NULL::TIMESTAMPTZ AS "finished_at", q."last_error"
  FROM /* TEMPLATE: job_queue */ AS q LEFT JOIN /* TEMPLATE: job_attempt */ AS a ON a."job_id" = q."id"
  WHERE (cardinality($3::TEXT[]) = 0 OR 'queued' = ANY($3::TEXT[]))
  UNION ALL
  SELECT d."id", d."queue", d."kind", 'dead', 0, d."attempts", d."max_attempts",
    d."created_at", d."created_at", d."died_at", d."last_error"
  FROM /* TEMPLATE: job_dead */ AS d
  WHERE (cardinality($3::TEXT[]) = 0 OR 'dead' = ANY($3::TEXT[]))
) AS f
WHERE ($1::TEXT = '' OR f."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR f."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  AND ($5::TIMESTAMPTZ IS NULL OR f."created_at" < $5::TIMESTAMPTZ
    OR (f."created_at" = $5::TIMESTAMPTZ AND ($6::BOOL IS FALSE OR f."id" < $7::TEXT)))
ORDER BY f."created_at" DESC, f."id" DESC
LIMIT $4;

-- name: show_bucketed
-- One bucketed job with its payload, metadata and error history: $1 id.
SELECT j."id"::TEXT, j."queue", j."kind", lower(j."status"::TEXT), j."priority", j."attempts", j."max_attempts",
  j."run_at", j."create_ts", j."finished_at", j."last_error", j."payload"::TEXT, j."metadata"::TEXT, j."errors"::TEXT
FROM /* TEMPLATE: jobs */ AS j WHERE j."id" = $1::INT8;

-- name: show_fanout
-- One fanout job, pending or dead: $1 id.
SELECT q."id", q."queue", q."kind", 'queued', 0, greatest(q."attempts", coalesce(a."attempts", 0)), q."max_attempts",
  coalesce(a."retry_at", q."created_at"), q."created_at", NULL::TIMESTAMPTZ, q."last_error",
  q."payload"::TEXT, q."metadata"::TEXT, q."errors"::TEXT
FROM /* TEMPLATE: job_queue */ AS q LEFT JOIN /* TEMPLATE: job_attempt */ AS a ON a."job_id" = q."id"
WHERE q."id" = $1
UNION ALL
SELECT d."id", d."queue", d."kind", 'dead', 0, d."attempts", d."max_attempts",
  d."created_at", d."created_at", d."died_at", d."last_error", d."payload"::TEXT, d."metadata"::TEXT, d."errors"::TEXT
FROM /* TEMPLATE: job_dead */ AS d WHERE d."id" = $1;

-- name: periodic
-- Every periodic job's schedule, last enqueued tick and next tick due.
SELECT "name", "schedule", "last_tick", "next_tick", "updated_at" FROM /* TEMPLATE: periodic */ ORDER BY "name";

-- name: queues_bucketed
-- Per queue and status: the count, and the oldest claimable Queued job's
-- run_at (NULL when none waits).
SELECT "queue", "status"::TEXT, count(*), min(CASE WHEN "status" = 'Queued' AND "run_at" <= now() THEN "run_at" END)
FROM /* TEMPLATE: jobs */ GROUP BY "queue", "status";

-- name: queues_fanout
-- Per queue: pending jobs and the oldest's creation time, then dead jobs.
SELECT "queue", 'queued', count(*), min("created_at") FROM /* TEMPLATE: job_queue */ GROUP BY "queue"
UNION ALL
SELECT "queue", 'dead', count(*), NULL::TIMESTAMPTZ FROM /* TEMPLATE: job_dead */ GROUP BY "queue";

-- name: queue_states
-- The queues operators paused (or resumed).
SELECT "name", "paused", "updated_at" FROM /* TEMPLATE: queue_state */;

-- name: set_paused
-- Pauses ($2 true) or resumes ($2 false) queue $1.
INSERT INTO /* TEMPLATE: queue_state */ AS q ("name", "paused", "updated_at") VALUES ($1, $2, now())
ON CONFLICT ("name") DO UPDATE SET "paused" = excluded."paused", "updated_at" = excluded."updated_at";
