package bucketed

import (
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
)

// statements holds every statement the queue sends, rendered once for the
// schema and engine. Values always travel as $n parameters.
type statements struct {
	insert, uniqueLookup                                  string
	claim                                                 string
	complete, fail, cancel, release, extend, extendIDs    string
	completedWith, deleteFinished, stats, pending, lookup string
}

// jobColumns is what a claim returns, in scanJob's order.
const jobColumns = `j."id", j."queue", j."payload"::TEXT, j."priority", j."status"::TEXT, j."attempts", j."max_attempts",
  j."create_ts", j."run_at", j."last_error", j."lease_owner", j."lease_token", j."lease_expires_at", j."bucket"`

// uniqueConflict names the partial unique index on live jobs' keys, for
// ON CONFLICT (it must repeat the index's predicate).
const uniqueConflict = `("queue", "unique_key") WHERE "unique_key" IS NOT NULL AND "status" IN ('Queued', 'Running')`

func buildStatements(d *skiplock.Dialect, schemaName string) statements {
	t := skiplock.QuoteIdent(schemaName) + "." + skiplock.QuoteIdent(schema.JobsTable)
	status := skiplock.QuoteIdent(schemaName) + "." + skiplock.QuoteIdent(schema.StatusType)
	r := strings.NewReplacer("{T}", t, "{S}", status)
	var s statements

	s.insert = r.Replace(`INSERT INTO {T} ("queue", "payload", "priority", "run_at", "max_attempts", "unique_key")
SELECT u.q, u.p::JSONB, u.pr, COALESCE(u.ra, now()), u.ma, u.uk
FROM unnest($1::TEXT[], $2::TEXT[], $3::INT2[], $4::TIMESTAMPTZ[], $5::INT4[], $6::TEXT[]) AS u (q, p, pr, ra, ma, uk)
ON CONFLICT ` + uniqueConflict + ` DO NOTHING
RETURNING "id"`)

	s.uniqueLookup = r.Replace(`SELECT "id" FROM {T} WHERE "queue" = $1 AND "unique_key" = $2 AND "status" IN ('Queued', 'Running')`)

	// The claim takes jobs of one priority only: the best (lowest) priority
	// that any claimable job of the queue has. The best priority is found first, unlocked, from
	// each bucket's head and from the expired leases; rows locked by
	// concurrent claims count too, so a claim may come up short, but never
	// takes a worse priority while a better one waits. The CTE is read
	// twice, so every engine computes it once (no MATERIALIZED keyword:
	// YugabyteDB's PostgreSQL 11 grammar lacks it). Branch one: jobs of
	// the queue whose lease has expired and that have attempts left (the
	// maintenance rescuer fails the others). Branch two: for each bucket in
	// the order given ($6, rotated by the caller), the bucket's claimable
	// Queued jobs of that priority after its hint ($7..$9; a priority below
	// the SMALLINT range means no hint; a hint at a worse priority than the
	// best one is ignored, since the best level's rows all sort below it).
	// Each branch locks in its own
	// subquery on the table (PITFALLS 1); LATERAL runs the bucket scan once
	// per bucket, and the outer LIMIT stops pulling rows, and so locking
	// them, at $2. ARRAY(...) collects the ids once before the UPDATE
	// touches a row (PITFALLS 2). Where the engine's sharded index fans out
	// itself, the bucket predicate is left out and the caller passes one
	// branch.
	bucketPred := `"bucket" = h.bucket AND `
	if d.ShardedIndexFansOut {
		bucketPred = ""
	}
	s.claim = r.Replace(`WITH best AS (SELECT LEAST(
    (SELECT min(x."priority") FROM unnest($6::INT2[]) AS hb (bucket) CROSS JOIN LATERAL (
      SELECT "priority" FROM {T}
      WHERE ` + strings.ReplaceAll(bucketPred, "h.bucket", "hb.bucket") + `"status" = 'Queued' AND "queue" = $1 AND "run_at" <= now()
      ORDER BY "priority", "run_at", "id" LIMIT 1) AS x),
    (SELECT min("priority") FROM {T}
      WHERE "status" = 'Running' AND "queue" = $1 AND "lease_expires_at" <= now()
        AND "attempts" < "max_attempts")) AS p)
UPDATE {T} AS j SET "status" = 'Running', "attempts" = j."attempts" + 1, "lease_owner" = $3, "lease_token" = $4,
  "lease_expires_at" = now() + $5::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
WHERE j."id" = ANY(ARRAY(
  SELECT c.id FROM (
    SELECT e.id FROM (
      SELECT "id" FROM {T}
      WHERE "status" = 'Running' AND "queue" = $1 AND "lease_expires_at" <= now()
        AND "attempts" < "max_attempts" AND "priority" = (SELECT p FROM best)
      ORDER BY "lease_expires_at" LIMIT $2 FOR UPDATE SKIP LOCKED) AS e
    UNION ALL
    SELECT b.id FROM unnest($6::INT2[], $7::INT4[], $8::TIMESTAMPTZ[], $9::INT8[]) AS h (bucket, p, t, i)
    CROSS JOIN LATERAL (
      SELECT "id" FROM {T}
      WHERE ` + bucketPred + `"status" = 'Queued' AND "queue" = $1 AND "run_at" <= now()
        AND "priority" = (SELECT p FROM best)
        AND ("priority", "run_at", "id") > (CASE WHEN h.p <= (SELECT p FROM best) THEN h.p ELSE -32769 END, h.t, h.i)
      ORDER BY "run_at", "id" LIMIT $2 FOR UPDATE SKIP LOCKED) AS b
  ) AS c LIMIT $2))
RETURNING ` + jobColumns)

	// Lease operations take parallel arrays of ids and lease tokens and
	// touch only rows still Running under that token (the fence).
	const fence = `FROM unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status" = 'Running'`

	s.complete = r.Replace(`UPDATE {T} AS j SET "status" = 'Success', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
` + fence + `
RETURNING j."id"`)

	s.cancel = r.Replace(`UPDATE {T} AS j SET "status" = 'Canceled', "finished_at" = now(), "lease_expires_at" = NULL, "last_updated" = now()
` + fence + `
RETURNING j."id"`)

	s.release = r.Replace(`UPDATE {T} AS j SET "status" = 'Queued', "attempts" = GREATEST(j."attempts" - 1, 0), "lease_expires_at" = NULL, "last_updated" = now()
` + fence + `
RETURNING j."id"`)

	s.extend = r.Replace(`UPDATE {T} AS j SET "lease_expires_at" = now() + $3::FLOAT8 * INTERVAL '1 second', "last_updated" = now()
` + fence + `
RETURNING j."id", j."lease_expires_at"`)
	s.extendIDs = strings.TrimSuffix(s.extend, `, j."lease_expires_at"`)

	// Fail: dead once attempts reach max_attempts, else Queued again at
	// now + the caller's backoff ($4, seconds, per job).
	s.fail = r.Replace(`UPDATE {T} AS j SET
  "status" = CASE WHEN j."attempts" >= j."max_attempts" THEN 'Failed'::{S} ELSE 'Queued'::{S} END,
  "finished_at" = CASE WHEN j."attempts" >= j."max_attempts" THEN now() END,
  "run_at" = CASE WHEN j."attempts" >= j."max_attempts" THEN j."run_at" ELSE now() + c.delay * INTERVAL '1 second' END,
  "last_error" = c.err, "lease_expires_at" = NULL, "last_updated" = now()
FROM unnest($1::INT8[], $2::INT8[], $3::TEXT[], $4::FLOAT8[]) AS c (id, token, err, delay)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status" = 'Running'
RETURNING j."id"`)

	// After an ambiguous commit: which of these leases did complete.
	s.completedWith = r.Replace(`SELECT j."id" FROM {T} AS j, unnest($1::INT8[], $2::INT8[]) AS c (id, token)
WHERE j."id" = c.id AND j."lease_token" = c.token AND j."status" = 'Success'`)

	s.deleteFinished = r.Replace(`DELETE FROM {T} WHERE "id" = ANY(ARRAY(
  SELECT "id" FROM {T} WHERE "finished_at" < now() - $1::FLOAT8 * INTERVAL '1 second'
  ORDER BY "finished_at" LIMIT $2))`)

	s.stats = r.Replace(`SELECT "status"::TEXT, "queue", "bucket", count(*),
  min(CASE WHEN "status" = 'Queued' AND "run_at" <= now() THEN "run_at" END),
  count(CASE WHEN "status" = 'Running' AND "lease_expires_at" > now() THEN 1 END),
  now()
FROM {T} WHERE ($1 = '' OR "queue" = $1)
GROUP BY "status", "queue", "bucket"`)

	s.pending = r.Replace(`SELECT EXISTS (SELECT 1 FROM {T} WHERE "status" = 'Queued' AND "queue" = $1)
  OR EXISTS (SELECT 1 FROM {T} WHERE "status" = 'Running' AND "queue" = $1)`)
	s.lookup = r.Replace(`SELECT ` + jobColumns + ` FROM {T} AS j WHERE j."id" = $1`)
	return s
}

// all lists every statement, for tests that check them against a grammar.
func (s *statements) all() []string {
	return []string{s.insert, s.uniqueLookup, s.claim, s.complete, s.fail, s.cancel, s.release, s.extend, s.extendIDs,
		s.completedWith, s.deleteFinished, s.stats, s.pending, s.lookup}
}
