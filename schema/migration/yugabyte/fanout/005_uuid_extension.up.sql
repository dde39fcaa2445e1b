-- skiplock migration fanout/005 uuid_extension, yugabyte.
--
-- Written by hand, then frozen: it replaces a block of version 001 that
-- fails on some servers, which go generate does not write. Databases record this
-- version as applied, so this file is never edited. What it does and why:
-- docs/engines.md, "YugabyteDB: gen_random_uuid without pgcrypto".
--
-- One "-- name:" block per statement, run in order. A "-- replaces:" block
-- is the current form of an earlier block: a database that has not applied
-- that version runs it in the earlier block's place (frozen.Resolve).
-- Placeholders are filled by schema.TemplateValues.

-- name: create_extension_pgcrypto
-- replaces: 001/create_extension_pgcrypto
DO 'BEGIN IF to_regproc(''gen_random_uuid'') IS NULL THEN CREATE EXTENSION IF NOT EXISTS "pgcrypto"; END IF; END';
