-- skiplock migration core/008 rate_limits, postgres.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. skiplock_queue gains the queue's rate limit and the count
-- of token rows made for it (bucketed's job_rate_token).
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_skiplock_queue_rate_limit
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_limit" INTEGER;

-- name: add_column_skiplock_queue_rate_period_ms
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_period_ms" BIGINT;

-- name: add_column_skiplock_queue_rate_tokens
ALTER TABLE /* TEMPLATE: schema */."skiplock_queue" ADD COLUMN IF NOT EXISTS "rate_tokens" INTEGER NOT NULL DEFAULT 0;
