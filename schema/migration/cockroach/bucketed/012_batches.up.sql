-- skiplock migration bucketed/012 batches, cockroach.
--
-- Written by hand (the generator writes only new tables and indexes;
-- this version adds a column too), then frozen: databases record this
-- version as applied, so this file is never edited. jobs gains the batch
-- a job was inserted in, job_batch the batches (one row each, written
-- when the batch is inserted and when the maintenance leader finishes it),
-- and the index of a batch's live jobs that the leader asks.
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_batch_id
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "batch_id" BIGINT;

-- name: create_table_job_batch
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_batch" (
  "id" BIGINT DEFAULT unordered_unique_rowid() NOT NULL,
  "size" INTEGER NOT NULL,
  "callback_queue" TEXT NOT NULL,
  "callback_kind" TEXT NOT NULL DEFAULT '',
  "callback_payload" JSONB NOT NULL DEFAULT 'null',
  "callback_metadata" JSONB NOT NULL DEFAULT '{}',
  "callback_max_attempts" INTEGER NOT NULL DEFAULT 25,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "finished_at" TIMESTAMPTZ,
  "callback_id" BIGINT,
  PRIMARY KEY ("id")
);

-- name: create_index_jobs_batch
CREATE INDEX IF NOT EXISTS "jobs_batch" ON /* TEMPLATE: schema */."jobs" ("batch_id", "status", "id") USING HASH WITH (bucket_count = /* TEMPLATE: buckets */) WHERE "batch_id" IS NOT NULL;
