-- What skiplocktest reads to check a test's jobs (package skiplocktest).
-- Templates, schema-qualified:
--   jobs       the bucketed layout's jobs
--   job_queue  the fanout layout's pending jobs
--   job_dead   the fanout layout's dead jobs
-- Every identifier is quoted; every value is a $n parameter. Each
-- statement returns a job in scanRow's order; fanout has no priority,
-- status, run time or lease, and gives RunAt as the creation time.

-- name: tables
-- Which of the layouts' tables ($2, $3) schema $1 has, from the catalog,
-- so that a missing table does not abort the caller's transaction.
SELECT "table_name"::TEXT FROM "information_schema"."tables"
WHERE "table_schema" = $1 AND "table_name" IN ($2, $3);

-- name: bucketed_by_kind
-- The bucketed jobs of kinds $1 (text[]), oldest first.
SELECT "id"::TEXT, "queue", "payload"::TEXT, "priority"::INT8, "status"::TEXT, "attempts"::INT8, "max_attempts"::INT8,
  "create_ts", "run_at", "last_error", "lease_owner", "lease_token", "lease_expires_at", "kind", "metadata"::TEXT
FROM /* TEMPLATE: jobs */ WHERE "kind" = ANY($1::TEXT[]) ORDER BY "id";

-- name: bucketed_all
-- Every bucketed job, oldest first.
SELECT "id"::TEXT, "queue", "payload"::TEXT, "priority"::INT8, "status"::TEXT, "attempts"::INT8, "max_attempts"::INT8,
  "create_ts", "run_at", "last_error", "lease_owner", "lease_token", "lease_expires_at", "kind", "metadata"::TEXT
FROM /* TEMPLATE: jobs */ ORDER BY "id";

-- name: bucketed_by_id
-- The bucketed job with id $1 (text).
SELECT "id"::TEXT, "queue", "payload"::TEXT, "priority"::INT8, "status"::TEXT, "attempts"::INT8, "max_attempts"::INT8,
  "create_ts", "run_at", "last_error", "lease_owner", "lease_token", "lease_expires_at", "kind", "metadata"::TEXT
FROM /* TEMPLATE: jobs */ WHERE "id"::TEXT = $1::TEXT;

-- name: fanout_by_kind
-- The pending fanout jobs of kinds $1 (text[]), oldest first.
SELECT "id", "queue", "payload"::TEXT, 0::INT8, '', "attempts"::INT8, "max_attempts"::INT8,
  "created_at", "created_at", "last_error", NULL::TEXT, NULL::INT8, NULL::TIMESTAMPTZ, "kind", "metadata"::TEXT
FROM /* TEMPLATE: job_queue */ WHERE "kind" = ANY($1::TEXT[]) ORDER BY "created_at", "id";

-- name: fanout_all
-- Every pending fanout job, oldest first.
SELECT "id", "queue", "payload"::TEXT, 0::INT8, '', "attempts"::INT8, "max_attempts"::INT8,
  "created_at", "created_at", "last_error", NULL::TEXT, NULL::INT8, NULL::TIMESTAMPTZ, "kind", "metadata"::TEXT
FROM /* TEMPLATE: job_queue */ ORDER BY "created_at", "id";

-- name: fanout_by_id
-- The pending fanout job with id $1.
SELECT "id", "queue", "payload"::TEXT, 0::INT8, '', "attempts"::INT8, "max_attempts"::INT8,
  "created_at", "created_at", "last_error", NULL::TEXT, NULL::INT8, NULL::TIMESTAMPTZ, "kind", "metadata"::TEXT
FROM /* TEMPLATE: job_queue */ WHERE "id"::TEXT = $1::TEXT;

-- name: fanout_dead_by_id
-- The dead fanout job with id $1.
SELECT "id", "queue", "payload"::TEXT, 0::INT8, '', "attempts"::INT8, "max_attempts"::INT8,
  "created_at", "created_at", "last_error", NULL::TEXT, NULL::INT8, NULL::TIMESTAMPTZ, "kind", "metadata"::TEXT
FROM /* TEMPLATE: job_dead */ WHERE "id"::TEXT = $1::TEXT;

-- name: bucketed_others
-- How many live bucketed jobs of queue $1 there are besides job $2.
SELECT count(*) FROM /* TEMPLATE: jobs */
WHERE "queue" = $1 AND "status" IN ('Queued', 'Running') AND "id"::TEXT <> $2::TEXT;

-- name: fanout_others
-- How many pending fanout jobs of queue $1 there are besides job $2.
SELECT count(*) FROM /* TEMPLATE: job_queue */ WHERE "queue" = $1 AND "id"::TEXT <> $2::TEXT;
