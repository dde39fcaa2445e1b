-- skiplock migration bucketed/014 workflow_nodes, postgres.
--
-- Written by hand (the generator writes only new tables and indexes;
-- this version also remakes an index and fills the new table), then
-- frozen: databases record this version as applied, so this file is never
-- edited. job_workflow_node gains one row per workflow job (its name
-- there and its id), filled here from the jobs the workflows have, and
-- jobs_workflow is made again over the waiting jobs only, so that a
-- workflow job's claim and completion write no entry in it (claims scan
-- nothing that needs it; completions' settle finds the waiting jobs
-- while it is built: run this version when the queues are quiet).
--
-- One "-- name:" block per statement, run in order. A "backfill_" block
-- writes data and creates nothing (schema's drift test passes over it).
-- Placeholders are filled by schema.TemplateValues.

-- name: create_table_job_workflow_node
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_workflow_node" (
  "workflow_id" BIGINT NOT NULL,
  "node" TEXT NOT NULL,
  "job_id" BIGINT NOT NULL,
  PRIMARY KEY ("workflow_id", "node")
);

-- name: backfill_job_workflow_node
INSERT INTO /* TEMPLATE: schema */."job_workflow_node" ("workflow_id", "node", "job_id")
SELECT "workflow_id", "workflow_node", "id" FROM /* TEMPLATE: schema */."jobs" WHERE "workflow_id" IS NOT NULL
ON CONFLICT ("workflow_id", "node") DO NOTHING;

-- name: drop_index_jobs_workflow
DROP INDEX IF EXISTS /* TEMPLATE: schema */."jobs_workflow";

-- name: create_index_jobs_workflow
CREATE INDEX IF NOT EXISTS "jobs_workflow" ON /* TEMPLATE: schema */."jobs" ("workflow_id", "workflow_node") WHERE "deps_left" IS NOT NULL;
