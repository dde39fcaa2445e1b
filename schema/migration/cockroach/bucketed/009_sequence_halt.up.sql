-- skiplock migration bucketed/009 sequence_halt, cockroach.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. The index a sequence that halts at a dead job reads: the
-- Failed (dead) jobs of partitioned queues, by partition and insert
-- order (jobs of queues that are not partitioned, and live jobs, have no
-- entry in it).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: create_index_jobs_partition_dead
CREATE INDEX IF NOT EXISTS "jobs_partition_dead" ON /* TEMPLATE: schema */."jobs" ("queue", "partition", "id") WHERE "status" = 'Failed' AND "partition" IS NOT NULL;
