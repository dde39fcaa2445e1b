-- skiplock migration bucketed/001 jobs, cockroach.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_type_job_status
CREATE TYPE IF NOT EXISTS /* TEMPLATE: schema */."job_status" AS ENUM ('Queued', 'Running', 'Canceled', 'Failed', 'Success');

-- name: create_table_jobs
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."jobs" (
  "id" BIGINT DEFAULT unique_rowid() NOT NULL,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "status" /* TEMPLATE: schema */."job_status" NOT NULL DEFAULT 'Queued',
  "priority" SMALLINT NOT NULL DEFAULT 0,
  "payload" JSONB NOT NULL DEFAULT 'null',
  "bucket" SMALLINT NOT NULL DEFAULT floor(random() * /* TEMPLATE: buckets */)::SMALLINT,
  "create_ts" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "run_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "lease_owner" TEXT,
  "lease_token" BIGINT,
  "lease_expires_at" TIMESTAMPTZ,
  "last_error" TEXT,
  "last_updated" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "finished_at" TIMESTAMPTZ,
  "unique_key" TEXT,
  PRIMARY KEY ("id")
);

-- name: create_index_jobs_dequeue
CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON /* TEMPLATE: schema */."jobs" ("queue", "priority", "run_at", "id") USING HASH WITH (bucket_count = /* TEMPLATE: buckets */) WHERE "status" = 'Queued';

-- name: create_index_jobs_lease_expiry
CREATE INDEX IF NOT EXISTS "jobs_lease_expiry" ON /* TEMPLATE: schema */."jobs" ("queue", "lease_expires_at") WHERE "status" = 'Running';

-- name: create_index_jobs_unique_key
CREATE UNIQUE INDEX IF NOT EXISTS "jobs_unique_key" ON /* TEMPLATE: schema */."jobs" ("queue", "unique_key") WHERE "unique_key" IS NOT NULL AND "status" IN ('Queued', 'Running');

-- name: create_index_jobs_finished
CREATE INDEX IF NOT EXISTS "jobs_finished" ON /* TEMPLATE: schema */."jobs" ("finished_at") WHERE "finished_at" IS NOT NULL;

-- name: insert_skiplock_setting
INSERT INTO /* TEMPLATE: schema */."skiplock_setting" ("name", "value") VALUES ('bucketed.buckets', '/* TEMPLATE: buckets */') ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value";
