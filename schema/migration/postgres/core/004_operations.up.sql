-- skiplock migration core/004 operations, postgres.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_skiplock_queue
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_queue" (
  "name" TEXT NOT NULL,
  "paused" BOOLEAN NOT NULL DEFAULT false,
  "updated_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);

-- name: create_table_skiplock_periodic
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_periodic" (
  "name" TEXT NOT NULL,
  "schedule" TEXT NOT NULL,
  "last_tick" timestamptz NOT NULL,
  "next_tick" timestamptz NOT NULL,
  "updated_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);
