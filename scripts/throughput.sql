-- Burn-down (like river bench -n): the scalable-job-queue article's dequeue without the sleep,
-- made correct as in latency.sql. Each transaction locks one job from a
-- random start, deletes it and commits. Run with -t so that clients x
-- transactions equals the jobs preloaded:
--   PGOPTIONS='-c search_path=skiplock_bench' pgbench -n -M prepared \
--     -c 50 -j 2 -t 2000 -f scripts/throughput.sql
\set r random(0, 4294967295)
begin transaction isolation level read committed;
select id from (select id from job_queue where id >= lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_from_start union all select id from (select id from job_queue where id < lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_wrap limit 1
\gset
delete from job_queue where id = :id;
commit;
