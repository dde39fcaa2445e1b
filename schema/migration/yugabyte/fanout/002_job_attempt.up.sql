-- skiplock migration fanout/002 job_attempt, yugabyte.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_job_attempt
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_attempt" (
  "job_id" TEXT NOT NULL,
  "attempts" INTEGER NOT NULL,
  "started_at" timestamptz NOT NULL,
  "retry_at" timestamptz NOT NULL,
  PRIMARY KEY ("job_id")
);
