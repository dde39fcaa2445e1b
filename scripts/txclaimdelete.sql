-- An experiment, not a baseline the bench runs: what a transactional claim
-- of a bucketed burn-down would cost the server. Each transaction locks up
-- to 100 Queued jobs of one bucket (skipping rows other clients hold),
-- reads their ids back (where a worker would run their handlers, holding
-- the locks), and deletes them in the same transaction: a row lock and a
-- delete per job, no new row version and no index entry. Run beside
-- claimcomplete.sql on the same preload (docs/design.md, "Writes per
-- job"), for example:
--   PGOPTIONS='-c search_path=skiplock_bench' pgbench -n -M prepared \
--     -c 8 -j 2 -t 300 -D buckets=8 -D queue=bench -f scripts/txclaimdelete.sql
\set b random(0, :buckets - 1)
BEGIN;
SELECT coalesce(array_agg(id), '{}') AS ids FROM (SELECT id FROM jobs WHERE bucket = :b AND status = 'Queued' AND deps_left IS NULL AND queue = :queue
  AND run_at <= now() ORDER BY priority, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) AS s \gset
DELETE FROM jobs WHERE id = ANY(:ids::INT8[]);
COMMIT;
