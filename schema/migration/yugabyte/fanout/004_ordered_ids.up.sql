-- skiplock migration fanout/004 ordered_ids, yugabyte.
--
-- Written by hand, then frozen: it changes objects that earlier versions
-- created, which go generate does not write. Databases record this
-- version as applied, so this file is never edited. What it does and why:
-- docs/design.md, "Fanout's ids: a random shard, then time".
--
-- One "-- name:" block per statement, run in order.
-- Placeholders are filled by schema.TemplateValues.

-- name: set_default_job_queue_id
ALTER TABLE /* TEMPLATE: schema */."job_queue" ALTER COLUMN "id" SET DEFAULT lpad(to_hex(floor(random() * 64)::INT * 4), 2, '0') || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::INT8), 14, '0') || substr(md5(gen_random_uuid()::TEXT), 1, 16);
