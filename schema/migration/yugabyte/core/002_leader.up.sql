-- skiplock migration core/002 leader, yugabyte.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_skiplock_leader
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_leader" (
  "name" TEXT NOT NULL,
  "holder" TEXT NOT NULL,
  "token" BIGINT NOT NULL,
  "elected_at" timestamptz NOT NULL,
  "expires_at" timestamptz NOT NULL,
  PRIMARY KEY ("name")
);
