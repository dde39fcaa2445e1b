-- skiplock migration core/011 sequence_halt, postgres.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains whether a sequence halts at a dead
-- job (halt_on_dead): no later job of the sequence starts while a job
-- before it is Dead.
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_halt_on_dead
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "halt_on_dead" BOOLEAN NOT NULL DEFAULT false;
