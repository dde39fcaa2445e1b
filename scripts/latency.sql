-- The scalable-job-queue article's latency test (dequeue.sql), made correct: the article put
-- FOR UPDATE SKIP LOCKED on its job_fanout view, which locks nothing
-- (docs/design.md, "A locking clause on a view locks nothing"), so two clients could take the same job. Here the locking
-- clause sits inside each branch that reads job_queue; the random start and
-- the wrap-around are the view's, written out.
--
-- Run from the schema that holds job_queue, with :work the seconds of
-- "processing" per job, for example:
--   PGOPTIONS='-c search_path=skiplock_bench' pgbench -n -M prepared \
--     -c 500 -j 2 -T 30 -D work=1 -f scripts/latency.sql
\set r random(0, 4294967295)
begin transaction isolation level read committed;
select id from (select id from job_queue where id >= lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_from_start union all select id from (select id from job_queue where id < lpad(to_hex((:r)::bigint), 8, '0') order by id limit 1 for update skip locked) fanout_wrap limit 1
\gset
select pg_sleep(:work);
delete from job_queue where id = :id;
commit;
