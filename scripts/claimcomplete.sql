-- The SQL limit of a bucketed burn-down (bench throughput --baseline in lease
-- mode): one statement claims up to 100 Queued jobs of one bucket in the
-- claim's index order (jobs_dequeue: bucket, queue, priority, run_at, id;
-- the query repeats the index's predicate, schema.Ready, or PostgreSQL
-- cannot use it), skipping rows other clients hold, and completes them, in one round trip
-- and one commit. No lease, no fencing, no batching of completions: what
-- the table and its index allow, not a queue a worker could use. :buckets is
-- the schema's bucket count, :queue the queue, for example:
--   PGOPTIONS='-c search_path=skiplock_bench' pgbench -n -M prepared \
--     -c 8 -j 2 -t 200 -D buckets=16 -D queue=bench -f scripts/claimcomplete.sql
\set b random(0, :buckets - 1)
update jobs set status = 'Success', attempts = attempts + 1, finished_at = now(), last_updated = now()
where id in (select id from jobs where bucket = :b and status = 'Queued' and deps_left is null and queue = :queue and run_at <= now()
  order by priority, run_at, id limit 100 for update skip locked);
