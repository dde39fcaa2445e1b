-- Every statement the fanout layout sends, rendered once per Queue for its
-- schema (sql.go). Templates:
--   queue_table  job_queue, schema-qualified and quoted
--   dead_table   job_dead, schema-qualified and quoted
--   job_columns  the columns claim returns, in scan order; the payload
--                travels as text so that both drivers scan it into a
--                string
-- Every identifier is quoted; every value is a $n parameter.

-- name: claim
-- Locks one job: $1 the random start, $2 the queue.
-- The locking clause goes on each branch that reads the table, never on a
-- view or CTE over it, where it locks nothing. Each branch is an ordered
-- index range scan with LIMIT 1 above the row lock, so a locked row is
-- stepped over and the next one taken. UNION ALL runs its branches in
-- order and the outer LIMIT stops after the first row, so the wrap-around
-- branch runs (and locks) only when nothing unlocked lies at or after the
-- start: PostgreSQL's and YSQL's Append are lazy (EXPLAIN ANALYZE shows
-- "never executed"), and CockroachDB runs UNION ALL branches serially
-- (cockroachdb/cockroach#87463). PostgreSQL refuses a locking clause
-- directly on a UNION branch (0A000), so each branch is a derived table
-- that locks its own rows.
SELECT * FROM (SELECT /* TEMPLATE: job_columns */ FROM /* TEMPLATE: queue_table */
  WHERE "id" >= $1 AND "queue" = $2 ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) AS "after"
UNION ALL
SELECT * FROM (SELECT /* TEMPLATE: job_columns */ FROM /* TEMPLATE: queue_table */
  WHERE "id" < $1 AND "queue" = $2 ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) AS "before"
LIMIT 1;

-- name: del
-- Removes a processed job: $1 the id.
DELETE FROM /* TEMPLATE: queue_table */ WHERE "id" = $1;

-- name: fail
-- Counts a failed attempt: $1 the id, $2 the error.
UPDATE /* TEMPLATE: queue_table */ SET "attempts" = "attempts" + 1, "last_error" = $2 WHERE "id" = $1
RETURNING "attempts", "max_attempts";

-- name: bury
-- Moves a job that used up its attempts to job_dead: $1 the id.
WITH "moved" AS (DELETE FROM /* TEMPLATE: queue_table */ WHERE "id" = $1
  RETURNING "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")
INSERT INTO /* TEMPLATE: dead_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")
SELECT "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at" FROM "moved";

-- name: insert
-- Adds jobs from three parallel arrays: queues, payloads (JSON text), max
-- attempts.
INSERT INTO /* TEMPLATE: queue_table */ ("queue", "payload", "max_attempts")
SELECT "t"."queue", "t"."payload"::jsonb, "t"."max_attempts"
FROM unnest($1::text[], $2::text[], $3::int[]) AS "t" ("queue", "payload", "max_attempts")
RETURNING "id";

-- name: queued
-- Counts live jobs per queue, with the oldest's creation time and the
-- server's now: $1 the queue or '' for all.
SELECT "queue", count(*), min("created_at"), now() FROM /* TEMPLATE: queue_table */
WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue";

-- name: dead
-- Counts dead jobs per queue: $1 the queue or '' for all.
SELECT "queue", count(*) FROM /* TEMPLATE: dead_table */
WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue";

-- name: exists
-- Whether a queue has a live job: $1 the queue.
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: queue_table */ WHERE "queue" = $1);

-- Actions by id, for operators and tools. Each returns the job's id when
-- it changed something; no row back means the id is unknown or the job is
-- somewhere the action does not apply, and the caller reads where_by_id.

-- name: cancel_by_id
-- A pending job ($1) that no worker holds moves to job_dead, its
-- last_error saying it was cancelled, so it can be retried later. SKIP
-- LOCKED: a job a worker holds is running inside that worker's
-- transaction, which commits or rolls back with its handler; no other
-- session can stop it.
WITH "moved" AS (DELETE FROM /* TEMPLATE: queue_table */
    WHERE "id" = (SELECT "id" FROM /* TEMPLATE: queue_table */ WHERE "id" = $1 FOR UPDATE SKIP LOCKED)
  RETURNING "id", "queue", "payload", "attempts", "max_attempts", "created_at")
INSERT INTO /* TEMPLATE: dead_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")
SELECT "id", "queue", "payload", "attempts", "max_attempts", 'cancelled by an operator', "created_at" FROM "moved"
RETURNING "id";

-- name: retry_by_id
-- A dead job ($1) goes back into the queue with its attempts reset; its
-- last error stays until its next attempt.
WITH "moved" AS (DELETE FROM /* TEMPLATE: dead_table */ WHERE "id" = $1
  RETURNING "id", "queue", "payload", "max_attempts", "last_error", "created_at")
INSERT INTO /* TEMPLATE: queue_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")
SELECT "id", "queue", "payload", 0, "max_attempts", "last_error", "created_at" FROM "moved"
RETURNING "id";

-- name: delete_by_id
-- A dead job ($1) is deleted. (A fanout job that succeeded left no row.)
DELETE FROM /* TEMPLATE: dead_table */ WHERE "id" = $1 RETURNING "id";

-- name: where_by_id
-- Where a job ($1) is: 'pending' (in the queue; held by a worker or not, as
-- far as this statement can tell without waiting), 'dead', or no row.
SELECT 'pending' FROM /* TEMPLATE: queue_table */ WHERE "id" = $1
UNION ALL
SELECT 'dead' FROM /* TEMPLATE: dead_table */ WHERE "id" = $1;
