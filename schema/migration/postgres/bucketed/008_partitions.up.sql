-- skiplock migration bucketed/008 partitions, postgres.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. jobs gains the partition key given at insert and the
-- job's partition in its queue's partitioning, and the index a
-- partitioned queue's claim walks (jobs of queues that are not
-- partitioned have no entry in it).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_partition_key
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "partition_key" TEXT;

-- name: add_column_jobs_partition
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "partition" TEXT;

-- name: create_index_jobs_partition
CREATE INDEX IF NOT EXISTS "jobs_partition" ON /* TEMPLATE: schema */."jobs" ("queue", "partition", "priority", "run_at", "id") WHERE "status" = 'Queued' AND "partition" IS NOT NULL;
