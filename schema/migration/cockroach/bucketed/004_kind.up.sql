-- skiplock migration bucketed/004 kind, cockroach.
--
-- Written by hand, then frozen: go generate writes new tables and indexes,
-- not new columns. Databases record this version as applied, so this file
-- is never edited. Each job gains its kind (the name its worker is
-- registered under; '' for jobs enqueued without one), its metadata (a
-- JSON object middleware fills, such as a trace context) and its errors
-- (the history of its failed attempts). All have
-- constant defaults, so existing rows need no rewrite on PostgreSQL (a
-- stored default since version 11); YugabyteDB and CockroachDB fill them
-- in online (see docs/design.md, "Kinds and metadata").
--
-- One "-- name:" block per statement, run in order. Placeholders are
-- filled by schema.TemplateValues.

-- name: add_column_jobs_kind
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "kind" TEXT NOT NULL DEFAULT '';

-- name: add_column_jobs_metadata
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "metadata" JSONB NOT NULL DEFAULT '{}';

-- name: add_column_jobs_errors
ALTER TABLE /* TEMPLATE: schema */."jobs" ADD COLUMN IF NOT EXISTS "errors" JSONB NOT NULL DEFAULT '[]';
