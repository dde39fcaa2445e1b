-- skiplock migration bucketed/010 unique_states, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. jobs gains the states in which a job holds its unique key
-- when its insert named them (null: Queued and Running), and the unique
-- index on held keys takes them into its predicate. The new index is made
-- before the old one goes, so that no moment has neither; an insert whose
-- conflict target names the old predicate still infers the new index
-- (the old predicate implies the new one).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_unique_states
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "unique_states" /* TEMPLATE: schema */."job_status"[];

-- name: create_index_jobs_unique_states
CREATE UNIQUE INDEX IF NOT EXISTS "jobs_unique_states" ON /* TEMPLATE: schema */."jobs" ("queue" ASC, "unique_key" ASC) WHERE "unique_key" IS NOT NULL AND ("status" IN ('Queued', 'Running') OR "status" = ANY ("unique_states"));

-- name: drop_index_jobs_unique_key
DROP INDEX IF EXISTS /* TEMPLATE: schema */."jobs_unique_key";
