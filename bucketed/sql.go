package bucketed

import (
	_ "embed"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"
)

// statements holds every statement the queue sends, rendered once per
// Queue from bucketed.sql for the schema and engine. Values always travel
// as $n parameters.
type statements struct {
	insert, uniqueLookup                                  string
	claim, heads                                          string
	complete, fail, cancel, release, extend, extendIDs    string
	snooze                                                string
	insertNotify                                          string // insert with its notifications (sqltext.WithNotify)
	completedWith, deleteFinished, stats, pending, lookup string
	cancelByID, retryByID, deleteByID, statusByID         string
	claimedBy                                             string // a claim read back after an ambiguous commit
	backlog                                               string
	// The completion and its ambiguous-commit check where completed jobs
	// are deleted (Config.DeleteCompleted); New puts them in place of
	// complete and completedWith.
	completeDelete, completedWithDelete string
	reserveIDs, notify                  string // the COPY path's (copy.go)
	// Held claims' (held.go); heldComplete is held_complete_delete where
	// completed jobs are deleted.
	claimHeld, holdOpen, holdClose, holdExists             string
	heldComplete, heldCompleteDelete, heldFail, heldSnooze string
}

//go:embed bucketed.sql
var sqlSource string

// sqlFile is bucketed.sql, parsed once.
var sqlFile = sqltext.MustParse("bucketed/bucketed.sql", sqlSource)

func init() {
	sqltext.Register(sqltext.Source{Path: sqlFile.Path, File: sqlFile, Vars: sqlVars})
}

// jobColumns is what a claim returns, in scanJob's order.
const jobColumns = `j."id", j."queue", j."payload"::TEXT, j."priority", j."status"::TEXT, j."attempts", j."max_attempts",
  j."create_ts", j."run_at", j."last_error", j."lease_owner", j."lease_token", j."lease_expires_at", j."bucket", j."kind", j."metadata"::TEXT`

// uniqueIndex names the partial unique index on live jobs' keys that
// insert's ON CONFLICT must match.
const uniqueIndex = "jobs_unique_key"

// uniqueConflict renders the ON CONFLICT target from the jobs table's
// model, so that the target and the index it must match never disagree.
func uniqueConflict() string {
	for _, ix := range schema.JobsTableDef(schema.DefaultBuckets).Indexes {
		if ix.Name == uniqueIndex {
			return ix.ConflictTarget()
		}
	}
	panic("bucketed: the jobs table has no index " + uniqueIndex)
}

// sqlVars are bucketed.sql's template values for an engine and schema.
func sqlVars(d *skiplock.Dialect, schemaName string) map[string]string {
	// Where the engine's sharded index fans out itself, the claim leaves
	// the bucket out and the caller passes one branch.
	bucketPred := `"bucket" = h.bucket AND `
	if d.ShardedIndexFansOut {
		bucketPred = ""
	}
	table := sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobsTable)
	vars := map[string]string{
		"table":            table,
		"queued_exists":    queuedExists(d, table, ""),
		"due_exists":       queuedExists(d, table, `"run_at" <= now()`),
		"status_type":      sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.StatusType),
		"job_columns":      jobColumns,
		"unique_conflict":  uniqueConflict(),
		"bucket_predicate": bucketPred,
		"push_error":       sqltext.PushError("j", `j."attempts"`),
		"push_error_held":  sqltext.PushError("j", `j."attempts" + 1`),
		"hold":             sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobHoldTable),
		// A dead holder's hold row (alias k).
		"hold_dead":  sqltext.HoldDead("k"),
		"not_paused": sqltext.NotPaused(sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.QueueStateTable)),
	}
	// The claims' best-priority CTE is a block of its own, rendered once
	// into both claims (claim, claim_held) that share it.
	best, err := sqltext.Render(sqlFile.Template("claim_best"), vars)
	if err != nil {
		panic(err) // the file is embedded: the tests render it for every engine
	}
	vars["claim_best"] = best
	return vars
}

// queuedExists is the test, for pending and backlog, that queue $1 has a
// Queued job (matching cond, when not empty): each bucket of $2 probed
// with an ordered LIMIT 1 scan of jobs_dequeue (see pending in
// bucketed.sql); where claims are key joins (no LATERAL there), a bare
// EXISTS that the engine's sharded partial index answers. $2 is typed in
// both.
func queuedExists(d *skiplock.Dialect, table, cond string) string {
	if cond != "" {
		cond = " AND " + cond
	}
	if d.KeyJoinDML {
		return `EXISTS (SELECT 1 FROM ` + table + ` WHERE "status" = 'Queued' AND "queue" = $1 AND array_length($2::INT2[], 1) > 0` + cond + `)`
	}
	bucketPred := `"bucket" = h.bucket AND `
	if d.ShardedIndexFansOut {
		bucketPred = ""
	}
	return `EXISTS (SELECT 1 FROM unnest($2::INT2[]) AS h (bucket) CROSS JOIN LATERAL (
    SELECT 1 FROM ` + table + ` WHERE ` + bucketPred + `"status" = 'Queued' AND "queue" = $1` + cond + `
    ORDER BY "priority", "run_at", "id" LIMIT 1) AS x)`
}

// buildStatements renders the statements for an engine and schema. Where
// the engine joins DML statements to their limited subqueries by key
// (Dialect.KeyJoinDML), the claim and the retention delete are the
// *_key_join blocks; call sites never see the difference.
func buildStatements(d *skiplock.Dialect, schemaName string) statements {
	var s statements
	var claimKeyJoin, headsKeyJoin, deleteFinishedKeyJoin, claimScalarBounds string
	err := sqlFile.Fill(sqlVars(d, schemaName), map[string]*string{
		"insert":                   &s.insert,
		"unique_lookup":            &s.uniqueLookup,
		"reserve_ids":              &s.reserveIDs,
		"notify":                   &s.notify,
		"claim_best":               new(string), // rendered into claim and claim_held (sqlVars)
		"claim":                    &s.claim,
		"claim_key_join":           &claimKeyJoin,
		"heads_key_join":           &headsKeyJoin,
		"claim_scalar_bounds":      &claimScalarBounds,
		"heads":                    &s.heads,
		"delete_finished_key_join": &deleteFinishedKeyJoin,
		"complete":                 &s.complete,
		"fail":                     &s.fail,
		"cancel":                   &s.cancel,
		"release":                  &s.release,
		"snooze":                   &s.snooze,
		"extend":                   &s.extend,
		"extend_ids":               &s.extendIDs,
		"completed_with":           &s.completedWith,
		"delete_finished":          &s.deleteFinished,
		"stats":                    &s.stats,
		"pending":                  &s.pending,
		"backlog":                  &s.backlog,
		"lookup":                   &s.lookup,
		"claimed_by":               &s.claimedBy,
		"cancel_by_id":             &s.cancelByID,
		"retry_by_id":              &s.retryByID,
		"delete_by_id":             &s.deleteByID,
		"complete_delete":          &s.completeDelete,
		"completed_with_delete":    &s.completedWithDelete,
		"status_by_id":             &s.statusByID,
		"claim_held":               &s.claimHeld,
		"hold_open":                &s.holdOpen,
		"hold_close":               &s.holdClose,
		"hold_exists":              &s.holdExists,
		"held_complete":            &s.heldComplete,
		"held_complete_delete":     &s.heldCompleteDelete,
		"held_fail":                &s.heldFail,
		"held_snooze":              &s.heldSnooze,
	})
	if err != nil {
		// The file is embedded and the same for every schema: the tests
		// render it for every engine, so this cannot happen in a build
		// that passed them.
		panic(err)
	}
	s.insertNotify = sqltext.WithNotify(s.insert, len(insertParams{}.args()))
	if !d.HeldClaims {
		// Not sent there (NewWorker refuses HeldClaims): the claim's
		// per-bucket LATERAL is PostgreSQL's shape.
		s.claimHeld, s.holdOpen, s.holdClose, s.holdExists = "", "", "", ""
		s.heldComplete, s.heldCompleteDelete, s.heldFail, s.heldSnooze = "", "", "", ""
	}
	switch {
	case d.KeyJoinDML:
		s.claim, s.heads, s.deleteFinished = claimKeyJoin, headsKeyJoin, deleteFinishedKeyJoin
	case d.RowBoundsNotPushed:
		s.claim = claimScalarBounds
	}
	return s
}

// all lists every statement the engine is sent, for tests that check them.
func (s *statements) all() []string {
	return slices.DeleteFunc([]string{s.insert, s.uniqueLookup, s.claim, s.heads, s.complete, s.fail, s.cancel, s.release, s.snooze, s.extend, s.extendIDs,
		s.completedWith, s.deleteFinished, s.stats, s.pending, s.backlog, s.lookup, s.claimedBy, s.cancelByID, s.retryByID, s.deleteByID, s.statusByID, s.reserveIDs, s.notify,
		s.completeDelete, s.completedWithDelete, s.claimHeld, s.holdOpen, s.holdClose, s.holdExists,
		s.heldComplete, s.heldCompleteDelete, s.heldFail, s.heldSnooze}, func(sql string) bool { return sql == "" })
}

// claimParams are the claim's parameters.
type claimParams struct {
	// Queue is the queue to claim from; Limit the most jobs to claim.
	Queue string
	Limit int
	// Owner and Token mark the lease; LeaseSeconds is its length.
	Owner        string
	Token        int64
	LeaseSeconds float64
	// Buckets lists the buckets to scan, in order, and the Hint arrays
	// each bucket's hint, parallel to it (see hints.args).
	Buckets        []int16
	HintPriorities []int32
	HintRunAts     []time.Time
	HintIDs        []int64
}

// args lists p in the claim's $n order.
func (p claimParams) args() []any {
	return []any{p.Queue, p.Limit, p.Owner, p.Token, p.LeaseSeconds, p.Buckets, p.HintPriorities, p.HintRunAts, p.HintIDs}
}

// insertParams are insert's parameters: one element per job in each array.
// A nil RunAts element means now; a nil UniqueKeys element, no key.
type insertParams struct {
	Queues      []string
	Payloads    []string
	Priorities  []int16
	RunAts      []*time.Time
	MaxAttempts []int32
	UniqueKeys  []*string
	Kinds       []string
	Metadata    []string
}

// args lists p in insert's $n order.
func (p insertParams) args() []any {
	return []any{p.Queues, p.Payloads, p.Priorities, p.RunAts, p.MaxAttempts, p.UniqueKeys, p.Kinds, p.Metadata}
}
