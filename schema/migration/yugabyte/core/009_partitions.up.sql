-- skiplock migration core/009 partitions, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains how the queue's jobs are partitioned
-- (partition_by), whether its claims share out among ready partitions
-- (fair), and partitions' own global limits (partition_limits).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_partition_by
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "partition_by" TEXT;

-- name: add_column_skiplock_queue_fair
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "fair" BOOLEAN NOT NULL DEFAULT false;

-- name: add_column_skiplock_queue_partition_limits
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "partition_limits" JSONB;
