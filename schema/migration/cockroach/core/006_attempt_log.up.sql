-- skiplock migration core/006 attempt_log, cockroach.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_work_attempt_log
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."work_attempt_log" (
  "id" TEXT NOT NULL,
  "job_id" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL,
  "worker" TEXT NOT NULL,
  "started_at" TIMESTAMPTZ NOT NULL,
  "finished_at" TIMESTAMPTZ,
  "outcome" TEXT,
  PRIMARY KEY ("id")
);

-- name: create_index_work_attempt_log_job_id
CREATE INDEX IF NOT EXISTS "work_attempt_log_job_id" ON /* TEMPLATE: schema */."work_attempt_log" ("job_id") USING HASH WITH (bucket_count = 16);

-- Written by hand (the generator writes only new tables and indexes):
-- work_log gains the completing attempt's handler start and end.

-- name: add_column_work_log_started_at
ALTER TABLE /* TEMPLATE: schema */."work_log" ADD COLUMN IF NOT EXISTS "started_at" TIMESTAMPTZ;

-- name: add_column_work_log_finished_at
ALTER TABLE /* TEMPLATE: schema */."work_log" ADD COLUMN IF NOT EXISTS "finished_at" TIMESTAMPTZ;
