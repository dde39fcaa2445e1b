-- The workflow dependency gate of the bucketed layout's jobs, shared by
-- the completions (bucketed) and the rescuer (maintenance), rendered per
-- schema (depgate.go). Templates:
--   jobs            the jobs table, schema-qualified and quoted
--   status_type     the job_status enum, schema-qualified and quoted
--   waiting_run_at  the run_at of a job that waits: never due
--   workflow_nodes  job_workflow_node, schema-qualified and quoted
-- A job waits while deps_left is above 0 (null once it waits for none):
-- it is Queued with waiting_run_at, so that no claim finds it due, the
-- gate that scheduled jobs and sequences use, and has no entry in
-- jobs_dequeue (schema.Ready), so that claims never walk past it. Edges are names within a workflow
-- (workflow_node), fixed at insert: depends_on on the dependent,
-- dependents on the dependency. settle finds the waiting dependents by
-- the jobs_workflow index, which holds only jobs with deps_left set (so
-- that a workflow job's claim and completion write no entry in it); every
-- other lookup by name goes through job_workflow_node, written once at
-- insert, to the job's id.

-- name: settle
-- Settles the jobs that depend on the finished workflow jobs $1: those
-- of $2 true ended badly (Failed, or Canceled), the others succeeded (a
-- job not in the state it is said to be in, such as one a rescue queued
-- again, is passed over).
-- Sent in the transaction that finished them, so that a dependency's end
-- and its dependents' release commit together. A dependent that waits
-- (Queued, deps_left above 0) counts each finished dependency off; at
-- none left its deps_left becomes null, which enters it in jobs_dequeue,
-- and its run_at now, and claims take it. A dependent of a
-- job that ended badly is Canceled instead, naming that dependency in
-- canceled_by (a retry of it queues the dependent again:
-- requeue_dependents), unless it runs anyway (run_anyway), which counts
-- the dependency off as finished. One level per statement: the caller
-- sends the returned Canceled jobs back as ended badly until none is
-- returned (a recursive CTE would need UNION's duplicate removal, which
-- a diamond of dependencies meets, and one UPDATE per level keeps the
-- statement a single write of the table, as CockroachDB requires). A
-- dependent another transaction changed meanwhile is re-read, and passed
-- over if it no longer waits. Returns each dependent written: its id,
-- status, queue, priority and run_at.
WITH e AS (
  SELECT p."workflow_id" AS wf, d.node, CASE WHEN c.bad THEN p."workflow_node" END AS cause
  FROM unnest($1::INT8[], $2::BOOL[]) AS c (id, bad)
  JOIN /* TEMPLATE: jobs */ AS p ON p."id" = c.id
  CROSS JOIN LATERAL unnest(p."dependents") AS d (node)
  WHERE p."workflow_id" IS NOT NULL
    AND CASE WHEN c.bad THEN p."status" IN ('Failed', 'Canceled') ELSE p."status" = 'Success' END),
x AS (SELECT wf, node, count(*) AS n, min(cause) AS cause FROM e GROUP BY wf, node)
UPDATE /* TEMPLATE: jobs */ AS w SET
  "status" = CASE WHEN x.cause IS NOT NULL AND NOT COALESCE(w."run_anyway", false) THEN 'Canceled'::/* TEMPLATE: status_type */ ELSE w."status" END,
  "deps_left" = CASE WHEN x.cause IS NOT NULL AND NOT COALESCE(w."run_anyway", false) THEN w."deps_left" WHEN w."deps_left" - x.n > 0 THEN w."deps_left" - x.n END,
  "run_at" = CASE WHEN (x.cause IS NULL OR COALESCE(w."run_anyway", false)) AND w."deps_left" - x.n <= 0 THEN clock_timestamp() ELSE w."run_at" END,
  "finished_at" = CASE WHEN x.cause IS NOT NULL AND NOT COALESCE(w."run_anyway", false) THEN now() END,
  "canceled_by" = CASE WHEN x.cause IS NOT NULL AND NOT COALESCE(w."run_anyway", false) THEN x.cause END,
  "last_error" = CASE WHEN x.cause IS NOT NULL AND NOT COALESCE(w."run_anyway", false) THEN /* TEMPLATE: cancelled_error */ ELSE w."last_error" END,
  "last_updated" = now()
FROM x
WHERE w."workflow_id" = x.wf AND w."workflow_node" = x.node AND w."deps_left" IS NOT NULL AND w."status" = 'Queued' AND w."deps_left" > 0
RETURNING w."id", w."status"::TEXT, w."queue", w."priority", w."run_at";

-- name: fence
-- Before the finished jobs $1 (Failed or Canceled) wait again for their
-- dependencies (an operator's retry, or requeue), writes every one of
-- those dependencies that has not succeeded, so that the count of what
-- they wait for, read after it, and a dependency's completion meet on a
-- row both write: a completion in flight either commits first, and the
-- count sees it, or waits for the retry to commit (READ COMMITTED) or
-- aborts with a serialization failure and runs again (snapshot and
-- SERIALIZABLE), and its settle then finds the job waiting. A lock would
-- not do: under snapshot isolation a completion whose snapshot predates
-- the retry reads the job as still finished and passes it over. Returns
-- the dependencies that ended badly, with whether the job runs anyway.
WITH w AS (
  SELECT n."job_id", COALESCE(j."run_anyway", false) AS anyway
  FROM /* TEMPLATE: jobs */ AS j
  JOIN /* TEMPLATE: workflow_nodes */ AS n ON n."workflow_id" = j."workflow_id" AND n."node" = ANY(j."depends_on")
  WHERE j."id" = ANY($1::INT8[]) AND j."workflow_id" IS NOT NULL AND j."status" IN ('Failed', 'Canceled'))
UPDATE /* TEMPLATE: jobs */ AS d SET "last_updated" = now()
FROM w
WHERE d."id" = w."job_id" AND d."status" <> 'Success'
RETURNING d."workflow_node", d."status"::TEXT, w.anyway;

-- name: cancelled_dependents
-- The dependents that the failure of jobs $1 cancelled (settle's
-- canceled_by names it) and that are still Canceled.
SELECT w."id"
FROM /* TEMPLATE: jobs */ AS p
JOIN /* TEMPLATE: workflow_nodes */ AS n ON n."workflow_id" = p."workflow_id" AND n."node" = ANY(p."dependents")
JOIN /* TEMPLATE: jobs */ AS w ON w."id" = n."job_id"
WHERE p."id" = ANY($1::INT8[]) AND p."workflow_id" IS NOT NULL
  AND w."status" = 'Canceled' AND w."canceled_by" = p."workflow_node";

-- name: requeue_dependents
-- The cancelled dependents $1 (cancelled_dependents, fenced) wait again,
-- for every dependency not finished (not_finished), once the failure that
-- cancelled them was retried. One that another dependency's bad end
-- still blocks (it does not run anyway) stays Canceled, now naming that
-- one, whose retry queues it again. Returns the jobs it queued: the
-- caller sends them back as the next level, until none.
WITH x AS (
  SELECT w."id",
    (SELECT count(*) FROM /* TEMPLATE: workflow_nodes */ AS m JOIN /* TEMPLATE: jobs */ AS d ON d."id" = m."job_id"
      WHERE m."workflow_id" = w."workflow_id" AND m."node" = ANY(w."depends_on") AND /* TEMPLATE: not_finished */) AS n,
    (SELECT min(m."node") FROM /* TEMPLATE: workflow_nodes */ AS m JOIN /* TEMPLATE: jobs */ AS d ON d."id" = m."job_id"
      WHERE m."workflow_id" = w."workflow_id" AND m."node" = ANY(w."depends_on") AND d."status" IN ('Failed', 'Canceled')
        AND NOT COALESCE(w."run_anyway", false)) AS cause
  FROM /* TEMPLATE: jobs */ AS w
  WHERE w."id" = ANY($1::INT8[]) AND w."status" = 'Canceled'),
u AS (UPDATE /* TEMPLATE: jobs */ AS w SET
  "status" = CASE WHEN x.cause IS NULL THEN 'Queued'::/* TEMPLATE: status_type */ ELSE w."status" END,
  "canceled_by" = x.cause,
  "finished_at" = CASE WHEN x.cause IS NULL THEN NULL ELSE w."finished_at" END,
  "deps_left" = CASE WHEN x.cause IS NULL AND x.n > 0 THEN x.n END,
  "run_at" = CASE WHEN x.cause IS NOT NULL THEN w."run_at" WHEN x.n > 0 THEN /* TEMPLATE: waiting_run_at */ ELSE clock_timestamp() END,
  "last_error" = CASE WHEN x.cause IS NULL THEN NULL ELSE /* TEMPLATE: cancelled_error */ END,
  "last_updated" = now()
FROM x
WHERE w."id" = x."id" AND w."status" = 'Canceled'
RETURNING w."id", w."status")
SELECT "id" FROM u WHERE "status" = 'Queued';
