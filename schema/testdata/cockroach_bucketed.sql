CREATE SCHEMA IF NOT EXISTS "skiplock";

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_migration" (
  "layout" TEXT NOT NULL,
  "version" INTEGER NOT NULL,
  "name" TEXT NOT NULL,
  "applied_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("layout", "version")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_setting" (
  "name" TEXT NOT NULL PRIMARY KEY,
  "value" TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_lock" (
  "name" TEXT NOT NULL PRIMARY KEY,
  "holder" TEXT NOT NULL,
  "expires_at" TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS "skiplock"."work_log" (
  "job_id" TEXT NOT NULL,
  "worker" TEXT NOT NULL,
  "handled_at" TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS "work_log_job_id" ON "skiplock"."work_log" ("job_id");

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_leader" (
  "name" TEXT NOT NULL,
  "holder" TEXT NOT NULL,
  "token" BIGINT NOT NULL,
  "elected_at" TIMESTAMPTZ NOT NULL,
  "expires_at" TIMESTAMPTZ NOT NULL,
  PRIMARY KEY ("name")
);

DROP INDEX IF EXISTS "skiplock"."work_log"@"work_log_job_id";

CREATE INDEX IF NOT EXISTS "work_log_job_id" ON "skiplock"."work_log" ("job_id") USING HASH WITH (bucket_count = 16);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_queue" (
  "name" TEXT NOT NULL,
  "paused" BOOLEAN NOT NULL DEFAULT false,
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_periodic" (
  "name" TEXT NOT NULL,
  "schedule" TEXT NOT NULL,
  "last_tick" TIMESTAMPTZ NOT NULL,
  "next_tick" TIMESTAMPTZ NOT NULL,
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("name")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_stat" (
  "id" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "minute" TIMESTAMPTZ NOT NULL,
  "client_id" TEXT NOT NULL,
  "completed" BIGINT NOT NULL DEFAULT 0,
  "failed" BIGINT NOT NULL DEFAULT 0,
  "wait_hist" JSONB NOT NULL DEFAULT '{}',
  "run_hist" JSONB NOT NULL DEFAULT '{}',
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_rollup" (
  "queue" TEXT NOT NULL,
  "minute" TIMESTAMPTZ NOT NULL,
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
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("queue", "minute")
);

CREATE TABLE IF NOT EXISTS "skiplock"."skiplock_client" (
  "id" TEXT NOT NULL,
  "host" TEXT NOT NULL,
  "pid" BIGINT NOT NULL,
  "queues" JSONB NOT NULL DEFAULT '[]',
  "started_at" TIMESTAMPTZ NOT NULL,
  "last_seen" TIMESTAMPTZ NOT NULL,
  PRIMARY KEY ("id")
);

CREATE TABLE IF NOT EXISTS "skiplock"."work_attempt_log" (
  "id" TEXT NOT NULL,
  "job_id" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL,
  "worker" TEXT NOT NULL,
  "started_at" TIMESTAMPTZ NOT NULL,
  "finished_at" TIMESTAMPTZ,
  "outcome" TEXT,
  PRIMARY KEY ("id")
);

CREATE INDEX IF NOT EXISTS "work_attempt_log_job_id" ON "skiplock"."work_attempt_log" ("job_id") USING HASH WITH (bucket_count = 16);

ALTER TABLE "skiplock"."work_log" ADD COLUMN IF NOT EXISTS "started_at" TIMESTAMPTZ;

ALTER TABLE "skiplock"."work_log" ADD COLUMN IF NOT EXISTS "finished_at" TIMESTAMPTZ;

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

CREATE TYPE IF NOT EXISTS "skiplock"."job_status" AS ENUM ('Queued', 'Running', 'Canceled', 'Failed', 'Success');

CREATE TABLE IF NOT EXISTS "skiplock"."jobs" (
  "id" BIGINT DEFAULT unique_rowid() NOT NULL,
  "queue" TEXT NOT NULL DEFAULT 'default',
  "status" "skiplock"."job_status" NOT NULL DEFAULT 'Queued',
  "priority" SMALLINT NOT NULL DEFAULT 0,
  "payload" JSONB NOT NULL DEFAULT 'null',
  "bucket" SMALLINT NOT NULL DEFAULT floor(random() * 8)::SMALLINT,
  "create_ts" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "run_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "max_attempts" INTEGER NOT NULL DEFAULT 25,
  "lease_owner" TEXT,
  "lease_token" BIGINT,
  "lease_expires_at" TIMESTAMPTZ,
  "last_error" TEXT,
  "last_updated" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "finished_at" TIMESTAMPTZ,
  "unique_key" TEXT,
  PRIMARY KEY ("id")
);

CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON "skiplock"."jobs" ("queue", "priority", "run_at", "id") USING HASH WITH (bucket_count = 8) WHERE "status" = 'Queued';

CREATE INDEX IF NOT EXISTS "jobs_lease_expiry" ON "skiplock"."jobs" ("queue", "lease_expires_at") WHERE "status" = 'Running';

CREATE UNIQUE INDEX IF NOT EXISTS "jobs_unique_key" ON "skiplock"."jobs" ("queue", "unique_key") WHERE "unique_key" IS NOT NULL AND "status" IN ('Queued', 'Running');

CREATE INDEX IF NOT EXISTS "jobs_finished" ON "skiplock"."jobs" ("finished_at") WHERE "finished_at" IS NOT NULL;

INSERT INTO "skiplock"."skiplock_setting" ("name", "value") VALUES ('bucketed.buckets', '8') ON CONFLICT ("name") DO UPDATE SET "value" = excluded."value";

ALTER TABLE "skiplock"."jobs" ALTER COLUMN "id" SET DEFAULT unordered_unique_rowid();

DROP INDEX IF EXISTS "skiplock"."jobs"@"jobs_lease_expiry";

CREATE INDEX IF NOT EXISTS "jobs_lease_expiry" ON "skiplock"."jobs" ("queue", "lease_expires_at") USING HASH WITH (bucket_count = 8) WHERE "status" = 'Running';

DROP INDEX IF EXISTS "skiplock"."jobs"@"jobs_finished";

CREATE INDEX IF NOT EXISTS "jobs_finished" ON "skiplock"."jobs" ("finished_at") USING HASH WITH (bucket_count = 8) WHERE "finished_at" IS NOT NULL;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "kind" TEXT NOT NULL DEFAULT '';

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "metadata" JSONB NOT NULL DEFAULT '{}';

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "errors" JSONB NOT NULL DEFAULT '[]';

CREATE TABLE IF NOT EXISTS "skiplock"."job_hold" (
  "token" BIGINT NOT NULL,
  "queue" TEXT NOT NULL,
  "ids" JSONB NOT NULL,
  "holder" BIGINT NOT NULL,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("token")
);

CREATE TABLE IF NOT EXISTS "skiplock"."job_slot" (
  "queue" TEXT NOT NULL,
  "partition" TEXT NOT NULL DEFAULT '',
  "slot" INTEGER NOT NULL,
  "job_id" BIGINT,
  "lease_token" BIGINT,
  PRIMARY KEY ("queue", "partition", "slot") USING HASH WITH (bucket_count = 16)
);

CREATE TABLE IF NOT EXISTS "skiplock"."job_rate_token" (
  "queue" TEXT NOT NULL,
  "partition" TEXT NOT NULL DEFAULT '',
  "token" INTEGER NOT NULL,
  "used_at" TIMESTAMPTZ,
  PRIMARY KEY ("queue", "partition", "token") USING HASH WITH (bucket_count = 16)
);

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "partition_key" TEXT;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "partition" TEXT;

CREATE INDEX IF NOT EXISTS "jobs_partition" ON "skiplock"."jobs" ("queue", "partition", "priority", "run_at", "id") USING HASH WITH (bucket_count = 8) WHERE "status" = 'Queued' AND "partition" IS NOT NULL;

CREATE INDEX IF NOT EXISTS "jobs_partition_dead" ON "skiplock"."jobs" ("queue", "partition", "id") WHERE "status" = 'Failed' AND "partition" IS NOT NULL;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "unique_states" "skiplock"."job_status"[];

CREATE UNIQUE INDEX IF NOT EXISTS "jobs_unique_states" ON "skiplock"."jobs" ("queue", "unique_key") WHERE "unique_key" IS NOT NULL AND ("status" IN ('Queued', 'Running') OR "status" = ANY ("unique_states"));

DROP INDEX IF EXISTS "skiplock"."jobs"@"jobs_unique_key";

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "output" JSONB;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "progress" JSONB;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "batch_id" BIGINT;

CREATE TABLE IF NOT EXISTS "skiplock"."job_batch" (
  "id" BIGINT DEFAULT unordered_unique_rowid() NOT NULL,
  "size" INTEGER NOT NULL,
  "callback_queue" TEXT NOT NULL,
  "callback_kind" TEXT NOT NULL DEFAULT '',
  "callback_payload" JSONB NOT NULL DEFAULT 'null',
  "callback_metadata" JSONB NOT NULL DEFAULT '{}',
  "callback_max_attempts" INTEGER NOT NULL DEFAULT 25,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "finished_at" TIMESTAMPTZ,
  "callback_id" BIGINT,
  PRIMARY KEY ("id")
);

CREATE INDEX IF NOT EXISTS "jobs_batch" ON "skiplock"."jobs" ("batch_id", "status", "id") USING HASH WITH (bucket_count = 8) WHERE "batch_id" IS NOT NULL;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "workflow_id" BIGINT;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "workflow_node" TEXT;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "depends_on" TEXT[];

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "dependents" TEXT[];

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "deps_left" INTEGER;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "run_anyway" BOOLEAN;

ALTER TABLE "skiplock"."jobs" ADD COLUMN IF NOT EXISTS "canceled_by" TEXT;

CREATE TABLE IF NOT EXISTS "skiplock"."job_workflow" (
  "id" BIGINT DEFAULT unordered_unique_rowid() NOT NULL,
  "name" TEXT NOT NULL DEFAULT '',
  "size" INTEGER NOT NULL,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

CREATE INDEX IF NOT EXISTS "jobs_workflow" ON "skiplock"."jobs" ("workflow_id", "workflow_node") USING HASH WITH (bucket_count = 8) WHERE "workflow_id" IS NOT NULL;

CREATE INDEX IF NOT EXISTS "jobs_waiting" ON "skiplock"."jobs" ("queue", "id") USING HASH WITH (bucket_count = 8) WHERE "status" = 'Queued' AND "deps_left" IS NOT NULL;

DROP INDEX IF EXISTS "skiplock"."jobs"@"jobs_dequeue";

CREATE INDEX IF NOT EXISTS "jobs_dequeue" ON "skiplock"."jobs" ("queue", "priority", "run_at", "id") USING HASH WITH (bucket_count = 8) WHERE "status" = 'Queued' AND "deps_left" IS NULL;

CREATE TABLE IF NOT EXISTS "skiplock"."job_workflow_node" (
  "workflow_id" BIGINT NOT NULL,
  "node" TEXT NOT NULL,
  "job_id" BIGINT NOT NULL,
  PRIMARY KEY ("workflow_id", "node")
);

INSERT INTO "skiplock"."job_workflow_node" ("workflow_id", "node", "job_id")
SELECT "workflow_id", "workflow_node", "id" FROM "skiplock"."jobs" WHERE "workflow_id" IS NOT NULL
ON CONFLICT ("workflow_id", "node") DO NOTHING;

DROP INDEX IF EXISTS "skiplock"."jobs"@"jobs_workflow";

CREATE INDEX IF NOT EXISTS "jobs_workflow" ON "skiplock"."jobs" ("workflow_id", "workflow_node") USING HASH WITH (bucket_count = 8) WHERE "deps_left" IS NOT NULL;

ALTER TABLE "skiplock"."job_slot" ADD COLUMN IF NOT EXISTS "held_until" TIMESTAMPTZ;
