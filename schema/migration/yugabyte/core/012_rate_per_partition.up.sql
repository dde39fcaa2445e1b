-- skiplock migration core/012 rate_per_partition, yugabyte.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains whether a partitioned queue's rate
-- limit applies to each partition (rate_per_partition), with rate token
-- rows of job_rate_token per partition, rather than to the queue.
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_rate_per_partition
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_per_partition" BOOLEAN NOT NULL DEFAULT false;
