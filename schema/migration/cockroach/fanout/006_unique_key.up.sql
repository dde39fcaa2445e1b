-- skiplock migration fanout/006 unique_key, cockroach.
--
-- Written by hand, then frozen: go generate writes new tables and indexes,
-- not new columns. Databases record this version as applied, so this file
-- is never edited. A fanout job gains its unique key (null: none), and a
-- partial unique index keeps one live job per key and queue: a job's row
-- is in job_queue exactly while it is live (see docs/concepts.md, "Unique
-- jobs"). The column is nullable with no default, so adding it rewrites
-- no row.
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_job_queue_unique_key
ALTER TABLE /* TEMPLATE: schema */."job_queue" ADD COLUMN IF NOT EXISTS "unique_key" TEXT;

-- name: create_index_job_queue_unique_key
CREATE UNIQUE INDEX IF NOT EXISTS "job_queue_unique_key" ON /* TEMPLATE: schema */."job_queue" ("queue", "unique_key") WHERE "unique_key" IS NOT NULL;
