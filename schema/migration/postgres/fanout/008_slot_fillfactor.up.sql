-- skiplock migration fanout/008 slot_fillfactor, postgres.
--
-- Written by hand (the generator writes only new tables and indexes),
-- then frozen: databases record this version as applied, so this file is
-- never edited. fanout_slot keeps nine tenths of each page free for the
-- next versions of its rows, which limited claims update many times a
-- second, so that those updates stay HOT (on the same page, with no new
-- index entry) without waiting for a vacuum.
--
-- One "-- name:" block per statement, run in order; "-- when:" limits a
-- block to split or unsplit tables (schema.Conditions). Placeholders are
-- filled by schema.TemplateValues.

-- name: fillfactor_fanout_slot
ALTER TABLE /* TEMPLATE: schema */."fanout_slot" SET (fillfactor = 10);
