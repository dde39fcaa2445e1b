WITH best AS (SELECT min(x."priority") AS p
  FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i) CROSS JOIN LATERAL (
    SELECT COALESCE(
      CASE WHEN h.p >= -32768 THEN (SELECT "priority" FROM "skiplock"."jobs"
        WHERE "bucket" = h.bucket AND "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND NOT EXISTS (SELECT 1 FROM "skiplock"."skiplock_queue" AS "qs" WHERE ("qs"."paused" OR "qs"."concurrency" IS NOT NULL OR "qs"."rate_limit" IS NOT NULL OR "qs"."partition_by" IS NOT NULL) AND "qs"."name" =  $1)
          AND "priority" = h.p AND "run_at" >= h.t AND ("run_at" > h.t OR "id" > h.i)
        ORDER BY "run_at", "id" LIMIT 1) END,
      (SELECT "priority" FROM "skiplock"."jobs"
        WHERE "bucket" = h.bucket AND "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND NOT EXISTS (SELECT 1 FROM "skiplock"."skiplock_queue" AS "qs" WHERE ("qs"."paused" OR "qs"."concurrency" IS NOT NULL OR "qs"."rate_limit" IS NOT NULL OR "qs"."partition_by" IS NOT NULL) AND "qs"."name" =  $1)
          AND "priority" > h.p
        ORDER BY "priority", "run_at", "id" LIMIT 1)) AS "priority") AS x)
UPDATE "skiplock"."jobs" AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = now() + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
WHERE j."id" = ANY(ARRAY(
  SELECT b.id FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i)
  CROSS JOIN LATERAL (
    SELECT "id" FROM "skiplock"."jobs"
    WHERE "bucket" = h.bucket AND "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND NOT EXISTS (SELECT 1 FROM "skiplock"."skiplock_queue" AS "qs" WHERE ("qs"."paused" OR "qs"."concurrency" IS NOT NULL OR "qs"."rate_limit" IS NOT NULL OR "qs"."partition_by" IS NOT NULL) AND "qs"."name" =  $1)
      AND "priority" = (SELECT p FROM best) AND h.p <= (SELECT p FROM best)
      AND "run_at" >= CASE WHEN h.p = (SELECT p FROM best) THEN h.t ELSE '-infinity'::TIMESTAMPTZ END
      AND (h.p < (SELECT p FROM best) OR "run_at" > h.t OR "id" > h.i)
    ORDER BY "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  LIMIT $2))
RETURNING j."id", j."queue", j."payload"::TEXT, j."priority", j."status"::TEXT, j."attempts", j."max_attempts",
  j."create_ts", j."run_at", j."last_error", j."lease_owner", j."lease_token", j."lease_expires_at", j."bucket", j."kind", j."metadata"::TEXT,
  j."workflow_id", COALESCE(array_length(j."dependents", 1), 0);
