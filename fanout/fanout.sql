-- Every statement the fanout layout sends, rendered once per Queue for its
-- schema; sql.go picks among them for the engine. Templates:
--   queue_table  job_queue, schema-qualified and quoted
--   dead_table   job_dead, schema-qualified and quoted
--   attempt_table  job_attempt, schema-qualified and quoted: a job's count
--                of started attempts and its retry time, written outside
--                the job's transaction (see doc.go, "Failures")
--   job_columns  the columns claim and lookup return, in scan order; the
--                payload travels as text so that both drivers scan it
--                into a string
--   id_default   the id column's default (schema.FanoutIDDefault)
--   not_paused, claim_gate, push_error, max_error_history  see sql.go
--   slot_table   fanout_slot; queue_state skiplock_queue
--   slot_with, slot_gate  empty in the plain claims; in the limited ones
--                slot_take as the CTE "slot", and the job's test that it
--                took one (see "Concurrency slots")
--   shard_n, shard_lo, shard_hi, shard_after  a shard union's branch:
--                its ordinal and its parameters (see "The shard unions")
--   shards_after_branches, heads_branches, exists_after_branches  the
--                unions' branches, rendered in Go, one per shard
-- Every identifier is quoted; every value is a $n parameter.

-- name: claim
-- Locks one job from the shards' watermarks (doc.go, "Watermarks"): $1,
-- $2 and $3 are parallel arrays, one element per shard in the order to
-- visit (rotated by the caller): $1 the scan's lower bound (the shard's
-- watermark, the id of the last job this Queue claimed there, or the
-- shard's two-digit prefix: id >= $1), $2 an exclusive lower bound (the
-- watermark again where it is a claimed job's id, which is not taken
-- again; '' where the heads probe moved the watermark to just before a
-- row, which is taken), $3 the shard's upper bound (the next prefix); $4
-- the queue. All three are index conditions: the scan reads not even the
-- row at the watermark. It returns the shard's ordinal in the arrays, then the job.
-- Each shard's scan starts at its watermark and stops at its upper bound,
-- so it walks neither the dead entries that claims left before the
-- watermark nor the next shard's dead head. LATERAL runs a shard's scan
-- only when the shards before it gave no row: the outer LIMIT stops the
-- nested loop at the first row, so a busy queue's claim reads one shard
-- and a drained queue's is one index descent per shard. A job that sorts
-- below its shard's watermark (a late commit, a failed attempt rolled
-- back, a job another process put back, a pre-existing random UUID) is
-- found by the heads probe, sent at most once per Config.HintMaxAge.
-- A job whose job_attempt row says it is waiting out a backoff (retry_at
-- in the future) is stepped over like a locked one. The locking clause
-- sits in the subquery on the table (on a view or a CTE reference a
-- locking clause locks nothing). The backoff test is a scalar subquery on
-- job_attempt's primary key, not a join: PostgreSQL keeps it as a per-row
-- SubPlan (one primary-key probe for each row the scan reaches, which
-- finds nothing for a job never claimed), so each shard's scan stays one
-- index range scan of job_queue. The subquery reads no rows for locking:
-- FOR UPDATE locks job_queue's row only. After the job's columns comes
-- "counted", the job's attempts counted so far (job_attempt's, 0 without
-- a row): the attempt about to start is the next, and is counted while
-- its handler runs (doc.go, "Failures").
/* TEMPLATE: slot_with */SELECT "h"."n", "c".* FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS "h" ("lo", "after", "hi", "n")
CROSS JOIN LATERAL (SELECT /* TEMPLATE: job_columns */,
    coalesce((SELECT "a"."attempts" FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), 0) AS "counted"
  FROM /* TEMPLATE: queue_table */ AS "j"
  WHERE "id" >= "h"."lo" AND "id" > "h"."after" AND "id" < "h"."hi" AND "queue" = $4 AND /* TEMPLATE: claim_gate */ $4)/* TEMPLATE: slot_gate */
    AND NOT coalesce((SELECT "a"."retry_at" > now() FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), false)
  ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) AS "c"
LIMIT 1;

-- name: claim_shard
-- The claim's first try: one shard, the one a claim starts at, with the
-- claim's bounds as scalars ($1 the inclusive lower bound, $2 the
-- exclusive one, $3 the upper bound, $4 the queue). On a busy queue it
-- finds a job, and costs what the random-start claim did: claim's arrays
-- (one element per shard, sent, decoded and planned for) are only for a
-- queue whose first shard came up empty. With the shard unions
-- (CockroachDB, below) it is the only locking statement: the start shard,
-- then each shard shards_after returned. One ordered locking range scan,
-- bounded to the shard, with LIMIT 1 on the scan itself. It returns the
-- job and "counted", as claim does.
/* TEMPLATE: slot_with */SELECT /* TEMPLATE: job_columns */,
  coalesce((SELECT "a"."attempts" FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), 0) AS "counted"
FROM /* TEMPLATE: queue_table */ AS "j"
WHERE "id" >= $1 AND "id" > $2 AND "id" < $3 AND "queue" = $4 AND /* TEMPLATE: claim_gate */ $4)/* TEMPLATE: slot_gate */
  AND NOT coalesce((SELECT "a"."retry_at" > now() FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), false)
ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED;

-- Concurrency slots (a queue's global limit, `skiplock queues configure
-- --concurrency N`; docs/flow-control.md, "Fanout queues"). A queue with
-- a limit of N has slot rows 0 to N-1 in fanout_slot, made by the workers
-- that read the limit (slots_make). The claims above, rendered plain,
-- refuse a limited queue (claim_gate); rendered limited (claim_limited,
-- claim_shard_limited, which take the slot's number as $5) they begin
-- with slot_take as the CTE "slot" and take a job only beside the slot it
-- took. The slot's write holds it for
-- as long as the job's transaction is open: the commit of the job's
-- removal, a rollback, or the server ending a dead worker's session frees
-- it, with no statement of its own.

-- name: slot_take
-- Slot $5 of queue $4's global limit, taken if it is free: a row from 0 to
-- concurrency-1 that no other transaction holds (SKIP LOCKED), stamped,
-- returning its number; none while the queue is paused or has no limit,
-- nor while any row past the limit exists (rows a lowered limit left, up
-- to the most ever made: skiplock_queue's slots, which setting a limit
-- raises to it). A worker's read of the limits deletes those rows as their
-- jobs end (slots_trim), so after a limit is lowered no job starts until
-- every job past it has finished. The claimer names the slot (the one its
-- goroutine held last, else one at random) and the statement reads that
-- row alone: a job's transaction, open while its handler runs, must not
-- have read the rows other jobs' transactions write, or a serializable
-- engine aborts one of them at its commit (PostgreSQL's SSI finds a
-- dangerous structure; CockroachDB's commit-time refresh of a scanned
-- span fails), and the job runs again. A slot taken by another claim
-- makes this claim come back empty; the next one names another slot.
-- The limit is read by scalar subqueries on skiplock_queue's key.
UPDATE /* TEMPLATE: slot_table */ AS "s" SET "taken_at" = now()
WHERE "s"."queue" = $4 AND "s"."slot" = (SELECT "f"."slot" FROM /* TEMPLATE: slot_table */ AS "f"
  WHERE "f"."queue" = $4 AND "f"."slot" = $5::INT4 AND $5::INT4 < /* TEMPLATE: slot_limit */
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS "o" WHERE "o"."queue" = $4 AND /* TEMPLATE: slot_past_o */)
  FOR UPDATE OF "f" SKIP LOCKED)
RETURNING "s"."slot"

-- name: claim_limited
/* TEMPLATE: claim_limited */

-- name: claim_shard_limited
/* TEMPLATE: claim_shard_limited */

-- name: slot_free
-- Whether slot $2 of queue $1 is this transaction's (its claim took it)
-- or free: a row when it is, none when another transaction holds it (or
-- it is not made yet). A limited claim that came back empty asks, in its
-- own transaction, which is about to end: a slot another process holds
-- makes the claimer try another at once instead of idling as on a drained
-- queue. One row by its key, as slot_take reads (see there).
SELECT "f"."slot" FROM /* TEMPLATE: slot_table */ AS "f"
WHERE "f"."queue" = $1 AND "f"."slot" = $2::INT4
FOR UPDATE OF "f" SKIP LOCKED;

-- name: limits_read
-- Queue $1's global and local limits and the most slot rows ever made
-- (skiplock_queue's slots, or the limit where that is larger); no row for
-- a queue never configured. Paused is the claims' business.
SELECT "concurrency", "local_concurrency", GREATEST("slots", COALESCE("concurrency", 0))
FROM /* TEMPLATE: queue_state */ WHERE "name" = $1;

-- name: slots_make
-- Slot rows 0 to $2-1 of queue $1, those missing. It inserts only rows
-- it does not see: the insert of a row that a running job's transaction
-- holds would wait for that transaction to end (a unique check meets the
-- row version its slot_take wrote), and a worker reading the limits of a
-- busy queue would wait for its longest job. A plain read does not wait
-- on PostgreSQL and YugabyteDB; on CockroachDB it waits on a held row's
-- write intent all the same (docs/flow-control.md, "Fanout queues").
INSERT INTO /* TEMPLATE: slot_table */ ("queue", "slot")
SELECT $1, "g" FROM generate_series(0, $2::INT4 - 1) AS "g"
WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS "e" WHERE "e"."queue" = $1 AND "e"."slot" = "g")
ON CONFLICT ("queue", "slot") DO NOTHING;

-- name: slots_trim
-- Queue $1's slot rows from $2 up to $3 (past its limit) that no job's
-- transaction holds, deleted; returns how many rows past the limit were
-- there before, so that the caller knows when none is left.
WITH "past" AS (SELECT "p"."slot" FROM /* TEMPLATE: slot_table */ AS "p"
    WHERE "p"."queue" = $1 AND /* TEMPLATE: slot_range_p */ FOR UPDATE OF "p" SKIP LOCKED),
"gone" AS (DELETE FROM /* TEMPLATE: slot_table */ AS "d" WHERE "d"."queue" = $1 AND "d"."slot" IN (SELECT "slot" FROM "past") RETURNING 1)
SELECT (SELECT count(*) FROM /* TEMPLATE: slot_table */ AS "c" WHERE "c"."queue" = $1 AND /* TEMPLATE: slot_range_c */) - (SELECT count(*) FROM "gone");

-- name: heads
-- The heads probe: each shard's first claimable job, unlocked, read from
-- the shard's head ($1 the lower and $2 the upper bounds, one element per
-- shard; $3 the queue), with the shard's ordinal. It walks the dead
-- entries claims skip, so a Queue sends it at most once per
-- Config.HintMaxAge per queue (or when it knows a job is back below a
-- watermark), and moves each watermark to just before the head it finds.
SELECT "h"."n", "x"."id" FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS "h" ("lo", "hi", "n")
CROSS JOIN LATERAL (SELECT "id" FROM /* TEMPLATE: queue_table */ AS "j"
  WHERE "id" >= "h"."lo" AND "id" < "h"."hi" AND "queue" = $3
    AND NOT coalesce((SELECT "a"."retry_at" > now() FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), false)
  ORDER BY "id" LIMIT 1) AS "x";

-- name: exists_after
-- Whether a queue has a live job at or after a shard's watermark: $1 the
-- lower and $2 the upper bounds, one element per shard; $3 the queue. The
-- cheap half of HasQueued: it stops at the first row, and reads no dead
-- entry before a watermark.
SELECT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS "h" ("lo", "hi")
  CROSS JOIN LATERAL (SELECT 1 FROM /* TEMPLATE: queue_table */
    WHERE "id" >= "h"."lo" AND "id" < "h"."hi" AND "queue" = $3 LIMIT 1) AS "x");

-- The shard unions: the claim's later shards, the heads probe and
-- exists_after where a LATERAL subquery with LIMIT is decorrelated
-- (Dialect.KeyJoinDML: CockroachDB turns it into a join under a
-- row_number() window, cockroachdb/cockroach PR #68299, which reads each
-- shard whole, loses the LIMIT, and under a locking clause locks every row
-- it reads; docs/design.md, "Claims on CockroachDB"). sql.go selects them
-- there. Each is a UNION ALL of one derived table per shard, each an
-- uncorrelated ordered range scan of job_queue's primary key with LIMIT 1,
-- bounded by index conditions; CockroachDB runs UNION ALL branches one
-- after another (cockroachdb/cockroach#87463; PR #53343 merges them with
-- an ordered synchronizer, in one goroutine). None locks: only claim_shard
-- does. The statements' text depends on the number of shards
-- (schema.FanoutShards), so sql.go renders each *_branch block once per
-- shard into its union's /* TEMPLATE: *_branches */ placeholder, at
-- render time: shard_n is the branch's ordinal (a literal), shard_lo,
-- shard_hi and shard_after its parameters, numbered in that order after
-- $1 (the queue), as many as the branch names. Rendered alone, as its own
-- block, a branch is its union's first ($1 the queue, $2 the lower bound,
-- $3 the upper bound, $4 the exclusive lower bound).

-- name: shards_after_branch
-- One shard of shards_after: its ordinal when it has a claimable job at
-- or after its watermark, with claim_shard's bounds and backoff test. The
-- job may be locked: this read does not lock, so it sees locked rows.
(SELECT /* TEMPLATE: shard_n */ AS "n" FROM /* TEMPLATE: queue_table */ AS "j"
  WHERE "id" >= /* TEMPLATE: shard_lo */ AND "id" > /* TEMPLATE: shard_after */ AND "id" < /* TEMPLATE: shard_hi */ AND "queue" = $1
    AND NOT coalesce((SELECT "a"."retry_at" > now() FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), false)
  ORDER BY "id" LIMIT 1)

-- name: shards_after
-- The claim's second step with the shard unions, when the start shard
-- (claim_shard) came up empty: the ordinals of the other shards that have
-- a claimable job at or after their watermarks, read without locks. $1
-- the queue, then for each shard in the order the caller visits them
-- (ordinals 1 to 63, the start shard being 0) its inclusive lower bound,
-- its upper bound and its exclusive lower bound, as claim_shard takes
-- them. The caller then sends claim_shard for each shard returned, in
-- ordinal order (UNION ALL promises none), until one locks a job: the row
-- seen may since be locked or gone, and claim_shard skips it. Each branch
-- is bounded by its shard's watermark and upper bound, as index
-- conditions, so it reads no dead entry before the watermark nor the next
-- shard's dead head; on a drained queue it is one index descent per shard
-- and reads no entry. The paused test is evaluated once, above the union:
-- a paused queue gets no ordinals, so no claim_shard follows.
-- Expected plan, EXPLAIN on CockroachDB 25.2 (written from the sources
-- cited above and in docs/design.md, not run):
--   • root
--   ├── • filter                      NOT EXISTS on skiplock_queue (the subquery's value)
--   │   └── • union all               63 branches, nested, run one after another
--   │       └── • render              n, the branch's literal ordinal
--   │           └── • limit           count: 1
--   │               └── • filter      NOT coalesce(retry_at > now(), false)
--   │                   └── • lookup join (left outer)   table: job_attempt@job_attempt_pkey;
--   │                       │                           equality: (id) = (job_id); equality cols are key
--   │                       └── • scan  table: job_queue@job_queue_pkey;
--   │                                   spans: [/(watermark) - /(next prefix)) (the tighter of
--   │                                   $2 and > $4, up to $3); filter: queue = $1 (residual: the
--   │                                   key is id alone); no locking strength
--   └── • subquery                    one point lookup of skiplock_queue
-- No FULL SCAN, no locking, no window (row_number) and no sort: each
-- branch's order is its scan's.
SELECT "s"."n" FROM (/* TEMPLATE: shards_after_branches */) AS "s"
WHERE /* TEMPLATE: not_paused */ $1);

-- name: heads_union_branch
-- One shard of heads_union: its ordinal and its first claimable job, read
-- from the shard's head, as heads reads it.
(SELECT /* TEMPLATE: shard_n */ AS "n", "id" FROM /* TEMPLATE: queue_table */ AS "j"
  WHERE "id" >= /* TEMPLATE: shard_lo */ AND "id" < /* TEMPLATE: shard_hi */ AND "queue" = $1
    AND NOT coalesce((SELECT "a"."retry_at" > now() FROM /* TEMPLATE: attempt_table */ AS "a" WHERE "a"."job_id" = "j"."id"), false)
  ORDER BY "id" LIMIT 1)

-- name: heads_union
-- heads with the shard unions: $1 the queue, then each shard's lower and
-- upper bound, in the order given (ordinals 1 to 64). The same rows as
-- heads, in no promised order; it walks the dead entries as heads does,
-- and is sent as rarely (Config.HintMaxAge).
-- Expected plan, EXPLAIN on CockroachDB 25.2 (from the sources, not run):
-- a union all of 64 branches, each • render ← • limit 1 ← • filter
-- (backoff) ← • lookup join (left outer, job_attempt@job_attempt_pkey) ←
-- • scan job_queue@job_queue_pkey, spans [/(prefix) - /(next prefix)),
-- unlocked; no FULL SCAN, no window.
SELECT "h"."n", "h"."id" FROM (/* TEMPLATE: heads_branches */) AS "h";

-- name: exists_after_union_branch
-- One shard of exists_after_union: a live job of the queue at or after
-- the shard's watermark, as exists_after reads it. ORDER BY "id" keeps it
-- a range scan of the primary key from the watermark: with constant
-- bounds and no order, PostgreSQL's planner prefers a sequential scan
-- under the LIMIT, which reads the dead rows from the table's start.
(SELECT 1 FROM /* TEMPLATE: queue_table */
  WHERE "id" >= /* TEMPLATE: shard_lo */ AND "id" < /* TEMPLATE: shard_hi */ AND "queue" = $1 ORDER BY "id" LIMIT 1)

-- name: exists_after_union
-- exists_after with the shard unions: $1 the queue, then each shard's
-- lower and upper bound. The outer LIMIT stops the serial union at the
-- first row, so it reads the shards only up to the first that has a job.
-- Expected plan, EXPLAIN on CockroachDB 25.2 (from the sources, not run):
-- • root ← • subquery (exists) ← • limit 1 ← • union all of 64 branches,
-- each • limit 1 ← • scan job_queue@job_queue_pkey, spans [/(watermark) -
-- /(next prefix)), filter queue = $1; no FULL SCAN.
SELECT EXISTS (SELECT 1 FROM (/* TEMPLATE: exists_after_branches */) AS "x" LIMIT 1);

-- name: count
-- Counts the attempts about to start, one per job id in $1 (text[]), in
-- one autocommit statement on a connection other than the jobs'
-- transactions, which hold the jobs' row locks: the count commits before
-- any handler runs, and survives the handler's rollback and its worker's
-- death. retry_at is set as if the attempt will fail (the backoff before
-- the next one, from $2 the base and $3 the cap in seconds, drawn from the
-- upper half as jitter, and at least a second), so that a job whose worker
-- dies waits out a backoff too, and a job whose failed attempt is still
-- being recorded (its row is unlocked between the rollback and the
-- recording) is rarely claimed meanwhile (a claim whose snapshot predates
-- the count still can: amend_dead); a success deletes the row, a recorded
-- failure resets it.
-- Only the worker that holds a job's row lock counts it, so the ids of one
-- statement are distinct and no row waits on another session's lock.
INSERT INTO /* TEMPLATE: attempt_table */ AS "a" ("job_id", "attempts", "started_at", "retry_at")
SELECT "t"."id", 1, now(), now() + interval '1 second' * greatest(least($2::float8, $3::float8) * (0.5 + random() / 2), 1)
FROM unnest($1::text[]) AS "t" ("id")
ON CONFLICT ("job_id") DO UPDATE SET "attempts" = "a"."attempts" + 1, "started_at" = now(),
  "retry_at" = now() + interval '1 second' * greatest(least($2::float8 * power(2::float8, least("a"."attempts", 40)::float8), $3::float8) * (0.5 + random() / 2), 1)
RETURNING "job_id", "attempts";

-- name: give_back
-- Takes back the counted attempts of the jobs in $1 (text[]), whose
-- handlers were stopped (a hard stop) or whose transactions the engine
-- asked to run again (a serialization failure): neither is the job's
-- failure. The job may be claimed again at once. Sent by the worker that
-- still holds each job's row lock, so no other claim has counted since.
UPDATE /* TEMPLATE: attempt_table */ SET "attempts" = greatest("attempts" - 1, 0), "retry_at" = now()
WHERE "job_id" = ANY($1::text[]);

-- name: del
-- Removes a processed job: $1 the id. Its attempt count stays: the count
-- is written by another connection while this transaction holds the job,
-- so a write of it here would be a write-write conflict at snapshot
-- isolation and SERIALIZABLE (YugabyteDB, CockroachDB), failing the
-- commit at every try. forget drops it after the commit.
DELETE FROM /* TEMPLATE: queue_table */ WHERE "id" = $1;

-- name: committed
-- Whether the transaction of an attempt whose COMMIT's outcome is unknown
-- (an ambiguous commit) committed: $1 the job's id, $2 the count that
-- attempt made. Only a commit of that transaction (del, bury_lost)
-- removes the job and leaves its count as it was: forget drops it only
-- after Process returned, a later claim counts again, and cancel_by_id and
-- bury drop it. A rollback leaves the job in the queue.
SELECT NOT EXISTS (SELECT 1 FROM /* TEMPLATE: queue_table */ WHERE "id" = $1::text)
  AND EXISTS (SELECT 1 FROM /* TEMPLATE: attempt_table */ WHERE "job_id" = $1::text AND "attempts" = $2::int);

-- name: forget
-- Drops the attempt counts of jobs whose removal committed (processed, or
-- moved to job_dead by bury_lost): $1 their ids (text[]). Sent after the
-- commit, in batches, outside any job's transaction; a count it misses
-- (the worker died first) is the pruner's (maintenance prune_attempts).
DELETE FROM /* TEMPLATE: attempt_table */ WHERE "job_id" = ANY($1::text[]);

-- name: fail
-- Records a failed attempt after its rollback: $1 the id, $2 the error,
-- $3 the attempt's number (its count). It locks the job's row first, so it
-- waits for a worker that claimed the job since (and then finds the job
-- gone if that worker succeeded), and only then touches job_attempt
-- (retry_at): every writer of a job_attempt row but the count holds the
-- job's row lock, so the count never waits on another session.
UPDATE /* TEMPLATE: queue_table */ AS "j" SET "attempts" = greatest("attempts", $3::int), "last_error" = $2,
  "errors" = /* TEMPLATE: push_error */ $2::text))
WHERE "id" = $1
RETURNING "attempts", "max_attempts";

-- name: backoff
-- Sets when a failed job may be claimed again: $1 the id, $2 the delay in
-- seconds. Sent after fail, in its transaction.
UPDATE /* TEMPLATE: attempt_table */ SET "retry_at" = now() + interval '1 second' * $2::float8 WHERE "job_id" = $1;

-- name: snooze_job
-- Counts a snooze (a handler's skiplock.Snooze) in the job's metadata: $1
-- the id. Sent after the attempt's rollback, in a short transaction that
-- takes the job's row lock first, as fail does; no row back means the job
-- is gone (another worker claimed and finished it since).
UPDATE /* TEMPLATE: queue_table */
SET "metadata" = jsonb_set("metadata", ARRAY['snoozes'], to_jsonb(COALESCE(("metadata"->>'snoozes')::INT8, 0) + 1))
WHERE "id" = $1 RETURNING "id";

-- name: snooze_attempt
-- Gives the snoozed attempt back and holds the job until $2 seconds from
-- now: $1 the id. Sent after snooze_job, in its transaction.
UPDATE /* TEMPLATE: attempt_table */ SET "attempts" = greatest("attempts" - 1, 0),
  "retry_at" = now() + interval '1 second' * $2::float8
WHERE "job_id" = $1;

-- name: bury
-- Moves a job that used up its attempts to job_dead, and drops its attempt
-- count: $1 the id. Sent after fail, in its transaction.
WITH "moved" AS (DELETE FROM /* TEMPLATE: queue_table */ WHERE "id" = $1
  RETURNING "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors"),
"forgot" AS (DELETE FROM /* TEMPLATE: attempt_table */ WHERE "job_id" = $1)
INSERT INTO /* TEMPLATE: dead_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors")
SELECT "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors" FROM "moved";

-- name: bury_lost
-- Moves a job to job_dead without running it, in the transaction that
-- claimed it, when its count says its attempts are used up although no
-- failure was recorded for the last one (its worker died, was killed or
-- lost its connection mid-job): $1 the id, $2 the error to keep. Its
-- attempts are its max_attempts, the handler starts it was allowed. Its
-- attempt count stays, as with del (forget drops it after the commit).
WITH "moved" AS (DELETE FROM /* TEMPLATE: queue_table */ WHERE "id" = $1
  RETURNING "id", "queue", "payload", "max_attempts", "created_at", "kind", "metadata", "errors")
INSERT INTO /* TEMPLATE: dead_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors")
SELECT "id", "queue", "payload", "max_attempts", "max_attempts", $2, "created_at", "kind", "metadata",
  CASE WHEN jsonb_array_length("errors") >= /* TEMPLATE: max_error_history */ THEN "errors" - 0 ELSE "errors" END
    || jsonb_build_array(jsonb_build_object('attempt', "max_attempts", 'at', now(), 'error', $2::text))
FROM "moved";

-- name: amend_dead
-- Gives a job that bury_lost moved to job_dead the error of its last
-- attempt: $1 the id, $2 the error, $3 the prefix of bury_lost's text.
-- The attempt had failed, but another worker claimed the job (its count
-- then said the attempts were used up) before the failure was recorded.
UPDATE /* TEMPLATE: dead_table */ SET "last_error" = $2
WHERE "id" = $1 AND left("last_error", length($3::text)) = $3::text;

-- name: insert
-- Adds jobs from six parallel arrays: queues, payloads (JSON text), max
-- attempts, kinds, metadata (JSON text), unique keys (null: none). A job
-- whose key a live job of its queue holds is skipped, and returns no id
-- (unique_conflict names job_queue's partial unique index on live keys).
INSERT INTO /* TEMPLATE: queue_table */ ("queue", "payload", "max_attempts", "kind", "metadata", "unique_key")
SELECT "t"."queue", "t"."payload"::jsonb, "t"."max_attempts", "t"."kind", "t"."metadata"::jsonb, "t"."unique_key"
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[]) AS "t" ("queue", "payload", "max_attempts", "kind", "metadata", "unique_key")
ON CONFLICT /* TEMPLATE: unique_conflict */ DO NOTHING
RETURNING "id";

-- name: unique_lookup
-- The live job of queue $1 holding unique key $2 (none: it finished).
SELECT "id" FROM /* TEMPLATE: queue_table */ WHERE "queue" = $1 AND "unique_key" = $2;

-- name: new_ids
-- $1 fresh ids made by the id column's own default (schema.FanoutIDDefault),
-- for a COPY that must report its jobs' ids (Dialect.BulkCopy engines
-- only; see queue.go, copyJobs).
SELECT /* TEMPLATE: id_default */ AS "id" FROM generate_series(1, $1::INT8) AS "g";

-- name: notify
-- Wakes the listeners of channel $1 with each queue name of $2: sent after
-- a COPY, in its transaction, since COPY cannot carry the notification as
-- the INSERT does (sqltext.WithNotify).
SELECT pg_notify($1::text, "q") FROM unnest($2::text[]) AS "q";

-- name: queued
-- Counts live jobs per queue, with the oldest's creation time and the
-- server's now: $1 the queue or '' for all.
SELECT "queue", count(*), min("created_at"), now() FROM /* TEMPLATE: queue_table */
WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue";

-- name: dead
-- Counts dead jobs per queue: $1 the queue or '' for all.
SELECT "queue", count(*) FROM /* TEMPLATE: dead_table */
WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue";

-- name: exists
-- Whether a queue has a live job: $1 the queue.
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: queue_table */ WHERE "queue" = $1);

-- Actions by id, for operators and tools. Each returns the job's id when
-- it changed something; no row back means the id is unknown or the job is
-- somewhere the action does not apply, and the caller reads where_by_id.

-- name: cancel_by_id
-- A pending job ($1) that no worker holds moves to job_dead, its
-- last_error saying it was cancelled, so it can be retried later. SKIP
-- LOCKED: a job a worker holds is running inside that worker's
-- transaction, which commits or rolls back with its handler; no other
-- session can stop it.
WITH "moved" AS (DELETE FROM /* TEMPLATE: queue_table */
    WHERE "id" = (SELECT "id" FROM /* TEMPLATE: queue_table */ WHERE "id" = $1 FOR UPDATE SKIP LOCKED)
  RETURNING "id", "queue", "payload", "attempts", "max_attempts", "created_at", "kind", "metadata", "errors"),
"forgot" AS (DELETE FROM /* TEMPLATE: attempt_table */ WHERE "job_id" IN (SELECT "id" FROM "moved"))
INSERT INTO /* TEMPLATE: dead_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors")
SELECT "id", "queue", "payload", "attempts", "max_attempts", 'cancelled by an operator', "created_at", "kind", "metadata", "errors" FROM "moved"
RETURNING "id";

-- name: retry_by_id
-- A dead job ($1) goes back into the queue with its attempts reset (and
-- any attempt count left behind dropped); its last error stays until its
-- next attempt.
WITH "moved" AS (DELETE FROM /* TEMPLATE: dead_table */ WHERE "id" = $1
  RETURNING "id", "queue", "payload", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors"),
"forgot" AS (DELETE FROM /* TEMPLATE: attempt_table */ WHERE "job_id" IN (SELECT "id" FROM "moved"))
INSERT INTO /* TEMPLATE: queue_table */ ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata", "errors")
SELECT "id", "queue", "payload", 0, "max_attempts", "last_error", "created_at", "kind", "metadata", "errors" FROM "moved"
RETURNING "id";

-- name: delete_by_id
-- A dead job ($1) is deleted. (A fanout job that succeeded left no row.)
DELETE FROM /* TEMPLATE: dead_table */ WHERE "id" = $1 RETURNING "id";

-- name: where_by_id
-- Where a job ($1) is: 'pending' (in the queue; held by a worker or not, as
-- far as this statement can tell without waiting), 'dead', or no row.
SELECT 'pending' FROM /* TEMPLATE: queue_table */ WHERE "id" = $1
UNION ALL
SELECT 'dead' FROM /* TEMPLATE: dead_table */ WHERE "id" = $1;

-- name: lookup
-- One job by id ($1), for tools and tests, read without locks: pending (in
-- the queue, held by a worker or not, which this read cannot tell) or
-- dead. The job_columns, then the attempts job_attempt counted (the claims
-- count an attempt there before its handler runs) and the end of the job's
-- backoff, both NULL when the job has no count and for a dead job, then
-- whether it is dead. No row: no job has the id (a job that succeeded left
-- none). job_columns name their columns unqualified, so the job is read in
-- a derived table, which job_attempt (with an "attempts" of its own) joins.
SELECT "j".*, "a"."attempts"::INT8 AS "counted", "a"."retry_at"::TIMESTAMPTZ AS "retry_at", false AS "dead"
FROM (SELECT /* TEMPLATE: job_columns */ FROM /* TEMPLATE: queue_table */ WHERE "id" = $1) AS "j"
LEFT JOIN /* TEMPLATE: attempt_table */ AS "a" ON "a"."job_id" = "j"."id"
UNION ALL
SELECT /* TEMPLATE: job_columns */, NULL::INT8, NULL::TIMESTAMPTZ, true FROM /* TEMPLATE: dead_table */ WHERE "id" = $1;
