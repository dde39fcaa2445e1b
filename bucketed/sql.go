package bucketed

import (
	_ "embed"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/depgate"
	"github.com/skiplock/skiplock/internal/sqlident"
	"github.com/skiplock/skiplock/internal/sqltext"
	"github.com/skiplock/skiplock/schema"
)

// statements holds every statement the queue sends, rendered once per
// Queue from bucketed.sql for the schema and engine. Values always travel
// as $n parameters.
type statements struct {
	insert, uniqueLookup, batchNew string
	// Workflows (workflow.go).
	workflowNew, dependencyOutputs string
	// insertWorkflow is insert with a workflow's columns
	// (insertParams.workflowArgs), writing each job's job_workflow_node
	// row in the same statement.
	insertWorkflow string
	// completeKept and completedWithKept are complete and completed_with
	// as rendered, which stay when Config.DeleteCompleted puts the
	// deleting ones in complete's place: a job with dependents is kept as
	// Success, since settle reads its dependents after the completion.
	completeKept, completedWithKept string
	claim, heads                    string
	// claimLimitedUse is the claim of an unpartitioned queue with a
	// global or rate limit, sent after limitsTake (limits.go): its gate
	// lets a limited queue through, where claim's claims nothing there,
	// and it gives its jobs their slots and stamps its rate tokens
	// (limitsUse's work, for the partitioned claims) in the same statement.
	claimLimitedUse string
	// claimPermitted is the plain claim for the jobs that run under the
	// permits a Worker holds (permits.go), with a gate of its own; the
	// permits are renewed (permitsRenew), read back after an ambiguous
	// commit (permitsHeld) and given back (permitsRelease).
	claimPermitted, permitsRenew, permitsHeld, permitsRelease string
	// claimPartitioned is the claim of a partitioned queue (limits.go),
	// its own parameters (claimPartitionedParams).
	claimPartitioned, claimSequenced                      string
	partitionsRewrite                                     string
	limitsTake, partitionsTake, slotsFree, limitsUse      string
	slotsMake, tokensMake                                 string
	queueLimits, limitsSet                                string
	slotsLock, slotsAdopt                                 string
	slotsHeld, partitionCounts                            string
	complete, fail, cancel, release, extend, extendIDs    string
	snooze, record                                        string
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
  j."create_ts", j."run_at", j."last_error", j."lease_owner", j."lease_token", j."lease_expires_at", j."bucket", j."kind", j."metadata"::TEXT,
  j."workflow_id", COALESCE(array_length(j."dependents", 1), 0)`

// uniqueIndex names the partial unique index on held keys that insert's
// ON CONFLICT must match.
const uniqueIndex = schema.UniqueIndex

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
	queueState := sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.QueueStateTable)
	vars := map[string]string{
		"table":                   table,
		"queued_exists":           queuedExists(d, table, ""),
		"due_exists":              queuedExists(d, table, `"run_at" <= now()`),
		"status_type":             sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.StatusType),
		"job_columns":             jobColumns,
		"unique_conflict":         uniqueConflict(),
		"unique_held":             schema.UniqueHeld,
		"batch_table":             sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobBatchTable),
		"workflow_table":          sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobWorkflowTable),
		"workflow_node_table":     sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobWorkflowNodeTable),
		"waiting_run_at":          depgate.WaitingRunAt,
		"dependency_not_finished": depgate.NotFinished,
		// A plain insert's; workflowInsertVars has the workflow's.
		"insert_run_at":           `COALESCE(u.ra, now())`,
		"insert_workflow_columns": "", "insert_workflow_values": "", "insert_workflow_params": "", "insert_workflow_names": "", "insert_workflow_returning": "",
		"bucket_predicate": bucketPred,
		"push_error":       sqltext.PushError("j", `j."attempts"`),
		"push_error_held":  sqltext.PushError("j", `j."attempts" + 1`),
		"hold":             sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobHoldTable),
		// A dead holder's hold row (alias k).
		"hold_dead":   sqltext.HoldDead("k"),
		"queue_state": queueState,
		"slot_table":  sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobSlotTable),
		"slot_held":   slotHeld("s", table),
		"slot_held_h": slotHeld("h", table),
		// limits_take's: the limit's slots, those past it that a lowered
		// limit left, and the rate's tokens; slots_held's: $2 slots.
		"slot_range_s": sqltext.KeyRange(d, `s."slot"`, "0", "(SELECT n FROM lim)"),
		"slot_range_h": sqltext.KeyRange(d, `h."slot"`, "(SELECT n FROM lim)", "(SELECT made FROM lim)"),
		// The same of a partition (pp) in a partitioned queue.
		"slot_range_p":    sqltext.KeyRange(d, `s."slot"`, "0", "pp.n"),
		"slot_range_hp":   sqltext.KeyRange(d, `h."slot"`, "pp.n", "(SELECT made FROM lim)"),
		"slot_range_all":  sqltext.KeyRange(d, `s."slot"`, "0", "$2::INT4"),
		"slot_range_made": sqltext.KeyRange(d, `s."slot"`, "0", `(SELECT GREATEST(qm."slots", qm."concurrency") FROM `+queueState+` AS qm WHERE qm."name" = $1)`),
		"token_range":     sqltext.KeyRange(d, `t."token"`, "0", "(SELECT r FROM lim)"),
		"rate_table":      sqlident.Quote(schemaName) + "." + sqlident.Quote(schema.JobRateTable),
		// limits_take's loose scan: the first ready partition of queue
		// $1 past a bound (the text between the two).
		"next_partition": `SELECT j."partition" FROM ` + table + ` AS j
    WHERE j."queue" = $1 AND j."status" = 'Queued' AND j."partition" IS NOT NULL AND j."run_at" <= now() AND j."partition"`,
		"next_partition_end": `ORDER BY j."partition" LIMIT 1`,
		// insert's: the job's partition in its queue's partitioning, as
		// the inserting Queue last read it (u.pb).
		"insert_partition": partitionOf("u.pb", "u.pk", "u.k", "u.p::JSONB"),
		// partitions_rewrite's: the same of job j, its queue's row read.
		"job_partition": partitionOf(`(SELECT "partition_by" FROM `+queueState+` WHERE "name" = $1)`, `j."partition_key"`, `j."kind"`, `j."payload"`),
		"lease_start":   "now()",
		// The claim's outer LIMIT (claim, claim_scalar_bounds).
		"claim_limit": "$2",
		// claim_limited_use's test of the slots limits_take locked: the
		// slots_free test, with the statement's snapshot, younger than
		// the lock; on CockroachDB (SERIALIZABLE) every locked slot is
		// free, or the claim fails to commit.
		"slot_still_free": "NOT (" + slotHeld("s", table) + ")",
	}
	if d.KeyJoinDML {
		vars["slot_still_free"] = "true"
	}
	vars["branch"] = "1"
	vars["partition_branches"] = partitionBranches(vars, "claim_partition_branch")
	tokens := sqlFile.MustRender("take_tokens", vars)
	vars["take_tokens"] = tokens
	held := sqlFile.MustRender("dead_hold_ids", vars)
	vars["dead_hold_ids"] = held
	// claim_limited_use's claim: the limited one, whose lease starts
	// after the tokens were taken (lease_start).
	limited := maps.Clone(vars)
	limited["lease_start"] = "clock_timestamp()"
	if !d.KeyJoinDML {
		// No more jobs than the permits held ($12) and claim_limited_use's
		// "free" hold, where the queue has a global limit ($12 >= 0).
		limited["claim_limit"] = `LEAST($2::INT4, CASE WHEN $12::INT4 < 0 THEN $2::INT4 ELSE $12::INT4 + (SELECT count(*) FROM "free")::INT4 END)`
	}
	setClaimGate(limited, limitedGate(queueState))
	vars["claim_ctes"], vars["claim_update"] = splitClaim(sqlFile.MustRender(ClaimBlock(d), limited))
	setClaimGate(vars, plainGate(queueState))
	// insert_workflow's jobs: insert with a workflow's templates.
	vars["insert_workflow_jobs"] = sqlFile.MustRender("insert", workflowInsertVars(vars))
	return vars
}

// partitionBranches renders block, one branch of the partitioned claim,
// for each of its MaxClaimPartitions partitions, with the gate of a
// partitioned queue.
func partitionBranches(vars map[string]string, block string) string {
	branchVars := maps.Clone(vars)
	branchVars["claim_gate"] = partitionedGate(vars["queue_state"])
	var branches []string
	for i := range MaxClaimPartitions {
		branchVars["branch"] = strconv.Itoa(i + 1)
		b := sqlFile.MustRender(block, branchVars)
		branches = append(branches, b)
	}
	return strings.Join(branches, "\n  UNION ALL ")
}

// MaxClaimPartitions is the most partitions one claim of a partitioned
// queue takes jobs from: its ready partitions are visited in turn, that
// many at a time.
const MaxClaimPartitions = 16

// The claims' gates (sqltext.NotPausedNor): each claim refuses, besides a
// paused queue, the queues another claim serves, so that a process with a
// stale view of a queue's limits claims nothing rather than jobs no limit
// counts. The plain claim serves queues with no limit; the limited claim
// (limits_take first) queues with a global or rate limit that are not
// partitioned; the partitioned claim partitioned queues.
func plainGate(queueState string) string {
	return sqltext.NotPausedNor(queueState, `"qs"."concurrency" IS NOT NULL`, `"qs"."rate_limit" IS NOT NULL`, `"qs"."partition_by" IS NOT NULL`)
}

func limitedGate(queueState string) string {
	return sqltext.NotPausedNor(queueState, `"qs"."partition_by" IS NOT NULL`)
}

// permittedGate is claim_permitted's: it serves a queue with a global
// limit and no rate, unpartitioned, whose limit is above every permit the
// claim runs jobs under ($10, the highest of their slots), and no slot at
// or past whose limit is held (limits_take's "past": a lowered limit
// starts nothing until the jobs past it have finished). The test of the
// slots past the limit reads an empty range of keys while no limit was
// lowered.
func permittedGate(queueState, slotTable, heldH string, d *skiplock.Dialect) string {
	past := `EXISTS (SELECT 1 FROM ` + slotTable + ` AS h WHERE h."queue" = "qs"."name" AND h."partition" = '' AND ` +
		sqltext.KeyRange(d, `h."slot"`, `"qs"."concurrency"`, `GREATEST("qs"."slots", "qs"."concurrency")`) + ` AND ` + heldH + `)`
	return sqltext.NotPausedNor(queueState, `"qs"."concurrency" IS NULL`, `"qs"."concurrency" <= $10::INT4`, `"qs"."rate_limit" IS NOT NULL`,
		`"qs"."partition_by" IS NOT NULL`, past)
}

func partitionedGate(queueState string) string {
	return sqltext.NotPausedNor(queueState, `"qs"."partition_by" IS NULL`)
}

// partitionOf is a job's partition in its queue's partitioning by (the
// queue's partition_by: kind, key or args.FIELD), from the job's
// partition key, kind and payload (JSONB): null while the queue is not
// partitioned; else the key given at insert, or the kind, or the payload's
// top-level FIELD as text, and ” where that is missing.
func partitionOf(by, key, kind, payload string) string {
	return `CASE WHEN ` + by + ` IS NULL THEN NULL ELSE COALESCE(` + key + `, CASE WHEN ` + by + ` = 'kind' THEN ` + kind +
		` WHEN ` + by + ` LIKE 'args.%' THEN ` + payload + ` ->> substr(` + by + `, 6) END, '') END`
}

// setClaimGate sets the claims' gate (claim_gate) and renders the
// best-priority CTE with it, a block of its own rendered once into every
// claim that shares it (claim_best).
func setClaimGate(vars map[string]string, gate string) {
	vars["claim_gate"] = gate
	best := sqlFile.MustRender("claim_best", vars)
	vars["claim_best"] = best
}

// slotHeld is the test that slot row alias is held: as a Worker's permit
// (held_until ahead), or by its job, Running under the lease token the
// slot recorded (bucketed.sql, "Concurrency slots"). The job's is a scalar
// subquery, one lookup by the job's key per slot, made only for a slot
// that is no permit: an EXISTS under the NOT and OR that test it would be
// hashed, reading every Running job, through the rescuer's index and its
// dead entries, at each claim. The status compared as text keeps that
// index's predicate out. A slot that names no job, or a job no longer
// Running, and holds no permit is free (false, never null).
func slotHeld(alias, table string) string {
	return `(COALESCE(` + alias + `."held_until" > now(), false) OR COALESCE((SELECT j."lease_token" FROM ` + table + ` AS j
      WHERE j."id" = ` + alias + `."job_id" AND j."status"::TEXT = 'Running') = ` + alias + `."lease_token", false))`
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
		return `EXISTS (SELECT 1 FROM ` + table + ` WHERE "status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1 AND array_length($2::INT2[], 1) > 0` + cond + `)`
	}
	bucketPred := `"bucket" = h.bucket AND `
	if d.ShardedIndexFansOut {
		bucketPred = ""
	}
	return `EXISTS (SELECT 1 FROM unnest($2::INT2[]) AS h (bucket) CROSS JOIN LATERAL (
    SELECT 1 FROM ` + table + ` WHERE ` + bucketPred + `"status" = 'Queued' AND "deps_left" IS NULL AND "queue" = $1` + cond + `
    ORDER BY "priority", "run_at", "id" LIMIT 1) AS x)`
}

// buildStatements renders the statements for an engine and schema. Where
// the engine joins DML statements to their limited subqueries by key
// (Dialect.KeyJoinDML), the claim and the retention delete are the
// *_key_join blocks; call sites never see the difference.
func buildStatements(d *skiplock.Dialect, schemaName string) statements {
	var s statements
	var claimKeyJoin, headsKeyJoin, deleteFinishedKeyJoin, claimScalarBounds string
	var claimPartitioned, claimPartitionedKeyJoin string
	vars := sqlVars(d, schemaName)
	// The plain claim, whose jobs run under the permits the claiming
	// Worker holds, with their gate.
	permitted := maps.Clone(vars)
	setClaimGate(permitted, permittedGate(vars["queue_state"], vars["slot_table"], slotHeld("h", vars["table"]), d))
	s.claimPermitted = sqlFile.MustRender(ClaimBlock(d), permitted)
	err := sqlFile.Fill(vars, map[string]*string{
		"insert":                     &s.insert,
		"insert_workflow":            &s.insertWorkflow,
		"unique_lookup":              &s.uniqueLookup,
		"batch_new":                  &s.batchNew,
		"workflow_new":               &s.workflowNew,
		"dependency_outputs":         &s.dependencyOutputs,
		"reserve_ids":                &s.reserveIDs,
		"notify":                     &s.notify,
		"claim_best":                 new(string), // rendered into claim and claim_held (sqlVars)
		"claim":                      &s.claim,
		"claim_key_join":             &claimKeyJoin,
		"heads_key_join":             &headsKeyJoin,
		"claim_scalar_bounds":        &claimScalarBounds,
		"heads":                      &s.heads,
		"delete_finished_key_join":   &deleteFinishedKeyJoin,
		"complete":                   &s.complete,
		"fail":                       &s.fail,
		"cancel":                     &s.cancel,
		"release":                    &s.release,
		"snooze":                     &s.snooze,
		"extend":                     &s.extend,
		"extend_ids":                 &s.extendIDs,
		"record":                     &s.record,
		"completed_with":             &s.completedWith,
		"delete_finished":            &s.deleteFinished,
		"stats":                      &s.stats,
		"pending":                    &s.pending,
		"backlog":                    &s.backlog,
		"lookup":                     &s.lookup,
		"claimed_by":                 &s.claimedBy,
		"cancel_by_id":               &s.cancelByID,
		"retry_by_id":                &s.retryByID,
		"delete_by_id":               &s.deleteByID,
		"complete_delete":            &s.completeDelete,
		"completed_with_delete":      &s.completedWithDelete,
		"status_by_id":               &s.statusByID,
		"claim_held":                 &s.claimHeld,
		"hold_open":                  &s.holdOpen,
		"hold_close":                 &s.holdClose,
		"hold_exists":                &s.holdExists,
		"held_complete":              &s.heldComplete,
		"held_complete_delete":       &s.heldCompleteDelete,
		"held_fail":                  &s.heldFail,
		"held_snooze":                &s.heldSnooze,
		"limits_take":                &s.limitsTake,
		"partitions_take":            &s.partitionsTake,
		"take_tokens":                new(string), // rendered into limits_take and partitions_take (sqlVars)
		"dead_hold_ids":              new(string), // rendered into claim, claim_held and hold_open (sqlVars)
		"claim_partitioned":          &claimPartitioned,
		"claim_partitioned_key_join": &claimPartitionedKeyJoin,
		"claim_partition_branch":     new(string), // rendered into claim_partitioned (sqlVars)
		"claim_sequence_branch":      new(string), // rendered into claim_partitioned (claimSequenced)
		"partitions_rewrite":         &s.partitionsRewrite,
		"claim_limited_use":          &s.claimLimitedUse,
		"permits_renew":              &s.permitsRenew,
		"permits_held":               &s.permitsHeld,
		"permits_release":            &s.permitsRelease,
		"slots_free":                 &s.slotsFree,
		"limits_use":                 &s.limitsUse,
		"tokens_make":                &s.tokensMake,
		"slots_make":                 &s.slotsMake,
		"queue_limits":               &s.queueLimits,
		"limits_set":                 &s.limitsSet,
		"slots_lock":                 &s.slotsLock,
		"slots_adopt":                &s.slotsAdopt,
		"slots_held":                 &s.slotsHeld,
		"partition_counts":           &s.partitionCounts,
	})
	if err != nil {
		// The file is embedded and the same for every schema: the tests
		// render it for every engine, so this cannot happen in a build
		// that passed them.
		panic(err)
	}
	// The claims rendered below are limited ones: their leases start after
	// the tokens were taken (lease_start).
	vars["lease_start"] = "clock_timestamp()"
	setClaimGate(vars, limitedGate(vars["queue_state"]))
	s.insertNotify = sqltext.WithNotify(s.insert, len(insertParams{}.args()))
	s.completeKept, s.completedWithKept = s.complete, s.completedWith
	if !d.HeldClaims {
		// Not sent there (NewWorker refuses HeldClaims): the claim's
		// per-bucket LATERAL is PostgreSQL's shape.
		s.claimHeld, s.holdOpen, s.holdClose, s.holdExists = "", "", "", ""
		s.heldComplete, s.heldCompleteDelete, s.heldFail, s.heldSnooze = "", "", "", ""
	}
	s.claim = map[string]string{"claim": s.claim, "claim_key_join": claimKeyJoin, "claim_scalar_bounds": claimScalarBounds}[ClaimBlock(d)]
	// A sequential queue's claim: the partitioned claim with the
	// sequences' branches.
	block := map[bool]string{false: "claim_partitioned", true: "claim_partitioned_key_join"}[d.KeyJoinDML]
	vars["partition_branches"] = partitionBranches(vars, "claim_sequence_branch")
	sequenced := sqlFile.MustRender(block, vars)
	s.claimSequenced = sequenced
	s.claimPartitioned = claimPartitioned
	if d.KeyJoinDML {
		s.heads, s.deleteFinished = headsKeyJoin, deleteFinishedKeyJoin
		s.claimPartitioned = claimPartitionedKeyJoin
	}
	return s
}

// splitClaim splits a rendered claim, its CTEs then its UPDATE (every
// claim block is "WITH best AS (...)" and one UPDATE ... RETURNING), into
// those two, for claim_limited_use to name the UPDATE as a CTE of its own.
func splitClaim(claim string) (ctes, update string) {
	at := strings.Index(claim, "\nUPDATE ")
	if !strings.HasPrefix(claim, "WITH ") || at < 0 || strings.Count(claim, "\nUPDATE ") != 1 {
		panic("bucketed: a claim block is not WITH ... UPDATE ... RETURNING: claim_limited_use cannot wrap it")
	}
	return claim[:at], strings.TrimSuffix(strings.TrimSpace(claim[at+1:]), ";")
}

// ClaimBlock names the block of bucketed.sql whose claim a Queue sends on
// d's engine, for tools that render or explain it.
func ClaimBlock(d *skiplock.Dialect) string {
	switch {
	case d.KeyJoinDML:
		return "claim_key_join"
	case d.RowBoundsNotPushed:
		return "claim_scalar_bounds"
	}
	return "claim"
}

// all lists every statement the engine is sent, for tests that check them.
func (s *statements) all() []string {
	return slices.DeleteFunc([]string{s.insert, s.uniqueLookup, s.batchNew, s.claim, s.heads, s.complete, s.fail, s.cancel, s.release, s.snooze, s.record, s.extend, s.extendIDs,
		s.completedWith, s.deleteFinished, s.stats, s.pending, s.backlog, s.lookup, s.claimedBy, s.cancelByID, s.retryByID, s.deleteByID, s.statusByID, s.reserveIDs, s.notify,
		s.completeDelete, s.completedWithDelete, s.claimHeld, s.holdOpen, s.holdClose, s.holdExists,
		s.heldComplete, s.heldCompleteDelete, s.heldFail, s.heldSnooze,
		s.claimLimitedUse, s.claimPermitted, s.permitsRenew, s.permitsHeld, s.permitsRelease, s.claimPartitioned, s.claimSequenced, s.partitionsRewrite, s.limitsTake, s.partitionsTake, s.slotsFree, s.limitsUse, s.slotsMake, s.tokensMake, s.queueLimits, s.limitsSet, s.slotsHeld, s.partitionCounts, s.slotsLock, s.slotsAdopt}, func(sql string) bool { return sql == "" })
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
// A nil RunAts element means now; a nil UniqueKeys element, no key; a nil
// UniqueStates element, Queued and Running (else an array literal of
// statuses, '{Queued,Running,Success}').
type insertParams struct {
	Queues      []string
	Payloads    []string
	Priorities  []int16
	RunAts      []*time.Time
	MaxAttempts []int32
	UniqueKeys  []*string
	Kinds       []string
	Metadata    []string
	// PartitionKeys: a nil element, none (NewJob.PartitionKey).
	PartitionKeys []*string
	// PartitionBys are the jobs' queues' partitionings as the Queue last
	// read them (a nil element: not partitioned): the insert gives each
	// job its partition from it, with no read of the queue's row.
	PartitionBys []*string
	UniqueStates []*string
	// BatchIDs: a nil element, in no batch.
	BatchIDs []*int64
	// Workflow columns (workflow.go), nil elements for a job in no
	// workflow: its workflow, its name there, the names of its
	// dependencies and of its dependents as array literals (nil: none),
	// and whether it runs anyway when a dependency ends badly.
	Workflows  []*int64
	Nodes      []*string
	DependsOn  []*string
	Dependents []*string
	RunAnyways []*bool
}

// workflowInsertVars are vars with insert's templates set for a
// workflow's insert (insertWorkflow).
func workflowInsertVars(vars map[string]string) map[string]string {
	w := maps.Clone(vars)
	w["insert_run_at"] = `CASE WHEN u.wd IS NULL THEN COALESCE(u.ra, now()) ELSE ` + depgate.WaitingRunAt + ` END`
	w["insert_workflow_columns"] = `, "workflow_id", "workflow_node", "depends_on", "dependents", "deps_left", "run_anyway"`
	w["insert_workflow_values"] = `, u.w, u.wn, u.wd::TEXT[], u.wt::TEXT[], array_length(u.wd::TEXT[], 1), u.wa`
	w["insert_workflow_params"] = `, $13::INT8[], $14::TEXT[], $15::TEXT[], $16::TEXT[], $17::BOOL[]`
	w["insert_workflow_names"] = `, w, wn, wd, wt, wa`
	w["insert_workflow_returning"] = `, "workflow_id", "workflow_node"`
	return w
}

// args lists p in insert's $n order.
func (p insertParams) args() []any {
	return []any{p.Queues, p.Payloads, p.Priorities, p.RunAts, p.MaxAttempts, p.UniqueKeys, p.Kinds, p.Metadata, p.PartitionKeys, p.PartitionBys, p.UniqueStates, p.BatchIDs}
}

// workflowArgs lists p in insertWorkflow's $n order: args, then the
// workflow's columns.
func (p insertParams) workflowArgs() []any {
	return append(p.args(), p.Workflows, p.Nodes, p.DependsOn, p.Dependents, p.RunAnyways)
}
