-- skiplock migration bucketed/007 rate_limits, yugabyte.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_job_rate_token
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_rate_token" (
  "queue" TEXT NOT NULL,
  "partition" TEXT NOT NULL DEFAULT '',
  "token" INTEGER NOT NULL,
  "used_at" timestamptz,
  PRIMARY KEY (("queue", "partition", "token") HASH)
);
