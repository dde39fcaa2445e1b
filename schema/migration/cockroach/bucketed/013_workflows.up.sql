-- skiplock migration bucketed/013 workflows, cockroach.
--
-- Written by hand (the generator writes only new tables and indexes;
-- this version adds columns too), then frozen: databases record this
-- version as applied, so this file is never edited. jobs gains its
-- workflow, its name there, its dependencies and dependents by name, the
-- count of dependencies left, whether it runs anyway when one fails, and
-- the dependency that cancelled it; job_workflow the workflows (one row
-- each, written when the workflow is inserted); the index by which a
-- completion finds the jobs that depend on it; jobs_waiting, the jobs
-- that wait; and jobs_dequeue made again without them (deps_left set),
-- so that claims never walk past them (claims scan without it while it
-- is built: run this version when the queues are quiet).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_workflow_id
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "workflow_id" BIGINT;

-- name: add_column_jobs_workflow_node
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "workflow_node" TEXT;

-- name: add_column_jobs_depends_on
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "depends_on" TEXT[];

-- name: add_column_jobs_dependents
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "dependents" TEXT[];

-- name: add_column_jobs_deps_left
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "deps_left" INTEGER;

-- name: add_column_jobs_run_anyway
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "run_anyway" BOOLEAN;

-- name: add_column_jobs_canceled_by
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "canceled_by" TEXT;

-- name: create_table_job_workflow
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_workflow" (
  "id" BIGINT DEFAULT unordered_unique_rowid() NOT NULL,
  "name" TEXT NOT NULL DEFAULT '',
  "size" INTEGER NOT NULL,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

-- name: create_index_jobs_workflow
CREATE INDEX IF NOT EXISTS "jobs_workflow" ON /* TEMPLATE: schema */."jobs" ("workflow_id", "workflow_node") USING HASH WITH (bucket_count = /* TEMPLATE: buckets */) WHERE "workflow_id" IS NOT NULL;

-- name: create_index_jobs_waiting
CREATE INDEX IF NOT EXISTS "jobs_waiting" ON /* TEMPLATE: schema */."jobs" ("queue", "id") USING HASH WITH (bucket_count = /* TEMPLATE: buckets */) WHERE "status" = 'Queued' AND "deps_left" IS NOT NULL;

-- name: drop_index_jobs_dequeue
DROP INDEX IF EXISTS /* TEMPLATE: schema */."jobs"@"jobs_dequeue";

-- name: create_index_jobs_dequeue
CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON /* TEMPLATE: schema */."jobs" ("queue", "priority", "run_at", "id") USING HASH WITH (bucket_count = /* TEMPLATE: buckets */) WHERE "status" = 'Queued' AND "deps_left" IS NULL;
