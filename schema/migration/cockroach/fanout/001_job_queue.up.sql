-- skiplock migration fanout/001 job_queue, cockroach.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_job_queue
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_queue" (
  "id" TEXT NOT NULL DEFAULT gen_random_uuid()::STRING,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "payload" JSONB NOT NULL DEFAULT 'null',
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "last_error" TEXT,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

-- name: split_job_queue
-- when: split
ALTER TABLE /* TEMPLATE: schema */."job_queue" SPLIT AT VALUES /* TEMPLATE: split_values */;

-- name: create_table_job_dead
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."job_dead" (
  "id" TEXT NOT NULL,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "payload" JSONB NOT NULL DEFAULT 'null',
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "last_error" TEXT,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "died_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

-- name: insert_skiplock_setting
INSERT INTO /* TEMPLATE: schema */."skiplock_setting" ("name", "value") VALUES ('fanout.tablets', '/* TEMPLATE: tablets */') ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value";
