-- skiplock migration core/005 rollups, yugabyte.
--
-- Generated once by `go generate ./schema` from the table model, then
-- frozen: databases record this version as applied, so this file is never
-- edited or regenerated. To change the schema, change the model and run
-- go generate again: it adds the next version.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: create_table_skiplock_stat
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_stat" (
  "id" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "minute" timestamptz NOT NULL,
  "client_id" TEXT NOT NULL,
  "completed" BIGINT NOT NULL DEFAULT 0,
  "failed" BIGINT NOT NULL DEFAULT 0,
  "wait_hist" JSONB NOT NULL DEFAULT '{}',
  "run_hist" JSONB NOT NULL DEFAULT '{}',
  "created_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

-- name: create_table_skiplock_rollup
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_rollup" (
  "queue" TEXT NOT NULL,
  "minute" timestamptz NOT NULL,
  "completed" BIGINT NOT NULL DEFAULT 0,
  "failed" BIGINT NOT NULL DEFAULT 0,
  "wait_hist" JSONB NOT NULL DEFAULT '{}',
  "run_hist" JSONB NOT NULL DEFAULT '{}',
  "wait_p50_us" BIGINT NOT NULL DEFAULT 0,
  "wait_p95_us" BIGINT NOT NULL DEFAULT 0,
  "wait_p99_us" BIGINT NOT NULL DEFAULT 0,
  "run_p50_us" BIGINT NOT NULL DEFAULT 0,
  "run_p95_us" BIGINT NOT NULL DEFAULT 0,
  "run_p99_us" BIGINT NOT NULL DEFAULT 0,
  "updated_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("queue", "minute")
);

-- name: create_table_skiplock_client
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */."skiplock_client" (
  "id" TEXT NOT NULL,
  "host" TEXT NOT NULL,
  "pid" BIGINT NOT NULL,
  "queues" JSONB NOT NULL DEFAULT '[]',
  "started_at" timestamptz NOT NULL,
  "last_seen" timestamptz NOT NULL,
  PRIMARY KEY ("id")
);
