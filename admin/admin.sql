-- What operators read about jobs, across both layouts of one schema
-- (package admin). Templates:
--   jobs        the bucketed layout's jobs table, schema-qualified
--   job_queue   fanout's pending jobs
--   job_dead    fanout's dead jobs
--   job_attempt fanout's attempt counts
-- Every identifier is quoted; every value is a $n parameter.
--
-- The listings (docs/design.md, "Admin queries at scale") read each
-- layout in the order of an index, so that a page reads about a page of
-- index entries (plus the rows its filters skip), never a whole table:
-- bucketed jobs by id descending (the primary key; newest first where
-- ids come from an identity, PostgreSQL and YugabyteDB; stable but not
-- by time on CockroachDB, whose ids are unordered_unique_rowid()), queued
-- ones in the order they run (jobs_dequeue), finished ones by finish time
-- (jobs_finished), running ones from the jobs in flight
-- (jobs_lease_expiry); then fanout jobs newest first by the time in
-- their ids. The queues overview counts through indexes, and every count
-- stops at a cap (a LIMIT of the cap plus one row).

-- name: list_bucketed
-- Bucketed jobs of any state, by id descending. $1 queue or '', $2 kind
-- or '' (a kind of '' is spelled '-'), $3 limit, $4 the page's start:
-- ids below it (the cursor's id, or the largest INT8 for the first page).
-- Expected plan (PostgreSQL): Limit over Index Scan Backward using
-- jobs_pkey, Index Cond id < $4, the filters a Filter.
SELECT j."id"::TEXT, j."queue", j."kind", lower(j."status"::TEXT), j."priority", j."attempts", j."max_attempts",
  j."run_at", j."create_ts", j."finished_at", j."last_error"
FROM /* TEMPLATE: jobs */ AS j
WHERE j."id" < $4::INT8
  AND ($1::TEXT = '' OR j."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
ORDER BY j."id" DESC
LIMIT $3;

-- name: list_bucketed_queued
-- Queued bucketed jobs in the order they run, queue by queue: (queue,
-- priority, run_at, id), the order of jobs_dequeue within a bucket. One
-- range scan of the index per bucket ($4, as queue_names_bucketed takes
-- them) from just after the cursor job (its queue, priority, run_at and
-- id: $5 ... $8; the first page passes ('', the lowest SMALLINT, a time
-- before any job, 0)), under LIMIT $3, then merged. $1 is '' (for one
-- queue: list_bucketed_queued_in), $2 kind or '' ('-' for '').
SELECT x."id"::TEXT, x."queue", x."kind", 'queued', x."priority", x."attempts", x."max_attempts",
  x."run_at", x."create_ts", x."finished_at", x."last_error"
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error"
  FROM /* TEMPLATE: jobs */ AS j
  WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ $1::TEXT = ''
    AND (j."queue", j."priority", j."run_at", j."id") > ($5::TEXT, $6::INT2, $7::TIMESTAMPTZ, $8::INT8)
    AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY j."queue", j."priority", j."run_at", j."id" LIMIT $3) AS x
ORDER BY x."queue", x."priority", x."run_at", x."id"
LIMIT $3;

-- name: list_bucketed_queued_in
-- list_bucketed_queued for one queue, $1: the queue bounds each scan,
-- so the last page stops at the queue's end.
SELECT x."id"::TEXT, x."queue", x."kind", 'queued', x."priority", x."attempts", x."max_attempts",
  x."run_at", x."create_ts", x."finished_at", x."last_error"
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error"
  FROM /* TEMPLATE: jobs */ AS j
  WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ j."queue" = $1::TEXT
    AND (j."queue", j."priority", j."run_at", j."id") > ($5::TEXT, $6::INT2, $7::TIMESTAMPTZ, $8::INT8)
    AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY j."queue", j."priority", j."run_at", j."id" LIMIT $3) AS x
ORDER BY x."queue", x."priority", x."run_at", x."id"
LIMIT $3;

-- name: list_bucketed_running
-- Running bucketed jobs, by id descending: the jobs in flight, read
-- whole from the partial index jobs_lease_expiry and sorted (as many as
-- the workers hold). $1 queue or '', $2 kind or '' ('-' for ''), $3
-- limit, $4 the page's start: ids below it.
SELECT j."id"::TEXT, j."queue", j."kind", 'running', j."priority", j."attempts", j."max_attempts",
  j."run_at", j."create_ts", j."finished_at", j."last_error"
FROM /* TEMPLATE: jobs */ AS j
WHERE j."status" = 'Running' AND j."id" < $4::INT8
  AND ($1::TEXT = '' OR j."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
ORDER BY j."id" DESC
LIMIT $3;

-- name: list_bucketed_finished
-- Finished bucketed jobs of the statuses $5 (of Success, Failed,
-- Canceled), the most recently finished first: a descending scan of the
-- partial index jobs_finished (per bucket where the index is led by the
-- bucket, finished_bucket_match; $4 the buckets, one element elsewhere)
-- under LIMIT $3, skipping the other finished statuses. The page starts
-- after the cursor job's (finished_at, id) ($6, $7; the first page
-- passes a time after any job's). $1 queue or '', $2 kind or '' ('-' for
-- '').
SELECT x."id"::TEXT, x."queue", x."kind", lower(x."status"::TEXT), x."priority", x."attempts", x."max_attempts",
  x."run_at", x."create_ts", x."finished_at", x."last_error"
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."status", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error"
  FROM /* TEMPLATE: jobs */ AS j
  WHERE j."finished_at" IS NOT NULL AND /* TEMPLATE: finished_bucket_match */ j."finished_at" <= $6::TIMESTAMPTZ
    AND (j."finished_at" < $6::TIMESTAMPTZ OR j."id" < $7::INT8)
    AND j."status"::TEXT = ANY($5::TEXT[])
    AND ($1::TEXT = '' OR j."queue" = $1::TEXT)
    AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY j."finished_at" DESC, j."id" DESC LIMIT $3) AS x
ORDER BY x."finished_at" DESC, x."id" DESC
LIMIT $3;

-- name: list_fanout_queued
-- Pending fanout jobs, newest first: an id is two hex digits (its shard),
-- 14 of clock time in microseconds, then random ones, so within one
-- two-digit prefix ids are in time order. One descending primary-key scan
-- per prefix ($4 lower and $5 upper bounds, one element per prefix), each
-- under LIMIT $3; the caller merges them by the time part (the id past
-- its prefix) and asks again with a larger $3 when a prefix may hold more
-- of the page. $6 is the page's start, the cursor id without its prefix
-- ('' for the first page): each prefix's scan starts below prefix || $6,
-- an index condition. $1 queue or '', $2 kind or '' ('-' for ''). A
-- pending job's attempts are its count in job_attempt when that is ahead
-- of its recorded failures: a primary-key probe per row returned.
SELECT q."id", q."queue", q."kind", 'queued', 0,
  greatest(q."attempts", coalesce((SELECT a."attempts" FROM /* TEMPLATE: job_attempt */ AS a WHERE a."job_id" = q."id"), 0)), q."max_attempts",
  coalesce((SELECT a."retry_at" FROM /* TEMPLATE: job_attempt */ AS a WHERE a."job_id" = q."id"), q."created_at"),
  q."created_at", NULL::TIMESTAMPTZ, q."last_error"
FROM unnest($4::TEXT[], $5::TEXT[]) AS h ("lo", "hi")
CROSS JOIN LATERAL (SELECT x."id", x."queue", x."kind", x."attempts", x."max_attempts", x."created_at", x."last_error"
  FROM /* TEMPLATE: job_queue */ AS x
  WHERE x."id" >= h."lo" AND x."id" < h."hi" AND x."id" < CASE WHEN $6::TEXT = '' THEN h."hi" ELSE h."lo" || $6::TEXT END
    AND ($1::TEXT = '' OR x."queue" = $1::TEXT)
    AND ($2::TEXT = '' OR x."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY x."id" DESC LIMIT $3) AS q;

-- name: list_fanout_dead
-- Dead fanout jobs, newest first: list_fanout_queued's parameters and
-- scans, on job_dead (a dead job keeps its id).
SELECT d."id", d."queue", d."kind", 'dead', 0, d."attempts", d."max_attempts",
  d."created_at", d."created_at", d."died_at", d."last_error"
FROM unnest($4::TEXT[], $5::TEXT[]) AS h ("lo", "hi")
CROSS JOIN LATERAL (SELECT x."id", x."queue", x."kind", x."attempts", x."max_attempts", x."created_at", x."died_at", x."last_error"
  FROM /* TEMPLATE: job_dead */ AS x
  WHERE x."id" >= h."lo" AND x."id" < h."hi" AND x."id" < CASE WHEN $6::TEXT = '' THEN h."hi" ELSE h."lo" || $6::TEXT END
    AND ($1::TEXT = '' OR x."queue" = $1::TEXT)
    AND ($2::TEXT = '' OR x."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY x."id" DESC LIMIT $3) AS d;

-- name: list_fanout_dead_unordered
-- list_fanout_dead where job_dead's primary key is hashed, not ordered
-- (YugabyteDB's default for PRIMARY KEY ("id")): no range of ids is an
-- index range there, so this is one scan of the table with a top-$3
-- sort (the page itself, not per prefix), bounded by the first prefix's
-- lower and the last's upper bound and started below the cursor by the
-- same key.
SELECT d."id", d."queue", d."kind", 'dead', 0, d."attempts", d."max_attempts",
  d."created_at", d."created_at", d."died_at", d."last_error"
FROM /* TEMPLATE: job_dead */ AS d
WHERE d."id" >= ($4::TEXT[])[1] AND d."id" < ($5::TEXT[])[cardinality($5::TEXT[])]
  AND ($6::TEXT = '' OR substr(d."id", 3) < $6::TEXT)
  AND ($1::TEXT = '' OR d."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR d."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
ORDER BY substr(d."id", 3) DESC, d."id" DESC
LIMIT $3;

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

-- The queues overview (Admin.Queues) counts through indexes and stops
-- every count at a cap: the statements below read at most the cap plus
-- one row per count, and one index descent per bucket, queue and level.

-- name: queue_names_bucketed
-- The queues that have Queued jobs: a loose index scan of jobs_dequeue
-- (bucket, queue, ...), per bucket the first queue, then the first after
-- it, one LIMIT 1 descent per bucket and queue. $1 the buckets (INT2[]);
-- where the engine shards the index itself (bucket_match empty) one
-- element, and each descent spans the shards.
WITH RECURSIVE "n" ("bucket", "queue") AS (
  SELECT "b"."bucket", "h"."queue" FROM unnest($1::INT2[]) AS "b" ("bucket")
  CROSS JOIN LATERAL (SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ TRUE
    ORDER BY j."queue" LIMIT 1) AS "h"
  UNION ALL
  SELECT "b"."bucket", "h"."queue" FROM "n" AS "b"
  CROSS JOIN LATERAL (SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ j."queue" > "b"."queue"
    ORDER BY j."queue" LIMIT 1) AS "h"
)
SELECT DISTINCT "queue" FROM "n";

-- name: queue_queued_bucketed
-- One queue's Queued jobs ($1 the queue, $2 the buckets): how many, read
-- from jobs_dequeue in index order bucket after bucket, up to $3 rows in
-- all (the cap plus one; the ORDER BY keeps PostgreSQL from building a
-- bitmap of the whole queue first), and the run_at of the oldest
-- claimable one. The index orders a bucket's jobs of a queue
-- by (priority, run_at, id), so the oldest is the minimum over the first
-- entry of each bucket and priority level: a loose scan of the levels,
-- one LIMIT 1 descent per bucket and level.
WITH RECURSIVE "lv" ("bucket", "priority", "run_at") AS (
  SELECT "b"."bucket", "h"."priority", "h"."run_at" FROM unnest($2::INT2[]) AS "b" ("bucket")
  CROSS JOIN LATERAL (SELECT j."priority", j."run_at" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ j."queue" = $1::TEXT
    ORDER BY j."priority", j."run_at" LIMIT 1) AS "h"
  UNION ALL
  SELECT "b"."bucket", "h"."priority", "h"."run_at" FROM "lv" AS "b"
  CROSS JOIN LATERAL (SELECT j."priority", j."run_at" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ j."queue" = $1::TEXT AND j."priority" > "b"."priority"
    ORDER BY j."priority", j."run_at" LIMIT 1) AS "h"
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM unnest($2::INT2[]) AS "b" ("bucket")
    CROSS JOIN LATERAL (SELECT 1 FROM /* TEMPLATE: jobs */ AS j
      WHERE j."status" = 'Queued' AND /* TEMPLATE: bucket_match */ j."queue" = $1::TEXT
      ORDER BY j."priority", j."run_at", j."id" LIMIT $3) AS "x"
    LIMIT $3) AS "c"),
  (SELECT min("run_at") FROM "lv" WHERE "run_at" <= now());

-- name: queue_running_bucketed
-- Running jobs per queue, from the partial index jobs_lease_expiry (the
-- jobs in flight), at most $1 rows (the cap plus one) in all.
SELECT "queue", 'running', count(*) FROM (SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j WHERE j."status" = 'Running' LIMIT $1) AS "r"
GROUP BY "queue";

-- name: queue_finished_bucketed
-- Finished jobs (Success, Failed, Canceled) per queue and status, from
-- the partial index jobs_finished: at most $1 rows (the cap plus one) in
-- all, the most recently finished first where the index is ordered by
-- finished_at alone (finished_order), which holds the most rows of any
-- state, so a schema with more finished jobs than the cap shows them as
-- "at least".
SELECT "queue", "status", count(*) FROM (SELECT j."queue", j."status"::TEXT AS "status" FROM /* TEMPLATE: jobs */ AS j
  WHERE j."finished_at" IS NOT NULL /* TEMPLATE: finished_order */ LIMIT $1) AS "f"
GROUP BY "queue", "status";

-- name: queue_counts_fanout
-- Fanout's pending and dead jobs per queue, at most $1 rows (the cap plus
-- one) of each table: neither has an index on the queue, so the tables
-- are read from their start under the LIMIT, with no filter.
SELECT "queue", 'queued', count(*) FROM (SELECT q."queue" FROM /* TEMPLATE: job_queue */ AS q LIMIT $1) AS "q" GROUP BY "queue"
UNION ALL
SELECT "queue", 'dead', count(*) FROM (SELECT d."queue" FROM /* TEMPLATE: job_dead */ AS d LIMIT $1) AS "d" GROUP BY "queue";

-- name: queue_oldest_fanout
-- The creation time of queue $3's oldest pending fanout job: the first
-- job of the queue from the head of each two-digit id prefix ($1 lower,
-- $2 upper bounds), ids being in time order within a prefix; one ordered
-- LIMIT 1 scan per prefix, which skips the other queues' jobs before it.
SELECT min("x"."created_at") FROM unnest($1::TEXT[], $2::TEXT[]) AS "h" ("lo", "hi")
CROSS JOIN LATERAL (SELECT q."created_at" FROM /* TEMPLATE: job_queue */ AS q
  WHERE q."id" >= "h"."lo" AND q."id" < "h"."hi" AND q."queue" = $3::TEXT
  ORDER BY q."id" LIMIT 1) AS "x";

-- name: queue_states
-- The queues operators paused (or resumed).
SELECT "name", "paused", "updated_at" FROM /* TEMPLATE: queue_state */;

-- name: set_paused
-- Pauses ($2 true) or resumes ($2 false) queue $1.
INSERT INTO /* TEMPLATE: queue_state */ AS q ("name", "paused", "updated_at") VALUES ($1, $2, now())
ON CONFLICT ("name") DO UPDATE SET "paused" = excluded."paused", "updated_at" = excluded."updated_at";
