-- skiplock migration bucketed/015 slot_fillfactor, postgres.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. The limits' tables keep nine tenths of each page free
-- for the next versions of its rows, which claims update many times a
-- second, so that those updates stay HOT (on the same page, with no new
-- index entry) without waiting for a vacuum: rows already stored move
-- only when the table is rewritten (VACUUM FULL, or slots made again).
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: fillfactor_job_slot
ALTER TABLE /* TEMPLATE: schema */."job_slot" SET (fillfactor = 10);

-- name: fillfactor_job_rate_token
ALTER TABLE /* TEMPLATE: schema */."job_rate_token" SET (fillfactor = 10);
