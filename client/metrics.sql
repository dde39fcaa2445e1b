-- What the maintenance leader reads for the queue gauges (metrics.go),
-- one statement per queue and layout, each bounded by indexes and a cap.
-- Templates:
--   jobs       the bucketed layout's jobs table, schema-qualified
--   job_queue  fanout's pending jobs
--   setting    skiplock_setting (the bucket count)
-- Every identifier is quoted; every value is a $n parameter.

-- name: sample_bucketed
-- Queue $1's Queued and Running jobs, each counted up to $2 rows of its
-- partial index (jobs_dequeue, jobs_lease_expiry), and the oldest run_at
-- among the buckets' next claimable jobs (one index probe per bucket, as
-- the claims' heads probe), with the server's clock.
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 LIMIT $2) AS q),
  (SELECT count(*) FROM (SELECT 1 FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Running' AND "queue" = $1 LIMIT $2) AS r),
  (SELECT min(x."run_at") FROM generate_series(0,
      (SELECT s."value"::INT8 FROM /* TEMPLATE: setting */ AS s WHERE s."name" = 'bucketed.buckets') - 1) AS h (bucket)
    CROSS JOIN LATERAL (SELECT "run_at" FROM /* TEMPLATE: jobs */
      WHERE "bucket" = h.bucket AND "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now()
      ORDER BY "priority", "run_at", "id" LIMIT 1) AS x),
  now();

-- name: sample_bucketed_key_join
-- sample_bucketed where the queue index is hash-sharded (CockroachDB: the
-- sharded index fans the ordered scan out itself): the queue's next
-- claimable job, with no per-bucket probe.
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 LIMIT $2) AS q),
  (SELECT count(*) FROM (SELECT 1 FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Running' AND "queue" = $1 LIMIT $2) AS r),
  (SELECT "run_at" FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now()
    ORDER BY "priority", "run_at", "id" LIMIT 1),
  now();

-- name: sample_fanout
-- Queue $1's pending jobs, counted up to $2 rows, and the oldest creation
-- time among the rows read (the queue's oldest below the cap), with the
-- server's clock. fanout's table holds only pending jobs.
SELECT count(*), min(q."created_at"), now() FROM (SELECT "created_at" FROM /* TEMPLATE: job_queue */
  WHERE "queue" = $1 LIMIT $2) AS q;
