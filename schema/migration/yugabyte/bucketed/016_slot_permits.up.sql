-- skiplock migration bucketed/016 slot_permits, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes;
-- this version adds a column), then frozen: databases record this
-- version as applied, so this file is never edited. job_slot gains
-- held_until: a slot may be held by a worker as a permit until that
-- time, renewed with the worker's heartbeats, instead of by one running
-- job; the worker then starts one job at a time under it without writing
-- the slot again (docs/flow-control.md, "How the limits are kept").
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_job_slot_held_until
ALTER TABLE /* TEMPLATE: schema */."job_slot" ADD COLUMN IF NOT EXISTS "held_until" timestamptz;
