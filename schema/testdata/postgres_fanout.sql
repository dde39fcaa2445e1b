CREATE SCHEMA IF NOT EXISTS "skiplock";

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_migration" (
  "layout" TEXT NOT NULL,
  "version" INTEGER NOT NULL,
  "name" TEXT NOT NULL,
  "applied_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("layout", "version")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_setting" (
  "name" TEXT NOT NULL PRIMARY KEY,
  "value" TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_lock" (
  "name" TEXT NOT NULL PRIMARY KEY,
  "holder" TEXT NOT NULL,
  "expires_at" timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS "skiplock"."work_log" (
  "job_id" TEXT NOT NULL,
  "worker" TEXT NOT NULL,
  "handled_at" timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS "work_log_job_id" ON "skiplock"."work_log" ("job_id");

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_leader" (
  "name" TEXT NOT NULL,
  "holder" TEXT NOT NULL,
  "token" BIGINT NOT NULL,
  "elected_at" timestamptz NOT NULL,
  "expires_at" timestamptz NOT NULL,
  PRIMARY KEY ("name")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_queue" (
  "name" TEXT NOT NULL,
  "paused" BOOLEAN NOT NULL DEFAULT false,
  "updated_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_periodic" (
  "name" TEXT NOT NULL,
  "schedule" TEXT NOT NULL,
  "last_tick" timestamptz NOT NULL,
  "next_tick" timestamptz NOT NULL,
  "updated_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_stat" (
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

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_rollup" (
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

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_client" (
  "id" TEXT NOT NULL,
  "host" TEXT NOT NULL,
  "pid" BIGINT NOT NULL,
  "queues" JSONB NOT NULL DEFAULT '[]',
  "started_at" timestamptz NOT NULL,
  "last_seen" timestamptz NOT NULL,
  PRIMARY KEY ("id")
);

CREATE TABLE IF NOT EXISTS "skiplock"."work_attempt_log" (
  "id" TEXT NOT NULL,
  "job_id" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL,
  "worker" TEXT NOT NULL,
  "started_at" timestamptz NOT NULL,
  "finished_at" timestamptz,
  "outcome" TEXT,
  PRIMARY KEY ("id")
);

CREATE INDEX IF NOT EXISTS "work_attempt_log_job_id" ON "skiplock"."work_attempt_log" ("job_id");

ALTER TABLE "skiplock"."work_log" ADD COLUMN IF NOT EXISTS "started_at" timestamptz;

ALTER TABLE "skiplock"."work_log" ADD COLUMN IF NOT EXISTS "finished_at" timestamptz;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "concurrency" INTEGER;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "local_concurrency" INTEGER;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "slots" INTEGER NOT NULL DEFAULT 0;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_limit" INTEGER;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_period_ms" BIGINT;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_tokens" INTEGER NOT NULL DEFAULT 0;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "partition_by" TEXT;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "fair" BOOLEAN NOT NULL DEFAULT false;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "partition_limits" JSONB;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "sequential" BOOLEAN NOT NULL DEFAULT false;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "halt_on_dead" BOOLEAN NOT NULL DEFAULT false;

ALTER TABLE "skiplock"."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_per_partition" BOOLEAN NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS "skiplock"."job_queue" (
  "id" TEXT NOT NULL DEFAULT gen_random_uuid()::text,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "payload" JSONB NOT NULL DEFAULT 'null',
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "last_error" TEXT,
  "created_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

CREATE TABLE IF NOT EXISTS "skiplock"."job_dead" (
  "id" TEXT NOT NULL,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "payload" JSONB NOT NULL DEFAULT 'null',
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "last_error" TEXT,
  "created_at" timestamptz NOT NULL DEFAULT now(),
  "died_at" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

INSERT INTO "skiplock"."skiplock_setting" ("name", "value") VALUES ('fanout.tablets', '8') ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value";

CREATE TABLE IF NOT EXISTS "skiplock"."job_attempt" (
  "job_id" TEXT NOT NULL,
  "attempts" INTEGER NOT NULL,
  "started_at" timestamptz NOT NULL,
  "retry_at" timestamptz NOT NULL,
  PRIMARY KEY ("job_id")
);

ALTER TABLE "skiplock"."job_queue" ADD COLUMN IF NOT EXISTS "kind" TEXT NOT NULL DEFAULT '';

ALTER TABLE "skiplock"."job_queue" ADD COLUMN IF NOT EXISTS "metadata" JSONB NOT NULL DEFAULT '{}';

ALTER TABLE "skiplock"."job_queue" ADD COLUMN IF NOT EXISTS "errors" JSONB NOT NULL DEFAULT '[]';

ALTER TABLE "skiplock"."job_dead" ADD COLUMN IF NOT EXISTS "kind" TEXT NOT NULL DEFAULT '';

ALTER TABLE "skiplock"."job_dead" ADD COLUMN IF NOT EXISTS "metadata" JSONB NOT NULL DEFAULT '{}';

ALTER TABLE "skiplock"."job_dead" ADD COLUMN IF NOT EXISTS "errors" JSONB NOT NULL DEFAULT '[]';

ALTER TABLE "skiplock"."job_queue" ALTER COLUMN "id" SET DEFAULT lpad(to_hex(floor(random() * 64)::INT * 4), 2, '0') || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::INT8), 14, '0') || substr(md5(gen_random_uuid()::TEXT), 1, 16);

ALTER TABLE "skiplock"."job_queue" ADD COLUMN IF NOT EXISTS "unique_key" TEXT;

CREATE UNIQUE INDEX IF NOT EXISTS "job_queue_unique_key" ON "skiplock"."job_queue" ("queue", "unique_key") WHERE "unique_key" IS NOT NULL;

CREATE TABLE IF NOT EXISTS "skiplock"."fanout_slot" (
  "queue" TEXT NOT NULL,
  "slot" INTEGER NOT NULL,
  "taken_at" timestamptz,
  PRIMARY KEY ("queue", "slot")
);

ALTER TABLE "skiplock"."fanout_slot" SET (fillfactor = 10);
