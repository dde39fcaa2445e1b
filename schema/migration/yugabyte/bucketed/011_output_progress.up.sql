-- skiplock migration bucketed/011 output_progress, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. jobs gains the output a handler records and the progress
-- it reports (JSON, null until written; no index reads them).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_output
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "output" JSONB;

-- name: add_column_jobs_progress
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "progress" JSONB;
