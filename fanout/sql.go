package fanout

import (
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"
)

// statements are the SQL a Queue sends, rendered once per Queue from
// fanout.sql for its schema and engine, which documents each one's
// parameters. Every identifier is quoted; every value is a $n parameter.
type statements struct {
	// unions says the claim, the heads probe and exists_after are the
	// shard unions (fanout.sql), which take $1 the queue then each shard's
	// bounds as scalars (unionArgs): claim is empty, and a claim whose
	// start shard is empty sends shardsAfter, then claimShard per shard.
	// Otherwise they are the LATERAL forms, which take arrays then the
	// queue, and shardsAfter is empty.
	unions                         bool
	claim, claimShard, shardsAfter string
	// claimLimited and claimShardLimited are claim and claimShard for a
	// queue with a global limit: each takes a concurrency slot with its
	// job (slot_take). The plain ones refuse such a queue.
	claimLimited, claimShardLimited                       string
	limitsRead, slotsMake, slotsTrim, slotFree            string
	heads, existsAfter                                    string
	del, fail, bury, insert, queued, dead, exists         string
	count, giveBack, forget, backoff, buryLost, amendDead string
	committed                                             string // resolves an ambiguous commit
	cancelByID, retryByID, deleteByID, whereByID, lookup  string
	snoozeJob, snoozeAttempt                              string
	insertNotify                                          string // insert with its notifications (sqltext.WithNotify)
	newIDs, notify                                        string // the COPY path's (copy.go)
	uniqueLookup                                          string // a duplicate's live job (Enqueue)
}

//go:embed fanout.sql
var sqlSource string

// sqlFile is fanout.sql, parsed once.
var sqlFile = sqltext.MustParse("fanout/fanout.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

// jobColumns are the columns claim and lookup return, in scan order. The
// payload travels as text so that both drivers scan it into a string.
const jobColumns = `"id", "queue", "payload"::text AS "payload", "attempts", "max_attempts", "last_error", "created_at", "kind", "metadata"::text AS "metadata"`

// The shard unions' branch templates (fanout.sql), rendered once per
// shard into their unions by sqlVars.
var (
	shardsAfterBranch = sqlFile.Template("shards_after_branch")
	headsBranch       = sqlFile.Template("heads_union_branch")
	existsAfterBranch = sqlFile.Template("exists_after_union_branch")
)

// sqlVars are fanout.sql's template values. The dialect chooses among
// the rendered blocks (in render), and how slot rows are read by key
// (sqltext.KeyRange).
func sqlVars(d *skiplock.Dialect, schemaName string) map[string]string {
	s := sqlident.Quote(schemaName)
	queueState := s + "." + sqlident.Quote(schema.QueueStateTable)
	// The limit and the most slot rows ever made, read in the statement
	// (slot_take): none while the queue is paused.
	limit := `(SELECT "l"."concurrency" FROM ` + queueState + ` AS "l" WHERE "l"."name" = $4 AND NOT "l"."paused")`
	made := `(SELECT GREATEST("l"."slots", "l"."concurrency") FROM ` + queueState + ` AS "l" WHERE "l"."name" = $4)`
	vars := map[string]string{
		"queue_table":     s + "." + sqlident.Quote(schema.JobQueueTable),
		"dead_table":      s + "." + sqlident.Quote(schema.DeadJobTable),
		"attempt_table":   s + "." + sqlident.Quote(schema.JobAttemptTable),
		"job_columns":     jobColumns,
		"id_default":      schema.FanoutIDDefault,
		"unique_conflict": uniqueConflict(),
		"push_error":      sqltext.PushError(`"j"`, `greatest("j"."attempts", $3::int)`),
		"not_paused":      sqltext.NotPausedNor(queueState),
		// The plain claims pass over a queue with a global limit too: its
		// claims take a slot (claim_limited).
		"claim_gate":   sqltext.NotPausedNor(queueState, `"qs"."concurrency" IS NOT NULL`),
		"queue_state":  queueState,
		"slot_table":   s + "." + sqlident.Quote(schema.FanoutSlotTable),
		"slot_with":    "",
		"slot_gate":    "",
		"slot_limit":   limit,
		"slot_past_o":  sqltext.KeyRange(d, `"o"."slot"`, limit, made),
		"slot_range_p": sqltext.KeyRange(d, `"p"."slot"`, "$2::INT4", "$3::INT4"),
		"slot_range_c": sqltext.KeyRange(d, `"c"."slot"`, "$2::INT4", "$3::INT4"),
		// bury_lost's lost attempt is max_attempts, not the row's count.
		"max_error_history": strconv.Itoa(skiplock.MaxErrorHistory),
		// A branch block rendered alone is its union's first branch.
		"shard_n": "1", "shard_lo": "$2", "shard_hi": "$3", "shard_after": "$4",
	}
	// shards_after covers the shards after the start shard, which
	// claim_shard tried first; the heads probe and exists_after all.
	vars["shards_after_branches"] = union(shardsAfterBranch, vars, schema.FanoutShards-1)
	vars["heads_branches"] = union(headsBranch, vars, schema.FanoutShards)
	vars["exists_after_branches"] = union(existsAfterBranch, vars, schema.FanoutShards)
	limited(vars)
	return vars
}

// limited renders the limited claims (claim_limited, claim_shard_limited)
// into vars: the claims with slot_take as their CTE "slot", the job taken
// only beside a slot, and the gate of paused queues alone.
func limited(vars map[string]string) {
	v := maps.Clone(vars)
	take := sqlFile.MustRender("slot_take", v)
	v["slot_with"] = `WITH "slot" AS (` + take + ")\n"
	v["slot_gate"] = "\n    AND EXISTS (SELECT 1 FROM \"slot\")"
	v["claim_gate"] = vars["not_paused"]
	for block, into := range map[string]string{"claim": "claim_limited", "claim_shard": "claim_shard_limited"} {
		vars[into] = sqlFile.MustRender(block, v)
	}
}

// unionParams are the per-shard parameters a branch template may name, in
// the order each branch numbers them (and unionArgs passes them).
var unionParams = []string{"shard_lo", "shard_hi", "shard_after"}

// union renders branch, a *_branch block of fanout.sql, for n shards with
// ordinals 1 to n, joined by UNION ALL. $1 is the queue; branch k (from
// 0) of a branch naming m of unionParams takes $(2+k*m) to $(1+(k+1)*m).
func union(branch string, vars map[string]string, n int) string {
	var params []string
	for _, p := range unionParams {
		if slices.Contains(sqltext.Placeholders(branch), p) {
			params = append(params, p)
		}
	}
	v := maps.Clone(vars)
	parts := make([]string, n)
	for k := range parts {
		v["shard_n"] = strconv.Itoa(k + 1)
		for i, p := range params {
			v[p] = "$" + strconv.Itoa(2+k*len(params)+i)
		}
		sql, err := sqltext.Render(branch, v)
		if err != nil {
			// The branches are embedded and the same for every schema:
			// the tests render them.
			panic(fmt.Sprintf("fanout: render a shard union's branch: %v", err))
		}
		parts[k] = sql
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// unionArgs are a shard union's arguments: $1 the queue, then each
// shard's bounds from cols (parallel, one element per shard), in
// unionParams' order: lower bounds, upper bounds, then exclusive lower
// bounds where the statement takes them.
func unionArgs(queue string, cols ...[]string) []any {
	args := make([]any, 1, 1+len(cols)*len(cols[0]))
	args[0] = queue
	for k := range cols[0] {
		for _, c := range cols {
			args = append(args, c[k])
		}
	}
	return args
}

// render renders the statements for an engine's dialect and a schema.
// Where a LATERAL subquery with LIMIT is decorrelated (Dialect.KeyJoinDML:
// CockroachDB, cockroachdb/cockroach PR #68299), the claim's later
// shards, the heads probe and exists_after are the shard unions
// (fanout.sql); elsewhere the LATERAL forms, rendered byte for byte as
// before the unions existed. The dialect is chosen here only.
func render(d *skiplock.Dialect, schemaName string) statements {
	var s statements
	var shardsAfter, headsUnion, existsAfterUnion, branches string
	err := sqlFile.Fill(sqlVars(d, schemaName), map[string]*string{
		"claim": &s.claim, "claim_shard": &s.claimShard, "heads": &s.heads, "exists_after": &s.existsAfter,
		"shards_after": &shardsAfter, "heads_union": &headsUnion, "exists_after_union": &existsAfterUnion,
		// Rendered alone only for the grammar check: sqlVars renders
		// them into their unions.
		"shards_after_branch": &branches, "heads_union_branch": &branches, "exists_after_union_branch": &branches,
		"del": &s.del, "fail": &s.fail, "bury": &s.bury,
		"insert": &s.insert, "queued": &s.queued, "dead": &s.dead, "exists": &s.exists,
		"count": &s.count, "give_back": &s.giveBack, "committed": &s.committed, "forget": &s.forget, "backoff": &s.backoff, "bury_lost": &s.buryLost, "amend_dead": &s.amendDead,
		"cancel_by_id": &s.cancelByID, "retry_by_id": &s.retryByID, "delete_by_id": &s.deleteByID, "where_by_id": &s.whereByID,
		"lookup":     &s.lookup,
		"snooze_job": &s.snoozeJob, "snooze_attempt": &s.snoozeAttempt,
		"new_ids": &s.newIDs, "notify": &s.notify, "unique_lookup": &s.uniqueLookup,
		"claim_limited": &s.claimLimited, "claim_shard_limited": &s.claimShardLimited, "slot_take": &branches,
		"limits_read": &s.limitsRead, "slots_make": &s.slotsMake, "slots_trim": &s.slotsTrim, "slot_free": &s.slotFree,
	})
	if err != nil {
		// The file is embedded and the same for every schema: the tests
		// render it, so this cannot happen in a build that passed them.
		panic(err)
	}
	if d.KeyJoinDML {
		// The same fact picks bucketed's heads_key_join (no LATERAL).
		s.unions = true
		s.claim, s.claimLimited, s.shardsAfter, s.heads, s.existsAfter = "", "", shardsAfter, headsUnion, existsAfterUnion
	}
	s.insertNotify = sqltext.WithNotify(s.insert, insertParamCount)
	return s
}

// insertParamCount is how many parameters insert takes.
const insertParamCount = 6

// uniqueConflict renders insert's ON CONFLICT target from job_queue's
// model, so that the target and the index it must match never disagree.
func uniqueConflict() string {
	for _, ix := range schema.JobQueueTableDef(1).Indexes {
		if ix.Name == schema.FanoutUniqueIndex {
			return ix.ConflictTarget()
		}
	}
	panic("fanout: job_queue has no index " + schema.FanoutUniqueIndex)
}

// all lists the statements the Queue sends, for tests that check each one.
func (s statements) all() map[string]string {
	out := map[string]string{
		"claim": s.claim, "claim_shard": s.claimShard, "shards_after": s.shardsAfter, "heads": s.heads, "exists_after": s.existsAfter, "del": s.del, "fail": s.fail, "bury": s.bury,
		"insert": s.insert, "queued": s.queued, "dead": s.dead, "exists": s.exists,
		"count": s.count, "give_back": s.giveBack, "committed": s.committed, "forget": s.forget, "backoff": s.backoff, "bury_lost": s.buryLost, "amend_dead": s.amendDead,
		"cancel_by_id": s.cancelByID, "retry_by_id": s.retryByID, "delete_by_id": s.deleteByID, "where_by_id": s.whereByID,
		"lookup": s.lookup, "unique_lookup": s.uniqueLookup,
		"snooze_job": s.snoozeJob, "snooze_attempt": s.snoozeAttempt,
		"claim_limited": s.claimLimited, "claim_shard_limited": s.claimShardLimited,
		"limits_read": s.limitsRead, "slots_make": s.slotsMake, "slots_trim": s.slotsTrim, "slot_free": s.slotFree,
		// new_ids and notify name no table, so no schema either.
	}
	maps.DeleteFunc(out, func(_, sql string) bool { return sql == "" }) // not sent on this engine
	return out
}
