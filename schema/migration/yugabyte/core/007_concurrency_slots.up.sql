-- skiplock migration core/007 concurrency_slots, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains the queue's limits and the count of
-- slot rows made for them (bucketed's job_slot).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_concurrency
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "concurrency" INTEGER;

-- name: add_column_skiplock_queue_local_concurrency
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "local_concurrency" INTEGER;

-- name: add_column_skiplock_queue_slots
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "slots" INTEGER NOT NULL DEFAULT 0;
