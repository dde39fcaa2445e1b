-- skiplock migration core/001 work_log, cockroach.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_work_log
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."work_log" (
  "job_id" TEXT NOT NULL,
  "worker" TEXT NOT NULL,
  "handled_at" TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: create_index_work_log_job_id
CREATE INDEX IF NOT EXISTS "work_log_job_id" ON /* TEMPLATE: schema */."work_log" ("job_id");
