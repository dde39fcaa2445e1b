-- skiplock migration core/010 sequences, cockroach.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains whether the queue's partitions are
-- sequences: one job of each at a time, in insert order (sequential).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_sequential
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "sequential" BOOLEAN NOT NULL DEFAULT false;
