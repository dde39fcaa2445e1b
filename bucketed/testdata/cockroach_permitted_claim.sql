WITH best AS (SELECT (SELECT "priority" FROM "skiplock"."jobs"
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND NOT EXISTS (SELECT 1 FROM "skiplock"."skiplock_queue" AS "qs" WHERE ("qs"."paused" OR "qs"."concurrency" IS NULL OR "qs"."concurrency" <= $10::INT4 OR "qs"."rate_limit" IS NOT NULL OR "qs"."partition_by" IS NOT NULL OR EXISTS (SELECT 1 FROM "skiplock"."job_slot" AS h WHERE h."queue" = "qs"."name" AND h."partition" = '' AND h."slot" >= "qs"."concurrency" AND h."slot" < GREATEST("qs"."slots", "qs"."concurrency") AND (COALESCE(h."held_until" > now(), false) OR COALESCE((SELECT j."lease_token" FROM "skiplock"."jobs" AS j
      WHERE j."id" = h."job_id" AND j."status"::TEXT = 'Running') = h."lease_token", false)))) AND "qs"."name" =  $1) AND array_length($6::INT2[], 1) > 0
      AND ("priority", "run_at", "id") > (($7::INT4[])[1], ($8::TIMESTAMPTZ[])[1], ($9::INT8[])[1])
      AND "run_at" <= now()
    ORDER BY "priority", "run_at", "id" LIMIT 1) AS p)
UPDATE "skiplock"."jobs" AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = now() + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
FROM (
  SELECT b.id FROM (
    SELECT "id", "priority" FROM "skiplock"."jobs"
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND NOT EXISTS (SELECT 1 FROM "skiplock"."skiplock_queue" AS "qs" WHERE ("qs"."paused" OR "qs"."concurrency" IS NULL OR "qs"."concurrency" <= $10::INT4 OR "qs"."rate_limit" IS NOT NULL OR "qs"."partition_by" IS NOT NULL OR EXISTS (SELECT 1 FROM "skiplock"."job_slot" AS h WHERE h."queue" = "qs"."name" AND h."partition" = '' AND h."slot" >= "qs"."concurrency" AND h."slot" < GREATEST("qs"."slots", "qs"."concurrency") AND (COALESCE(h."held_until" > now(), false) OR COALESCE((SELECT j."lease_token" FROM "skiplock"."jobs" AS j
      WHERE j."id" = h."job_id" AND j."status"::TEXT = 'Running') = h."lease_token", false)))) AND "qs"."name" =  $1) AND array_length($6::INT2[], 1) > 0
      AND ("priority", "run_at", "id") > (($7::INT4[])[1], ($8::TIMESTAMPTZ[])[1], ($9::INT8[])[1])
      AND "run_at" <= now()
    ORDER BY "priority", "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  WHERE b."priority" = (SELECT p FROM best)) AS c
WHERE j."id" = c.id
RETURNING j."id", j."queue", j."payload"::TEXT, j."priority", j."status"::TEXT, j."attempts", j."max_attempts",
  j."create_ts", j."run_at", j."last_error", j."lease_owner", j."lease_token", j."lease_expires_at", j."bucket", j."kind", j."metadata"::TEXT,
  j."workflow_id", COALESCE(array_length(j."dependents", 1), 0);
