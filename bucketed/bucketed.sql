-- Every statement the bucketed layout sends, rendered once per Queue for
-- its schema and engine (sql.go). Templates:
--   table             the jobs table, schema-qualified and quoted
--   status_type       the job_status enum, schema-qualified and quoted
--   job_columns       what scanJob reads, in its order
--   unique_conflict   the ON CONFLICT target, rendered from the
--                     jobs_unique_states index of schema.JobsTableDef
--   unique_held       that index's predicate (schema.UniqueHeld)
--   bucket_predicate  the claim's per-bucket filter, empty where the
--                     engine's sharded index fans out itself
--   claim_gate        the claims' test that queue $1 is not paused (and,
--                     for a claim that takes no slots, has no global
--                     limit): sqltext.NotPaused / NotPausedNorLimited
--   lease_start       when a claim's lease starts: its transaction's
--                     start (now()), or for the claim of a limited queue
--                     its statement's time (clock_timestamp()), taken
--                     after its rate tokens, so that a lease's start is
--                     never less than a period after the token's last use
--   slot_table, queue_state  job_slot and skiplock_queue
--   slot_held         whether slot row s is held (sql.go, slotHeld);
--                     slot_held_h the same of row h
--   slot_range_*, token_range  slot or token numbers from one bound to
--                     another (sql.go, keyRange)
--   rate_table        job_rate_token
--   waiting_run_at, dependency_not_finished  a waiting job's run_at, and
--                     whether dependency d has not finished (depgate)
-- Values always travel as $n parameters; statements with many of them
-- take a params struct whose args method lists them in $n order.

-- name: insert
-- Adds jobs from parallel arrays (insertParams). A job whose unique key a
-- job of its queue already holds is skipped: the conflict target
-- repeats the partial unique index's columns and predicate, which is how
-- the engine infers that index. A job of a partitioned queue gets its
-- partition (insert_partition) from the queue's partitioning as the
-- caller last read it ($10; a read of the queue's row here cost a tenth of
-- a single-job insert): SetLimits waits for every process to have read a
-- change before it rewrites the jobs' partitions. Rendered twice
-- (sql.go): as is, and as a workflow's insert, whose insert_workflow_*
-- templates add $13 the workflow, $14 each job's name there, $15 and $16
-- the names of its dependencies and dependents as array literals, and $17
-- run anyway, and return each job's workflow and name (insert_workflow
-- reads them); a job with dependencies waits, its run_at waiting_run_at
-- (never due) until the last of them finishes (internal/depgate). Plain
-- inserts carry none of those arrays.
INSERT INTO /* TEMPLATE: table */ ("queue", "payload", "priority", "run_at", "max_attempts", "unique_key", "kind", "metadata", "partition_key", "partition", "unique_states", "batch_id"/* TEMPLATE: insert_workflow_columns */)
SELECT u.q, u.p::JSONB, u.pr, /* TEMPLATE: insert_run_at */, u.ma, u.uk, u.k, u.m::JSONB, u.pk, /* TEMPLATE: insert_partition */, u.us::/* TEMPLATE: status_type */[], u.b/* TEMPLATE: insert_workflow_values */
FROM unnest($1::TEXT[], $2::TEXT[], $3::INT2[], $4::TIMESTAMPTZ[], $5::INT4[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::TEXT[], $12::INT8[]/* TEMPLATE: insert_workflow_params */) AS u (q, p, pr, ra, ma, uk, k, m, pk, pb, us, b/* TEMPLATE: insert_workflow_names */)
ON CONFLICT /* TEMPLATE: unique_conflict */ DO NOTHING
RETURNING "id"/* TEMPLATE: insert_workflow_returning */;

-- name: insert_workflow
-- A workflow's jobs (insert, rendered with its workflow templates:
-- insert_workflow_jobs) and each one's row in job_workflow_node, in one
-- statement; returns every job's name and id.
WITH "j" AS (/* TEMPLATE: insert_workflow_jobs */)
INSERT INTO /* TEMPLATE: workflow_node_table */ ("workflow_id", "node", "job_id")
SELECT "workflow_id", "workflow_node", "id" FROM "j"
RETURNING "node", "job_id";

-- name: batch_new
-- A batch of $1 jobs, whose callback (queue $2, kind $3, payload $4,
-- metadata $5, max attempts $6) the maintenance leader inserts once none
-- of them is left Queued or Running (finish_batches); returns its id.
INSERT INTO /* TEMPLATE: batch_table */ ("size", "callback_queue", "callback_kind", "callback_payload", "callback_metadata", "callback_max_attempts")
VALUES ($1::INT4, $2::TEXT, $3::TEXT, $4::TEXT::JSONB, $5::TEXT::JSONB, $6::INT4)
RETURNING "id";

-- name: workflow_new
-- A workflow named $1 of $2 jobs, whose jobs the same transaction
-- inserts (insert's $13); returns its id.
INSERT INTO /* TEMPLATE: workflow_table */ ("name", "size") VALUES ($1::TEXT, $2::INT4) RETURNING "id";

-- name: reserve_ids
-- Takes $2 ids from the jobs table's id sequence ($1: the table's quoted,
-- schema-qualified name, as pg_get_serial_sequence reads it), for a COPY
-- that must report its jobs' ids (Dialect.BulkCopy engines only).
SELECT nextval("s"."seq") AS "id" FROM (SELECT pg_get_serial_sequence($1::TEXT, 'id')::REGCLASS AS "seq") AS "s", generate_series(1, $2::INT8) AS "g" ORDER BY 1;

-- name: notify
-- Wakes the listeners of channel $1 with each queue name of $2: sent after
-- a COPY, in its transaction, since COPY cannot carry the notification as
-- the INSERT does (sqltext.WithNotify).
SELECT pg_notify($1::TEXT, "q") FROM unnest($2::TEXT[]) AS "q";

-- name: unique_lookup
-- The job holding a unique key (unique_held: the unique index's
-- predicate): $1 the queue, $2 the key.
SELECT "id" FROM /* TEMPLATE: table */ WHERE "queue" = $1 AND "unique_key" = $2 AND /* TEMPLATE: unique_held */;

-- name: claim_best
-- The best (lowest) priority of the queue's claimable jobs after the
-- watermarks ($1 the queue, $6..$9 the buckets and their watermarks, as
-- in claim), read unlocked from each bucket: the best CTE of claim and
-- claim_held, which take their jobs from that priority only. Rendered
-- into both (sql.go), not sent alone.
SELECT min(x."priority") AS p
  FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i) CROSS JOIN LATERAL (
    SELECT "priority" FROM /* TEMPLATE: table */
    WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
      AND ("priority", "run_at", "id") > (h.p, h.t, h.i)
    ORDER BY "priority", "run_at", "id" LIMIT 1) AS x;

-- name: claim
-- The claim (claimParams) takes jobs of one priority only: the best
-- (lowest) priority that any claimable job of the queue has after the
-- watermarks, read first, unlocked, from each bucket. Rows locked by
-- concurrent claims count too, so a claim may come up short, but it never
-- takes a worse priority while a better one waits after the watermarks.
-- For each bucket in the order given ($6, rotated by the caller), the
-- claim takes the bucket's claimable Queued jobs of that priority after its
-- watermark ($7..$9, the key of the last job claimed there; a priority
-- below the SMALLINT range means none): it never walks the dead index
-- entries that claimed jobs left before the watermark (tombstones on
-- YugabyteDB and CockroachDB, dead tuples under a long snapshot on
-- PostgreSQL). Jobs that sort before a watermark (a retry whose backoff
-- ended, a back-dated or better-priority enqueue, a late commit, a rescued
-- lease) are found by the heads probe, which moves the watermarks back
-- (see the package doc for the bound). Expired leases are the maintenance
-- rescuer's, not the claim's: a claim reads no lease index at all.
-- The locking clause sits in the subquery on the table (on a view or a
-- CTE reference a locking clause locks nothing); LATERAL runs the bucket
-- scan once per bucket, and the outer LIMIT stops pulling rows, and so
-- locking them, at $2. ARRAY(...) collects the ids once before the UPDATE
-- touches a row (a LIMIT ... SKIP LOCKED subquery on the inner side of a
-- nested loop may run more than once and claim more than $2). Where the
-- engine's sharded index fans out itself, the bucket predicate is left out
-- and the caller passes one branch. Like claim_held, it skips the jobs a
-- dead held claim's hold row names until the rescuer has counted their
-- attempt, so lease and held workers may share a queue (dead_hold_ids:
-- the hold table is empty, and its read a scan of no page, where none
-- holds).
-- This shape runs on PostgreSQL only; YugabyteDB and CockroachDB have
-- their own (claim_scalar_bounds, claim_key_join), and no held claims.
WITH best AS (/* TEMPLATE: claim_best */)
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = /* TEMPLATE: lease_start */ + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
WHERE j."id" = ANY(ARRAY(
  SELECT b.id FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i)
  CROSS JOIN LATERAL (
    SELECT "id" FROM /* TEMPLATE: table */
    WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
      AND "priority" = (SELECT p FROM best) AND ("priority", "run_at", "id") > (h.p, h.t, h.i)
      AND "id" <> ALL (ARRAY(/* TEMPLATE: dead_hold_ids */))
    ORDER BY "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  LIMIT /* TEMPLATE: claim_limit */))
RETURNING /* TEMPLATE: job_columns */;

-- name: claim_scalar_bounds
-- The claim where a row comparison does not bound an index scan on a
-- hash-sharded index (Dialect.RowBoundsNotPushed: YugabyteDB). Same
-- parameters, rows and result columns as claim, and the same meaning: each
-- watermark bound (priority, run_at, id) > (h.p, h.t, h.i) is written as
-- single-column bounds DocDB can push down, plus a residual test for the
-- rows that tie on run_at. In best, the bucket's level at its watermark
-- and the levels after it are probed separately, so neither probe starts
-- at a head of dead entries: "priority" = h.p AND "run_at" >= h.t, and
-- "priority" > h.p (the levels after the watermark's were not claimed from
-- yet, or their claimed rows moved the watermark past them). In the claim,
-- a bucket whose watermark is at the best level scans from the watermark's
-- run_at; one whose watermark is at a better level scans the best level
-- from its head; one whose watermark is past the best level takes nothing.
-- Round trips inside the cluster (docs/design.md, "Round trips of a claim
-- on YugabyteDB"): every index probe is a DocDB read RPC, sent one after
-- another, so best asks for a bucket's second probe only when its first
-- finds nothing: COALESCE evaluates an argument only when those before it
-- are null (PostgreSQL's documentation, "COALESCE"), and the first probe's
-- row, at the watermark's level, sorts before any of the second's. A
-- bucket with no watermark (h.p below the SMALLINT range) has no level to
-- probe at, and the CASE skips that probe without a read. Buckets the
-- claim does not need cost no read: the claim's LATERAL stops at $2 rows
-- (the outer LIMIT), and a bucket whose watermark is past the best level,
-- or a claim with no best level at all (a drained queue: best is null),
-- is cut by a one-time filter on h.p <= best before its scan starts.
WITH best AS (SELECT min(x."priority") AS p
  FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i) CROSS JOIN LATERAL (
    SELECT COALESCE(
      CASE WHEN h.p >= -32768 THEN (SELECT "priority" FROM /* TEMPLATE: table */
        WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
          AND "priority" = h.p AND "run_at" >= h.t AND ("run_at" > h.t OR "id" > h.i)
        ORDER BY "run_at", "id" LIMIT 1) END,
      (SELECT "priority" FROM /* TEMPLATE: table */
        WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
          AND "priority" > h.p
        ORDER BY "priority", "run_at", "id" LIMIT 1)) AS "priority") AS x)
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = /* TEMPLATE: lease_start */ + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
WHERE j."id" = ANY(ARRAY(
  SELECT b.id FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i)
  CROSS JOIN LATERAL (
    SELECT "id" FROM /* TEMPLATE: table */
    WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
      AND "priority" = (SELECT p FROM best) AND h.p <= (SELECT p FROM best)
      AND "run_at" >= CASE WHEN h.p = (SELECT p FROM best) THEN h.t ELSE '-infinity'::TIMESTAMPTZ END
      AND (h.p < (SELECT p FROM best) OR "run_at" > h.t OR "id" > h.i)
    ORDER BY "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  LIMIT /* TEMPLATE: claim_limit */))
RETURNING /* TEMPLATE: job_columns */;

-- name: heads
-- The heads probe: each bucket's first claimable job ($2, the buckets in
-- order; $1 the queue), unlocked, scanned from the bucket's head. It walks
-- the dead entries claims skip, so the Queue sends it at most once per
-- Config.HintMaxAge per queue, and moves each watermark to just before the
-- head it finds.
SELECT h.bucket, x."priority", x."run_at", x."id"
FROM unnest($2::INT2[]) AS h (bucket) CROSS JOIN LATERAL (
  SELECT "priority", "run_at", "id" FROM /* TEMPLATE: table */
  WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now()
  ORDER BY "priority", "run_at", "id" LIMIT 1) AS x;

-- name: heads_key_join
-- The heads probe where claims are key joins (CockroachDB, one branch: the
-- sharded index fans the ordered scan out itself): the first claimable job
-- of the queue, with no LATERAL. array_length($2, 1) > 0 types $2.
SELECT 0::INT2, "priority", "run_at", "id" FROM /* TEMPLATE: table */
WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND array_length($2::INT2[], 1) > 0 AND "run_at" <= now()
ORDER BY "priority", "run_at", "id" LIMIT 1;

-- name: claim_key_join
-- The claim where the engine joins a DML statement to its limited subquery
-- by primary key (Dialect.KeyJoinDML: CockroachDB, where the sharded index
-- fans out itself, so $6 holds one bucket and $7..$9 its one hint). Same
-- parameters, rows and result columns as claim. Why not claim's shape there
-- (docs/design.md, "Claims on CockroachDB"): id = ANY(ARRAY(subquery)) does
-- not constrain the UPDATE's scan (cockroachdb/cockroach#23264, PR #100881),
-- so the UPDATE would scan, and implicitly lock, the whole table; a LATERAL
-- subquery with LIMIT > 1 is rewritten into row_number() (PR #68299), which
-- takes the limit off its locking scan; and a priority compared with the
-- best CTE inside a locking scan is either a residual filter (rows read are
-- locked, then discarded) or, hoisted (PR #100881), a lookup join under a
-- top-k that locks every match (#143017, #173245). So here each branch is
-- one locking scan whose only predicates are index constraints, ordered as
-- its index is, with a hard LIMIT $2; the best-priority and attempts tests
-- apply above that LIMIT, and the UPDATE joins the surviving ids by key.
-- Rows the scan locked and the best-priority test dropped (a worse
-- priority, after the best level's rows ran out) stay locked until the
-- claim commits, at once. The watermark ($7..$9, one for the one branch) is
-- an index constraint too, in best's scan as in the claim's, so neither
-- walks the dead entries before it (the heads probe moves it back).
-- $6 is not needed: array_length($6, 1) > 0 types it and folds to a constant.
-- run_at <= now() stays a residual filter of the Queued scan (priority
-- precedes it in the index and is not fixed), so a scheduled job at a
-- better priority than the claimed ones is read and locked.
--
-- Expected plan, EXPLAIN on CockroachDB 25.2 (written from the sources
-- cited in docs/design.md, not run):
--   • root
--   ├── • update                    table: jobs; set: status, attempts, lease_owner, lease_token, lease_expires_at, last_updated
--   │   └── • render
--   │       └── • lookup join       table: jobs@jobs_pkey; equality: (id) = (id); equality cols are key;
--   │           │                   locking strength: for update (the UPDATE's implicit lock: already ours)
--   │           └── • filter        priority = best
--   │               └── • limit     count: $2
--   │                   └── • filter         run_at <= now()
--   │                       └── • union all  ordered merge of one limited scan per shard
--   │                           └── • scan   table: jobs@jobs_dequeue (partial index);
--   │                                        spans: [/shard/$1/(watermark) - /shard/$1] per shard;
--   │                                        locking strength: for update; locking wait policy: skip locked
--   └── • subquery                  best: one unlocked LIMIT 1 scan of jobs@jobs_dequeue after the watermark
WITH best AS (SELECT (SELECT "priority" FROM /* TEMPLATE: table */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND /* TEMPLATE: claim_gate */ $1) AND array_length($6::INT2[], 1) > 0
      AND ("priority", "run_at", "id") > (($7::INT4[])[1], ($8::TIMESTAMPTZ[])[1], ($9::INT8[])[1])
      AND "run_at" <= now()
    ORDER BY "priority", "run_at", "id" LIMIT 1) AS p)
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = /* TEMPLATE: lease_start */ + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
FROM (
  SELECT b.id FROM (
    SELECT "id", "priority" FROM /* TEMPLATE: table */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND /* TEMPLATE: claim_gate */ $1) AND array_length($6::INT2[], 1) > 0
      AND ("priority", "run_at", "id") > (($7::INT4[])[1], ($8::TIMESTAMPTZ[])[1], ($9::INT8[])[1])
      AND "run_at" <= now()
    ORDER BY "priority", "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  WHERE b."priority" = (SELECT p FROM best)) AS c
WHERE j."id" = c.id
RETURNING /* TEMPLATE: job_columns */;

-- Concurrency slots and rate tokens (a queue's global limit and rate
-- limit, set with `skiplock queues configure --concurrency N --rate
-- N/PERIOD`; docs/flow-control.md, "How the limits are kept"). A queue with
-- a limit of N has slot rows 0 to N-1 (job_slot, partition ''), and with a
-- rate of R per period token rows 0 to R-1 (job_rate_token). A claim of it
-- takes free slots and tokens (limits_take), claims at most as many jobs
-- (the claim, rendered with a claim_gate that lets a limited queue
-- through), writes each job and its lease token into a slot and stamps
-- each token it used (limits_use), all in one transaction. A slot is held
-- while its job is Running under that token, or while its held_until is
-- ahead (slot_held): a Worker's claim of an unpartitioned queue writes its
-- permit token and held_until instead of the job (claim_limited_use), and
-- the slot is then that Worker's permit, renewed by its heartbeats
-- (permits_renew) and given back when it has no use for it
-- (permits_release); the Worker starts one job at a time under each
-- permit it holds, with no further write (claim_permitted). A job's
-- completion, failure, release, cancellation or rescue frees a job's slot
-- in the same commit. A token is free once a period has passed since its
-- stamp.

-- name: limits_take
-- Up to $3 free slots of queue $1's global limit and up to $2 of its rate
-- tokens, locked (SKIP LOCKED: those other claims are taking are passed
-- over), as ('slot', '', number) and ('token', '', number) rows, the
-- global limit as ('limit', '', N, 1 if a slot past it is held, else 0),
-- and ('slot', '', -1) or ('token', '', -1) when the queue has no such limit
-- (nor either while it is paused, or partitioned: the claim's gate then
-- takes nothing). A slot is free when neither its job nor a permit holds
-- it (slot_held); none is taken while a slot at or past the limit (rows a
-- lowered limit left, up to "slots", the rows ever made) is held: after a
-- limit is lowered, no job starts until the jobs running past it have
-- finished. The tokens are take_tokens'. Rows are read by key: a range of
-- numbers under the queue's prefix, or on YugabyteDB, whose key is hashed
-- whole, the numbers listed (*_range); never a scan of the table. Under
-- READ COMMITTED a slot taken by a claim that committed after this
-- statement's snapshot can read as free here (the row is re-read when
-- locked, the job it names is not): claim_limited_use checks each slot
-- again.
WITH lim AS (SELECT "concurrency" AS n, GREATEST("slots", "concurrency") AS made, "rate_limit" AS r, "rate_period_ms" AS per,
    "rate_per_partition" AS rpp
  FROM /* TEMPLATE: queue_state */ WHERE "name" = $1 AND NOT "paused" AND "partition_by" IS NULL),
past AS (SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS h
    WHERE h."queue" = $1 AND h."partition" = '' AND /* TEMPLATE: slot_range_h */ AND /* TEMPLATE: slot_held_h */) AS held),
slots AS (SELECT s."slot" FROM /* TEMPLATE: slot_table */ AS s
  WHERE s."queue" = $1 AND s."partition" = '' AND /* TEMPLATE: slot_range_s */ AND NOT (/* TEMPLATE: slot_held */)
    AND NOT (SELECT held FROM past)
  LIMIT $3::INT4 FOR UPDATE OF s SKIP LOCKED),
tokens AS (/* TEMPLATE: take_tokens */)
SELECT 'slot', '', "slot", 0::INT4 FROM slots
UNION ALL SELECT 'token', '', "token", 0::INT4 FROM tokens
UNION ALL SELECT 'limit', '', n, CASE WHEN (SELECT held FROM past) THEN 1 ELSE 0 END FROM lim WHERE n IS NOT NULL
UNION ALL SELECT 'slot', '', -1::INT4, 0::INT4 WHERE NOT EXISTS (SELECT 1 FROM lim WHERE n IS NOT NULL)
UNION ALL SELECT 'token', '', -1::INT4, 0::INT4 WHERE NOT EXISTS (SELECT 1 FROM lim WHERE r IS NOT NULL);

-- name: take_tokens
-- Up to $2 of the rate tokens of queue $1 (limits read as lim), locked:
-- the tokens CTE of limits_take and partitions_take, rendered into both
-- (sql.go), not sent alone. A token is free when its last use (stamped as
-- its claim committed) is a period before this statement
-- (clock_timestamp()), and a tenth of it more, at most 100 ms: a job's
-- handler starts a moment after its claim commits, and the margin keeps
-- the rate at the handlers too. A token another claim stamped after this
-- statement's snapshot is re-read when locked, and its new used_at fails
-- the test. None where the rate is each partition's (rate_per_partition:
-- partitions_take's ptokens).
SELECT t."token" FROM /* TEMPLATE: rate_table */ AS t
WHERE t."queue" = $1 AND t."partition" = '' AND NOT (SELECT rpp FROM lim) AND /* TEMPLATE: token_range */
  AND (t."used_at" IS NULL OR t."used_at" <= clock_timestamp() - (SELECT per::FLOAT8 + LEAST(per::FLOAT8 / 10, 100) FROM lim) * INTERVAL '1 millisecond')
LIMIT $2 FOR UPDATE OF t SKIP LOCKED

-- name: partitions_take
-- limits_take for a partitioned queue, whose limit is per partition (a
-- partition's own from partition_limits, else the queue's; 1 where the
-- partitions are sequences): a first row ('partitioned', '', flags: 1 fair
-- turns, 2 sequences, 4 a rate per partition), none when the queue is not partitioned (nor
-- paused); its ready partitions, found in turn from the cursor $3 (those
-- after it, then from the first up to it), at most $4 of them, by a loose
-- scan of jobs_partition (one probe per partition), each as ('part',
-- partition, limit or -1, its place); up to $2 of their free slots in all,
-- the partitions' in the order visited, as ('slot', partition, number);
-- and the rate tokens: the queue's as limits_take's, or where the rate is
-- each partition's (rate_per_partition) up to $2 of the visited
-- partitions' free tokens in the order visited, as ('ptoken', partition,
-- number), their rows made as the slots' are. A partition's slot rows are made
-- here when its last is missing (the insert's rows are not visible to this
-- statement: the next claim takes them). Slots past a partition's limit
-- hold it as in limits_take. On CockroachDB, whose top-k over a locking
-- join locks every row it reads (cockroachdb/cockroach#143017), every free
-- slot of the visited partitions is locked until the claim commits: at
-- most their limits. No LATERAL: CockroachDB rewrites a LATERAL LIMIT into
-- row_number(), which takes the limit off the locking scan.
WITH RECURSIVE lim AS (SELECT "concurrency" AS n, GREATEST("slots", "concurrency") AS made, "rate_limit" AS r, "rate_period_ms" AS per,
    "partition_limits" AS pl, "fair" AS fair, "sequential" AS seq, "rate_per_partition" AS rpp
  FROM /* TEMPLATE: queue_state */ WHERE "name" = $1 AND NOT "paused" AND "partition_by" IS NOT NULL),
fwd (p, d) AS (
  SELECT (/* TEMPLATE: next_partition */ > $3::TEXT /* TEMPLATE: next_partition_end */), 1::INT4 WHERE EXISTS (SELECT 1 FROM lim)
  UNION ALL
  SELECT (/* TEMPLATE: next_partition */ > f.p /* TEMPLATE: next_partition_end */), (f.d + 1)::INT4 FROM fwd AS f WHERE f.p IS NOT NULL AND f.d < $4::INT4),
wrap (p, d) AS (
  SELECT (/* TEMPLATE: next_partition */ >= '' AND j."partition" <= $3::TEXT /* TEMPLATE: next_partition_end */), ((SELECT count(p) FROM fwd) + 1)::INT4
    WHERE EXISTS (SELECT 1 FROM lim) AND (SELECT count(p) FROM fwd) < $4::INT4
  UNION ALL
  SELECT (/* TEMPLATE: next_partition */ > w.p AND j."partition" <= $3::TEXT /* TEMPLATE: next_partition_end */), (w.d + 1)::INT4
    FROM wrap AS w WHERE w.p IS NOT NULL AND w.d < $4::INT4),
parts AS (SELECT x.p, x.d, CASE WHEN (SELECT seq FROM lim) THEN 1 ELSE COALESCE(((SELECT pl FROM lim) ->> x.p)::INT4, (SELECT n FROM lim)) END AS n
  FROM (SELECT p, d FROM fwd UNION ALL SELECT p, d FROM wrap) AS x WHERE x.p IS NOT NULL),
made AS (INSERT INTO /* TEMPLATE: slot_table */ ("queue", "partition", "slot")
  SELECT $1, pp.p, g FROM parts AS pp JOIN generate_series(0, (SELECT max(n) FROM parts) - 1) AS g ON g < pp.n
  WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS e WHERE e."queue" = $1 AND e."partition" = pp.p AND e."slot" = pp.n - 1)
  ON CONFLICT ("queue", "partition", "slot") DO NOTHING RETURNING 1),
slots AS (SELECT pp.p, pp.d, s."slot" FROM parts AS pp JOIN /* TEMPLATE: slot_table */ AS s
    ON s."queue" = $1 AND s."partition" = pp.p AND /* TEMPLATE: slot_range_p */
  WHERE pp.n IS NOT NULL AND NOT (/* TEMPLATE: slot_held */)
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS h
      WHERE h."queue" = $1 AND h."partition" = pp.p AND /* TEMPLATE: slot_range_hp */ AND /* TEMPLATE: slot_held_h */)
  ORDER BY pp.d, s."slot" LIMIT $2 FOR UPDATE OF s SKIP LOCKED),
tokens AS (/* TEMPLATE: take_tokens */),
tmade AS (INSERT INTO /* TEMPLATE: rate_table */ ("queue", "partition", "token")
  SELECT $1, pp.p, g FROM parts AS pp CROSS JOIN generate_series(0, COALESCE((SELECT r FROM lim), 0) - 1) AS g
  WHERE (SELECT rpp FROM lim) AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: rate_table */ AS e
    WHERE e."queue" = $1 AND e."partition" = pp.p AND e."token" = (SELECT r FROM lim) - 1)
  ON CONFLICT ("queue", "partition", "token") DO NOTHING RETURNING 1),
ptokens AS (SELECT pp.p, pp.d, t."token" FROM parts AS pp JOIN /* TEMPLATE: rate_table */ AS t
    ON t."queue" = $1 AND t."partition" = pp.p AND /* TEMPLATE: token_range */
  WHERE (SELECT rpp FROM lim)
    AND (t."used_at" IS NULL OR t."used_at" <= clock_timestamp() - (SELECT per::FLOAT8 + LEAST(per::FLOAT8 / 10, 100) FROM lim) * INTERVAL '1 millisecond')
  ORDER BY pp.d, t."token" LIMIT $2 FOR UPDATE OF t SKIP LOCKED)
SELECT 'partitioned', '', (CASE WHEN fair THEN 1 ELSE 0 END + CASE WHEN seq THEN 2 ELSE 0 END + CASE WHEN rpp THEN 4 ELSE 0 END)::INT4, -1::INT4 FROM lim
UNION ALL SELECT 'part', p, COALESCE(n, -1)::INT4, d FROM parts
UNION ALL SELECT 'slot', p, "slot", d FROM slots
UNION ALL SELECT 'token', '', "token", 0::INT4 FROM tokens
UNION ALL SELECT 'ptoken', p, "token", d FROM ptokens
UNION ALL SELECT 'token', '', -1::INT4, 0::INT4 WHERE NOT EXISTS (SELECT 1 FROM lim WHERE r IS NOT NULL)
ORDER BY 4;

-- name: claim_partitioned
-- The claim of a partitioned queue: up to $6[i] jobs of partition $5[i],
-- for each i, each partition's in priority order (claim_partition_branch,
-- one branch per element, rendered up to MaxClaimPartitions; a branch past
-- the arrays takes none), $7 in all: the branches run in order until $7
-- are taken (a claim without fair shares asks each partition for all it
-- may take, and fills up from the first). Its own parameters: $1 the
-- queue, $2 the owner, $3 the lease token, $4 the lease's seconds. Returns the job columns and
-- each job's partition, whose slot limits_use gives it. The lease starts
-- at this statement (lease_start). Where the engine joins DML to its
-- limited subqueries by key (KeyJoinDML: CockroachDB), the branches are
-- the UPDATE's FROM (claim_partitioned_key_join); each is one locking
-- scan of jobs_partition whose only predicates are index constraints but
-- run_at, with a limit of its own.
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $2, "lease_token" = $3,
  "lease_expires_at" = clock_timestamp() + $4::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
WHERE j."id" = ANY(ARRAY(SELECT u."id" FROM (/* TEMPLATE: partition_branches */) AS u LIMIT $7::INT4))
RETURNING /* TEMPLATE: job_columns */, j."partition";

-- name: claim_partitioned_key_join
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $2, "lease_token" = $3,
  "lease_expires_at" = clock_timestamp() + $4::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
FROM (SELECT u."id" FROM (/* TEMPLATE: partition_branches */) AS u LIMIT $7::INT4) AS c
WHERE j."id" = c."id"
RETURNING /* TEMPLATE: job_columns */, j."partition";

-- name: claim_sequence_branch
-- A sequential queue's branch (rendered into claim_partitioned in place
-- of claim_partition_branch: claim_sequenced): partition $5[i]'s first
-- Queued job in insert order (id), locked, taken only if it is due. A
-- failed job waiting out its backoff is that first job, so the sequence
-- waits for it. No SKIP LOCKED: the partition's one slot, which this claim
-- holds, keeps every other claim off the partition; a row another
-- statement changed meanwhile is re-read, and passed over if it is no
-- longer Queued. Where the queue halts at a dead job (halt_on_dead, read
-- now, not from the claimer's view), a Failed job of the partition before
-- the head holds the sequence (jobs_partition_dead: one probe).
SELECT "id" FROM (SELECT "id", "run_at" FROM /* TEMPLATE: table */
  WHERE "status" = 'Queued' AND "queue" = $1 AND "partition" = ($5::TEXT[])[/* TEMPLATE: branch */]
    AND /* TEMPLATE: claim_gate */ $1)
  ORDER BY "id" LIMIT LEAST(COALESCE(($6::INT4[])[/* TEMPLATE: branch */], 0), 1) FOR UPDATE) AS b/* TEMPLATE: branch */
WHERE b/* TEMPLATE: branch */."run_at" <= now()
  AND NOT (COALESCE((SELECT h."halt_on_dead" FROM /* TEMPLATE: queue_state */ AS h WHERE h."name" = $1), false)
    AND EXISTS (SELECT 1 FROM /* TEMPLATE: table */ AS d WHERE d."status" = 'Failed' AND d."queue" = $1
      AND d."partition" = ($5::TEXT[])[/* TEMPLATE: branch */] AND d."id" < b/* TEMPLATE: branch */."id"))

-- name: claim_partition_branch
SELECT "id" FROM (SELECT "id" FROM /* TEMPLATE: table */
  WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "partition" = ($5::TEXT[])[/* TEMPLATE: branch */] AND "run_at" <= now()
    AND /* TEMPLATE: claim_gate */ $1)
  ORDER BY "priority", "run_at", "id" LIMIT COALESCE(($6::INT4[])[/* TEMPLATE: branch */], 0) FOR UPDATE SKIP LOCKED) AS b/* TEMPLATE: branch */

-- name: slots_free
-- Of the slots ($2 partitions, $3 numbers) that partitions_take locked in
-- this transaction (an unpartitioned queue's claim, claim_limited_use,
-- does this in its own statement), those still free, read with a snapshot taken after the lock
-- (the next statement's, under READ COMMITTED): a slot a claim committed
-- between limits_take's snapshot and its lock is held, and dropped here.
-- Nothing can take a slot that this transaction holds locked, and a held
-- slot can only come free, so what this returns stays free until the
-- commit. (Under REPEATABLE READ and SERIALIZABLE such a slot's lock fails
-- instead, as a serialization failure, and the claim is retried; a claim
-- at SERIALIZABLE does not send this.) The slots are found by whole key,
-- whatever the table's statistics say.
SELECT s."partition", s."slot" FROM unnest($2::TEXT[], $3::INT4[]) AS k (p, n)
  JOIN /* TEMPLATE: slot_table */ AS s ON s."queue" = $1 AND s."partition" = k.p AND s."slot" = k.n
WHERE NOT (/* TEMPLATE: slot_held */);

-- name: limits_use
-- A partitioned queue's claim's (an unpartitioned one's does this in
-- claim_limited_use). Gives the slots ($2 partitions, $3 numbers: locked by limits_take and
-- found free by slots_free in this transaction) to the jobs $4 the claim
-- took under lease token $5, in the order given, and stamps the rate
-- tokens $6 of partitions $7 ('' for the queue's; locked by limits_take
-- or partitions_take) with the time now, just before the
-- commit that starts the jobs (not the transaction's start, now(): a claim
-- that took long would otherwise let the next use of its tokens start its
-- jobs less than a period after these). Any array may be empty.
WITH b AS (UPDATE /* TEMPLATE: slot_table */ AS s SET "job_id" = k.j, "lease_token" = $5, "held_until" = NULL
    FROM unnest($2::TEXT[], $3::INT4[], $4::INT8[]) AS k (p, n, j)
    WHERE s."queue" = $1 AND s."partition" = k.p AND s."slot" = k.n RETURNING 1),
u AS (UPDATE /* TEMPLATE: rate_table */ AS t SET "used_at" = clock_timestamp()
    FROM unnest($7::TEXT[], $6::INT4[]) AS r (p, n)
    WHERE t."queue" = $1 AND t."partition" = r.p AND t."token" = r.n RETURNING 1)
SELECT (SELECT count(*) FROM b), (SELECT count(*) FROM u);

-- name: claim_limited_use
-- The claim of a queue with a global or rate limit, unpartitioned, that
-- also does limits_use's work, so that a limited claim is one statement
-- less: the claim (claim_ctes, then the claim's UPDATE as "c") with the
-- limited gate, then its jobs, in id order: the first $12 run under
-- permits the claiming Worker holds already (-1: the queue has no global
-- limit), and each after them is given the next of the slots $10 that are
-- still free ("free": locked by limits_take in this transaction, and read
-- again with this statement's snapshot, which is younger than the lock:
-- slot_still_free, slots_free's test, which is not sent for these; every
-- slot on CockroachDB, whose SERIALIZABLE refuses a slot taken since the
-- snapshot; partition ''), written as a permit of token $13 held for $14
-- milliseconds (0: as the job's slot, with the claim's lease token $4, for
-- a caller that is not a Worker), and the next of the queue's rate tokens
-- $11 (partition '') stamped with the time now, just before the commit
-- that starts the jobs. The claim takes no more jobs than it was given
-- tokens ($2) and than the permits and "free" hold (claim_limit, its
-- outer LIMIT). A data-modifying CTE runs whether or not it is read; the
-- final SELECT reads both counts anyway, which every engine then cannot
-- leave out. The three modify three tables: CockroachDB refuses two
-- modifications of one table in a statement. It returns the claim's rows,
-- each with the slot it was given (null: none, or a permit held already).
/* TEMPLATE: claim_ctes */,
"free" AS (SELECT k."slot", k."o" FROM unnest($10::INT4[]) WITH ORDINALITY AS k ("slot", "o")
    JOIN /* TEMPLATE: slot_table */ AS s ON s."queue" = $1 AND s."partition" = '' AND s."slot" = k."slot"
  WHERE /* TEMPLATE: slot_still_free */),
"c" AS (/* TEMPLATE: claim_update */),
"n" AS (SELECT "c"."id", row_number() OVER (ORDER BY "c"."id") - GREATEST($12::INT4, 0) AS "r" FROM "c"),
"fs" AS (SELECT "free"."slot", row_number() OVER (ORDER BY "free"."o") AS "r" FROM "free"),
"b" AS (UPDATE /* TEMPLATE: slot_table */ AS s SET "job_id" = CASE WHEN $13::INT8 = 0 THEN "n"."id" END,
    "lease_token" = CASE WHEN $13::INT8 = 0 THEN $4::INT8 ELSE $13::INT8 END,
    "held_until" = CASE WHEN $13::INT8 = 0 THEN NULL ELSE clock_timestamp() + $14::FLOAT8 * INTERVAL '1 millisecond' END
    FROM "fs" AS k JOIN "n" ON "n"."r" = k."r"
    WHERE s."queue" = $1 AND s."partition" = '' AND s."slot" = k."slot" RETURNING 1),
"u" AS (UPDATE /* TEMPLATE: rate_table */ AS t SET "used_at" = clock_timestamp()
    FROM unnest($11::INT4[]) WITH ORDINALITY AS k (token, r) JOIN "n" ON "n"."r" + GREATEST($12::INT4, 0) = k.r
    WHERE t."queue" = $1 AND t."partition" = '' AND t."token" = k.token RETURNING 1)
SELECT "c".*, "fs"."slot" FROM "c" JOIN "n" ON "n"."id" = "c"."id" LEFT JOIN "fs" ON "fs"."r" = "n"."r"
WHERE (SELECT count(*) FROM "b") >= 0 AND (SELECT count(*) FROM "u") >= 0;

-- name: permits_renew
-- Renews the permits of token $2 on queue $1's slots $3 (partition ''):
-- each still held under that token is held $4 milliseconds from now, and
-- returned. A permit missing from the result lapsed (its Worker's renewals
-- failed for longer than it was held) or was never written (a claim whose
-- commit failed).
UPDATE /* TEMPLATE: slot_table */ AS s SET "held_until" = clock_timestamp() + $4::FLOAT8 * INTERVAL '1 millisecond'
WHERE s."queue" = $1 AND s."partition" = '' AND s."slot" = ANY($3::INT4[]) AND s."lease_token" = $2::INT8 AND s."held_until" > now()
RETURNING s."slot";

-- name: permits_held
-- The slots of queue $1 (partition '', every row made) held as permits of
-- token $2: what a claim whose commit was ambiguous may have written.
SELECT s."slot" FROM /* TEMPLATE: slot_table */ AS s
WHERE s."queue" = $1 AND s."partition" = '' AND /* TEMPLATE: slot_range_made */ AND s."lease_token" = $2::INT8 AND s."held_until" > now();

-- name: permits_release
-- Gives back the permits of token $2 on queue $1's slots $3 (partition
-- ''): those still held under it are free from this commit.
UPDATE /* TEMPLATE: slot_table */ AS s SET "held_until" = NULL, "lease_token" = NULL
WHERE s."queue" = $1 AND s."partition" = '' AND s."slot" = ANY($3::INT4[]) AND s."lease_token" = $2::INT8;

-- name: tokens_make
-- Makes queue $1's rate token rows 0 to $2-1 that are missing (partition
-- ''), never used: a rate limit's `queues configure --rate`, in the
-- transaction that sets it.
INSERT INTO /* TEMPLATE: rate_table */ ("queue", "partition", "token")
SELECT $1, '', g FROM generate_series(0, $2::INT4 - 1) AS g
ON CONFLICT ("queue", "partition", "token") DO NOTHING;

-- name: slots_make
-- Makes queue $1's slot rows 0 to $2-1 that are missing (partition ''),
-- and records in skiplock_queue how many were ever made: an operator's
-- `queues configure --concurrency`, in the transaction that sets the
-- limit.
INSERT INTO /* TEMPLATE: slot_table */ ("queue", "partition", "slot")
SELECT $1, '', g FROM generate_series(0, $2::INT4 - 1) AS g
ON CONFLICT ("queue", "partition", "slot") DO NOTHING;

-- name: queue_limits
-- Queue $1's limits: global (concurrency, per partition where the queue is
-- partitioned), per process (local_concurrency) and its rate (rate_limit
-- per rate_period_ms), each null when unset, how many slot rows it has,
-- whether it is paused, its partitioning (null: none), whether its claims
-- share out among partitions, partitions' own limits (a JSON object as
-- text, null: none), whether its partitions are sequences, and whether
-- they halt at a dead job; no row when the queue was never paused or
-- configured.
SELECT "concurrency", "local_concurrency", "slots", "paused", "rate_limit", "rate_period_ms", "partition_by", "fair", "partition_limits"::TEXT,
  "sequential", "halt_on_dead", "rate_per_partition"
FROM /* TEMPLATE: queue_state */ WHERE "name" = $1;

-- name: slots_lock
-- Queue $1's count of slot rows, its partitioning and its global limit,
-- its row locked for the transaction that sets its limits (no row: none
-- made, none).
SELECT "slots", "partition_by", "concurrency" FROM /* TEMPLATE: queue_state */ WHERE "name" = $1 FOR UPDATE;

-- name: slots_adopt
-- When a global limit is set on a queue that had none (or was
-- partitioned): each Running job of queue $1 that holds no slot (claimed
-- while the queue had no limit) gets one, numbered from $2
-- (the rows made so far) up, so that the limit counts the jobs already
-- running, and those past it keep claims waiting until they finish. A
-- claim that was in flight as the limit was set, and commits after this
-- statement read the jobs, is not counted: the plain claim's gate read
-- the queue before the limit.
INSERT INTO /* TEMPLATE: slot_table */ ("queue", "partition", "slot", "job_id", "lease_token")
SELECT $1, '', $2::INT4 + (row_number() OVER (ORDER BY j."id"))::INT4 - 1, j."id", j."lease_token"
FROM /* TEMPLATE: table */ AS j
WHERE j."status" = 'Running' AND j."queue" = $1
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: slot_table */ AS s
    WHERE s."queue" = $1 AND s."partition" = '' AND s."job_id" = j."id" AND s."lease_token" = j."lease_token")
ON CONFLICT ("queue", "partition", "slot") DO UPDATE SET "job_id" = excluded."job_id", "lease_token" = excluded."lease_token"
RETURNING "slot";

-- name: limits_set
-- Sets queue $1's limits ($2 global, $3 per process, $5 starts per $6
-- milliseconds; null: none), its partitioning ($7, null: none), fair
-- turns ($8), partitions' own limits ($9, a JSON object, null: none),
-- sequences ($10) and their halting at a dead job ($11), whether the
-- rate is each partition's ($12), and raises its
-- count of slot rows to $4 and of rate tokens to $5; its paused flag stays
-- as it is.
INSERT INTO /* TEMPLATE: queue_state */ AS q ("name", "concurrency", "local_concurrency", "slots", "rate_limit", "rate_period_ms", "rate_tokens",
  "partition_by", "fair", "partition_limits", "sequential", "halt_on_dead", "rate_per_partition", "updated_at")
VALUES ($1, $2::INT4, $3::INT4, $4::INT4, $5::INT4, $6::INT8, COALESCE($5::INT4, 0), $7::TEXT, $8::BOOLEAN, $9::TEXT::JSONB, $10::BOOLEAN, $11::BOOLEAN,
  $12::BOOLEAN, now())
ON CONFLICT ("name") DO UPDATE SET "concurrency" = excluded."concurrency", "local_concurrency" = excluded."local_concurrency",
  "slots" = GREATEST(q."slots", excluded."slots"), "rate_limit" = excluded."rate_limit", "rate_period_ms" = excluded."rate_period_ms",
  "rate_tokens" = GREATEST(q."rate_tokens", excluded."rate_tokens"), "partition_by" = excluded."partition_by", "fair" = excluded."fair",
  "partition_limits" = excluded."partition_limits", "sequential" = excluded."sequential", "halt_on_dead" = excluded."halt_on_dead",
  "rate_per_partition" = excluded."rate_per_partition", "updated_at" = excluded."updated_at";

-- name: partitions_rewrite
-- One batch of a changed partitioning: the Queued and Running jobs of
-- queue $1 after id $2, $3 of them in id order, get their partition in
-- the queue's partitioning as it is now (job_partition: null when it is
-- not partitioned). Returns how many jobs the batch read, the last id it
-- read (0: none) and how many it changed; the caller goes on from that id
-- until a batch reads fewer than $3. Running jobs keep the slot they hold
-- (of their old partition) until they finish; a retry comes back in its
-- new partition.
WITH c AS (SELECT "id" FROM /* TEMPLATE: table */ WHERE "queue" = $1 AND "status" IN ('Queued', 'Running') AND "id" > $2::INT8
    ORDER BY "id" LIMIT $3::INT4),
u AS (UPDATE /* TEMPLATE: table */ AS j SET "partition" = /* TEMPLATE: job_partition */
    WHERE j."id" IN (SELECT "id" FROM c) AND j."status" IN ('Queued', 'Running') AND j."partition" IS DISTINCT FROM /* TEMPLATE: job_partition */
    RETURNING 1)
SELECT (SELECT count(*) FROM c), COALESCE((SELECT max("id") FROM c), 0), (SELECT count(*) FROM u);

-- name: slots_held
-- How many of queue $1's slot rows 0 to $2-1 are held.
SELECT count(*) FROM /* TEMPLATE: slot_table */ AS s
WHERE s."queue" = $1 AND s."partition" = '' AND /* TEMPLATE: slot_range_all */ AND /* TEMPLATE: slot_held */;

-- name: partition_counts
-- A partitioned queue's partitions ($1), the first $2 in order: how many
-- of each one's jobs run and how many wait (Queued, ready or not).
SELECT j."partition", count(*) FILTER (WHERE j."status" = 'Running'), count(*) FILTER (WHERE j."status" = 'Queued')
FROM /* TEMPLATE: table */ AS j
WHERE j."queue" = $1 AND j."status" IN ('Queued', 'Running') AND j."partition" IS NOT NULL
GROUP BY j."partition" ORDER BY j."partition" LIMIT $2::INT4;

-- Lease operations take parallel arrays of ids ($1) and lease tokens ($2)
-- and touch only rows still Running under that token (the fence). Under a
-- snapshot held for long (`bench tombstones`), PostgreSQL may scan the
-- rescuer's partial index of Running jobs whole for each of these, through
-- its dead entries, where its statistics still say it is small; steering
-- it off that index (comparing the status as text) cost far more in the
-- common case (a nested loop over the unnested ids, 171 ms for 1,000), so
-- the plain join stays.

-- name: complete
-- The lease writes (complete through fail) find each job by id, take it
-- only under its lease token, and only while it is Running. The status is
-- compared as text so that the test does not imply the predicate of the
-- rescuer's partial index of Running jobs (jobs_lease_expiry), which the
-- planner could then use: its statistics, taken while few jobs ran, call it
-- nearly empty, and PostgreSQL chose to read it whole and hash-join the
-- ids, through every dead entry under a long snapshot (17 ms for 200 jobs
-- against 2 ms by key under bench tombstones: docs/design.md, "Lease
-- writes by key").
-- Success. last_error is left as it is: after a failed attempt it stays as
-- the job's history (the package doc, "Lifecycle").
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Success', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: complete_delete
-- complete where Config.DeleteCompleted is set: the completed jobs are
-- deleted, not kept as Success for the pruner. A row deleted writes no
-- new row version and no index entry, where the update to Success writes
-- both (docs/design.md, "Writes per job"); the lease test is the same.
DELETE FROM /* TEMPLATE: table */ AS j
USING unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: cancel
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Canceled', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: release
-- Gives the jobs back without counting the attempt.
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Queued', "attempts" = GREATEST(j."attempts" - 1, 0), "lease_expires_at" = NULL, "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: snooze
-- Gives the jobs back to run after $3 seconds without counting the attempt
-- (a handler's skiplock.Snooze); their metadata counts the snooze.
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Queued', "attempts" = GREATEST(j."attempts" - 1, 0),
  "run_at" = now() + $3::FLOAT8 * INTERVAL '1 second', "lease_expires_at" = NULL, "last_updated" = now(),
  "metadata" = jsonb_set(j."metadata", ARRAY['snoozes'], to_jsonb(COALESCE((j."metadata"->>'snoozes')::INT8, 0) + 1))
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: extend
-- Extends leases to now + $3 seconds and returns the new expiry.
UPDATE /* TEMPLATE: table */ AS j SET "lease_expires_at" = now() + $3::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id", j."lease_expires_at";

-- name: extend_ids
-- extend, returning only the ids.
UPDATE /* TEMPLATE: table */ AS j SET "lease_expires_at" = now() + $3::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: record
-- A running job's handler records its output ($3, JSON) or reports its
-- progress ($4, JSON); null keeps the column as it is. Under the lease
-- token ($2), while the job is Running, as the lease writes.
UPDATE /* TEMPLATE: table */ AS j SET "output" = COALESCE($3::JSONB, j."output"), "progress" = COALESCE($4::JSONB, j."progress"), "last_updated" = now()
WHERE j."id" = $1::INT8 AND j."lease_token" = $2::INT8 AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: fail
-- Fail: dead once attempts reach max_attempts, else Queued again at
-- now + the caller's backoff ($4, seconds, per job); $3 the errors, each
-- also appended to the job's error history. A job whose handler cancelled
-- it ($5, skiplock.Cancel) ends Canceled at once.
UPDATE /* TEMPLATE: table */ AS j SET
  "status" = CASE WHEN c.cancel THEN 'Canceled'::/* TEMPLATE: status_type */ WHEN j."attempts" >= j."max_attempts" THEN 'Failed'::/* TEMPLATE: status_type */ ELSE 'Queued'::/* TEMPLATE: status_type */ END,
  "finished_at" = CASE WHEN c.cancel OR j."attempts" >= j."max_attempts" THEN now() END,
  "run_at" = CASE WHEN c.cancel OR j."attempts" >= j."max_attempts" THEN j."run_at" ELSE now() + c.delay * INTERVAL '1 second' END,
  "last_error" = c.err, "errors" = /* TEMPLATE: push_error */ c.err)),
  "lease_expires_at" = NULL, "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[], $3::TEXT[], $4::FLOAT8[], $5::BOOL[]) AS c (id, token, err, delay, cancel)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status"::TEXT = 'Running'
RETURNING j."id";

-- name: dependency_outputs
-- The outputs of job $1's dependencies, by their names in its workflow
-- (a dependency retention deleted is missing).
SELECT n."node", d."output"::TEXT FROM /* TEMPLATE: table */ AS w
JOIN /* TEMPLATE: workflow_node_table */ AS n ON n."workflow_id" = w."workflow_id" AND n."node" = ANY(w."depends_on")
JOIN /* TEMPLATE: table */ AS d ON d."id" = n."job_id"
WHERE w."id" = $1::INT8;

-- name: completed_with
-- After an ambiguous commit: which of these leases did complete.
SELECT j."id" FROM /* TEMPLATE: table */ AS j, unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status" = 'Success';

-- name: completed_with_delete
-- completed_with where completions delete: which of these leases' jobs
-- are gone. Only a completion deletes a Running job (retention and the
-- admin's delete take finished ones), so a job gone after an ambiguous
-- commit was completed: by this one, or by a later holder of the job.
SELECT c.id FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: table */ AS j WHERE j."id" = c.id);

-- name: delete_finished
-- Retention: up to $2 jobs that finished more than $1 seconds ago, oldest
-- first.
DELETE FROM /* TEMPLATE: table */ WHERE "id" = ANY(ARRAY(
  SELECT "id" FROM /* TEMPLATE: table */ WHERE "finished_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  ORDER BY "finished_at" LIMIT $2));

-- name: delete_finished_key_join
-- delete_finished where the engine joins a DML statement to its limited
-- subquery by primary key (Dialect.KeyJoinDML: CockroachDB): the ids come
-- from the same bounded scan, and the DELETE looks each up by key instead
-- of scanning the table for id = ANY(ARRAY(...)) (docs/design.md, "Claims
-- on CockroachDB").
-- Expected plan, EXPLAIN on CockroachDB 25.2 (not run):
--   • delete (from jobs) ← • lookup join (jobs@jobs_pkey, equality (id) = (id), key;
--   locking strength: for update) ← • limit $2 ← • union all (one ordered scan of
--   jobs@jobs_finished per shard, spans [/shard - /shard/now() - $1])
DELETE FROM /* TEMPLATE: table */ AS j USING (
  SELECT "id" FROM /* TEMPLATE: table */ WHERE "finished_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  ORDER BY "finished_at" LIMIT $2) AS c
WHERE j."id" = c.id;

-- name: stats
-- Counts per status, queue and bucket, with the oldest claimable run_at,
-- the live leases and the server's clock: $1 the queue or '' for all.
SELECT "status"::TEXT, "queue", "bucket", count(*),
  min(CASE WHEN "status" = 'Queued' AND "run_at" <= now() THEN "run_at" END),
  count(CASE WHEN "status" = 'Running' AND "lease_expires_at" > now() THEN 1 END),
  now()
FROM /* TEMPLATE: table */ WHERE ($1 = '' OR "queue" = $1)
GROUP BY "status", "queue", "bucket";

-- name: pending
-- Whether queue $1 has a Queued or Running job; $2 lists the buckets. The
-- Queued check (queued_exists) is each bucket's ordered LIMIT 1 scan of
-- jobs_dequeue, as the heads probe's: a bare EXISTS lets PostgreSQL's
-- planner price a sequential scan's first match as if the matches were
-- spread evenly over the heap, and pick it, while after a burn-down they
-- sit at its end behind every finished row (docs/design.md, "Checks for
-- work left"). Where claims are key joins (CockroachDB: no LATERAL, one
-- branch) it is a bare EXISTS on the sharded partial index.
SELECT /* TEMPLATE: queued_exists */
  OR EXISTS (SELECT 1 FROM /* TEMPLATE: table */ WHERE "status" = 'Running' AND "queue" = $1);

-- name: backlog
-- What queue $1 has left ($2: the buckets): whether a Queued job is due
-- (run_at has come; due_exists is queued_exists with that test), whether
-- a job is Running (leased, or its lease expired), and, only when neither
-- (the CASE evaluates its subqueries only when it needs them), how many
-- Queued jobs wait for a later run_at and the earliest of those, and how
-- many wait for workflow dependencies (deps_left) instead; with the
-- server's clock.
SELECT d.due, d.running,
  CASE WHEN d.due OR d.running THEN 0 ELSE (SELECT count(*) FROM /* TEMPLATE: table */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" > now()) END,
  CASE WHEN d.due OR d.running THEN NULL ELSE (SELECT min("run_at") FROM /* TEMPLATE: table */
    WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" > now()) END,
  now(),
  CASE WHEN d.due OR d.running THEN 0 ELSE (SELECT count(*) FROM /* TEMPLATE: table */
    WHERE "status" = 'Queued' AND "deps_left" IS NOT NULL AND "queue" = $1) END
FROM (SELECT
  /* TEMPLATE: due_exists */ AS due,
  EXISTS (SELECT 1 FROM /* TEMPLATE: table */ WHERE "status" = 'Running' AND "queue" = $1) AS running) AS d;

-- name: claimed_by
-- The jobs of queue $1 a claim leased under its token ($2), read back when
-- the claim's commit came back ambiguous: the token is the claim's own,
-- fresh and random, so only that claim's commit made jobs Running under it.
SELECT /* TEMPLATE: job_columns */ FROM /* TEMPLATE: table */ AS j
WHERE j."status" = 'Running' AND j."queue" = $1 AND j."lease_token" = $2;

-- name: lookup
-- One job by id ($1).
SELECT /* TEMPLATE: job_columns */ FROM /* TEMPLATE: table */ AS j WHERE j."id" = $1;

-- Actions by id, without a lease, for operators and tools. Each changes
-- the row only in the states it applies to and returns its id; no row back
-- means the id is unknown or the job is in another state, and the caller
-- reads status_by_id to say which.

-- name: cancel_by_id
-- A Queued or Running job ($1) becomes Canceled and will not run again. A
-- Running job's holder then finds its lease gone: its next heartbeat
-- cancels the handler's context, and its completion is refused by the
-- lease fence (the row is no longer Running).
UPDATE /* TEMPLATE: table */ SET "status" = 'Canceled', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
WHERE "id" = $1 AND "status" IN ('Queued', 'Running')
RETURNING "id";

-- name: retry_by_id
-- A Failed or Canceled job ($1) is Queued again to run now, with its
-- attempts reset; its last error stays until a new failure replaces it.
-- A workflow job waits again for its dependencies that have not
-- finished (deps_left: waiting_run_at while any is left); RetryJob has
-- fenced them and refused a job that one's bad end blocks
-- (depgate.Gate.BeforeRetry).
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Queued', "attempts" = 0, "finished_at" = NULL, "canceled_by" = NULL,
  "deps_left" = CASE WHEN x.n > 0 THEN x.n END,
  "run_at" = CASE WHEN x.n > 0 THEN /* TEMPLATE: waiting_run_at */ ELSE now() END,
  "lease_expires_at" = NULL, "last_updated" = now()
FROM (SELECT count(d."id") AS n FROM /* TEMPLATE: table */ AS w
  LEFT JOIN /* TEMPLATE: workflow_node_table */ AS m ON m."workflow_id" = w."workflow_id" AND m."node" = ANY(w."depends_on")
  LEFT JOIN /* TEMPLATE: table */ AS d ON d."id" = m."job_id" AND /* TEMPLATE: dependency_not_finished */
  WHERE w."id" = $1) AS x
WHERE j."id" = $1 AND j."status" IN ('Failed', 'Canceled')
RETURNING j."id";

-- name: delete_by_id
-- A finished job ($1: Success, Failed or Canceled) is deleted.
DELETE FROM /* TEMPLATE: table */ WHERE "id" = $1 AND "status" IN ('Success', 'Failed', 'Canceled')
RETURNING "id";

-- name: status_by_id
-- A job's status ($1), to say why an action did not apply.
SELECT "status"::TEXT FROM /* TEMPLATE: table */ WHERE "id" = $1;

-- Held claims (WorkerConfig.HeldClaims; Dialect.HeldClaims: PostgreSQL).
-- A held claim locks its jobs in a transaction that stays open while their
-- handlers run and writes nothing to them: the claim transaction's commit
-- writes each job once, as the claim-and-complete statement of the SQL
-- limit does, where a lease claim writes it twice (Running, then Success:
-- docs/design.md, "Writes per job"). Its one record, a row of the hold
-- table naming the jobs, is committed on its own before the handlers run
-- (hold_open) and deleted by the claim transaction's commit (hold_close).

-- name: claim_held
-- claim's jobs (the same parameters, order, watermarks and best priority),
-- locked and returned, not updated: each stays Queued under this
-- transaction's row lock until its commit. A job a hold row names is not
-- taken: its holder died or failed to commit with the job's attempt
-- unrecorded, which the maintenance rescuer adds first (rescue_held). The
-- returned rows read as a lease claim's would: Running, the attempt that
-- is running counted, owner $3, the hold's token $4 as the lease token,
-- and the held claim's deadline ($5 seconds) as the lease's expiry; a
-- last column gives this transaction's id, for its hold row. The ids
-- named by hold rows are read once per statement (dead_hold_ids), not
-- per job, and only from rows whose holder is no longer running: a live
-- holder's jobs are locked, and skipped anyway.
WITH best AS (/* TEMPLATE: claim_best */)
SELECT j."id", j."queue", j."payload"::TEXT, j."priority", 'Running', j."attempts" + 1, j."max_attempts",
  j."create_ts", j."run_at", j."last_error", $3::TEXT, $4::INT8, now() + $5::FLOAT8 * INTERVAL '1 second', j."bucket", j."kind", j."metadata"::TEXT,
  j."workflow_id", COALESCE(array_length(j."dependents", 1), 0), pg_current_xact_id()::TEXT::INT8
FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i)
CROSS JOIN LATERAL (
  SELECT * FROM /* TEMPLATE: table */
  WHERE /* TEMPLATE: bucket_predicate */"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND "run_at" <= now() AND /* TEMPLATE: claim_gate */ $1)
    AND "priority" = (SELECT p FROM best) AND ("priority", "run_at", "id") > (h.p, h.t, h.i)
    AND "id" <> ALL (ARRAY(/* TEMPLATE: dead_hold_ids */))
  ORDER BY "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS j
LIMIT $2;

-- name: dead_hold_ids
-- The jobs that the hold rows of dead holders (hold_dead: no longer
-- running) name, which a claim leaves alone until the rescuer has counted
-- their attempts: read once per statement into an array (as long as the
-- dead holds the rescuer has not reached yet: none, mostly), which the
-- claims test with <> ALL (rendered into claim, claim_held and hold_open
-- by sqlVars, not sent alone). Not NOT IN: PostgreSQL runs that as a
-- hashed subplan whose hash table it sizes from the planner's guess of
-- the rows, and for a hold table never analyzed (new, or truncated) it
-- guesses 696 rows of 100 ids: megabytes allocated and cleared at every
-- claim, which on a backend's first claims outweighs the claim itself.
SELECT (n.e)::INT8 FROM /* TEMPLATE: hold */ AS k, jsonb_array_elements_text(k."ids") AS n (e)
WHERE /* TEMPLATE: hold_dead */

-- name: hold_open
-- Records a held claim before its handlers run, in a transaction of its
-- own: token $1, queue $2, the claim transaction's id $4, and the jobs of
-- $3 that no dead holder's row names. It returns the ids recorded, which are the jobs to run, or NULL
-- when it recorded them all (the common case: nothing to parse): a job
-- another row names (its holder died between this claim's start and its
-- lock) stays locked and unrun until the claim commits, and the rescuer
-- counts its attempt.
INSERT INTO /* TEMPLATE: hold */ ("token", "queue", "holder", "ids")
SELECT $1, $2, $4, COALESCE(jsonb_agg(c.id ORDER BY c.id), '[]'::JSONB) FROM unnest($3::INT8[]) AS c (id)
WHERE c.id <> ALL (ARRAY(/* TEMPLATE: dead_hold_ids */))
RETURNING CASE WHEN jsonb_array_length("ids") < cardinality($3::INT8[]) THEN "ids"::TEXT END;

-- name: hold_close
-- Ends a held claim in its transaction: its record goes with the commit
-- that writes its jobs' results.
DELETE FROM /* TEMPLATE: hold */ WHERE "token" = $1;

-- name: hold_exists
-- After an ambiguous commit of a held claim: whether its record is still
-- there (the commit did not happen) or gone (it did).
SELECT count(*) FROM /* TEMPLATE: hold */ WHERE "token" = $1;

-- name: held_complete
-- Success for held jobs ($1, ids), in the held claim's transaction, which
-- holds their row locks: their one write. The held writes return nothing:
-- the caller checks that each took every job it names. The attempt is counted here, the
-- owner and the hold's token ($2, $3) recorded as a lease claim records
-- them.
UPDATE /* TEMPLATE: table */ AS j SET "status" = 'Success', "attempts" = j."attempts" + 1, "finished_at" = now(),
  "lease_owner" = $2, "lease_token" = $3, "last_updated" = now()
WHERE j."id" = ANY($1::INT8[]) AND j."status"::TEXT = 'Queued';

-- name: held_complete_delete
-- held_complete where Config.DeleteCompleted is set: the jobs are deleted
-- (no new row version, no index entry).
DELETE FROM /* TEMPLATE: table */ AS j
WHERE j."id" = ANY($1::INT8[]) AND j."status"::TEXT = 'Queued';

-- name: held_fail
-- A failed attempt of held jobs, in the held claim's transaction: the
-- attempt counted, dead once it reaches max_attempts, else Queued again
-- at now + the caller's backoff ($4, seconds, per job); $3 the errors,
-- also appended to the error history; $2 the owner; Canceled at once
-- where the handler cancelled the job ($5).
UPDATE /* TEMPLATE: table */ AS j SET "attempts" = j."attempts" + 1,
  "status" = CASE WHEN c.cancel THEN 'Canceled'::/* TEMPLATE: status_type */ WHEN j."attempts" + 1 >= j."max_attempts" THEN 'Failed'::/* TEMPLATE: status_type */ ELSE 'Queued'::/* TEMPLATE: status_type */ END,
  "finished_at" = CASE WHEN c.cancel OR j."attempts" + 1 >= j."max_attempts" THEN now() END,
  "run_at" = CASE WHEN c.cancel OR j."attempts" + 1 >= j."max_attempts" THEN j."run_at" ELSE now() + c.delay * INTERVAL '1 second' END,
  "last_error" = c.err, "errors" = /* TEMPLATE: push_error_held */ c.err)),
  "lease_owner" = $2, "last_updated" = now()
FROM unnest($1::INT8[], $3::TEXT[], $4::FLOAT8[], $5::BOOL[]) AS c (id, err, delay, cancel)
WHERE j."id" = c.id AND j."status"::TEXT = 'Queued';

-- name: held_snooze
-- Snoozed held jobs ($1) run again after $2 seconds; the attempt is not
-- counted, the snooze is (as snooze does for leased jobs).
UPDATE /* TEMPLATE: table */ AS j SET "run_at" = now() + $2::FLOAT8 * INTERVAL '1 second', "last_updated" = now(),
  "metadata" = jsonb_set(j."metadata", ARRAY['snoozes'], to_jsonb(COALESCE((j."metadata"->>'snoozes')::INT8, 0) + 1))
WHERE j."id" = ANY($1::INT8[]) AND j."status"::TEXT = 'Queued';
