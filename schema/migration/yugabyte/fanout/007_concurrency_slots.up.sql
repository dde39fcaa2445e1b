-- skiplock migration fanout/007 concurrency_slots, yugabyte.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_fanout_slot
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."fanout_slot" (
  "queue" TEXT NOT NULL,
  "slot" INTEGER NOT NULL,
  "taken_at" timestamptz,
  PRIMARY KEY (("queue", "slot") HASH)
);
