-- skiplock migration bucketed/005 held_claims, cockroach.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_job_hold
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_hold" (
  "token" BIGINT NOT NULL,
  "queue" TEXT NOT NULL,
  "ids" JSONB NOT NULL,
  "holder" BIGINT NOT NULL,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("token")
);
