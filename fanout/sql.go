package fanout

import (
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/schema"
)

// statements are the SQL a Queue sends, rendered once per Queue for its
// schema. Every identifier is quoted; every value is a $n parameter.
type statements struct {
	// claim locks one job: $1 the random start, $2 the queue.
	claim string
	// del removes a processed job: $1 the id.
	del string
	// fail counts a failed attempt: $1 the id, $2 the error.
	fail string
	// bury moves a job that used up its attempts to job_dead: $1 the id.
	bury string
	// insert adds jobs from three parallel arrays: queues, payloads (JSON
	// text), max attempts.
	insert string
	// queued counts live jobs per queue, with the oldest's creation time
	// and the server's now: $1 the queue or "" for all.
	queued string
	// dead counts dead jobs per queue: $1 the queue or "" for all.
	dead string
	// exists says whether a queue has a live job: $1 the queue.
	exists string
}

// jobColumns are the columns claim returns, in scan order. The payload
// travels as text so that both drivers scan it into a string.
const jobColumns = `"id", "queue", "payload"::text AS "payload", "attempts", "max_attempts", "last_error", "created_at"`

func render(schemaName string) statements {
	s := skiplock.QuoteIdent(schemaName)
	q := s + "." + skiplock.QuoteIdent(schema.JobQueueTable)
	d := s + "." + skiplock.QuoteIdent(schema.DeadJobTable)
	// The locking clause goes on each branch that reads the table, never
	// on a view or CTE over it (PITFALLS 1). Each branch is an ordered
	// index range scan with LIMIT 1 above the row lock, so a locked row is
	// stepped over and the next one taken. UNION ALL runs its branches in
	// order and the outer LIMIT stops after the first row, so the
	// wrap-around branch runs (and locks) only when nothing unlocked lies
	// at or after the start: PostgreSQL's and YSQL's Append are lazy
	// (EXPLAIN ANALYZE shows "never executed"), and CockroachDB runs UNION
	// ALL branches serially (cockroachdb/cockroach#87463).
	// PostgreSQL refuses a locking clause directly on a UNION branch
	// (0A000), so each branch is a derived table that locks its own rows.
	branch := func(alias, cmp string) string {
		return `SELECT * FROM (SELECT ` + jobColumns + ` FROM ` + q + ` WHERE "id" ` + cmp + ` $1 AND "queue" = $2` +
			` ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED) AS "` + alias + `"`
	}
	return statements{
		claim: branch("after", ">=") + ` UNION ALL ` + branch("before", "<") + ` LIMIT 1`,
		del:   `DELETE FROM ` + q + ` WHERE "id" = $1`,
		fail: `UPDATE ` + q + ` SET "attempts" = "attempts" + 1, "last_error" = $2 WHERE "id" = $1` +
			` RETURNING "attempts", "max_attempts"`,
		bury: `WITH "moved" AS (DELETE FROM ` + q + ` WHERE "id" = $1` +
			` RETURNING "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")` +
			` INSERT INTO ` + d + ` ("id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at")` +
			` SELECT "id", "queue", "payload", "attempts", "max_attempts", "last_error", "created_at" FROM "moved"`,
		insert: `INSERT INTO ` + q + ` ("queue", "payload", "max_attempts")` +
			` SELECT "t"."queue", "t"."payload"::jsonb, "t"."max_attempts"` +
			` FROM unnest($1::text[], $2::text[], $3::int[]) AS "t" ("queue", "payload", "max_attempts")` +
			` RETURNING "id"`,
		queued: `SELECT "queue", count(*), min("created_at"), now() FROM ` + q +
			` WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue"`,
		dead: `SELECT "queue", count(*) FROM ` + d +
			` WHERE ($1::text = '' OR "queue" = $1::text) GROUP BY "queue"`,
		exists: `SELECT EXISTS (SELECT 1 FROM ` + q + ` WHERE "queue" = $1)`,
	}
}

// all lists the statements, for tests that check each one.
func (s statements) all() map[string]string {
	return map[string]string{
		"claim": s.claim, "del": s.del, "fail": s.fail, "bury": s.bury,
		"insert": s.insert, "queued": s.queued, "dead": s.dead, "exists": s.exists,
	}
}
