-- skiplock migration bucketed/002 status_type, postgres.
--
-- Written by hand, then frozen: it replaces a block of version 001 that
-- fails on some servers, which go generate does not write. Databases record this
-- version as applied, so this file is never edited. What it does and why:
-- docs/design.md, "The status type is created without an exception block".
--
-- One "-- name:" block per statement, run in order. A "-- replaces:" block
-- is the current form of an earlier block: a database that has not applied
-- that version runs it in the earlier block's place (frozen.Resolve).
-- Placeholders are filled by schema.TemplateValues.

-- name: create_type_job_status
-- replaces: 001/create_type_job_status
DO 'BEGIN IF to_regtype(''/* TEMPLATE: schema */."job_status"'') IS NULL THEN CREATE TYPE /* TEMPLATE: schema */."job_status" AS ENUM (''Queued'', ''Running'', ''Canceled'', ''Failed'', ''Success''); END IF; END';
