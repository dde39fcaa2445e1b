-- Statements of the maintenance leader. Placeholders: leader (the leader
-- lease table), jobs (bucketed's table), status (its status enum type),
-- dead (fanout's dead letters). Values are $n parameters.

-- name: elect
-- Takes the lease when nobody holds it or the holder's lease expired. Each
-- takeover draws the next fencing token; a live lease is left alone (no row
-- comes back). Two electors racing for the same expired row: one updates,
-- the other waits for its row lock, re-checks the WHERE against the new row
-- and updates nothing.
INSERT INTO /* TEMPLATE: leader */ AS l ("name", "holder", "token", "elected_at", "expires_at")
VALUES ($1, $2, 1, now(), now() + $3::FLOAT8 * INTERVAL '1 second')
ON CONFLICT ("name") DO UPDATE SET "holder" = excluded."holder", "token" = l."token" + 1,
  "elected_at" = excluded."elected_at", "expires_at" = excluded."expires_at"
WHERE l."expires_at" <= now()
RETURNING l."token";

-- name: renew
-- Extends a lease that is still ours and still live; no row back means the
-- lease was lost.
UPDATE /* TEMPLATE: leader */ SET "expires_at" = now() + $4::FLOAT8 * INTERVAL '1 second'
WHERE "name" = $1 AND "holder" = $2 AND "token" = $3 AND "expires_at" > now()
RETURNING "token";

-- name: resign
-- Ends our lease now, so that another process takes over at its next try
-- instead of after the lease runs out.
UPDATE /* TEMPLATE: leader */ SET "expires_at" = now()
WHERE "name" = $1 AND "holder" = $2 AND "token" = $3 AND "expires_at" > now();

-- name: fence
-- The first statement of every maintenance transaction: the lease must be
-- ours and live. On PostgreSQL and YugabyteDB, and at READ COMMITTED on
-- CockroachDB, FOR SHARE holds the row until the transaction ends, so a
-- takeover (an UPDATE of this row) waits for the maintenance work to commit
-- or roll back: two leaders never act at once. CockroachDB takes no shared
-- lock at SERIALIZABLE (unless enable_shared_locking_for_serializable;
-- select-for-update.md): there serializability fences instead, since a
-- takeover that writes the row this transaction read is ordered after it,
-- or this transaction fails to commit.
SELECT "token" FROM /* TEMPLATE: leader */
WHERE "name" = $1 AND "token" = $2 AND "expires_at" > now()
FOR SHARE;

-- name: current
-- Who leads, for status pages and tests.
SELECT "holder", "token", "elected_at", "expires_at", "expires_at" > now()
FROM /* TEMPLATE: leader */ WHERE "name" = $1;

-- name: rescue_bucketed
-- The rescuer: Running jobs whose lease expired (their worker died, lost
-- its connection or stalled past the visibility timeout). A job with
-- attempts left goes back to Queued, to run again; one whose attempts
-- reached max_attempts becomes Failed, so a job that kills its worker every
-- time ends instead of running for ever. The old holder's late completion
-- is refused by the lease-token fence either way, since the row is no
-- longer Running under its token. The ids are collected once, locked and
-- limited, before the UPDATE touches a row.
UPDATE /* TEMPLATE: jobs */ AS j SET
  "status" = CASE WHEN j."attempts" >= j."max_attempts" THEN 'Failed'::/* TEMPLATE: status */ ELSE 'Queued'::/* TEMPLATE: status */ END,
  "finished_at" = CASE WHEN j."attempts" >= j."max_attempts" THEN now() END,
  "last_error" = 'lease expired during attempt ' || j."attempts"::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or stalled past its visibility timeout',
  "errors" = /* TEMPLATE: push_error */ 'lease expired during attempt ' || j."attempts"::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or stalled past its visibility timeout')),
  "lease_expires_at" = NULL, "last_updated" = now()
WHERE j."id" = ANY(ARRAY(
    SELECT "id" FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Running' AND "lease_expires_at" <= now()
    ORDER BY "lease_expires_at" LIMIT $1 FOR UPDATE SKIP LOCKED))
  AND j."status" = 'Running' AND j."lease_expires_at" <= now()
RETURNING j."id", j."status"::TEXT;

-- name: rescue_bucketed_key_join
-- rescue_bucketed where the engine joins a DML statement to its limited
-- subquery by primary key (Dialect.KeyJoinDML: CockroachDB). There,
-- id = ANY(ARRAY(...)) does not constrain the UPDATE's scan, which would
-- read and implicitly lock the whole jobs table (cockroachdb/cockroach
-- #23264), and the locking subquery, with no queue to constrain
-- jobs_lease_expiry's (queue, lease_expires_at) key, would sort every
-- Running row under a top-k and lock them all, live leases included
-- (#143017, #173245). So the candidates are read without a lock (the
-- rescuer is the only one of its kind: one maintenance leader), and the
-- UPDATE's key join locks at most $1 rows and checks each again: a row a
-- claim or a completion holds is waited for, and one that is no longer
-- Running or no longer expired by then is left alone (docs/design.md,
-- "Claims on CockroachDB").
-- Expected plan, EXPLAIN on CockroachDB 25.2 (not run):
--   • update (table: jobs) ← • render ← • lookup join (jobs@jobs_pkey; equality (id) = (id);
--   equality cols are key; pred: status = 'Running' AND lease_expires_at <= now();
--   locking strength: for update) ← • top-k (order: +lease_expires_at; k: $1)
--   ← • filter (lease_expires_at <= now()) ← • scan (jobs@jobs_lease_expiry, partial index of
--   Running rows, every shard; no locking)
UPDATE /* TEMPLATE: jobs */ AS j SET
  "status" = CASE WHEN j."attempts" >= j."max_attempts" THEN 'Failed'::/* TEMPLATE: status */ ELSE 'Queued'::/* TEMPLATE: status */ END,
  "finished_at" = CASE WHEN j."attempts" >= j."max_attempts" THEN now() END,
  "last_error" = 'lease expired during attempt ' || j."attempts"::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or stalled past its visibility timeout',
  "errors" = /* TEMPLATE: push_error */ 'lease expired during attempt ' || j."attempts"::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or stalled past its visibility timeout')),
  "lease_expires_at" = NULL, "last_updated" = now()
FROM (
    SELECT "id" FROM /* TEMPLATE: jobs */
    WHERE "status" = 'Running' AND "lease_expires_at" <= now()
    ORDER BY "lease_expires_at" LIMIT $1) AS c
WHERE j."id" = c.id AND j."status" = 'Running' AND j."lease_expires_at" <= now()
RETURNING j."id", j."status"::TEXT;

-- name: prune_bucketed
-- The pruner: finished jobs of one status ($1) that finished longer than $2
-- seconds ago, at most $3 per statement, oldest first.
DELETE FROM /* TEMPLATE: jobs */ WHERE "id" = ANY(ARRAY(
  SELECT "id" FROM /* TEMPLATE: jobs */
  WHERE "status" = $1::/* TEMPLATE: status */ AND "finished_at" < now() - $2::FLOAT8 * INTERVAL '1 second'
  ORDER BY "finished_at" LIMIT $3));

-- name: prune_dead
-- The pruner for fanout's dead letters: those that died longer than $1
-- seconds ago, at most $2 per statement.
DELETE FROM /* TEMPLATE: dead */ WHERE "id" = ANY(ARRAY(
  SELECT "id" FROM /* TEMPLATE: dead */
  WHERE "died_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  LIMIT $2));

-- name: prune_bucketed_key_join
-- prune_bucketed where the engine joins a DML statement to its limited
-- subquery by primary key (Dialect.KeyJoinDML: CockroachDB): the same
-- bounded read of jobs_finished, and a DELETE that looks each id up by key
-- instead of scanning the table for id = ANY(ARRAY(...)).
-- Expected plan, EXPLAIN on CockroachDB 25.2 (not run):
--   • delete (from jobs) ← • lookup join (jobs@jobs_pkey; equality (id) = (id); key;
--   locking strength: for update) ← • limit $3 ← • filter (status = $1) ← • index join
--   (jobs@jobs_pkey) ← • union all (ordered merge of one scan of jobs@jobs_finished per shard,
--   spans [/shard - /shard/now() - $2])
DELETE FROM /* TEMPLATE: jobs */ AS j USING (
  SELECT "id" FROM /* TEMPLATE: jobs */
  WHERE "status" = $1::/* TEMPLATE: status */ AND "finished_at" < now() - $2::FLOAT8 * INTERVAL '1 second'
  ORDER BY "finished_at" LIMIT $3) AS c
WHERE j."id" = c.id;

-- name: prune_dead_key_join
-- prune_dead where the engine joins a DML statement to its limited subquery
-- by primary key (Dialect.KeyJoinDML: CockroachDB).
-- Expected plan, EXPLAIN on CockroachDB 25.2 (not run):
--   • delete (from job_dead) ← • lookup join (job_dead@job_dead_pkey; equality (id) = (id);
--   key; locking strength: for update) ← • limit $2 ← • filter (died_at < ...) ← • scan
--   (job_dead@job_dead_pkey, limit hint $2: no index on died_at)
DELETE FROM /* TEMPLATE: dead */ AS d USING (
  SELECT "id" FROM /* TEMPLATE: dead */
  WHERE "died_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  LIMIT $2) AS c
WHERE d."id" = c.id;

-- name: prune_attempts
-- fanout's attempt counts whose job is no longer queued (processed or
-- dead; its worker died before its forget statement dropped the count),
-- counted more than $1 seconds ago, at most $2 per statement.
DELETE FROM /* TEMPLATE: attempt */ WHERE "job_id" = ANY(ARRAY(
  SELECT "a"."job_id" FROM /* TEMPLATE: attempt */ AS "a"
  WHERE "a"."started_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: queue */ AS "j" WHERE "j"."id" = "a"."job_id")
  LIMIT $2));

-- name: prune_attempts_key_join
-- prune_attempts where the engine joins a DML statement to its limited
-- subquery by primary key (Dialect.KeyJoinDML: CockroachDB).
DELETE FROM /* TEMPLATE: attempt */ AS "d" USING (
  SELECT "a"."job_id" FROM /* TEMPLATE: attempt */ AS "a"
  WHERE "a"."started_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: queue */ AS "j" WHERE "j"."id" = "a"."job_id")
  LIMIT $2) AS "c"
WHERE "d"."job_id" = "c"."job_id";

-- Held claims (bucketed.WorkerConfig.HeldClaims): a hold row names the
-- jobs of a claim whose transaction holds their row locks while they run,
-- and is deleted by that transaction's commit. A row whose transaction
-- ended without it (the worker died or lost its connection, or its commit
-- failed) is an attempt of each job it names that nothing counted: the
-- rescuer counts it, and claims do not take those jobs until then. A job a
-- live claim holds is locked, so the rescuer, which skips locked rows,
-- never counts a running attempt.

-- name: finish_batches
-- Batches (job_batch) none of whose jobs is left Queued or Running, at most
-- $1, locked (SKIP LOCKED: one leader, but a deposed one's last statement
-- may still run): each gets its callback job, with the batch's counts by
-- final state in its metadata, and is stamped finished in the same
-- statement, so its callback is inserted once. Jobs deleted before the
-- batch finished (completed under DeleteCompleted, or by an operator)
-- count as gone. The open batches are found by reading job_batch (no
-- index: see schema.JobBatchTableDef), each asked of jobs_batch; where
-- that index is led by the bucket, $2 lists every bucket (batch_bucket).
-- Returns how many it finished and how many were open before it (the
-- statement's snapshot), so that the leader looks less often while none
-- is.
WITH "done" AS (
  SELECT b."id", b."size", b."callback_queue", b."callback_kind", b."callback_payload", b."callback_metadata", b."callback_max_attempts"
  FROM /* TEMPLATE: batch */ AS b
  WHERE b."finished_at" IS NULL
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: jobs */ AS j WHERE /* TEMPLATE: batch_bucket */j."batch_id" = b."id" AND j."status" IN ('Queued', 'Running'))
  LIMIT $1
  FOR UPDATE OF b SKIP LOCKED
), "counted" AS (
  SELECT d."id",
    (SELECT count(*) FROM /* TEMPLATE: jobs */ AS j WHERE /* TEMPLATE: batch_bucket */j."batch_id" = d."id" AND j."status" = 'Success') AS "success",
    (SELECT count(*) FROM /* TEMPLATE: jobs */ AS j WHERE /* TEMPLATE: batch_bucket */j."batch_id" = d."id" AND j."status" = 'Failed') AS "failed",
    (SELECT count(*) FROM /* TEMPLATE: jobs */ AS j WHERE /* TEMPLATE: batch_bucket */j."batch_id" = d."id" AND j."status" = 'Canceled') AS "canceled"
  FROM "done" AS d
), "callback" AS (
  INSERT INTO /* TEMPLATE: jobs */ ("queue", "kind", "payload", "metadata", "max_attempts")
  SELECT d."callback_queue", d."callback_kind", d."callback_payload",
    d."callback_metadata" || jsonb_build_object('batch', jsonb_build_object('id', d."id"::TEXT, 'size', d."size",
      'counts', jsonb_build_object('success', c."success", 'failed', c."failed", 'canceled', c."canceled",
        'gone', d."size" - c."success" - c."failed" - c."canceled"))),
    d."callback_max_attempts"
  FROM "done" AS d JOIN "counted" AS c ON c."id" = d."id"
  RETURNING "id", ("metadata"->'batch'->>'id')::INT8 AS "batch"
), "finished" AS (
  UPDATE /* TEMPLATE: batch */ AS b SET "finished_at" = now(), "callback_id" = cb."id"
  FROM "callback" AS cb WHERE b."id" = cb."batch"
  RETURNING b."id"
)
SELECT (SELECT count(*) FROM "finished"), (SELECT count(*) FROM /* TEMPLATE: batch */ AS o WHERE o."finished_at" IS NULL);

-- name: prune_batches
-- Finished batches whose callback was inserted longer than $1 seconds
-- ago (the retention of completed jobs), at most $2 per statement. The
-- table has no index on finished_at: it holds only the batches within
-- retention.
DELETE FROM /* TEMPLATE: batch */ AS b USING (
  SELECT "id" FROM /* TEMPLATE: batch */
  WHERE "finished_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  LIMIT $2) AS c
WHERE b."id" = c."id";

-- name: prune_workflows
-- Workflows made longer than $1 seconds ago (the retention of completed
-- jobs) none of whose jobs is left, retention having deleted them, at
-- most $2 per statement, with their jobs' names (job_workflow_node): a
-- workflow's rows follow its jobs out. Each is asked of job_workflow_node
-- by its id, and its jobs by theirs. The table holds only the workflows
-- within retention or with jobs left.
WITH c AS (
  SELECT f."id" FROM /* TEMPLATE: workflow */ AS f
  WHERE f."created_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: workflow_node */ AS m JOIN /* TEMPLATE: jobs */ AS j ON j."id" = m."job_id" WHERE m."workflow_id" = f."id")
  LIMIT $2),
n AS (DELETE FROM /* TEMPLATE: workflow_node */ AS m USING c WHERE m."workflow_id" = c."id")
DELETE FROM /* TEMPLATE: workflow */ AS w USING c
WHERE w."id" = c."id";

-- name: held_orphans
-- Hold rows to check, oldest first: those whose holder is no longer
-- running (a live holder's jobs are locked, and its row is left alone),
-- locked so that two rescuers (a leader and a deposed one) do not count
-- the same row twice.
SELECT "token", "ids"::TEXT FROM /* TEMPLATE: hold */ WHERE /* TEMPLATE: hold_dead */
ORDER BY "created_at" LIMIT $1 FOR UPDATE SKIP LOCKED;

-- name: rescue_held
-- Counts the attempts of the jobs ($1) that the hold rows name ($2: how
-- many rows name each) and that no claim holds (locked with SKIP
-- LOCKED): Queued again, or Failed once the count reaches max_attempts.
UPDATE /* TEMPLATE: jobs */ AS j SET "attempts" = j."attempts" + c.n,
  "status" = CASE WHEN j."attempts" + c.n >= j."max_attempts" THEN 'Failed'::/* TEMPLATE: status */ ELSE 'Queued'::/* TEMPLATE: status */ END,
  "finished_at" = CASE WHEN j."attempts" + c.n >= j."max_attempts" THEN now() END,
  "last_error" = 'held claim ended without a result during attempt ' || (j."attempts" + c.n)::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or failed to commit',
  "errors" = /* TEMPLATE: push_error_held */ 'held claim ended without a result during attempt ' || (j."attempts" + c.n)::TEXT || ' of ' || j."max_attempts"::TEXT ||
    ': the worker died, lost its connection or failed to commit')),
  "last_updated" = now()
FROM unnest($1::INT8[], $2::INT4[]) AS c (id, n)
WHERE j."id" = c.id AND j."status" = 'Queued' AND j."id" = ANY(ARRAY(
    SELECT "id" FROM /* TEMPLATE: jobs */ WHERE "id" = ANY($1::INT8[]) AND "status" = 'Queued'
    ORDER BY "id" FOR UPDATE SKIP LOCKED))
RETURNING j."id";

-- name: held_still_queued
-- Which of the jobs ($1) are still Queued: after rescue_held, in its
-- transaction, those it did not count are held by a live claim.
SELECT "id" FROM /* TEMPLATE: jobs */ WHERE "id" = ANY($1::INT8[]) AND "status" = 'Queued';

-- name: hold_trim
-- Keeps in hold row $1 only the jobs still held ($2, a JSON array).
UPDATE /* TEMPLATE: hold */ SET "ids" = $2::JSONB WHERE "token" = $1;

-- name: hold_drop
-- Deletes hold rows ($1) whose every job was counted or has finished.
DELETE FROM /* TEMPLATE: hold */ WHERE "token" = ANY($1::INT8[]);
