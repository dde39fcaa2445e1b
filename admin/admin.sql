-- What operators read about jobs, across both layouts of one schema
-- (package admin). Templates:
--   jobs        the bucketed layout's jobs table, schema-qualified
--   job_queue   fanout's pending jobs
--   job_dead    fanout's dead jobs
--   job_attempt fanout's attempt counts
--   workflow    the bucketed layout's workflows (job_workflow)
--   workflow_node  their jobs by name (job_workflow_node)
--   workflow_columns_j, _x  a job's workflow and the ids of the jobs it
--               depends on (alias j or x): the ids from its dependencies'
--               names, by job_workflow_node, for workflow jobs only
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
  j."run_at", j."create_ts", j."finished_at", j."last_error", /* TEMPLATE: workflow_columns_j */
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
  x."run_at", x."create_ts", x."finished_at", x."last_error", /* TEMPLATE: workflow_columns_x */
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error", j."workflow_id", j."depends_on"
  FROM /* TEMPLATE: jobs */ AS j
  WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ $1::TEXT = ''
    AND (j."queue", j."priority", j."run_at", j."id") > ($5::TEXT, $6::INT2, $7::TIMESTAMPTZ, $8::INT8)
    AND ($2::TEXT = '' OR j."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
  ORDER BY j."queue", j."priority", j."run_at", j."id" LIMIT $3) AS x
ORDER BY x."queue", x."priority", x."run_at", x."id"
LIMIT $3;

-- name: list_bucketed_queued_in
-- list_bucketed_queued for one queue, $1: the queue bounds each scan,
-- so the last page stops at the queue's end.
SELECT x."id"::TEXT, x."queue", x."kind", 'queued', x."priority", x."attempts", x."max_attempts",
  x."run_at", x."create_ts", x."finished_at", x."last_error", /* TEMPLATE: workflow_columns_x */
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error", j."workflow_id", j."depends_on"
  FROM /* TEMPLATE: jobs */ AS j
  WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" = $1::TEXT
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
  j."run_at", j."create_ts", j."finished_at", j."last_error", /* TEMPLATE: workflow_columns_j */
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
  x."run_at", x."create_ts", x."finished_at", x."last_error", /* TEMPLATE: workflow_columns_x */
FROM unnest($4::INT2[]) AS "b" ("bucket")
CROSS JOIN LATERAL (SELECT j."id", j."queue", j."kind", j."status", j."priority", j."attempts", j."max_attempts",
    j."run_at", j."create_ts", j."finished_at", j."last_error", j."workflow_id", j."depends_on"
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
  q."created_at", NULL::TIMESTAMPTZ, q."last_error", NULL::TEXT, NULL::TEXT[]
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
  d."created_at", d."created_at", d."died_at", d."last_error", NULL::TEXT, NULL::TEXT[]
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
  d."created_at", d."created_at", d."died_at", d."last_error", NULL::TEXT, NULL::TEXT[]
FROM /* TEMPLATE: job_dead */ AS d
WHERE d."id" >= ($4::TEXT[])[1] AND d."id" < ($5::TEXT[])[cardinality($5::TEXT[])]
  AND ($6::TEXT = '' OR substr(d."id", 3) < $6::TEXT)
  AND ($1::TEXT = '' OR d."queue" = $1::TEXT)
  AND ($2::TEXT = '' OR d."kind" = CASE WHEN $2::TEXT = '-' THEN '' ELSE $2::TEXT END)
ORDER BY substr(d."id", 3) DESC, d."id" DESC
LIMIT $3;

-- name: show_bucketed
-- One bucketed job with its payload, metadata, error history, the
-- output and progress its handler recorded, its batch, its workflow and
-- dependencies, and while it is Queued how many of them it waits for:
-- $1 id.
SELECT j."id"::TEXT, j."queue", j."kind", lower(j."status"::TEXT), j."priority", j."attempts", j."max_attempts",
  j."run_at", j."create_ts", j."finished_at", j."last_error", j."payload"::TEXT, j."metadata"::TEXT, j."errors"::TEXT,
  j."output"::TEXT, j."progress"::TEXT, j."batch_id"::TEXT, /* TEMPLATE: workflow_columns_j */, CASE WHEN j."status" = 'Queued' THEN j."deps_left" END
FROM /* TEMPLATE: jobs */ AS j WHERE j."id" = $1::INT8;

-- name: show_fanout
-- One fanout job, pending or dead: $1 id.
SELECT q."id", q."queue", q."kind", 'queued', 0, greatest(q."attempts", coalesce(a."attempts", 0)), q."max_attempts",
  coalesce(a."retry_at", q."created_at"), q."created_at", NULL::TIMESTAMPTZ, q."last_error",
  q."payload"::TEXT, q."metadata"::TEXT, q."errors"::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT[], NULL::INT4
FROM /* TEMPLATE: job_queue */ AS q LEFT JOIN /* TEMPLATE: job_attempt */ AS a ON a."job_id" = q."id"
WHERE q."id" = $1
UNION ALL
SELECT d."id", d."queue", d."kind", 'dead', 0, d."attempts", d."max_attempts",
  d."created_at", d."created_at", d."died_at", d."last_error", d."payload"::TEXT, d."metadata"::TEXT, d."errors"::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT[], NULL::INT4
FROM /* TEMPLATE: job_dead */ AS d WHERE d."id" = $1;

-- name: periodic
-- Every periodic job's schedule, last enqueued tick and next tick due.
SELECT "name", "schedule", "last_tick", "next_tick", "updated_at" FROM /* TEMPLATE: periodic */ ORDER BY "name";

-- The queues listing (Admin.ListQueues) is paged by (queue, layout): a
-- page reads, from each source of queue names, its first $2 names at or
-- after the cursor's name (the page size plus one, so that the merged
-- page is complete up to the first source that stopped), in the
-- database's order of names, and counts the page's queues only. Every
-- count stops at a cap (a LIMIT of the cap plus one row), and every
-- statement below is one per page, whatever the number of queues: the
-- statements read index descents per bucket and name of the page, and
-- samples of at most the cap plus one row.

-- name: queue_page_bucketed
-- The bucketed layout's queue names at or after $1 (at most $2 per
-- source), with the samples' counts, and the totals. $3 the buckets (as
-- list_bucketed_queued takes them), $4 the cap plus one. Rows (source,
-- queue, state, count):
--   queued    the queues with Queued jobs: a loose index scan of
--             jobs_dequeue (bucket, queue, ...) per bucket, from $1, one
--             LIMIT 1 descent per bucket and name, $2 names per bucket at
--             most, merged; count 0 (queue_queued_bucketed counts the
--             page's queues)
--   running   Running jobs per queue, over a sample of at most $4 rows of
--             the partial index jobs_lease_expiry (the jobs in flight)
--   finished  finished jobs per queue and status, over the $4 most
--             recently finished (jobs_finished backward where it is
--             ordered by finished_at alone, finished_order); no index has
--             a finished job's queue
--   total     queue '': the samples' totals per state, and the Queued jobs
--             of every queue, counted in jobs_dequeue's order up to $4.
-- A sample is filtered by name after its LIMIT, so every page reads the
-- same rows, and a bounded number of them.
WITH RECURSIVE "n" ("bucket", "queue", "i") AS (
  SELECT "b"."bucket", "h"."queue", 1::INT8 FROM unnest($3::INT2[]) AS "b" ("bucket")
  CROSS JOIN LATERAL (SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" >= $1::TEXT
    ORDER BY j."queue" LIMIT 1) AS "h"
  UNION ALL
  SELECT "b"."bucket", "h"."queue", "b"."i" + 1 FROM "n" AS "b"
  CROSS JOIN LATERAL (SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" > "b"."queue"
    ORDER BY j."queue" LIMIT 1) AS "h"
  WHERE "b"."i" < $2::INT8
), "r" AS (
  SELECT j."queue" FROM /* TEMPLATE: jobs */ AS j WHERE j."status" = 'Running' LIMIT $4::INT8
), "f" AS (
  SELECT j."queue", lower(j."status"::TEXT) AS "state" FROM /* TEMPLATE: jobs */ AS j
  WHERE j."finished_at" IS NOT NULL /* TEMPLATE: finished_order */ LIMIT $4::INT8
)
SELECT 'queued', "q"."queue", 'queued', 0::INT8 FROM (SELECT DISTINCT "queue" FROM "n" ORDER BY "queue" LIMIT $2::INT8) AS "q"
UNION ALL
SELECT 'running', "r"."queue", 'running', count(*) FROM "r"
WHERE "r"."queue" IN (SELECT DISTINCT "queue" FROM "r" WHERE "queue" >= $1::TEXT ORDER BY "queue" LIMIT $2::INT8)
GROUP BY "r"."queue"
UNION ALL
SELECT 'finished', "f"."queue", "f"."state", count(*) FROM "f"
WHERE "f"."queue" IN (SELECT DISTINCT "queue" FROM "f" WHERE "queue" >= $1::TEXT ORDER BY "queue" LIMIT $2::INT8)
GROUP BY "f"."queue", "f"."state"
UNION ALL
SELECT 'total', '', 'running', count(*) FROM "r"
UNION ALL
SELECT 'total', '', "f"."state", count(*) FROM "f" GROUP BY "f"."state"
UNION ALL
SELECT 'total', '', 'queued', count(*) FROM (SELECT 1 FROM unnest($3::INT2[]) AS "b" ("bucket")
  CROSS JOIN LATERAL (SELECT 1 FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ TRUE
    ORDER BY j."queue", j."priority", j."run_at", j."id" LIMIT $4::INT8) AS "x"
  LIMIT $4::INT8) AS "c";

-- name: queue_queued_bucketed
-- The Queued jobs of each queue of $1 (TEXT[], a page's), $2 the buckets:
-- how many, read from jobs_dequeue in index order bucket after bucket, up
-- to $3 rows per queue (the cap plus one; the ORDER BY keeps PostgreSQL
-- from building a bitmap of the whole queue first), and the run_at of the
-- oldest claimable one. The index orders a bucket's jobs of a queue by
-- (priority, run_at, id), so the oldest is the minimum over the first
-- entry of each bucket and priority level: a loose scan of the levels,
-- one LIMIT 1 descent per queue, bucket and level.
WITH RECURSIVE "lv" ("queue", "bucket", "priority", "run_at") AS (
  SELECT "q"."queue", "b"."bucket", "h"."priority", "h"."run_at"
  FROM unnest($1::TEXT[]) AS "q" ("queue") CROSS JOIN unnest($2::INT2[]) AS "b" ("bucket")
  CROSS JOIN LATERAL (SELECT j."priority", j."run_at" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" = "q"."queue"
    ORDER BY j."priority", j."run_at" LIMIT 1) AS "h"
  UNION ALL
  SELECT "b"."queue", "b"."bucket", "h"."priority", "h"."run_at" FROM "lv" AS "b"
  CROSS JOIN LATERAL (SELECT j."priority", j."run_at" FROM /* TEMPLATE: jobs */ AS j
    WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" = "b"."queue" AND j."priority" > "b"."priority"
    ORDER BY j."priority", j."run_at" LIMIT 1) AS "h"
), "o" AS (
  SELECT "queue", min("run_at") AS "oldest" FROM "lv" WHERE "run_at" <= now() GROUP BY "queue"
), "c" AS (
  SELECT "q"."queue", "x"."n" FROM unnest($1::TEXT[]) AS "q" ("queue")
  CROSS JOIN LATERAL (SELECT count(*) AS "n" FROM (SELECT 1 FROM unnest($2::INT2[]) AS "b" ("bucket")
    CROSS JOIN LATERAL (SELECT 1 FROM /* TEMPLATE: jobs */ AS j
      WHERE j."status" = 'Queued' AND j."deps_left" IS NULL AND /* TEMPLATE: bucket_match */ j."queue" = "q"."queue"
      ORDER BY j."priority", j."run_at", j."id" LIMIT $3::INT8) AS "y"
    LIMIT $3::INT8) AS "z") AS "x"
)
SELECT "c"."queue", "c"."n", "o"."oldest" FROM "c" LEFT JOIN "o" ON "o"."queue" = "c"."queue";

-- name: queue_page_fanout
-- Fanout's queue names at or after $1 (at most $2 per table) with their
-- counts and oldest pending job, and the totals: neither job_queue nor
-- job_dead has an index on the queue, so each is sampled, read from its
-- start under a LIMIT of $3 rows (the cap plus one) with no filter, and
-- the sample grouped. Rows (source, queue, count, oldest created_at):
-- source queued (pending) or dead, and total_queued and total_dead with
-- queue '' for the samples' sizes. The oldest is the sample's: the
-- table's own while the table holds no more than the cap.
WITH "p" AS (
  SELECT q."queue", q."created_at" FROM /* TEMPLATE: job_queue */ AS q LIMIT $3::INT8
), "d" AS (
  SELECT d."queue" FROM /* TEMPLATE: job_dead */ AS d LIMIT $3::INT8
)
SELECT 'queued', "p"."queue", count(*), min("p"."created_at") FROM "p"
WHERE "p"."queue" IN (SELECT DISTINCT "queue" FROM "p" WHERE "queue" >= $1::TEXT ORDER BY "queue" LIMIT $2::INT8)
GROUP BY "p"."queue"
UNION ALL
SELECT 'dead', "d"."queue", count(*), NULL::TIMESTAMPTZ FROM "d"
WHERE "d"."queue" IN (SELECT DISTINCT "queue" FROM "d" WHERE "queue" >= $1::TEXT ORDER BY "queue" LIMIT $2::INT8)
GROUP BY "d"."queue"
UNION ALL
SELECT 'total_queued', '', count(*), NULL::TIMESTAMPTZ FROM "p"
UNION ALL
SELECT 'total_dead', '', count(*), NULL::TIMESTAMPTZ FROM "d";

-- name: queue_page_states
-- The queues operators paused, resumed or configured, named at or after
-- $1, the first $2 by name: a range of skiplock_queue's primary key. With
-- each, its limits (bucketed.Limits; null: none).
SELECT "name", "paused", "concurrency", "local_concurrency", "rate_limit", "rate_period_ms", "partition_by", "fair", "sequential", "halt_on_dead",
  "rate_per_partition"
FROM /* TEMPLATE: queue_state */ WHERE "name" >= $1::TEXT ORDER BY "name" LIMIT $2::INT8;

-- name: queue_page_order
-- The names of $1 (TEXT[]: every source's names of a page) at or after
-- $2, each once, in the order the sources' statements compare them: the
-- database's, which may not be the bytes' (a collation).
SELECT DISTINCT "u"."n" FROM unnest($1::TEXT[]) AS "u" ("n") WHERE "u"."n" >= $2::TEXT ORDER BY "u"."n";

-- name: queue_states
-- The queues operators paused (or resumed).
SELECT "name", "paused", "updated_at" FROM /* TEMPLATE: queue_state */;

-- name: set_paused
-- Pauses ($2 true) or resumes ($2 false) queue $1.
INSERT INTO /* TEMPLATE: queue_state */ AS q ("name", "paused", "updated_at") VALUES ($1, $2, now())
ON CONFLICT ("name") DO UPDATE SET "paused" = excluded."paused", "updated_at" = excluded."updated_at";

-- name: workflows_list
-- Workflows, newest first by id ($2: ids below it; the largest INT8 for
-- the first page), $1 of them, each with its jobs counted by state as a
-- JSON object (waiting: Queued behind dependencies), read through
-- job_workflow_node.
SELECT w."id"::TEXT, w."name", w."size", w."created_at",
  COALESCE((SELECT jsonb_object_agg(c.s, c.n) FROM (
    SELECT CASE WHEN j."status" = 'Queued' AND COALESCE(j."deps_left", 0) > 0 THEN 'waiting' ELSE lower(j."status"::TEXT) END AS s, count(*) AS n
    FROM /* TEMPLATE: workflow_node */ AS m JOIN /* TEMPLATE: jobs */ AS j ON j."id" = m."job_id"
    WHERE m."workflow_id" = w."id" GROUP BY 1) AS c), '{}'::JSONB)::TEXT
FROM /* TEMPLATE: workflow */ AS w
WHERE w."id" < $2::INT8
ORDER BY w."id" DESC
LIMIT $1;

-- name: workflow_row
-- One workflow: $1 id.
SELECT w."id"::TEXT, w."name", w."size", w."created_at", '{}'::TEXT FROM /* TEMPLATE: workflow */ AS w WHERE w."id" = $1::INT8;

-- name: workflow_jobs
-- A workflow's jobs ($1), in id order, with their names there, what they
-- depend on (by name) and why a cancelled one was.
SELECT j."id"::TEXT, j."workflow_node", j."queue", j."kind",
  CASE WHEN j."status" = 'Queued' AND COALESCE(j."deps_left", 0) > 0 THEN 'waiting' ELSE lower(j."status"::TEXT) END,
  j."attempts", j."max_attempts", j."finished_at", j."last_error", COALESCE(j."depends_on", ARRAY[]::TEXT[]),
  COALESCE(j."run_anyway", false), j."canceled_by", j."output"::TEXT
FROM /* TEMPLATE: workflow_node */ AS m JOIN /* TEMPLATE: jobs */ AS j ON j."id" = m."job_id"
WHERE m."workflow_id" = $1::INT8
ORDER BY j."id";

-- name: workflow_cancel
-- Cancels every Queued or Running job of workflow $1 (a Running job's
-- holder finds its lease gone, as cancel_by_id's), returning their ids.
UPDATE /* TEMPLATE: jobs */ SET "status" = 'Canceled', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
WHERE "id" IN (SELECT "job_id" FROM /* TEMPLATE: workflow_node */ WHERE "workflow_id" = $1::INT8) AND "status" IN ('Queued', 'Running')
RETURNING "id";

-- name: workflow_failed
-- The Failed jobs of workflow $1, in id order, for a retry.
SELECT j."id" FROM /* TEMPLATE: workflow_node */ AS m JOIN /* TEMPLATE: jobs */ AS j ON j."id" = m."job_id"
WHERE m."workflow_id" = $1::INT8 AND j."status" = 'Failed' ORDER BY j."id";
