-- What the client sends besides the layouts' statements. Templates:
--   periodic  skiplock_periodic, schema-qualified
-- Every identifier is quoted; every value is a $n parameter.

-- name: periodic_lock
-- A periodic job's last enqueued tick, locked for the maintenance
-- leader's fenced round: $1 the name. No row: never enqueued.
SELECT "last_tick" FROM /* TEMPLATE: periodic */ WHERE "name" = $1 FOR UPDATE;

-- name: periodic_upsert
-- Records a periodic job's schedule ($2, as text), the tick just enqueued
-- ($3) and the next one due ($4): $1 the name. Sent in the transaction
-- that enqueued the tick's job.
INSERT INTO /* TEMPLATE: periodic */ AS p ("name", "schedule", "last_tick", "next_tick", "updated_at")
VALUES ($1, $2, $3, $4, now())
ON CONFLICT ("name") DO UPDATE SET "schedule" = excluded."schedule", "last_tick" = excluded."last_tick",
  "next_tick" = excluded."next_tick", "updated_at" = excluded."updated_at";
