-- The scalable-job-queue article's lock-only test, made correct as in latency.sql: each
-- transaction locks one job from a random start and commits without
-- deleting it.
--   PGOPTIONS='-c search_path=skiplock_bench' pgbench -n -M prepared \
--     -c 15 -j 2 -T 30 -f scripts/lock.sql
\set r random(0, 4294967295)
begin transaction isolation level read committed;
select id from (select id from job_queue where id >= lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_from_start union all select id from (select id from job_queue where id < lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_wrap limit 1;
commit;
