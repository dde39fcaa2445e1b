package fanout

import (
	_ "embed"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"
)

// statements are the SQL a Queue sends, rendered once per Queue from
// fanout.sql for its schema, which documents each one's parameters. Every
// identifier is quoted; every value is a $n parameter.
type statements struct {
	claim, claimShard, claimRandom, heads, existsAfter string
	del, fail, bury, insert, queued, dead, exists      string
	count, giveBack, backoff, buryLost, amendDead      string
	cancelByID, retryByID, deleteByID, whereByID       string
	snoozeJob, snoozeAttempt                           string
	insertNotify                                       string // insert with its notifications (sqltext.WithNotify)
	newIDs, notify                                     string // the COPY path's (copy.go)
}

//go:embed fanout.sql
var sqlSource string

// sqlFile is fanout.sql, parsed once.
var sqlFile = sqltext.MustParse("fanout/fanout.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

// jobColumns are the columns claim returns, in scan order. The payload
// travels as text so that both drivers scan it into a string.
const jobColumns = `"id", "queue", "payload"::text AS "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata"::text AS "metadata"`

// sqlVars are fanout.sql's template values. The statements are the same
// on every engine, so the dialect is not consulted.
func sqlVars(_ *skiplock.Dialect, schemaName string) map[string]string {
	s := skiplock.QuoteIdent(schemaName)
	return map[string]string{
		"queue_table":   s + "." + skiplock.QuoteIdent(schema.JobQueueTable),
		"dead_table":    s + "." + skiplock.QuoteIdent(schema.DeadJobTable),
		"attempt_table": s + "." + skiplock.QuoteIdent(schema.JobAttemptTable),
		"job_columns":   jobColumns,
		"id_default":    schema.FanoutIDDefault,
		"push_error":    sqltext.PushError(`"j"`, `greatest("j"."attempts", $3::int)`),
		"not_paused":    sqltext.NotPaused(skiplock.QuoteIdent(schemaName) + "." + skiplock.QuoteIdent(schema.QueueStateTable)),
		// bury_lost's lost attempt is max_attempts, not the row's count.
		"max_error_history": strconv.Itoa(skiplock.MaxErrorHistory),
	}
}

func render(schemaName string) statements {
	var s statements
	err := sqlFile.Fill(sqlVars(nil, schemaName), map[string]*string{
		"claim": &s.claim, "claim_shard": &s.claimShard, "claim_random": &s.claimRandom, "heads": &s.heads, "exists_after": &s.existsAfter, "del": &s.del, "fail": &s.fail, "bury": &s.bury,
		"insert": &s.insert, "queued": &s.queued, "dead": &s.dead, "exists": &s.exists,
		"count": &s.count, "give_back": &s.giveBack, "backoff": &s.backoff, "bury_lost": &s.buryLost, "amend_dead": &s.amendDead,
		"cancel_by_id": &s.cancelByID, "retry_by_id": &s.retryByID, "delete_by_id": &s.deleteByID, "where_by_id": &s.whereByID,
		"snooze_job": &s.snoozeJob, "snooze_attempt": &s.snoozeAttempt,
		"new_ids": &s.newIDs, "notify": &s.notify,
	})
	if err != nil {
		// The file is embedded and the same for every schema: the tests
		// render it, so this cannot happen in a build that passed them.
		panic(err)
	}
	s.insertNotify = sqltext.WithNotify(s.insert, insertParamCount)
	return s
}

// insertParamCount is how many parameters insert takes.
const insertParamCount = 5

// all lists the statements, for tests that check each one.
func (s statements) all() map[string]string {
	return map[string]string{
		"claim": s.claim, "claim_shard": s.claimShard, "claim_random": s.claimRandom, "heads": s.heads, "exists_after": s.existsAfter, "del": s.del, "fail": s.fail, "bury": s.bury,
		"insert": s.insert, "queued": s.queued, "dead": s.dead, "exists": s.exists,
		"count": s.count, "give_back": s.giveBack, "backoff": s.backoff, "bury_lost": s.buryLost, "amend_dead": s.amendDead,
		"cancel_by_id": s.cancelByID, "retry_by_id": s.retryByID, "delete_by_id": s.deleteByID, "where_by_id": s.whereByID,
		"snooze_job": s.snoozeJob, "snooze_attempt": s.snoozeAttempt,
		// new_ids and notify name no table, so no schema either.
	}
}
